"""``s3discovery.properties``: where it is found, what it may say, and what is wrong with it.

The keys are those of HiveMQ's S3 discovery extension. Every problem is a :class:`ConfigError`
that names the key (and the file); the extension turns it into a refusal to start.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from hive_ext_api import Properties, Setting, SettingError, read_properties

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


def load_settings(path: Path) -> S3Settings:
    if not path.is_file():
        raise ConfigError(f"no configuration at {path}: write {CONFIG_FILE_NAME} there, or "
                          f"point {CONFIG_ENV} at one (at least s3-bucket-name)")
    return settings_from(read_properties(path, KEYS), str(path))


def _endpoint_url(read: Properties) -> str | None:
    text = read.text("s3-endpoint")
    if text is None or text == AWS_DEFAULT_ENDPOINT:
        return None
    return read.http_url(text, "s3-endpoint")


def _credentials(read: Properties) -> Credentials:
    kind = read.text("credentials-type", "default")
    assert kind is not None
    if kind in _NOT_HERE:
        raise read.error(f"credentials-type {kind} is not supported: {_NOT_HERE[kind]}")
    if kind not in CREDENTIALS_TYPES:
        raise read.error(f"credentials-type must be one of {', '.join(CREDENTIALS_TYPES)}, not "
                         f"{kind!r}")
    required, optional = _REQUIRED.get(kind, ()), _OPTIONAL.get(kind, ())
    for key in required:
        if read.text(key) is None:
            raise read.error(f"credentials-type {kind} needs {key}")
    for key in (*_SECRET_KEYS, "credentials-profile-name"):
        if key in read.settings and key not in (*required, *optional):
            raise read.error(f"{key} is set, but credentials-type {kind} does not use it (set "
                             "the credentials-type that does, or remove it)")
    return Credentials(kind, read.text("credentials-access-key-id"),
                       read.text("credentials-secret-access-key"),
                       read.text("credentials-session-token"),
                       read.text("credentials-profile-name"))


def _region(read: Properties, key: str, default: str | None) -> str | None:
    region = read.text(key, default)
    if region is not None and not _REGION.fullmatch(region):
        raise read.error(f"{key} {region!r} is not a region name (like us-east-1)")
    return region


def settings_from(settings: dict[str, Setting], source: str) -> S3Settings:
    """Checked settings (of known keys: ``parse_properties(text, source, KEYS)``);
    :class:`ConfigError` names the first key that is missing or wrong."""
    read = Properties(settings, source)
    bucket = read.text("s3-bucket-name")
    if bucket is None:
        raise read.error("s3-bucket-name is required (the bucket the nodes share)")
    if not _BUCKET_NAME.fullmatch(bucket) or ".." in bucket:
        raise read.error(f"s3-bucket-name {bucket!r} is not a bucket name (3 to 63 lower-case "
                         "letters, digits, dots and hyphens)")
    region = _region(read, "s3-bucket-region", "us-east-1")
    assert region is not None
    endpoint_region = _region(read, "s3-endpoint-region", None)
    expiration = read.seconds("file-expiration", 360.0)
    update = read.seconds("update-interval", 180.0)
    if expiration > 0 and not 0 < update < expiration:
        raise read.error(
            f"update-interval ({update:g} s) must be above 0 and shorter than file-expiration "
            f"({expiration:g} s), or a live node's record expires between two updates "
            "(file-expiration 0 turns expiration off)")
    return S3Settings(
        bucket_name=bucket, bucket_region=region,
        file_prefix=read.text("file-prefix", "hive/cluster/nodes/") or "",
        file_expiration_s=expiration, update_interval_s=update,
        endpoint_url=_endpoint_url(read), endpoint_region=endpoint_region,
        path_style_access=read.boolean("s3-path-style-access"),
        credentials=_credentials(read), source=source)


__all__ = ["CONFIG_ENV", "CONFIG_FILE_NAME", "KEYS", "ConfigError", "Credentials", "S3Settings",
           "load_settings", "settings_from"]
