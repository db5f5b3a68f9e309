"""file-discovery: the hooks called directly on a shared file, and the extension on a node."""

from __future__ import annotations

import logging
import multiprocessing
from pathlib import Path
from typing import Any

import pytest
from hive_ext_api import ClusterNodeAddress, ExtensionContext, ExtensionRefused

import hive_ext_file_discovery as discovery
from hive_ext_file_discovery import FileDiscovery, NodeFile, NodeRecord, parse_line
from hive_ext_file_discovery._node_file import MalformedLine, now_ms

A = ClusterNodeAddress("10.0.0.1", 7800)
B = ClusterNodeAddress("10.0.0.2", 7800)


@pytest.fixture
def nodes_file(tmp_path: Path) -> Path:
    return tmp_path / "shared" / "cluster-nodes.txt"


@pytest.fixture
def started(nodes_file: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    """The extension started by hand, as the node would, on ``nodes_file``."""
    monkeypatch.setenv(discovery.FILE_ENV, str(nodes_file))
    monkeypatch.setenv(discovery.RELOAD_INTERVAL_ENV, "5")
    context = ExtensionContext(name="file-discovery", data_dir=tmp_path / "data",
                               services=None,  # type: ignore[arg-type]
                               log=logging.getLogger("test"))
    discovery.hive_extension_start(context)
    yield discovery
    discovery.hive_extension_stop()


def _peer(nodes_file: Path, expiration_s: float = 360) -> FileDiscovery:
    return FileDiscovery(NodeFile(nodes_file), expiration_s)


def _records(nodes_file: Path) -> list[NodeRecord]:
    return NodeFile(nodes_file).read()


def test_init_appends_a_versioned_record_and_destroy_removes_it(started: Any,
                                                                nodes_file: Path) -> None:
    before = now_ms()
    started.hive_discovery_init(own_address=A, cluster_id="node-a")
    lines = [line for line in nodes_file.read_text().splitlines() if not line.startswith("#")]
    assert len(lines) == 1
    host_port, version, node_id, written = lines[0].split()
    assert (host_port, version, node_id) == ("10.0.0.1:7800", "1", "node-a")
    assert before <= int(written) <= now_ms()
    assert started.hive_discovery_reload() == [A]

    started.hive_discovery_destroy(own_address=A)
    assert _records(nodes_file) == []
    assert started.hive_discovery_reload() == []


def test_reload_sees_peers_and_static_lines(started: Any, nodes_file: Path) -> None:
    nodes_file.parent.mkdir(parents=True)
    nodes_file.write_text("# hand-written\n10.0.0.9:7801\n[fd00::7]:7800\n\n")
    peer = _peer(nodes_file)
    peer.init(B, "node-b")
    started.hive_discovery_init(own_address=A, cluster_id="node-a")

    assert started.hive_discovery_reload() == [
        ClusterNodeAddress("10.0.0.9", 7801), ClusterNodeAddress("fd00::7", 7800), B, A]
    peer.destroy()
    assert B not in started.hive_discovery_reload()
    assert ClusterNodeAddress("fd00::7", 7800) in started.hive_discovery_reload()
    assert "[fd00::7]:7800\n" in nodes_file.read_text()  # static lines survive rewrites


def test_dead_records_age_out(started: Any, nodes_file: Path) -> None:
    dead = NodeRecord("10.0.0.3", 7800, "node-dead", now_ms() - 361_000)
    alive = NodeRecord("10.0.0.4", 7800, "node-alive", now_ms() - 100_000)
    nodes_file.parent.mkdir(parents=True)
    nodes_file.write_text(f"{dead.line()}\n{alive.line()}\n")

    assert started.hive_discovery_reload() == [ClusterNodeAddress("10.0.0.4", 7800)]
    started.hive_discovery_init(own_address=A, cluster_id="node-a")
    assert [r.node_id for r in _records(nodes_file)] == ["node-alive", "node-a"]  # purged


def test_reload_refreshes_the_own_record_before_it_expires(nodes_file: Path) -> None:
    node = _peer(nodes_file, expiration_s=2)
    node.init(A, "node-a")
    first = _records(nodes_file)[0].written_ms
    NodeFile(nodes_file).update(
        lambda records: [NodeRecord(r.host, r.port, r.node_id, first - 1500) for r in records])
    assert node.reload() == [A]
    assert _records(nodes_file)[0].written_ms >= first

    nodes_file.write_text("")  # an operator cleared the file: the running node comes back
    assert node.reload() == [A]


def test_a_restarted_node_replaces_its_old_record(nodes_file: Path) -> None:
    _peer(nodes_file).init(A, "node-a-before-restart")
    _peer(nodes_file).init(A, "node-a-after-restart")
    assert [r.node_id for r in _records(nodes_file)] == ["node-a-after-restart"]


def test_bad_lines_are_skipped_counted_and_logged(started: Any, nodes_file: Path,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    nodes_file.parent.mkdir(parents=True)
    nodes_file.write_text("10.0.0.5\n10.0.0.6:7800 2 node-x 1\n10.0.0.7:7800\n")
    node = _peer(nodes_file)
    with caplog.at_level(logging.WARNING):
        assert node.reload() == [ClusterNodeAddress("10.0.0.7", 7800)]
    assert node.errors == {"io": 0, "malformed": 2}
    assert "line 1" in caplog.text and "format version 2" in caplog.text


def test_an_unreadable_file_is_no_news_not_a_crash(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    node = _peer(blocker / "cluster-nodes.txt")
    node.init(A, "node-a")  # logged and counted, not raised
    assert node.reload() is None
    node.destroy()
    assert node.errors["io"] == 3


def test_reload_interval_comes_from_the_environment(started: Any) -> None:
    assert started.hive_discovery_reload_interval() == 5.0


def test_bad_settings_refuse_to_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(discovery.EXPIRATION_ENV, "soon")
    context = ExtensionContext(name="file-discovery", data_dir=tmp_path,
                               services=None,  # type: ignore[arg-type]
                               log=logging.getLogger("test"))
    with pytest.raises(ExtensionRefused, match="HIVE_FILE_DISCOVERY_EXPIRATION"):
        discovery.hive_extension_start(context)


@pytest.mark.parametrize("line", ["10.0.0.1:7800", "[::1]:7800", "h:1 1 node-1 1718000000000"])
def test_lines_round_trip(line: str) -> None:
    record = parse_line(line)
    assert record is not None and record.line() == line


@pytest.mark.parametrize("line", ["h", "h:0", "h:port", ":7800", "h:1 1 node", "h:1 1 n 1.5"])
def test_malformed_lines(line: str) -> None:
    with pytest.raises(MalformedLine):
        parse_line(line)


def _register_many(path: str, first: int) -> None:
    for i in range(first, first + 10):
        _peer(Path(path)).init(ClusterNodeAddress(f"10.1.0.{i}", 7800), f"node-{i}")


def test_concurrent_writers_lose_nothing(nodes_file: Path) -> None:
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_register_many, args=(str(nodes_file), n * 10))
               for n in range(6)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(30)
        assert worker.exitcode == 0
    assert sorted(r.node_id or "" for r in _records(nodes_file)) == sorted(
        f"node-{i}" for i in range(60))


def test_a_node_with_the_extension_starts_and_it_is_active(
        hive_node_factory: Any, nodes_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(discovery.FILE_ENV, str(nodes_file))
    node = hive_node_factory(extensions=[discovery])
    records = [r for r in node.extensions.manager.records
               if r.module is discovery or r.name in ("file-discovery", discovery.__name__)]
    assert len(records) == 1 and records[0].active, node.extensions.manager.records


def test_installed_under_the_extensions_entry_point() -> None:
    from importlib.metadata import entry_points

    (entry_point,) = entry_points(group="hive.extensions", name="file-discovery")
    assert entry_point.load() is discovery
