"""``spark.properties``: where the extension finds its settings, and what they may say.

The file is named by ``HIVE_SPARK_CONFIG``, else it is ``spark.properties`` in the extension's
data folder; without either, every setting has its default. Lines are ``key = value`` (or
``key: value``); ``#`` and ``!`` start comments. Every problem is a :class:`SettingsError` naming
the key and the file.
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

CONFIG_ENV = "HIVE_SPARK_CONFIG"
CONFIG_FILE_NAME = "spark.properties"
DEFAULT_FOLDER = "events"

KEYS = ("folder", "node-id", "segment-max-bytes", "segment-max-age", "retention-max-bytes",
        "s3-bucket-name", "s3-bucket-region", "s3-prefix", "s3-endpoint", "s3-path-style-access",
        "credentials-type", "credentials-access-key-id", "credentials-secret-access-key",
        "s3-keep-local", "s3-retry-interval")
CREDENTIALS_TYPES = ("default", "access_key")

_SIZE = re.compile(r"(\d+)\s*(B|KB|KIB|MB|MIB|GB|GIB|K|M|G)?", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "B": 1, "K": 1024, "KB": 1000, "KIB": 1024, "M": 1024**2, "MB": 1000**2,
               "MIB": 1024**2, "G": 1024**3, "GB": 1000**3, "GIB": 1024**3}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h)?", re.IGNORECASE)
_DURATION_UNITS = {"": 1.0, "MS": 0.001, "S": 1.0, "M": 60.0, "H": 3600.0}
_BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")

MIN_SEGMENT_BYTES = 64 * 1024


class SettingsError(ValueError):
    """A setting is wrong; the message names it and where it came from."""


@dataclass(frozen=True, slots=True)
class S3Settings:
    bucket_name: str
    bucket_region: str = "us-east-1"
    prefix: str = "hive-events/"
    endpoint_url: str | None = None
    path_style_access: bool = False
    credentials_type: str = "default"
    access_key_id: str | None = None
    secret_access_key: str | None = field(default=None, repr=False)
    keep_local: bool = False
    retry_interval_s: float = 5.0


@dataclass(frozen=True, slots=True)
class Settings:
    """What the file says, checked. Sizes in bytes, times in seconds."""

    folder: Path
    node_id: str | None = None
    segment_max_bytes: int = 16 * 1024**2
    segment_max_age_s: float = 5.0
    retention_max_bytes: int = 1024**3
    s3: S3Settings | None = None
    source: str = "defaults"


def read_properties(text: str, source: str) -> dict[str, str]:
    values: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        match = re.match(r"([^=:\s]+)\s*[=:]\s*(.*)", line)
        if match is None:
            raise SettingsError(f"{source} line {number}: expected 'key = value', got {line!r}")
        key, value = match.group(1), match.group(2).strip()
        if key not in KEYS:
            close = difflib.get_close_matches(key, KEYS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise SettingsError(f"{source} line {number}: unknown setting {key!r}{hint}; "
                                f"known: {', '.join(KEYS)}")
        if key in values:
            raise SettingsError(f"{source} line {number}: {key} is set twice")
        values[key] = value
    return values


def _number_and_unit(key: str, text: str, source: str, pattern: re.Pattern[str],
                     what: str) -> tuple[str, str]:
    """The number and the unit (upper case, "" for none) of ``text`` as ``pattern`` reads it;
    else a :class:`SettingsError` saying that ``text`` is not ``what``."""
    match = pattern.fullmatch(text.strip())
    if match is None:
        raise SettingsError(f"{source}: {key} = {text!r} is not {what}")
    return match.group(1), (match.group(2) or "").upper()


def parse_size(key: str, text: str, source: str) -> int:
    number, unit = _number_and_unit(key, text, source, _SIZE, "a size (like 16MiB, 500KB, 1GiB "
                                    "or a number of bytes)")
    return int(number) * _SIZE_UNITS[unit]


def parse_duration(key: str, text: str, source: str) -> float:
    number, unit = _number_and_unit(key, text, source, _DURATION, "a duration (like 5s, 500ms, "
                                    "2m or a number of seconds)")
    return float(number) * _DURATION_UNITS[unit]


def parse_boolean(key: str, text: str, source: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "yes", "on", "1"):
        return True
    if lowered in ("false", "no", "off", "0"):
        return False
    raise SettingsError(f"{source}: {key} = {text!r} is not true or false")


def _s3(values: dict[str, str], source: str) -> S3Settings | None:
    bucket = values.get("s3-bucket-name", "")
    if not bucket:
        others = [k for k in values if k.startswith(("s3-", "credentials-")) and values[k]]
        if others:
            raise SettingsError(f"{source}: {others[0]} is set but s3-bucket-name is not: set "
                                "s3-bucket-name to ship segments to S3")
        return None
    if not _BUCKET_NAME.fullmatch(bucket):
        raise SettingsError(f"{source}: s3-bucket-name {bucket!r} is not a valid bucket name")
    endpoint = values.get("s3-endpoint") or None
    if endpoint is not None and not re.match(r"https?://[^/\s]+", endpoint):
        raise SettingsError(f"{source}: s3-endpoint {endpoint!r} is not an http(s) URL")
    kind = values.get("credentials-type") or "default"
    if kind not in CREDENTIALS_TYPES:
        raise SettingsError(f"{source}: credentials-type {kind!r} is not one of "
                            f"{', '.join(CREDENTIALS_TYPES)}")
    key_id = values.get("credentials-access-key-id") or None
    secret = values.get("credentials-secret-access-key") or None
    if kind == "access_key" and (key_id is None or secret is None):
        missing = "credentials-access-key-id" if key_id is None else \
            "credentials-secret-access-key"
        raise SettingsError(f"{source}: credentials-type access_key needs {missing}")
    if kind == "default" and (key_id or secret):
        raise SettingsError(f"{source}: credentials-access-key-id and "
                            "credentials-secret-access-key need credentials-type access_key")
    prefix = values.get("s3-prefix", "hive-events/")
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    retry = parse_duration("s3-retry-interval", values["s3-retry-interval"], source) \
        if "s3-retry-interval" in values else 5.0
    if retry <= 0:
        raise SettingsError(f"{source}: s3-retry-interval must be above 0")
    return S3Settings(
        bucket_name=bucket, bucket_region=values.get("s3-bucket-region") or "us-east-1",
        prefix=prefix.lstrip("/"), endpoint_url=endpoint,
        path_style_access=parse_boolean("s3-path-style-access",
                                        values.get("s3-path-style-access", "false"), source),
        credentials_type=kind, access_key_id=key_id, secret_access_key=secret,
        keep_local=parse_boolean("s3-keep-local", values.get("s3-keep-local", "false"), source),
        retry_interval_s=retry)


def parse_settings(values: dict[str, str], data_dir: Path, source: str) -> Settings:
    folder_text = values.get("folder") or DEFAULT_FOLDER
    folder = Path(folder_text)
    if not folder.is_absolute():
        folder = data_dir / folder
    segment_bytes = parse_size("segment-max-bytes", values["segment-max-bytes"], source) \
        if "segment-max-bytes" in values else 16 * 1024**2
    if segment_bytes < MIN_SEGMENT_BYTES:
        raise SettingsError(f"{source}: segment-max-bytes must be at least 64KiB")
    age = parse_duration("segment-max-age", values["segment-max-age"], source) \
        if "segment-max-age" in values else 5.0
    if age <= 0:
        raise SettingsError(f"{source}: segment-max-age must be above 0")
    retention = parse_size("retention-max-bytes", values["retention-max-bytes"], source) \
        if "retention-max-bytes" in values else 1024**3
    if retention < segment_bytes:
        raise SettingsError(f"{source}: retention-max-bytes ({retention}) must be at least "
                            f"segment-max-bytes ({segment_bytes})")
    node_id = values.get("node-id") or None
    if node_id is not None and not re.fullmatch(r"[A-Za-z0-9._-]{1,64}", node_id):
        raise SettingsError(f"{source}: node-id {node_id!r} may hold letters, digits, '.', '_' "
                            "and '-' only")
    return Settings(folder=folder, node_id=node_id, segment_max_bytes=segment_bytes,
                    segment_max_age_s=age, retention_max_bytes=retention,
                    s3=_s3(values, source), source=source)


def load_settings(data_dir: Path) -> Settings:
    """The settings from ``$HIVE_SPARK_CONFIG``, else ``<data_dir>/spark.properties``."""
    named = os.environ.get(CONFIG_ENV, "").strip()
    if named:
        path = Path(named)
        if not path.is_file():
            raise SettingsError(f"{CONFIG_ENV}={named}: no such file")
    else:
        path = data_dir / CONFIG_FILE_NAME
        if not path.is_file():
            return parse_settings({}, data_dir, "defaults")
    try:
        text = path.read_text()
    except OSError as exc:
        raise SettingsError(f"{path}: cannot read: {exc}") from None
    return parse_settings(read_properties(text, str(path)), data_dir, str(path))
