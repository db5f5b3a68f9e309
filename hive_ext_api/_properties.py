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
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

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
