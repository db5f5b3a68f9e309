"""s3discovery.properties: every missing or wrong setting is refused, naming the setting."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hive_ext_api.testing import SettingsFileContract

import hive_ext_s3
from hive_ext_s3 import CONFIG_ENV, ConfigError, S3Settings, load_settings
from hive_ext_s3._bucket import s3_client


class TestSettingsFile(SettingsFileContract):
    """Where the file is, a refusal that names the setting, the README."""

    MODULE, README = hive_ext_s3, Path(__file__).resolve().parents[1] / "README.md"
    REFUSED = ("s3-bucket-name:abc\nfile-expiration:10\nupdate-interval:30\n",
               r"update-interval .* file-expiration")


settings = TestSettingsFile.settings


def test_the_defaults_are_hivemqs() -> None:
    s = settings("s3-bucket-name:hive-cluster\n")
    assert (s.bucket_region, s.file_prefix, s.file_expiration_s, s.update_interval_s) == (
        "us-east-1", "hive/cluster/nodes/", 360, 180)
    assert s.credentials.kind == "default"
    assert s.endpoint_url is None and s.path_style_access is None


def test_every_key_is_read() -> None:
    s = settings("""
        # comments and blank lines are fine
        ! so is this
        credentials-type:temporary_session
        credentials-access-key-id = AKIA1
        credentials-secret-access-key: s3cr3t
        credentials-session-token: tok
        s3-bucket-region: eu-west-1
        s3-bucket-name: my.bucket-1
        file-prefix: prod/hive/
        file-expiration: 60
        update-interval: 20.5
        s3-endpoint: minio.internal:9000
        s3-endpoint-region: us-east-1
        s3-path-style-access: TRUE
    """)
    assert s.credentials.kind == "temporary_session"
    assert (s.credentials.access_key_id, s.credentials.secret_access_key,
            s.credentials.session_token) == ("AKIA1", "s3cr3t", "tok")
    assert "s3cr3t" not in repr(s) and "tok'" not in repr(s)
    assert (s.bucket_name, s.bucket_region, s.file_prefix) == ("my.bucket-1", "eu-west-1",
                                                               "prod/hive/")
    assert (s.file_expiration_s, s.update_interval_s) == (60, 20.5)
    assert s.endpoint_url == "https://minio.internal:9000"
    assert s.signing_region == "us-east-1" and s.path_style_access is True


def test_the_aws_default_endpoint_lets_the_sdk_choose() -> None:
    assert settings("s3-bucket-name:abc\ns3-endpoint:s3.amazonaws.com\n").endpoint_url is None
    assert settings("s3-bucket-name:abc\ns3-endpoint:http://127.0.0.1:9000/\n").endpoint_url \
        == "http://127.0.0.1:9000"


def test_environment_references_are_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HIVE_TEST_BUCKET", "from-env")
    assert settings("s3-bucket-name:${ENV:HIVE_TEST_BUCKET}\n").bucket_name == "from-env"


@pytest.mark.parametrize(("text", "message"), [
    ("", "s3-bucket-name is required"),
    ("s3-bucket-name:\n", "s3-bucket-name is required"),
    ("s3-bucket-name:Bad_Bucket\n", "s3-bucket-name 'Bad_Bucket' is not a bucket name"),
    ("s3-bucket-name:abc\ns3-bucket-region:Frankfurt\n", "s3-bucket-region 'Frankfurt'"),
    ("s3-bucket-name:abc\ns3-endpoint-region:x\n", "s3-endpoint-region 'x'"),
    ("s3-bucket-name:abc\nfile-expiration:soon\n", "file-expiration must be a number"),
    ("s3-bucket-name:abc\nupdate-interval:-1\n", "update-interval must be a number"),
    ("s3-bucket-name:abc\nfile-expiration:nan\n", "file-expiration must be a number"),
    ("s3-bucket-name:abc\nfile-expiration:60\nupdate-interval:60\n",
     "update-interval (60 s) must be above 0 and shorter than file-expiration (60 s)"),
    ("s3-bucket-name:abc\nfile-expiration:60\nupdate-interval:0\n",
     "update-interval (0 s) must be above 0 and shorter than file-expiration (60 s)"),
    ("s3-bucket-name:abc\nupdate-interval:400\n",
     "update-interval (400 s) must be above 0 and shorter than file-expiration (360 s)"),
    ("s3-bucket-name:abc\ns3-path-style-access:yes\n", "s3-path-style-access must be true"),
    ("s3-bucket-name:abc\ns3-endpoint:ftp://x\n", "s3-endpoint 'ftp://x' is not"),
    ("s3-bucket-name:abc\ns3-endpoint:http://h:port\n", "s3-endpoint 'http://h:port' is not"),
    ("s3-bucket-name:abc\ns3-bucket:abc\n", "unknown setting s3-bucket (did you mean "
                                            "s3-bucket-name?)"),
    ("s3-bucket-name:abc\nnot a setting\n", "line 2: 'not a setting' is not 'key:value'"),
    ("s3-bucket-name:abc\ns3-bucket-name:def\n", "line 2: s3-bucket-name is already set on "
                                                 "line 1"),
    ("s3-bucket-name:abc\ncredentials-type:magic\n", "credentials-type must be one of"),
    ("s3-bucket-name:abc\ncredentials-type:java_system_properties\n",
     "credentials-type java_system_properties is not supported"),
    ("s3-bucket-name:abc\ncredentials-type:instance_profile_credentials\n", "use default"),
    ("s3-bucket-name:abc\ncredentials-type:access_key\ncredentials-access-key-id:A\n",
     "credentials-type access_key needs credentials-secret-access-key"),
    ("s3-bucket-name:abc\ncredentials-type:temporary_session\ncredentials-access-key-id:A\n"
     "credentials-secret-access-key:B\n",
     "credentials-type temporary_session needs credentials-session-token"),
    ("s3-bucket-name:abc\ncredentials-access-key-id:A\n",
     "credentials-access-key-id is set, but credentials-type default does not use it"),
    ("s3-bucket-name:abc\ncredentials-type:access_key\ncredentials-access-key-id:A\n"
     "credentials-secret-access-key:B\ncredentials-profile-name:p\n",
     "credentials-profile-name is set, but credentials-type access_key does not use it"),
    ("s3-bucket-name:${ENV:HIVE_TEST_UNSET_VARIABLE}\n",
     "s3-bucket-name refers to ${ENV:HIVE_TEST_UNSET_VARIABLE}, but the environment has no"),
])
def test_a_wrong_setting_is_refused_by_name(text: str, message: str,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HIVE_TEST_UNSET_VARIABLE", raising=False)
    with pytest.raises(ConfigError, match=re.escape(message)):
        settings(text)


def test_expiration_off_allows_any_update_interval() -> None:
    s = settings("s3-bucket-name:abc\nfile-expiration:0\nupdate-interval:0\n")
    assert (s.file_expiration_s, s.update_interval_s) == (0, 0)


def test_a_missing_file_names_the_path_and_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=f"no configuration at {tmp_path}.*{CONFIG_ENV}"):
        load_settings(tmp_path / "s3discovery.properties")


def test_the_readme_example_is_a_valid_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HIVE_S3_ACCESS_KEY", "AKIAEXAMPLE")
    monkeypatch.setenv("HIVE_S3_SECRET_KEY", "secret")
    s = settings(TestSettingsFile.readme_example())
    assert s.credentials.access_key_id == "AKIAEXAMPLE"
    assert s.bucket_name and 0 < s.update_interval_s < s.file_expiration_s


# ---------------------------------------------------------------- credentials, as boto3 does them


def _config(tmp_path: Path, text: str) -> S3Settings:
    path = tmp_path / "s3discovery.properties"
    path.write_text("s3-bucket-name:abc\n" + text)
    return load_settings(path)


def test_default_chain_without_credentials_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="credentials-type default found no AWS credentials"):
        s3_client(_config(tmp_path, ""))


def test_default_chain_takes_the_environment(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAENV")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    client = s3_client(_config(tmp_path, ""))
    assert client._request_signer._credentials.access_key == "AKIAENV"


def test_environment_variables_are_required_by_name(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"):
        s3_client(_config(tmp_path, "credentials-type:environment_variables\n"))


def test_a_profile_of_the_shared_credentials_file(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    credentials = tmp_path / "credentials"
    credentials.write_text("[hive]\naws_access_key_id = AKIAPROFILE\n"
                           "aws_secret_access_key = secret\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    client = s3_client(_config(tmp_path, "credentials-type:user_credentials_file\n"
                                         "credentials-profile-name:hive\n"))
    assert client._request_signer._credentials.access_key == "AKIAPROFILE"
    with pytest.raises(ConfigError, match="credentials-profile-name 'other' is not a profile"):
        s3_client(_config(tmp_path, "credentials-type:profile\ncredentials-profile-name:other\n"))
