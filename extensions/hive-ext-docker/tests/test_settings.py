"""Settings: the properties file, the environment over it, and a clear refusal for every bad one."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from hive_ext_api import ExtensionContext, ExtensionRefused, SettingError

import hive_ext_docker
from hive_ext_docker import (
    CONFIG_ENV,
    DnsSettings,
    EngineSettings,
    Label,
    load_settings,
)

FULL_ENGINE = """\
# Docker discovery: the Engine API
! a comment this way too
mode = engine
docker-host: unix:///var/run/docker.sock
label=com.example.hive=prod,com.example.tier
network=hive-net
cluster-port-label=com.example.hive.port
cluster-port=7800
api-timeout=2.5
"""


def _write(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / hive_ext_docker.FILE_NAME
    path.write_text(text)
    return path


def test_a_full_engine_file(tmp_path: Path) -> None:
    _write(tmp_path, FULL_ENGINE)
    assert load_settings({}, tmp_path) == EngineSettings(
        labels=(Label("com.example.hive", "prod"), Label("com.example.tier")),
        network="hive-net", docker_host="unix:///var/run/docker.sock", cluster_port=7800,
        cluster_port_label="com.example.hive.port", api_timeout=2.5)


def test_dns_from_the_environment_alone(tmp_path: Path) -> None:
    environ = {"HIVE_DOCKER_DISCOVERY_MODE": "dns", "HIVE_DOCKER_DISCOVERY_DNS_NAME": "tasks.hive.",
               "HIVE_DOCKER_DISCOVERY_RESOLVER_ADDRESS": "127.0.0.11",
               "HIVE_DOCKER_DISCOVERY_RESOLVER_PORT": "5353",
               "HIVE_DOCKER_DISCOVERY_RESOLUTION_TIMEOUT": "1"}
    assert load_settings(environ, tmp_path) == DnsSettings(
        name="tasks.hive", resolver_address="127.0.0.11", resolver_port=5353,
        resolution_timeout=1.0)


def test_the_environment_overrides_the_file_and_names_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path / "elsewhere", FULL_ENGINE)
    settings = load_settings({CONFIG_ENV: str(path), "HIVE_DOCKER_DISCOVERY_NETWORK": "other",
                              "HIVE_DOCKER_DISCOVERY_CLUSTER_PORT": ""}, tmp_path / "unused")
    assert isinstance(settings, EngineSettings)
    assert settings.network == "other"
    assert settings.cluster_port is None  # an empty value unsets


@pytest.mark.parametrize(("text", "environ", "message"), [
    ("", {}, "not configured: no .*docker-discovery.properties and no HIVE_DOCKER_DISCOVERY_"),
    ("network=n\n", {}, r"mode is required \(in the properties file, or "
                        r"\$HIVE_DOCKER_DISCOVERY_MODE\)"),
    ("mode=swarm\n", {}, r"mode='swarm' \(.*line 1\): must be engine or dns"),
    ("mode=engine\nnetwork=n\n", {}, "label is required"),
    ("mode=engine\nlabel=a\n", {}, "network is required"),
    ("mode=dns\n", {}, "dns-name is required"),
    ("mode=engine\nlabel=a=\nnetwork=n\n", {}, "label='a=' .*expected key=value or key"),
    ("mode=engine\nlabel=a,,b\nnetwork=n\n", {}, "label='a,,b'"),
    ("mode=engine\nlabel=a\nnetwork=n\ncluster-port=0\n", {}, "cluster-port='0' .*not a port"),
    ("mode=engine\nlabel=a\nnetwork=n\ncluster-port=http\n", {}, "cluster-port='http'"),
    ("mode=engine\nlabel=a\nnetwork=n\napi-timeout=10\n", {},
     "api-timeout='10' .*at most 4 .*the node waits 5 s"),
    ("mode=engine\nlabel=a\nnetwork=n\napi-timeout=soon\n", {}, "api-timeout='soon'"),
    ("mode=engine\nlabel=a\nnetwork=n\ndocker-host=/var/run/docker.sock\n", {},
     "docker-host='/var/run/docker.sock' .*expected unix:///path/docker.sock or tcp://host:port"),
    ("mode=engine\nlabel=a\nnetwork=n\ndocker-host=ssh://me@host\n", {}, "docker-host="),
    ("mode=engine\nlabel=a\nnetwork=n\ncluster-port-label=a b\n", {}, "cluster-port-label="),
    ("mode=dns\ndns-name=tasks.hive\nresolver-address=dns.example\n", {},
     "resolver-address='dns.example' .*not an IP address"),
    ("mode=dns\ndns-name=tasks..hive\n", {}, "dns-name='tasks..hive' .*not a DNS name"),
    ("mode=dns\ndns-name=tasks.hive\nresolver-port=99999\n", {}, "resolver-port='99999'"),
    ("mode=dns\ndns-name=tasks.hive\nnetwork=n\n", {},
     r"network \(.*line 3\) applies to mode=engine only, and mode is dns"),
    ("mode=engine\nlabel=a\nnetwork=n\ndns-name=x\n", {}, "dns-name .*applies to mode=dns only"),
    ("mode=engine\nnetwrok=n\n", {}, r"line 2: unknown setting netwrok \(did you mean network"),
    ("mode=engine\ncolour=red\n", {}, r"line 2: unknown setting colour \(known: mode, "),
    ("mode=engine\njust some words\n", {}, "line 2: 'just some words' is not 'key:value'"),
    ("mode=engine\nmode=dns\n", {}, "line 2: mode is already set on line 1"),
    ("", {"HIVE_DOCKER_DISCOVERY_NETWROK": "n"},
     r"\$HIVE_DOCKER_DISCOVERY_NETWROK: unknown setting"),
    ("mode=engine\nlabel=a\n", {"HIVE_DOCKER_DISCOVERY_NETWORK": " "}, "network is required"),
])
def test_a_bad_setting_is_named(tmp_path: Path, text: str, environ: dict[str, str],
                                message: str) -> None:
    if text:
        _write(tmp_path, text)
    with pytest.raises(SettingError, match=message):
        load_settings(environ, tmp_path)


def test_a_named_config_file_must_exist(tmp_path: Path) -> None:
    with pytest.raises(SettingError, match=rf"\${CONFIG_ENV}=.*nope.properties: no such file"):
        load_settings({CONFIG_ENV: str(tmp_path / "nope.properties")}, tmp_path)


def test_an_unreadable_config_file_is_named(tmp_path: Path) -> None:
    (tmp_path / hive_ext_docker.FILE_NAME).mkdir(parents=True)  # a folder where the file goes
    with pytest.raises(SettingError, match=r"cannot read .*docker-discovery\.properties"):
        load_settings({}, tmp_path)


def test_values_may_contain_separators_and_environment_references(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HIVE_TEST_CLUSTER", "prod")
    _write(tmp_path, "mode=engine\nlabel = a=b:c,hive.cluster=${ENV:HIVE_TEST_CLUSTER}\n"
                     "network=n\n")
    settings = load_settings({}, tmp_path)
    assert isinstance(settings, EngineSettings)
    assert settings.labels == (Label("a", "b:c"), Label("hive.cluster", "prod"))


def test_the_extension_refuses_to_start_naming_the_setting(
        extension_context: ExtensionContext, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HIVE_DOCKER_DISCOVERY_MODE", "engine")
    monkeypatch.setenv("HIVE_DOCKER_DISCOVERY_LABEL", "hive.cluster=a")
    plugin = hive_ext_docker.create_plugin()
    with pytest.raises(ExtensionRefused, match="network is required"):
        plugin.hive_extension_start(extension_context)
    assert plugin.discovery is None


def test_the_extension_is_idle_when_the_node_uses_another_discovery(
        extension_context: ExtensionContext) -> None:
    """Installed but not selected: no settings needed, no refusal, nothing discovered."""
    for cluster in (SimpleNamespace(enabled=True, discovery_kind="static"),
                    SimpleNamespace(enabled=False, discovery_kind="extension")):
        extension_context.node_config = SimpleNamespace(cluster=cluster)
        plugin = hive_ext_docker.create_plugin()
        plugin.hive_extension_start(extension_context)
        assert plugin.discovery is None


def test_the_extension_starts_with_good_settings(extension_context: ExtensionContext,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    extension_context.node_config = SimpleNamespace(
        cluster=SimpleNamespace(enabled=True, discovery_kind="extension"))
    _write(extension_context.data_dir, "mode=dns\ndns-name=tasks.hive\n"
                                       "resolver-address=127.0.0.11\n")
    plugin = hive_ext_docker.create_plugin()
    plugin.hive_extension_start(extension_context)
    assert plugin.discovery is not None
    assert plugin.discovery.source.describe() == "DNS tasks.hive A (resolver 127.0.0.11 port 53)"
    plugin.hive_extension_stop()
    assert plugin.discovery is None
