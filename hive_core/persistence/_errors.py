"""The one exception a session store raises; it lives in the extension API, so third-party stores
can raise it too."""

from hive_ext_api import PersistenceError

__all__ = ["PersistenceError"]
