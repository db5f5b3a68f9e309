"""Hive example extension: authentication and topic permissions from a TOML users file.

The users file is ``$HIVE_FILE_AUTH_USERS``, or ``users.toml`` in the extension's data folder.
It is read once at start; a missing or invalid file makes the extension refuse to start.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from hive_ext_api import (
    AuthDecision,
    ClientInfo,
    ConnectInfo,
    ExtensionContext,
    ExtensionRefused,
    ReasonCode,
    hookimpl,
)

from hive_ext_file_auth._passwords import hash_password, verify_password
from hive_ext_file_auth._permissions import allows, strip_share
from hive_ext_file_auth._users import User, UsersFileError, load_users

__version__ = "1.0.0"

HIVE_API = ">=1.0,<2"

USERS_ENV = "HIVE_FILE_AUTH_USERS"
DEFAULT_FILE_NAME = "users.toml"

__all__ = ["HIVE_API", "USERS_ENV", "User", "UsersFileError", "hash_password", "load_users",
           "users_file_path"]

_users: dict[str, User] = {}


def users_file_path(context: ExtensionContext) -> Path:
    """Where the users file is: ``$HIVE_FILE_AUTH_USERS``, else in the extension's data folder."""
    configured = os.environ.get(USERS_ENV)
    return Path(configured) if configured else context.data_dir / DEFAULT_FILE_NAME


@hookimpl
def hive_extension_start(context: ExtensionContext) -> None:
    path = users_file_path(context)
    try:
        users = load_users(path)
    except UsersFileError as exc:
        raise ExtensionRefused(f"{exc} (set {USERS_ENV} or create {path})") from None
    _users.clear()
    _users.update(users)
    context.log.info("file-auth: %d users from %s", len(users), path)


@hookimpl
def hive_extension_stop() -> None:
    _users.clear()


@hookimpl
async def hive_authenticate(connect: ConnectInfo) -> AuthDecision | None:
    user = _users.get(connect.username or "")
    if user is None:
        return None  # not one of ours: the next authenticator decides
    # Scrypt is slow on purpose; a thread keeps the node's event loop serving other clients.
    ok = await asyncio.to_thread(verify_password, connect.password or b"", user.salt,
                                 user.password_hash)
    if ok:
        return AuthDecision.accept()
    return AuthDecision.refuse(ReasonCode.BAD_USER_NAME_OR_PASSWORD)


@hookimpl
def hive_authorize_publish(client: ClientInfo, topic: str) -> bool | None:
    user = _users.get(client.username or "")
    if user is None:
        return None
    return allows(user.publish, topic, user.name, client.client_id)


@hookimpl
def hive_authorize_subscribe(client: ClientInfo, topic_filter: str) -> bool | None:
    user = _users.get(client.username or "")
    if user is None:
        return None
    return allows(user.subscribe, strip_share(topic_filter), user.name, client.client_id)
