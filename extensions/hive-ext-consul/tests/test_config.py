"""consuldiscovery.properties: every missing or wrong setting is refused, naming the setting."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hive_ext_api.testing import SettingsFileContract

import hive_ext_consul
from hive_ext_consul import ConfigError, ConsulSettings, load_settings
from hive_ext_consul._agent import consul_client


class TestSettingsFile(SettingsFileContract):
    """Where the file is, a refusal that names the setting, the README."""

    MODULE, README = hive_ext_consul, Path(__file__).resolve().parents[1] / "README.md"
    REFUSED = ("consul-ttl:10\nconsul-update-interval:30\n",
               r"consul-update-interval .* consul-ttl")
    IN_THE_FOLDER = "consul-ttl:-3\n"  # no file there is every setting's default


settings = TestSettingsFile.settings


def test_the_defaults_are_the_local_agent() -> None:
    s = settings("")
    assert (s.url, s.host, s.port, s.scheme) == ("http://127.0.0.1:8500", "127.0.0.1", 8500,
                                                 "http")
    assert (s.service_name, s.datacenter, s.acl_token) == ("hive", None, None)
    assert (s.ttl_s, s.update_interval_s, s.deregister_critical_after_s) == (30, 10, 600)
    assert s.tls_verify and s.tls_ca_file is None


def test_without_a_file_every_setting_has_its_default(tmp_path: Path) -> None:
    assert load_settings(tmp_path / "consuldiscovery.properties") == ConsulSettings(
        source=str(tmp_path / "consuldiscovery.properties"))


def test_every_key_is_read(tmp_path: Path) -> None:
    for name in ("ca.pem", "client.pem", "client-key.pem"):
        (tmp_path / name).write_text("-")
    s = settings(f"""
        consul-url: https://consul.internal:8501
        consul-service-name: hive-prod
        consul-datacenter: eu-1
        consul-acl-token: 0b2f-secret
        consul-ttl: 20
        consul-update-interval: 5.5
        consul-deregister-critical-after: 0
        consul-tls-ca-file: {tmp_path}/ca.pem
        consul-tls-cert-file: {tmp_path}/client.pem
        consul-tls-key-file: {tmp_path}/client-key.pem
        consul-tls-verify: true
    """)
    assert (s.host, s.port, s.scheme) == ("consul.internal", 8501, "https")
    assert (s.service_name, s.datacenter, s.acl_token) == ("hive-prod", "eu-1", "0b2f-secret")
    assert "0b2f-secret" not in repr(s)
    assert (s.ttl_s, s.update_interval_s, s.deregister_critical_after_s) == (20, 5.5, 0)
    assert (s.tls_ca_file, s.tls_cert_file, s.tls_key_file) == (
        tmp_path / "ca.pem", tmp_path / "client.pem", tmp_path / "client-key.pem")


def test_consul_http_addr_is_the_url_when_the_file_has_none(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONSUL_HTTP_ADDR", "10.0.0.9:8500")
    assert settings("").url == "http://10.0.0.9:8500"
    assert settings("consul-url:http://127.0.0.1:9500\n").url == "http://127.0.0.1:9500"
    monkeypatch.setenv("CONSUL_HTTP_ADDR", "http://h:x")
    with pytest.raises(ConfigError, match=re.escape("CONSUL_HTTP_ADDR (no consul-url)")):
        settings("")


def test_the_token_of_the_file_wins_over_consul_http_token(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONSUL_HTTP_TOKEN", "from-environment")
    assert consul_client(settings("consul-acl-token:from-file\n")).token == "from-file"
    assert consul_client(settings("")).token == "from-environment"


@pytest.mark.parametrize(("text", "message"), [
    ("consul-url:ftp://h:1\n", "consul-url 'ftp://h:1' is not http(s)://host:port"),
    ("consul-url:http://h:port\n", "consul-url 'http://h:port' is not"),
    ("consul-url:http://h:8500/v1\n", "consul-url 'http://h:8500/v1' is not"),
    ("consul-service-name:hive_nodes\n", "consul-service-name 'hive_nodes' is not a service"),
    ("consul-datacenter:eu 1\n", "consul-datacenter 'eu 1' is not a datacenter name"),
    ("consul-ttl:soon\n", "consul-ttl must be a number of seconds"),
    ("consul-ttl:0\n", "consul-ttl must be above 0 seconds"),
    ("consul-ttl:10\nconsul-update-interval:10\n",
     "consul-update-interval (10 s) must be above 0 and shorter than consul-ttl (10 s)"),
    ("consul-update-interval:45\n",
     "consul-update-interval (45 s) must be above 0 and shorter than consul-ttl (30 s)"),
    ("consul-update-interval:0\n", "consul-update-interval (0 s) must be above 0"),
    ("consul-deregister-critical-after:30\n",
     "consul-deregister-critical-after (30 s) must be 0 (never) or at least 60 s"),
    ("consul-tls-verify:maybe\n", "consul-tls-verify must be true or false, not 'maybe'"),
    ("consul-tls-ca-file:/no/such/ca.pem\n", "consul-tls-ca-file '/no/such/ca.pem' is not a "
                                             "readable file"),
    ("consul-url:https://h:8501\nconsul-tls-verify:false\nconsul-tls-ca-file:{ca}\n",
     "consul-tls-ca-file is set but consul-tls-verify is false"),
    ("consul-tls-ca-file:{ca}\n", "consul-tls-* settings need an https consul-url"),
    ("consul-tls-verify:false\n", "consul-tls-* settings need an https consul-url"),
    ("consul-url:https://h:8501\nconsul-tls-cert-file:{ca}\n",
     "consul-tls-cert-file needs consul-tls-key-file"),
    ("consul-url:https://h:8501\nconsul-tls-key-file:{ca}\n",
     "consul-tls-key-file needs consul-tls-cert-file"),
    ("consul-service:hive\n", "unknown setting consul-service (did you mean "
                              "consul-service-name?)"),
    ("consul-ttl:5\nconsul-ttl:6\n", "line 2: consul-ttl is already set on line 1"),
    ("consul-acl-token:${ENV:HIVE_TEST_UNSET_TOKEN}\n",
     "consul-acl-token refers to ${ENV:HIVE_TEST_UNSET_TOKEN}, but the environment has no"),
])
def test_a_wrong_setting_is_refused_by_name(text: str, message: str, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HIVE_TEST_UNSET_TOKEN", raising=False)
    (tmp_path / "ca.pem").write_text("-")
    with pytest.raises(ConfigError, match=re.escape(message)):
        settings(text.replace("{ca}", str(tmp_path / "ca.pem")))


def test_the_readme_example_is_a_valid_configuration(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HIVE_CONSUL_TOKEN", "a-token")
    text = TestSettingsFile.readme_example()
    for path in re.findall(r"consul-tls-\w+-file:(\S+)", text):  # stand-ins for the PEM files
        monkeypatch.chdir(tmp_path)
        target = tmp_path / Path(path).name
        target.write_text("-")
        text = text.replace(path, str(target))
    s = settings(text)
    assert s.acl_token == "a-token" and 0 < s.update_interval_s < s.ttl_s
