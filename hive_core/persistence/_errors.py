"""The one exception a session store raises."""

from __future__ import annotations


class PersistenceError(Exception):
    """The store could not open, or could not make a write durable.

    ``__cause__`` holds the underlying error (``sqlite3.Error``, ``OSError``, ...).
    """
