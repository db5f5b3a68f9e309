"""One node per data folder: an OS lock on ``<data>/.lock``, held for the node's life.

Two nodes on one folder would share a node id and one SQLite store, each overwriting what the
other keeps. ``flock`` is released by the kernel when the process ends, however it ends, so a
node killed with ``kill -9`` leaves no stale lock behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

__all__ = ["DataFolderInUse", "DataFolderLock"]

LOCK_FILE = ".lock"


class DataFolderInUse(OSError):
    """Another process holds the data folder; the message names the folder and its PID."""

    def __str__(self) -> str:
        return str(self.args[0])


class DataFolderLock:
    """``acquire()`` takes the folder or raises :class:`DataFolderInUse`; ``release()`` frees it."""

    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise DataFolderInUse(
                f"the data folder {self.path.parent} is in use by another Hive node (PID "
                f"{holder}); give each node a folder of its own (hive run --data-dir)") from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)
            os.close(self._fd)  # closing the descriptor drops the lock
            self._fd = None
