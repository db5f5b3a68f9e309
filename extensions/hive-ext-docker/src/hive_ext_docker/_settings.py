"""The extension's settings: its properties file, then ``HIVE_DOCKER_DISCOVERY_*`` overrides.

The file is ``$HIVE_DOCKER_DISCOVERY_CONFIG`` when that is set, else ``docker-discovery.properties``
in the extension's data folder. Each key may be overridden by an environment variable named
after it (``cluster-port`` -> ``HIVE_DOCKER_DISCOVERY_CLUSTER_PORT``), which is handy in a
container. The file is read by hive_ext_api's ``read_properties`` (``key=value`` or ``key:value``,
``${ENV:NAME}`` replaced). Every value is checked at start: a missing or wrong one raises
:class:`SettingError` naming the key and where its value came from.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from hive_ext_api import Setting, SettingError, read_properties

CONFIG_ENV = "HIVE_DOCKER_DISCOVERY_CONFIG"
FILE_NAME = "docker-discovery.properties"
ENV_PREFIX = "HIVE_DOCKER_DISCOVERY_"
MAX_TIMEOUT_S = 4.0  # the node gives a discovery hook 5 s (docs/extensions.md); answer before
DEFAULT_TIMEOUT_S = 3.0
DOCKER_HOST_SCHEMES = ("unix", "tcp", "http", "https")

Mode = Literal["engine", "dns"]

# key -> the mode it belongs to ("" for both)
KEYS: dict[str, str] = {
    "mode": "",
    "cluster-port": "",
    "docker-host": "engine",
    "label": "engine",
    "network": "engine",
    "cluster-port-label": "engine",
    "api-timeout": "engine",
    "dns-name": "dns",
    "resolver-address": "dns",
    "resolver-port": "dns",
    "resolution-timeout": "dns",
}

_LABEL_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")
_DNS_LABEL = re.compile(r"^(?!-)[A-Za-z0-9_-]{1,63}(?<!-)$")


@dataclass(frozen=True, slots=True)
class Label:
    """A container label to match: ``key=value``, or ``key`` alone for any value."""

    key: str
    value: str | None = None

    def filter(self) -> str:
        """The Engine API's ``label`` filter for it."""
        return self.key if self.value is None else f"{self.key}={self.value}"


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """Containers carrying every one of ``labels``, running, attached to ``network``."""

    labels: tuple[Label, ...]
    network: str
    docker_host: str | None = None  # None: $DOCKER_HOST, else the local socket
    cluster_port: int | None = None  # None: this node's own cluster port
    cluster_port_label: str | None = None  # a label whose value is the container's port
    api_timeout: float = DEFAULT_TIMEOUT_S
    mode: Mode = "engine"


@dataclass(frozen=True, slots=True)
class DnsSettings:
    """The A records of ``name``, asked of ``resolver_address`` (None: the system's)."""

    name: str
    cluster_port: int | None = None  # None: this node's own cluster port
    resolver_address: str | None = None
    resolver_port: int = 53
    resolution_timeout: float = DEFAULT_TIMEOUT_S
    mode: Mode = "dns"


Settings = EngineSettings | DnsSettings


def env_name(key: str) -> str:
    return ENV_PREFIX + key.upper().replace("-", "_")


def environment_overrides(environ: Mapping[str, str]) -> dict[str, Setting]:
    """The ``HIVE_DOCKER_DISCOVERY_*`` variables, by setting key; an unknown one is an error."""
    by_env = {env_name(key): key for key in KEYS}
    values: dict[str, Setting] = {}
    for name, text in environ.items():
        if not name.startswith(ENV_PREFIX) or name == CONFIG_ENV:
            continue
        key = by_env.get(name)
        if key is None:
            known = ", ".join(sorted([CONFIG_ENV, *by_env]))
            raise SettingError(f"${name}: unknown setting (known: {known})")
        values[key] = Setting(text.strip(), f"${name}")
    return values


def config_path(environ: Mapping[str, str], data_dir: Path) -> tuple[Path, bool]:
    """The properties file, and whether the operator named it (then it must exist)."""
    named = environ.get(CONFIG_ENV, "").strip()
    return (Path(named), True) if named else (data_dir / FILE_NAME, False)


