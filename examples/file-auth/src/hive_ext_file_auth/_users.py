"""The users file: one TOML table per user with a password hash and topic permissions.

    [users.sensor-1]
    salt = "mVd3...=="                      # base64, 16 random bytes
    hash = "0x8r...="                       # base64 Scrypt hash of the password
    publish = ["sensors/{username}/#"]      # topic filters this user may publish to
    subscribe = ["commands/{username}/#"]   # topic filters this user may subscribe to
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hive_ext_file_auth._passwords import decode_base64
from hive_ext_file_auth._permissions import is_valid_filter

KNOWN_KEYS = frozenset({"salt", "hash", "publish", "subscribe"})


class UsersFileError(Exception):
    """The users file is missing or does not say what it should; the message says where."""


@dataclass(frozen=True, slots=True)
class User:
    name: str
    salt: bytes
    password_hash: bytes
    publish: tuple[str, ...] = ()
    subscribe: tuple[str, ...] = ()


def _filters(name: str, table: dict[str, Any], key: str) -> tuple[str, ...]:
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UsersFileError(f"user {name!r}: {key} must be a list of topic filters")
    bad = [v for v in value if not is_valid_filter(v)]
    if bad:
        raise UsersFileError(f"user {name!r}: {key} has invalid topic filters {bad}")
    return tuple(value)


def _user(name: str, table: Any) -> User:
    if not isinstance(table, dict):
        raise UsersFileError(f"user {name!r} must be a table ([users.{name}])")
    unknown = set(table) - KNOWN_KEYS
    if unknown:
        raise UsersFileError(f"user {name!r}: unknown keys {sorted(unknown)}")
    fields: dict[str, bytes] = {}
    for key in ("salt", "hash"):
        value = table.get(key)
        if not isinstance(value, str):
            raise UsersFileError(f"user {name!r}: {key} is missing (make one with "
                                 "hive-file-auth-hash)")
        try:
            fields[key] = decode_base64(value, key)
        except ValueError as exc:
            raise UsersFileError(f"user {name!r}: {exc}") from None
    return User(name, fields["salt"], fields["hash"], _filters(name, table, "publish"),
                _filters(name, table, "subscribe"))


def load_users(path: Path) -> dict[str, User]:
    """Read and check the users file at ``path``; UsersFileError says what is wrong."""
    try:
        with path.open("rb") as file:
            document = tomllib.load(file)
    except FileNotFoundError:
        raise UsersFileError(f"users file {path} does not exist") from None
    except OSError as exc:
        raise UsersFileError(f"users file {path} cannot be read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsersFileError(f"users file {path} is not valid TOML: {exc}") from None
    users = document.get("users")
    if not isinstance(users, dict):
        raise UsersFileError(f"users file {path} has no [users.<name>] tables")
    try:
        return {name: _user(name, table) for name, table in users.items()}
    except UsersFileError as exc:
        raise UsersFileError(f"users file {path}: {exc}") from None
