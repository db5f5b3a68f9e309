"""A ``.properties`` file as HiveMQ's extensions write them: ``key:value`` (or ``key=value``).

    # a comment
    s3-bucket-name:hive-cluster
    credentials-secret-access-key:${ENV:HIVE_S3_SECRET}

``${ENV:NAME}`` is replaced by the environment variable NAME, as in Hive's ``config.xml``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

_ENV_REFERENCE = re.compile(r"\$\{ENV:([A-Za-z_][A-Za-z0-9_]*)\}")


class ConfigError(ValueError):
    """A setting is missing or wrong; the message names the setting and the file."""


@dataclass(frozen=True, slots=True)
class Setting:
    value: str
    line: int


def parse_properties(text: str, source: str) -> dict[str, Setting]:
    """Every ``key: value`` of ``text``; a line that is not one, or a repeated key, is refused."""
    settings: dict[str, Setting] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        separator = min((i for i in (line.find(":"), line.find("=")) if i > 0), default=-1)
        if separator < 0:
            raise ConfigError(f"{source} line {number}: {line!r} is not 'key:value'")
        key, value = line[:separator].strip(), line[separator + 1:].strip()
        if key in settings:
            raise ConfigError(f"{source} line {number}: {key} is already set on line "
                              f"{settings[key].line}")
        settings[key] = Setting(_expand(value, key, source, number), number)
    return settings


def _expand(value: str, key: str, source: str, number: int) -> str:
    def variable(match: re.Match[str]) -> str:
        name = match.group(1)
        found = os.environ.get(name)
        if found is None:
            raise ConfigError(f"{source} line {number}: {key} refers to ${{ENV:{name}}}, "
                              f"but the environment has no {name}")
        return found

    return _ENV_REFERENCE.sub(variable, value)


def read_properties(path: Path) -> dict[str, Setting]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    return parse_properties(text, str(path))
