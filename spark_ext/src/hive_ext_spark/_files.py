"""Small files beside the segments, written so a reader never sees half of one."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

STATE_FILE = "state.json"  # the node's next sequence and segment numbers
CONSUMED_FILE = "consumed.json"  # written by the Spark job: the segments it committed


def fsync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_atomically(path: Path, document: object) -> None:
    """Temporary name, fsync, rename: readers see the old or the new content, never a part."""
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    with temporary.open("w") as out:
        json.dump(document, out)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)


def read_json(path: Path) -> dict[str, object]:
    """The JSON object in ``path``; empty when it is missing or unreadable."""
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return document if isinstance(document, dict) else {}
