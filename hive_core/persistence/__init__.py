"""Persistence: the records the broker keeps across restarts, and the stores that keep them.

The records, the store protocol and :class:`PersistenceError` live in the extension API, so that
third-party stores use the same ones; the core takes them from there.
"""

from hive_ext_api import (
    NEVER_EXPIRES,
    Direction,
    PersistenceError,
    SessionStore,
    Snapshot,
    StoredInflight,
    StoredMessage,
    StoredSession,
    StoredSubscription,
)

from ._acknowledging import HOLD_PAUSE, Acknowledging
from ._data_lock import DataFolderInUse, DataFolderLock
from ._file_store import FileSessionStore, StoreStats
from ._memory_store import MemorySessionStore
from ._previous import PREVIOUS, keep_previous_data

__all__ = [
    "HOLD_PAUSE",
    "NEVER_EXPIRES",
    "PREVIOUS",
    "Acknowledging",
    "DataFolderInUse",
    "DataFolderLock",
    "Direction",
    "FileSessionStore",
    "MemorySessionStore",
    "PersistenceError",
    "SessionStore",
    "Snapshot",
    "StoreStats",
    "StoredInflight",
    "StoredMessage",
    "StoredSession",
    "StoredSubscription",
    "keep_previous_data",
]
