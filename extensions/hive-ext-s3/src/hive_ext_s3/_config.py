"""``s3discovery.properties``: where it is found, what it may say, and what is wrong with it.

The keys are those of HiveMQ's S3 discovery extension. Every problem is a :class:`ConfigError`
that names the key (and the file); the extension turns it into a refusal to start.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from hive_ext_api import Setting, SettingError, read_properties

ConfigError = SettingError  # this package's name for it: a setting missing or wrong

CONFIG_ENV = "HIVE_S3_DISCOVERY_CONFIG"
CONFIG_FILE_NAME = "s3discovery.properties"

AWS_DEFAULT_ENDPOINT = "s3.amazonaws.com"  # HiveMQ's default: "let the SDK choose"

CREDENTIALS_TYPES = ("default", "environment_variables", "user_credentials_file", "profile",
                     "access_key", "temporary_session")
_NOT_HERE = {
    "java_system_properties": "there are no Java system properties in Hive: use "
                              "environment_variables or access_key",
    "instance_profile_credentials": "use default: the default chain ends with the instance "
                                    "profile (and the container role)",
}

KEYS = ("credentials-type", "credentials-access-key-id", "credentials-secret-access-key",
        "credentials-session-token", "credentials-profile-name", "s3-bucket-region",
        "s3-bucket-name", "file-prefix", "file-expiration", "update-interval", "s3-endpoint",
        "s3-endpoint-region", "s3-path-style-access")

_SECRET_KEYS = ("credentials-access-key-id", "credentials-secret-access-key",
                "credentials-session-token")
_REQUIRED = {  # by credentials-type
    "access_key": _SECRET_KEYS[:2],
    "temporary_session": _SECRET_KEYS,
}
_OPTIONAL = {"user_credentials_file": ("credentials-profile-name",),
             "profile": ("credentials-profile-name",)}

_BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_REGION = re.compile(r"[a-z]{2}(-[a-z0-9]+)+")


@dataclass(frozen=True, slots=True)
class Credentials:
    """How to sign requests: ``kind`` is a credentials-type; the rest as that type needs."""

    kind: str = "default"
    access_key_id: str | None = None
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    profile_name: str | None = None  # None: the profile named "default"


@dataclass(frozen=True, slots=True)
class S3Settings:
    """What the properties file says, checked; times in seconds (0: never)."""

    bucket_name: str
    bucket_region: str = "us-east-1"
    file_prefix: str = "hive/cluster/nodes/"
    file_expiration_s: float = 360.0
    update_interval_s: float = 180.0
    endpoint_url: str | None = None  # None: AWS, the endpoint the SDK picks for the region
    endpoint_region: str | None = None  # the region requests are signed for, if not the bucket's
    path_style_access: bool | None = None  # None: the SDK decides per request
    credentials: Credentials = field(default_factory=Credentials)
    source: str = ""

    @property
    def signing_region(self) -> str:
        return self.endpoint_region or self.bucket_region


def config_path(data_dir: Path) -> Path:
    """``$HIVE_S3_DISCOVERY_CONFIG``, else ``s3discovery.properties`` in the extension's folder."""
    configured = os.environ.get(CONFIG_ENV, "").strip()
    return Path(configured) if configured else data_dir / CONFIG_FILE_NAME


def load_settings(path: Path) -> S3Settings:
    if not path.is_file():
        raise ConfigError(f"no configuration at {path}: write {CONFIG_FILE_NAME} there, or "
                          f"point {CONFIG_ENV} at one (at least s3-bucket-name)")
    return settings_from(read_properties(path, KEYS), str(path))


def _seconds(settings: dict[str, Setting], key: str, default: float, source: str) -> float:
    if key not in settings:
        return default
    text = settings[key].value
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):  # also refuses nan
        raise ConfigError(f"{source}: {key} must be a number of seconds >= 0, not {text!r}")
    return value


def _boolean(settings: dict[str, Setting], key: str, source: str) -> bool | None:
    if key not in settings:
        return None
    text = settings[key].value.lower()
    if text not in ("true", "false"):
        raise ConfigError(f"{source}: {key} must be true or false, not {settings[key].value!r}")
    return text == "true"


