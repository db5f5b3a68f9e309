"""The copy of a clustered node's data from before its start, in ``<data>/cluster-backup/``.

A node that joins a cluster merges its sessions and retained messages with the cluster's, and
what the merge drops (an older copy of a session, a retained message cleared meanwhile) is
gone from its store. A copy of the store and the replicas, made before the store opens, keeps
it recoverable (the recovery tool reads ``cluster-backup/`` too). One previous copy is kept.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

log = logging.getLogger("hive.persistence")

PREVIOUS = "cluster-backup"
KEPT = ("persistence", "replicas")  # what a copy holds: the store and the replicas


def keep_previous_data(data_dir: Path) -> Path | None:
    """Copy ``persistence/`` and ``replicas/`` into ``cluster-backup/``, replacing the copy
    of the start before. Call with the data folder locked and the store not yet open.

    Returns the copy, or None when the folder holds no persistent data (the last copy stays).
    At any moment one complete copy exists: the new one is made beside the old, then takes
    its name.
    """
    sources = [data_dir / name for name in KEPT if _holds_files(data_dir / name)]
    target = data_dir / PREVIOUS
    fresh, old = data_dir / f".{PREVIOUS}.new", data_dir / f".{PREVIOUS}.old"
    if old.is_dir() and not target.exists():  # a start stopped between the two renames
        old.rename(target)
    shutil.rmtree(fresh, ignore_errors=True)
    shutil.rmtree(old, ignore_errors=True)
    if not sources:
        return None
    fresh.mkdir()
    files = size = 0
    for source in sources:
        shutil.copytree(source, fresh / source.name, ignore=_lock_files)
    for root, _dirs, names in os.walk(fresh):
        for name in names:
            files += 1
            size += (Path(root) / name).stat().st_size
    _sync_tree(fresh)
    replaced = target.exists()
    if replaced:
        target.rename(old)
    fresh.rename(target)
    shutil.rmtree(old, ignore_errors=True)
    log.info("Copied the node's persistent data (%s: %d files, %d bytes) into %s%s, so that "
             "what the cluster's merge drops can still be recovered",
             ", ".join(s.name for s in sources), files, size, target,
             " (the previous copy replaced)" if replaced else "")
    return target


def _holds_files(folder: Path) -> bool:
    return folder.is_dir() and any(p.is_file() for p in folder.rglob("*"))


def _lock_files(folder: str, names: list[str]) -> list[str]:
    return [n for n in names if n.endswith(".lock")]


def _sync_tree(folder: Path) -> None:
    for root, _dirs, names in os.walk(folder):
        for name in names:
            fd = os.open(Path(root) / name, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
