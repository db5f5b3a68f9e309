"""An extension's settings file, as HiveMQ's extensions write them: ``key:value`` or ``key=value``.

    # a comment (so is a line starting with !)
    s3-bucket-name:hive-cluster
    credentials-secret-access-key:${ENV:HIVE_S3_SECRET}

``${ENV:NAME}`` is replaced by the environment variable NAME, as in Hive's ``config.xml``. A line
that is not a setting, a key given twice, an unknown key (when the known ones are given) and a
reference to a variable the environment lacks are refused with a :class:`SettingError` that
names the file and the line.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from hive_ext_api._types import ExtensionRefused

_ENV_REFERENCE = re.compile(r"\$\{ENV:([A-Za-z_][A-Za-z0-9_]*)\}")


class SettingError(ExtensionRefused):
    """A setting is missing or wrong, or the settings file cannot be read.

    The message names where (a file and line, or an environment variable) and what is wrong.
    Raised from ``hive_extension_start`` it refuses the extension with that message, and the node
    runs on without it.
    """


@dataclass(frozen=True, slots=True)
class Setting:
    """One value and where it came from (``"FILE line 3"``, ``"$VARIABLE"``), for messages."""

    value: str
    origin: str


def unknown_setting(key: str, origin: str, known: Collection[str]) -> SettingError:
    """The error for a key that is not one of ``known``: the closest known key, or all of them."""
    close = difflib.get_close_matches(key, list(known), n=1)
    hint = f"did you mean {close[0]}?" if close else f"known: {', '.join(known)}"
    return SettingError(f"{origin}: unknown setting {key} ({hint})")


def parse_properties(text: str, source: str,
                     known: Collection[str] | None = None) -> dict[str, Setting]:
    """Every setting of ``text`` (from ``source``); with ``known``, any other key is refused."""
    settings: dict[str, Setting] = {}
    lines: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        origin = f"{source} line {number}"
        separator = min((i for i in (line.find(":"), line.find("=")) if i > 0), default=-1)
        if separator < 0:
            raise SettingError(f"{origin}: {line!r} is not 'key:value' (or 'key=value')")
        key, value = line[:separator].strip(), line[separator + 1:].strip()
        if known is not None and key not in known:
            raise unknown_setting(key, origin, known)
        if key in settings:
            raise SettingError(f"{origin}: {key} is already set on line {lines[key]}")
        settings[key], lines[key] = Setting(_expand(value, key, origin), origin), number
    return settings


def _expand(value: str, key: str, origin: str) -> str:
    def variable(match: re.Match[str]) -> str:
        name = match.group(1)
        found = os.environ.get(name)
        if found is None:
            raise SettingError(f"{origin}: {key} refers to ${{ENV:{name}}}, but the environment "
                               f"has no {name}")
        return found

    return _ENV_REFERENCE.sub(variable, value)


def read_properties(path: Path | str, known: Collection[str] | None = None) -> dict[str, Setting]:
    """The settings of the file at ``path`` (UTF-8); one that cannot be read is a SettingError."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise SettingError(f"cannot read {path}: {why}") from None
    return parse_properties(text, str(path), known)


def settings_file(variable: str, file_name: str, data_dir: Path) -> Path:
    """Where an extension's settings file is: the path in the environment variable ``variable``
    when it is set, else ``file_name`` in the extension's data folder."""
    configured = os.environ.get(variable, "").strip()
    return Path(configured) if configured else data_dir / file_name


class Properties:
    """The settings of one file, read as the types an extension needs.

    A key that is absent or empty is not set: each reader answers its default. A value of the
    wrong form is a :class:`SettingError` that names the key and the file (``source``).
    """

    def __init__(self, settings: Mapping[str, Setting], source: str) -> None:
        self.settings = settings
        self.source = source

    def error(self, message: str) -> SettingError:
        """A :class:`SettingError` saying ``message`` about this file."""
        return SettingError(f"{self.source}: {message}")

    def text(self, key: str, default: str | None = None) -> str | None:
        """The value of ``key``, or ``default`` when it is not set."""
        setting = self.settings.get(key)
        return setting.value if setting is not None and setting.value else default

    def seconds(self, key: str, default: float) -> float:
        """A number of seconds, 0 or more and finite."""
        text = self.text(key)
        if text is None:
            return default
        try:
            value = float(text)
        except ValueError:
            value = -1.0
        if not value >= 0 or value == float("inf"):  # also refuses nan
            raise self.error(f"{key} must be a number of seconds >= 0, not {text!r}")
        return value

    def boolean(self, key: str, default: bool | None = None) -> bool | None:
        """``true`` or ``false``, in any case."""
        text = self.text(key)
        if text is None:
            return default
        if text.lower() not in ("true", "false"):
            raise self.error(f"{key} must be true or false, not {text!r}")
        return text.lower() == "true"

    def readable_file(self, key: str) -> Path | None:
        """The path of a file this process can read (``~`` expanded)."""
        text = self.text(key)
        if text is None:
            return None
        path = Path(text).expanduser()
        if not path.is_file() or not os.access(path, os.R_OK):
            raise self.error(f"{key} {text!r} is not a readable file")
        return path

    def http_url(self, text: str, key: str, *, default_scheme: str = "https",
                 path_allowed: bool = True, expected: str = "a host or an http(s) URL") -> str:
        """``text`` (the value of ``key``, or of an environment variable standing in for it) as
        an http(s) URL without a trailing slash; a bare ``host[:port]`` gets ``default_scheme``.
        Refused, as not ``expected``, without a host, with another scheme or a port that is not
        one, and with a path unless ``path_allowed``."""
        url = text if "://" in text else f"{default_scheme}://{text}"
        parts = urlsplit(url)
        try:
            port_ok = parts.port is None or 0 < parts.port < 65536
        except ValueError:  # a port that is not a number
            port_ok = False
        if parts.scheme not in ("http", "https") or not parts.hostname or not port_ok \
                or (not path_allowed and parts.path.strip("/")):
            raise self.error(f"{key} {text!r} is not {expected}")
        return url.rstrip("/")
