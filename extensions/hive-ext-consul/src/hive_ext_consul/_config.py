"""``consuldiscovery.properties``: where it is found, what it may say, what is wrong with it.

Every problem is a :class:`ConfigError` naming the key (and the file); the extension turns it
into a refusal to start. Without a key, Consul's own environment variables apply where Consul's
tools read them (``CONSUL_HTTP_ADDR``, ``CONSUL_HTTP_TOKEN``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from hive_ext_api import Setting, SettingError, read_properties

ConfigError = SettingError  # this package's name for it: a setting missing or wrong

CONFIG_ENV = "HIVE_CONSUL_DISCOVERY_CONFIG"
CONFIG_FILE_NAME = "consuldiscovery.properties"
DEFAULT_URL = "http://127.0.0.1:8500"  # the local agent, as Consul's tools assume

KEYS = ("consul-url", "consul-service-name", "consul-datacenter", "consul-acl-token",
        "consul-ttl", "consul-update-interval", "consul-deregister-critical-after",
        "consul-tls-ca-file", "consul-tls-cert-file", "consul-tls-key-file", "consul-tls-verify")

# Consul's rules for names that appear in DNS: letters, digits and dashes.
_SERVICE_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_DATACENTER = re.compile(r"[A-Za-z0-9_-]+")
DEREGISTER_MINIMUM_S = 60.0  # Consul's own minimum for DeregisterCriticalServiceAfter


@dataclass(frozen=True, slots=True)
class ConsulSettings:
    """What the properties file says, checked; times in seconds."""

    url: str = DEFAULT_URL
    service_name: str = "hive"
    datacenter: str | None = None  # None: the agent's
    acl_token: str | None = field(default=None, repr=False)
    ttl_s: float = 30.0
    update_interval_s: float = 10.0
    deregister_critical_after_s: float = 600.0  # 0: never
    tls_ca_file: Path | None = None
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    tls_verify: bool = True
    source: str = ""

    @property
    def host(self) -> str:
        return urlsplit(self.url).hostname or "127.0.0.1"

    @property
    def port(self) -> int:
        parts = urlsplit(self.url)
        return parts.port or (443 if parts.scheme == "https" else 80)

    @property
    def scheme(self) -> str:
        return urlsplit(self.url).scheme


def config_path(data_dir: Path) -> Path:
    """``$HIVE_CONSUL_DISCOVERY_CONFIG``, else ``consuldiscovery.properties`` in the extension's
    folder."""
    configured = os.environ.get(CONFIG_ENV, "").strip()
    return Path(configured) if configured else data_dir / CONFIG_FILE_NAME


def load_settings(path: Path) -> ConsulSettings:
    """The settings of the file at ``path``. A missing file is no error: every key has a
    default (the local agent on port 8500, service ``hive``)."""
    properties = read_properties(path, KEYS) if path.exists() else {}
    return settings_from(properties, str(path))


def _text(settings: dict[str, Setting], key: str) -> str | None:
    return settings[key].value if key in settings and settings[key].value else None


def _seconds(settings: dict[str, Setting], key: str, default: float, source: str) -> float:
    text = _text(settings, key)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):  # also refuses nan
        raise ConfigError(f"{source}: {key} must be a number of seconds >= 0, not {text!r}")
    return value


def _url(text: str, key: str, source: str) -> str:
    url = text if "://" in text else f"http://{text}"
    parts = urlsplit(url)
    try:
        port_ok = parts.port is None or 0 < parts.port < 65536
    except ValueError:  # a port that is not a number
        port_ok = False
    if parts.scheme not in ("http", "https") or not parts.hostname or not port_ok \
            or parts.path.strip("/"):
        raise ConfigError(f"{source}: {key} {text!r} is not http(s)://host:port of a Consul "
                          "agent")
    return url.rstrip("/")


def _file(settings: dict[str, Setting], key: str, source: str) -> Path | None:
    text = _text(settings, key)
    if text is None:
        return None
    path = Path(text).expanduser()
    if not path.is_file() or not os.access(path, os.R_OK):
        raise ConfigError(f"{source}: {key} {text!r} is not a readable file")
    return path


def settings_from(settings: dict[str, Setting], source: str) -> ConsulSettings:
    """Checked settings (of known keys: ``parse_properties(text, source, KEYS)``);
    :class:`ConfigError` names the first key that is missing or wrong."""
    configured_url = _text(settings, "consul-url")
    if configured_url is not None:
        url = _url(configured_url, "consul-url", source)
    elif os.environ.get("CONSUL_HTTP_ADDR"):
        url = _url(os.environ["CONSUL_HTTP_ADDR"], "CONSUL_HTTP_ADDR (no consul-url)", source)
    else:
        url = DEFAULT_URL
    name = _text(settings, "consul-service-name") or "hive"
    if not _SERVICE_NAME.fullmatch(name):
        raise ConfigError(f"{source}: consul-service-name {name!r} is not a service name "
                          "(letters, digits and dashes, at most 63)")
    datacenter = _text(settings, "consul-datacenter")
    if datacenter is not None and not _DATACENTER.fullmatch(datacenter):
        raise ConfigError(f"{source}: consul-datacenter {datacenter!r} is not a datacenter name")
    ttl = _seconds(settings, "consul-ttl", 30.0, source)
    update = _seconds(settings, "consul-update-interval", 10.0, source)
    if ttl <= 0:
        raise ConfigError(f"{source}: consul-ttl must be above 0 seconds, not {ttl:g}")
    if not 0 < update < ttl:
        raise ConfigError(
            f"{source}: consul-update-interval ({update:g} s) must be above 0 and shorter than "
            f"consul-ttl ({ttl:g} s), or the node's check goes critical between two updates")
    deregister = _seconds(settings, "consul-deregister-critical-after", 600.0, source)
    if 0 < deregister < DEREGISTER_MINIMUM_S:
        raise ConfigError(f"{source}: consul-deregister-critical-after ({deregister:g} s) must "
                          f"be 0 (never) or at least {DEREGISTER_MINIMUM_S:g} s (Consul's "
                          "minimum)")
    verify_text = (_text(settings, "consul-tls-verify") or "true").lower()
    if verify_text not in ("true", "false"):
        raise ConfigError(f"{source}: consul-tls-verify must be true or false, not "
                          f"{settings['consul-tls-verify'].value!r}")
    ca, cert, key = (_file(settings, k, source) for k in (
        "consul-tls-ca-file", "consul-tls-cert-file", "consul-tls-key-file"))
    if (cert is None) != (key is None):
        given, missing = ("consul-tls-cert-file", "consul-tls-key-file") if key is None else (
            "consul-tls-key-file", "consul-tls-cert-file")
        raise ConfigError(f"{source}: {given} needs {missing} (the client certificate and its "
                          "key go together)")
    if (ca or cert or verify_text == "false") and urlsplit(url).scheme != "https":
        raise ConfigError(f"{source}: consul-tls-* settings need an https consul-url, not "
                          f"{url!r}")
    if ca is not None and verify_text == "false":
        raise ConfigError(f"{source}: consul-tls-ca-file is set but consul-tls-verify is false "
                          "(the CA would not be used)")
    return ConsulSettings(
        url=url, service_name=name, datacenter=datacenter,
        acl_token=_text(settings, "consul-acl-token"), ttl_s=ttl, update_interval_s=update,
        deregister_critical_after_s=deregister, tls_ca_file=ca, tls_cert_file=cert,
        tls_key_file=key, tls_verify=verify_text == "true", source=source)


__all__ = ["CONFIG_ENV", "CONFIG_FILE_NAME", "KEYS", "ConfigError", "ConsulSettings", "config_path",
           "load_settings", "settings_from"]
