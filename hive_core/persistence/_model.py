"""The persistence records and protocol live in the extension API; the core uses them from there."""

from hive_ext_api import (
    NEVER_EXPIRES,
    Direction,
    SessionStore,
    Snapshot,
    StoredInflight,
    StoredMessage,
    StoredSession,
    StoredSubscription,
)

__all__ = [
    "NEVER_EXPIRES",
    "Direction",
    "SessionStore",
    "Snapshot",
    "StoredInflight",
    "StoredMessage",
    "StoredSession",
    "StoredSubscription",
]
