"""keep_previous_data: the copy of a clustered node's data in ``cluster-backup/`` (one copy,
complete at every moment, also after a start that stopped half way)."""

from __future__ import annotations

from pathlib import Path

from hive_core.persistence import PREVIOUS, keep_previous_data


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _tree(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): p.read_text() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def test_nothing_to_copy_makes_nothing(tmp_path: Path) -> None:
    (tmp_path / "persistence").mkdir()  # an empty store folder is no data
    assert keep_previous_data(tmp_path) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["persistence"]


def test_the_store_and_the_replicas_are_copied_and_the_copy_replaced(tmp_path: Path) -> None:
    _write(tmp_path / "persistence" / "sessions.db", "store 1")
    _write(tmp_path / "persistence" / "sessions.db-wal", "wal 1")
    _write(tmp_path / "replicas" / "node-b" / "persistence" / "sessions.db", "replica 1")
    _write(tmp_path / "node-id", "me")
    _write(tmp_path / ".lock", "")
    copy = keep_previous_data(tmp_path)
    assert copy == tmp_path / PREVIOUS
    assert _tree(copy) == {"persistence/sessions.db": "store 1",
                           "persistence/sessions.db-wal": "wal 1",
                           "replicas/node-b/persistence/sessions.db": "replica 1"}
    _write(tmp_path / "persistence" / "sessions.db", "store 2")
    (tmp_path / "persistence" / "sessions.db-wal").unlink()
    keep_previous_data(tmp_path)
    assert _tree(copy)["persistence/sessions.db"] == "store 2"
    assert "persistence/sessions.db-wal" not in _tree(copy)
    assert sorted(p.name for p in tmp_path.iterdir() if PREVIOUS in p.name) == [PREVIOUS]


def test_a_start_stopped_between_the_renames_keeps_the_old_copy(tmp_path: Path) -> None:
    # The old copy was moved aside, the new one not yet in place (a half-made one beside it).
    _write(tmp_path / f".{PREVIOUS}.old" / "persistence" / "sessions.db", "old copy")
    _write(tmp_path / f".{PREVIOUS}.new" / "persistence" / "sessions.db", "half")
    assert keep_previous_data(tmp_path) is None  # nothing new to copy
    assert _tree(tmp_path) == {f"{PREVIOUS}/persistence/sessions.db": "old copy"}