def load_settings(environ: Mapping[str, str], data_dir: Path) -> Settings:
    """Read the file (if any), apply the environment, check everything."""
    path, named = config_path(environ, data_dir)
    values: dict[str, Setting] = {}
    if path.exists() or path.is_symlink():
        values = read_properties(path, KEYS)
    elif named:
        raise SettingError(f"${CONFIG_ENV}={path}: no such file")
    values.update(environment_overrides(environ))
    if not values:
        raise SettingError(
            f"not configured: no {path} and no {ENV_PREFIX}* variables; set at least "
            f"mode (engine or dns) and what that mode needs (see the extension's README)")
    return parse_settings(values)


def parse_settings(values: Mapping[str, Setting]) -> Settings:
    """Settings from raw values (empty values count as not set)."""
    given = {key: setting for key, setting in values.items() if setting.value}
    mode = _required(given, "mode")
    if mode.value not in ("engine", "dns"):
        raise SettingError(f"mode={mode.value!r} ({mode.origin}): must be engine or dns")
    for key, setting in given.items():
        if KEYS[key] not in ("", mode.value):
            raise SettingError(f"{key} ({setting.origin}) applies to mode={KEYS[key]} only, "
                               f"and mode is {mode.value}")
    cluster_port = _port(given, "cluster-port")
    if mode.value == "engine":
        return EngineSettings(
            labels=_labels(_required(given, "label")),
            network=_required(given, "network").value,
            docker_host=_docker_host(given.get("docker-host")),
            cluster_port=cluster_port,
            cluster_port_label=_label_key(given.get("cluster-port-label")),
            api_timeout=_timeout(given, "api-timeout"),
        )
    return DnsSettings(
        name=_dns_name(_required(given, "dns-name")),
        cluster_port=cluster_port,
        resolver_address=_ip_address(given.get("resolver-address")),
        resolver_port=_port(given, "resolver-port") or 53,
        resolution_timeout=_timeout(given, "resolution-timeout"),
    )


def _required(given: Mapping[str, Setting], key: str) -> Setting:
    setting = given.get(key)
    if setting is None:
        raise SettingError(f"{key} is required (in the properties file, or ${env_name(key)})")
    return setting


def _port(given: Mapping[str, Setting], key: str) -> int | None:
    setting = given.get(key)
    if setting is None:
        return None
    if not setting.value.isdigit() or not 0 < int(setting.value) < 65536:
        raise SettingError(f"{key}={setting.value!r} ({setting.origin}): not a port (1 to 65535)")
    return int(setting.value)


def _timeout(given: Mapping[str, Setting], key: str) -> float:
    setting = given.get(key)
    if setting is None:
        return DEFAULT_TIMEOUT_S
    try:
        seconds = float(setting.value)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds <= MAX_TIMEOUT_S:
        raise SettingError(f"{key}={setting.value!r} ({setting.origin}): seconds, more than 0 "
                           f"and at most {MAX_TIMEOUT_S:g} (the node waits 5 s for a discovery "
                           "answer)")
    return seconds


def _label_key(setting: Setting | None, key: str = "cluster-port-label") -> str | None:
    if setting is None:
        return None
    if not _LABEL_KEY.match(setting.value):
        raise SettingError(f"{key}={setting.value!r} ({setting.origin}): not a label key")
    return setting.value


def _labels(setting: Setting) -> tuple[Label, ...]:
    labels = []
    for item in setting.value.split(","):
        key, sep, label_value = item.strip().partition("=")
        if not _LABEL_KEY.match(key) or (sep and not label_value):
            raise SettingError(f"label={setting.value!r} ({setting.origin}): expected key=value "
                               f"or key, comma-separated; {item.strip()!r} is neither")
        labels.append(Label(key, label_value if sep else None))
    return tuple(labels)


def _docker_host(setting: Setting | None) -> str | None:
    if setting is None:
        return None
    scheme, sep, rest = setting.value.partition("://")
    if not sep or scheme not in DOCKER_HOST_SCHEMES or not rest:
        raise SettingError(f"docker-host={setting.value!r} ({setting.origin}): expected "
                           f"unix:///path/docker.sock or tcp://host:port")
    return setting.value


def _dns_name(setting: Setting) -> str:
    name = setting.value.rstrip(".")
    if len(name) > 253 or not all(_DNS_LABEL.match(part) for part in name.split(".")):
        raise SettingError(f"dns-name={setting.value!r} ({setting.origin}): not a DNS name")
    return name


def _ip_address(setting: Setting | None) -> str | None:
    if setting is None:
        return None
    try:
        return str(ipaddress.ip_address(setting.value))
    except ValueError:
        raise SettingError(f"resolver-address={setting.value!r} ({setting.origin}): not an IP "
                           f"address (the resolver is asked directly, not looked up)") from None
