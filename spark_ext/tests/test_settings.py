"""spark.properties: defaults, where the file is found, and errors that name the setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from hive_ext_spark._settings import CONFIG_ENV, SettingsError, load_settings


def settings_from(tmp_path: Path, text: str, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    path = tmp_path / "spark.properties"
    path.write_text(text)
    monkeypatch.setenv(CONFIG_ENV, str(path))
    return load_settings(tmp_path / "data")


def test_defaults_without_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CONFIG_ENV, raising=False)
    settings = load_settings(tmp_path)
    assert settings.folder == tmp_path / "events"
    assert (settings.segment_max_bytes, settings.segment_max_age_s,
            settings.retention_max_bytes, settings.s3) == (16 * 1024**2, 5.0, 1024**3, None)


def test_the_file_in_the_data_folder_is_read(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CONFIG_ENV, raising=False)
    (tmp_path / "spark.properties").write_text(
        "# comment\nfolder = /srv/events\n! also a comment\nsegment-max-bytes: 1MiB\n"
        "segment-max-age = 250ms\nretention-max-bytes = 2GB\n")
    settings = load_settings(tmp_path)
    assert settings.folder == Path("/srv/events")
    assert settings.segment_max_bytes == 1024**2
    assert settings.segment_max_age_s == pytest.approx(0.25)
    assert settings.retention_max_bytes == 2 * 1000**3


def test_s3_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = settings_from(tmp_path, (
        "s3-bucket-name = my-events\ns3-prefix = plant-a\ns3-endpoint = http://127.0.0.1:9000\n"
        "s3-path-style-access = true\ncredentials-type = access_key\n"
        "credentials-access-key-id = AK\ncredentials-secret-access-key = SK\n"
        "s3-retry-interval = 2s\n"), monkeypatch)
    s3 = settings.s3
    assert s3 is not None
    assert (s3.bucket_name, s3.prefix, s3.endpoint_url, s3.path_style_access,
            s3.access_key_id, s3.secret_access_key, s3.retry_interval_s, s3.keep_local) == (
        "my-events", "plant-a/", "http://127.0.0.1:9000", True, "AK", "SK", 2.0, False)


@pytest.mark.parametrize("text, named", [
    ("segment-max-bytes = lots", "segment-max-bytes = 'lots' is not a size"),
    ("segment-max-bytes = 1KiB", "segment-max-bytes must be at least 64KiB"),
    ("segment-max-age = soon", "segment-max-age = 'soon' is not a duration"),
    ("segment-max-age = 0", "segment-max-age must be above 0"),
    ("retention-max-bytes = 1MiB", "retention-max-bytes (1048576) must be at least"),
    ("segment-max-bites = 1MiB", "unknown setting 'segment-max-bites' (did you mean "
                                 "'segment-max-bytes'?)"),
    ("folder = a\nfolder = b", "folder is set twice"),
    ("just words", "expected 'key = value'"),
    ("s3-endpoint = http://x", "s3-endpoint is set but s3-bucket-name is not"),
    ("s3-bucket-name = Bad_Bucket", "s3-bucket-name 'Bad_Bucket' is not a valid bucket name"),
    ("s3-bucket-name = ok-bucket\ns3-endpoint = 127.0.0.1:9000",
     "s3-endpoint '127.0.0.1:9000' is not an http(s) URL"),
    ("s3-bucket-name = ok-bucket\ncredentials-type = magic", "credentials-type 'magic'"),
    ("s3-bucket-name = ok-bucket\ncredentials-type = access_key\n"
     "credentials-access-key-id = AK", "access_key needs credentials-secret-access-key"),
    ("s3-bucket-name = ok-bucket\ns3-path-style-access = maybe",
     "s3-path-style-access = 'maybe' is not true or false"),
    ("node-id = a/b", "node-id 'a/b' may hold"),
])
def test_a_wrong_setting_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str,
                                  named: str) -> None:
    with pytest.raises(SettingsError) as caught:
        settings_from(tmp_path, text + "\n", monkeypatch)
    assert named in str(caught.value)
    assert str(tmp_path / "spark.properties") in str(caught.value)


def test_a_named_file_that_is_missing_is_refused(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CONFIG_ENV, str(tmp_path / "nope.properties"))
    with pytest.raises(SettingsError, match=f"{CONFIG_ENV}=.*nope.properties: no such file"):
        load_settings(tmp_path)
