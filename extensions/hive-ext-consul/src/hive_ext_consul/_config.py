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

from hive_ext_api import Properties, Setting, SettingError, read_properties

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


def load_settings(path: Path) -> ConsulSettings:
    """The settings of the file at ``path``. A missing file is no error: every key has a
    default (the local agent on port 8500, service ``hive``)."""
    properties = read_properties(path, KEYS) if path.exists() else {}
    return settings_from(properties, str(path))


def _url(read: Properties) -> str:
    configured = read.text("consul-url")
    key = "consul-url"
    if configured is None and os.environ.get("CONSUL_HTTP_ADDR"):
        configured, key = os.environ["CONSUL_HTTP_ADDR"], "CONSUL_HTTP_ADDR (no consul-url)"
    if configured is None:
        return DEFAULT_URL
    return read.http_url(configured, key, default_scheme="http", path_allowed=False,
                         expected="http(s)://host:port of a Consul agent")


def _tls_files(read: Properties, url: str,
               verify: bool) -> tuple[Path | None, Path | None, Path | None]:
    ca, cert, key = (read.readable_file(k) for k in (
        "consul-tls-ca-file", "consul-tls-cert-file", "consul-tls-key-file"))
    if (cert is None) != (key is None):
        given, missing = ("consul-tls-cert-file", "consul-tls-key-file") if key is None else (
            "consul-tls-key-file", "consul-tls-cert-file")
        raise read.error(f"{given} needs {missing} (the client certificate and its key go "
                         "together)")
    if (ca or cert or not verify) and urlsplit(url).scheme != "https":
        raise read.error(f"consul-tls-* settings need an https consul-url, not {url!r}")
    if ca is not None and not verify:
        raise read.error("consul-tls-ca-file is set but consul-tls-verify is false (the CA would "
                         "not be used)")
    return ca, cert, key


def settings_from(settings: dict[str, Setting], source: str) -> ConsulSettings:
    """Checked settings (of known keys: ``parse_properties(text, source, KEYS)``);
    :class:`ConfigError` names the first key that is missing or wrong."""
    read = Properties(settings, source)
    url = _url(read)
    name = read.text("consul-service-name", "hive")
    assert name is not None
    if not _SERVICE_NAME.fullmatch(name):
        raise read.error(f"consul-service-name {name!r} is not a service name (letters, digits "
                         "and dashes, at most 63)")
    datacenter = read.text("consul-datacenter")
    if datacenter is not None and not _DATACENTER.fullmatch(datacenter):
        raise read.error(f"consul-datacenter {datacenter!r} is not a datacenter name")
    ttl = read.seconds("consul-ttl", 30.0)
    update = read.seconds("consul-update-interval", 10.0)
    if ttl <= 0:
        raise read.error(f"consul-ttl must be above 0 seconds, not {ttl:g}")
    if not 0 < update < ttl:
        raise read.error(
            f"consul-update-interval ({update:g} s) must be above 0 and shorter than consul-ttl "
            f"({ttl:g} s), or the node's check goes critical between two updates")
    deregister = read.seconds("consul-deregister-critical-after", 600.0)
    if 0 < deregister < DEREGISTER_MINIMUM_S:
        raise read.error(f"consul-deregister-critical-after ({deregister:g} s) must be 0 (never) "
                         f"or at least {DEREGISTER_MINIMUM_S:g} s (Consul's minimum)")
    verify = read.boolean("consul-tls-verify", True)
    assert verify is not None
    ca, cert, key = _tls_files(read, url, verify)
    return ConsulSettings(
        url=url, service_name=name, datacenter=datacenter,
        acl_token=read.text("consul-acl-token"), ttl_s=ttl, update_interval_s=update,
        deregister_critical_after_s=deregister, tls_ca_file=ca, tls_cert_file=cert,
        tls_key_file=key, tls_verify=verify, source=source)


__all__ = ["CONFIG_ENV", "CONFIG_FILE_NAME", "KEYS", "ConfigError", "ConsulSettings",
           "load_settings", "settings_from"]
