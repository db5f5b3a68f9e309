"""Persistence: the records the broker keeps across restarts, and the stores that keep them."""

from ._data_lock import DataFolderInUse, DataFolderLock
from ._errors import PersistenceError
from ._file_store import FileSessionStore, StoreStats
from ._memory_store import MemorySessionStore
from ._model import (
    NEVER_EXPIRES,
    Direction,
    SessionStore,
    Snapshot,
    StoredInflight,
    StoredMessage,
    StoredSession,
    StoredSubscription,
)
from ._previous import PREVIOUS, keep_previous_data

__all__ = [
    "NEVER_EXPIRES",
    "PREVIOUS",
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
