"""The extension's settings: its properties file, then ``HIVE_DOCKER_DISCOVERY_*`` overrides.

The file is ``$HIVE_DOCKER_DISCOVERY_CONFIG`` when that is set, else ``docker-discovery.properties``
in the extension's data folder. Each key may be overridden by an environment variable named
after it (``cluster-port`` -> ``HIVE_DOCKER_DISCOVERY_CLUSTER_PORT``), which is handy in a
container. Every value is checked at start: a missing or wrong one raises :class:`SettingError`
naming the key and where its value came from.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from hive_ext_api import ExtensionRefused

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


class SettingError(ExtensionRefused):
    """A setting is missing or wrong; the message names it and where its value came from."""


@dataclass(frozen=True, slots=True)
class Value:
    text: str
    origin: str  # "<file> line N" or "$HIVE_DOCKER_DISCOVERY_X"


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


def read_properties(text: str, origin: str) -> dict[str, Value]:
    """``key=value`` (or ``key: value``) lines; ``#`` and ``!`` start comments."""
    values: dict[str, Value] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        match = re.match(r"^([^=:\s]+)\s*[=:]\s*(.*)$", line)
        where = f"{origin} line {number}"
        if match is None:
            raise SettingError(f"{where}: expected key=value, got {line!r}")
        key, value = match.group(1), match.group(2).strip()
        if key not in KEYS:
            raise SettingError(f"{where}: unknown setting {key!r} (known: {', '.join(KEYS)})")
        values[key] = Value(value, where)
    return values


def environment_overrides(environ: Mapping[str, str]) -> dict[str, Value]:
    """The ``HIVE_DOCKER_DISCOVERY_*`` variables, by setting key; an unknown one is an error."""
    by_env = {env_name(key): key for key in KEYS}
    values: dict[str, Value] = {}
    for name, text in environ.items():
        if not name.startswith(ENV_PREFIX) or name == CONFIG_ENV:
            continue
        key = by_env.get(name)
        if key is None:
            known = ", ".join(sorted([CONFIG_ENV, *by_env]))
            raise SettingError(f"${name}: unknown setting (known: {known})")
        values[key] = Value(text.strip(), f"${name}")
    return values


def config_path(environ: Mapping[str, str], data_dir: Path) -> tuple[Path, bool]:
    """The properties file, and whether the operator named it (then it must exist)."""
    named = environ.get(CONFIG_ENV, "").strip()
    return (Path(named), True) if named else (data_dir / FILE_NAME, False)


def load_settings(environ: Mapping[str, str], data_dir: Path) -> Settings:
    """Read the file (if any), apply the environment, check everything."""
    path, named = config_path(environ, data_dir)
    values: dict[str, Value] = {}
    try:
        values = read_properties(path.read_text(encoding="utf-8"), str(path))
    except FileNotFoundError:
        if named:
            raise SettingError(f"${CONFIG_ENV}={path}: no such file") from None
    except OSError as exc:
        raise SettingError(f"cannot read {path}: {exc}") from None
    values.update(environment_overrides(environ))
    if not values:
        raise SettingError(
            f"not configured: no {path} and no {ENV_PREFIX}* variables; set at least "
            f"mode (engine or dns) and what that mode needs (see the extension's README)")
    return parse_settings(values)


def parse_settings(values: Mapping[str, Value]) -> Settings:
    """Settings from raw values (empty values count as not set)."""
    given = {key: value for key, value in values.items() if value.text}
    mode = _required(given, "mode")
    if mode.text not in ("engine", "dns"):
        raise SettingError(f"mode={mode.text!r} ({mode.origin}): must be engine or dns")
    for key, value in given.items():
        if KEYS[key] not in ("", mode.text):
            raise SettingError(f"{key} ({value.origin}) applies to mode={KEYS[key]} only, "
                               f"and mode is {mode.text}")
    cluster_port = _port(given, "cluster-port")
    if mode.text == "engine":
        return EngineSettings(
            labels=_labels(_required(given, "label")),
            network=_required(given, "network").text,
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


def _required(given: Mapping[str, Value], key: str) -> Value:
    value = given.get(key)
    if value is None:
        raise SettingError(f"{key} is required (in the properties file, or ${env_name(key)})")
    return value


def _port(given: Mapping[str, Value], key: str) -> int | None:
    value = given.get(key)
    if value is None:
        return None
    if not value.text.isdigit() or not 0 < int(value.text) < 65536:
        raise SettingError(f"{key}={value.text!r} ({value.origin}): not a port (1 to 65535)")
    return int(value.text)


def _timeout(given: Mapping[str, Value], key: str) -> float:
    value = given.get(key)
    if value is None:
        return DEFAULT_TIMEOUT_S
    try:
        seconds = float(value.text)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds <= MAX_TIMEOUT_S:
        raise SettingError(f"{key}={value.text!r} ({value.origin}): seconds, more than 0 and "
                           f"at most {MAX_TIMEOUT_S:g} (the node waits 5 s for a discovery answer)")
    return seconds


def _label_key(value: Value | None, setting: str = "cluster-port-label") -> str | None:
    if value is None:
        return None
    if not _LABEL_KEY.match(value.text):
        raise SettingError(f"{setting}={value.text!r} ({value.origin}): not a label key")
    return value.text


def _labels(value: Value) -> tuple[Label, ...]:
    labels = []
    for item in value.text.split(","):
        key, sep, label_value = item.strip().partition("=")
        if not _LABEL_KEY.match(key) or (sep and not label_value):
            raise SettingError(f"label={value.text!r} ({value.origin}): expected key=value or "
                               f"key, comma-separated; {item.strip()!r} is neither")
        labels.append(Label(key, label_value if sep else None))
    return tuple(labels)


def _docker_host(value: Value | None) -> str | None:
    if value is None:
        return None
    scheme, sep, rest = value.text.partition("://")
    if not sep or scheme not in DOCKER_HOST_SCHEMES or not rest:
        raise SettingError(f"docker-host={value.text!r} ({value.origin}): expected "
                           f"unix:///path/docker.sock or tcp://host:port")
    return value.text


def _dns_name(value: Value) -> str:
    name = value.text.rstrip(".")
    if len(name) > 253 or not all(_DNS_LABEL.match(part) for part in name.split(".")):
        raise SettingError(f"dns-name={value.text!r} ({value.origin}): not a DNS name")
    return name


def _ip_address(value: Value | None) -> str | None:
    if value is None:
        return None
    try:
        return str(ipaddress.ip_address(value.text))
    except ValueError:
        raise SettingError(f"resolver-address={value.text!r} ({value.origin}): not an IP "
                           f"address (the resolver is asked directly, not looked up)") from None