def _endpoint_url(text: str, source: str) -> str | None:
    if not text or text == AWS_DEFAULT_ENDPOINT:
        return None
    url = text if "://" in text else f"https://{text}"
    parts = urlsplit(url)
    try:
        port_ok = parts.port is None or 0 < parts.port < 65536
    except ValueError:  # a port that is not a number
        port_ok = False
    if parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
        raise ConfigError(f"{source}: s3-endpoint {text!r} is not a host or an http(s) URL")
    return url.rstrip("/")


def _credentials(settings: dict[str, Setting], source: str) -> Credentials:
    kind = settings["credentials-type"].value if "credentials-type" in settings else "default"
    if kind in _NOT_HERE:
        raise ConfigError(f"{source}: credentials-type {kind} is not supported: {_NOT_HERE[kind]}")
    if kind not in CREDENTIALS_TYPES:
        raise ConfigError(f"{source}: credentials-type must be one of "
                          f"{', '.join(CREDENTIALS_TYPES)}, not {kind!r}")
    required, optional = _REQUIRED.get(kind, ()), _OPTIONAL.get(kind, ())
    for key in required:
        if key not in settings or not settings[key].value:
            raise ConfigError(f"{source}: credentials-type {kind} needs {key}")
    for key in (*_SECRET_KEYS, "credentials-profile-name"):
        if key in settings and key not in (*required, *optional):
            raise ConfigError(f"{source}: {key} is set, but credentials-type {kind} does not use "
                              "it (set the credentials-type that does, or remove it)")

    def value(key: str) -> str | None:
        return settings[key].value if key in settings and settings[key].value else None

    return Credentials(kind, value("credentials-access-key-id"),
                       value("credentials-secret-access-key"), value("credentials-session-token"),
                       value("credentials-profile-name"))


def settings_from(settings: dict[str, Setting], source: str) -> S3Settings:
    """Checked settings (of known keys: ``parse_properties(text, source, KEYS)``);
    :class:`ConfigError` names the first key that is missing or wrong."""
    bucket = settings["s3-bucket-name"].value if "s3-bucket-name" in settings else ""
    if not bucket:
        raise ConfigError(f"{source}: s3-bucket-name is required (the bucket the nodes share)")
    if not _BUCKET_NAME.fullmatch(bucket) or ".." in bucket:
        raise ConfigError(f"{source}: s3-bucket-name {bucket!r} is not a bucket name (3 to 63 "
                          "lower-case letters, digits, dots and hyphens)")
    region = settings["s3-bucket-region"].value if "s3-bucket-region" in settings else "us-east-1"
    if not _REGION.fullmatch(region):
        raise ConfigError(f"{source}: s3-bucket-region {region!r} is not a region name "
                          "(like us-east-1)")
    endpoint_region = settings["s3-endpoint-region"].value if "s3-endpoint-region" in settings \
        else ""
    if endpoint_region and not _REGION.fullmatch(endpoint_region):
        raise ConfigError(f"{source}: s3-endpoint-region {endpoint_region!r} is not a region "
                          "name (like us-east-1)")
    expiration = _seconds(settings, "file-expiration", 360.0, source)
    update = _seconds(settings, "update-interval", 180.0, source)
    if expiration > 0 and not 0 < update < expiration:
        raise ConfigError(
            f"{source}: update-interval ({update:g} s) must be above 0 and shorter than "
            f"file-expiration ({expiration:g} s), or a live node's record expires between two "
            "updates (file-expiration 0 turns expiration off)")
    endpoint = settings["s3-endpoint"].value if "s3-endpoint" in settings else ""
    return S3Settings(
        bucket_name=bucket, bucket_region=region,
        file_prefix=settings["file-prefix"].value if "file-prefix" in settings
        else "hive/cluster/nodes/",
        file_expiration_s=expiration, update_interval_s=update,
        endpoint_url=_endpoint_url(endpoint, source), endpoint_region=endpoint_region or None,
        path_style_access=_boolean(settings, "s3-path-style-access", source),
        credentials=_credentials(settings, source), source=source)


__all__ = ["CONFIG_ENV", "CONFIG_FILE_NAME", "KEYS", "ConfigError", "Credentials", "S3Settings",
           "config_path", "load_settings", "settings_from"]
