"""The `hive` subcommands' conventions: `hive cluster status` as an overview of a real 2-node
cluster, `--json` (one JSON document on standard output) on every command that prints data,
the exit codes of the README's table, and `--help` (with its exit codes) everywhere."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from cluster._nodes import cluster_nodes, node_id, start_cluster, wait_for, wait_for_members
from conftest import free_port

from hive_core import __version__
from hive_core.admin import verify_password
from hive_core.cli import build_parser
from hive_core.config import PasswordHash
from hive_core.exit_codes import MEANINGS

pytestmark = pytest.mark.timeout(60)


def hive_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hive_core.cli", *args], capture_output=True,
                          text=True, timeout=30, input=stdin)


def rest(node: object) -> str:
    return f"http://127.0.0.1:{node.ports['rest']}"  # type: ignore[attr-defined]


class Traffic:
    """A paho publisher and subscriber on one node: about 50 messages a second in and out."""

    def __init__(self, port: int) -> None:
        self.clients = [mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=name)
                        for name in ("cli-sub", "cli-pub")]
        subscribed = threading.Event()
        self.clients[0].on_subscribe = lambda *_: subscribed.set()
        for client in self.clients:
            client.connect("127.0.0.1", port)
            client.loop_start()
        self.clients[0].subscribe("cli/#", qos=0)
        assert subscribed.wait(5), "no SUBACK"
        self.running = True
        self.thread = threading.Thread(target=self._publish, daemon=True)
        self.thread.start()

    def _publish(self) -> None:
        while self.running:
            self.clients[1].publish("cli/t", b"x", qos=0)
            time.sleep(0.02)

    def stop(self) -> None:
        self.running = False
        self.thread.join(5)
        for client in self.clients:
            client.disconnect()
            client.loop_stop()


@pytest.fixture
def two_nodes(hive_factory: object) -> Iterator[list[object]]:
    nodes = start_cluster(hive_factory, 2)  # type: ignore[arg-type]
    wait_for_members(nodes, 2)
    yield nodes


def test_cluster_status_shows_every_member_with_its_numbers(two_nodes: list[object]) -> None:
    ids = [node_id(n) for n in two_nodes]  # type: ignore[arg-type]
    first, second = two_nodes
    traffic = Traffic(first.port)  # type: ignore[attr-defined]
    try:
        done = hive_cli("cluster", "status", "--json", "--rest", rest(first), "--rest",
                        rest(second))
    finally:
        traffic.stop()
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["node_id"] == ids[0] and document["size"] == 2
    assert document["rate_seconds"] == 1.0
    nodes = {node["id"]: node for node in document["nodes"]}
    assert set(nodes) == set(ids)
    busy, idle = nodes[ids[0]], nodes[ids[1]]
    assert busy["this_node"] and not idle["this_node"]
    for node, other in ((busy, idle), (idle, busy)):
        assert node["state"] == "RUNNING" and node["version"] == __version__
        assert node["backups"] == [other["id"]]  # replica-count 2 by default
        assert set(node["replication_lag"]) == {other["id"]}
    assert busy["address"] == f"127.0.0.1:{first.ports['cluster']}"  # type: ignore[attr-defined]
    assert busy["connections"] == 2 and idle["connections"] == 0
    # 50 a second published and delivered; a loaded machine may slow the publisher down
    assert 10 < busy["messages_in_per_second"] < 80, busy
    assert 10 < busy["messages_out_per_second"] < 80, busy
    assert idle["messages_in_per_second"] == 0.0


def test_cluster_status_table_fits_100_columns_and_marks_the_nodes_not_asked(
        two_nodes: list[object]) -> None:
    ids = [node_id(n) for n in two_nodes]  # type: ignore[arg-type]
    # The other node's load comes with its heartbeats: wait for the first to have arrived.
    wait_for(lambda: all("load" in m for m in cluster_nodes(two_nodes[1])  # type: ignore
                         if m["id"] == ids[0]), 15, "a heartbeat with node 1's load on node 2")
    done = hive_cli("cluster", "status", "--rest", rest(two_nodes[1]), "--sample", "0.2")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert all(len(line) <= 100 for line in lines), done.stdout
    assert lines[0] == f"Cluster size: 2, as node {ids[1]} (*) sees it; rates over 0.2 s"
    assert lines[1].split() == ["NODE", "STATE", "VERSION", "ADDRESS", "CONN", "IN/S", "OUT/S",
                                "BACKUPS", "LAG"]
    rows = {line.split()[0]: line.split() for line in lines[2:4]}
    assert rows[ids[1] + "*"] == [ids[1] + "*", "RUNNING", __version__,
                                  f"127.0.0.1:{two_nodes[1].ports['cluster']}",  # type: ignore
                                  "0", "0.0", "0.0", ids[0], "0"]
    # Not asked: its load as the heartbeats carried it to the node asked; no backups, no lag.
    assert rows[ids[0]][4] != "-" and rows[ids[0]][7:] == ["-", "-"]
    assert lines[4].startswith("not asked (no --rest): load as the heartbeats carry it")
    both = hive_cli("cluster", "status", "--rest", rest(two_nodes[1]), "--rest",
                    rest(two_nodes[0]), "--sample", "0")
    assert both.returncode == 0, both.stderr
    assert "; rates over" not in both.stdout and "not asked" not in both.stdout
    assert len(both.stdout.splitlines()) == 4


def test_cluster_status_exit_codes(two_nodes: list[object]) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"
    alone = hive_cli("cluster", "status", "--rest", nowhere, "--timeout", "2", "--json")
    assert alone.returncode == 1 and alone.stdout == ""
    assert "cannot reach the REST API" in alone.stderr
    # the member list came, one node asked did not answer: the table, and exit 1
    partly = hive_cli("cluster", "status", "--rest", rest(two_nodes[0]), "--rest", nowhere,
                      "--sample", "0", "--json")
    assert partly.returncode == 1
    assert json.loads(partly.stdout)["size"] == 2
    assert f"cannot reach the REST API at {nowhere}" in partly.stderr
    for bad in (["--sample", "-1"], ["--sample", "soon"], ["--no-such-option"]):
        usage = hive_cli("cluster", "status", "--rest", rest(two_nodes[0]), *bad)
        assert usage.returncode == 2, (bad, usage.stderr)
        assert usage.stdout == ""


def test_backups_list_json_is_one_document(two_nodes: list[object]) -> None:
    done = hive_cli("backups", "list", "--json", "--rest", rest(two_nodes[0]))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


# ------------------------------------------------------------------------- without a node


def test_extensions_json() -> None:
    done = hive_cli("extensions", "--json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["hive"] == __version__
    names = {e["name"]: e for e in document["extensions"]}
    assert names["file_persistence"]["active"] is True
    assert names["file_persistence"]["source"] == "built-in"


def test_extensions_with_a_bad_config_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "c.xml").write_text("<hivemq><nope/></hivemq>")
    done = hive_cli("extensions", "--json", "--config", str(tmp_path / "c.xml"))
    assert done.returncode == 2 and done.stdout == ""


def test_rest_api_json() -> None:
    token = hive_cli("rest-api", "new-token", "--json")
    assert token.returncode == 0, token.stderr
    assert len(json.loads(token.stdout)["token"]) >= 32
    hashed = hive_cli("rest-api", "hash-password", "--password-stdin", "--json",
                      "--algorithm", "pbkdf2-sha256", stdin="s3cret\n")
    assert hashed.returncode == 0, hashed.stderr
    document = json.loads(hashed.stdout)
    assert document["algorithm"] == "pbkdf2-sha256"
    assert verify_password(b"s3cret", PasswordHash.parse(document["password_hash"]))
    empty = hive_cli("rest-api", "hash-password", "--password-stdin", "--json", stdin="\n")
    assert empty.returncode == 2 and empty.stdout == ""


def test_certs_json_and_several_nodes_in_one_call(tmp_path: Path) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes

    ca = hive_cli("certs", "ca", "--out", str(tmp_path / "ca"), "--json")
    assert ca.returncode == 0, ca.stderr
    ca_document = json.loads(ca.stdout)
    ca_cert = x509.load_pem_x509_certificate((tmp_path / "ca" / "ca.pem").read_bytes())
    assert ca_document["fingerprint_sha256"] == \
        ca_cert.fingerprint(hashes.SHA256()).hex(":").upper()
    names = [f"node{i}" for i in range(5)]
    nodes = hive_cli("certs", "node", "--ca", str(tmp_path / "ca"), "--out",
                     str(tmp_path / "nodes"), "--json", *(w for n in names for w in ("--name", n)))
    assert nodes.returncode == 0, nodes.stderr
    assert nodes.stderr == ""  # no progress line: standard error is not a terminal
    document = json.loads(nodes.stdout)
    assert document["ca_fingerprint_sha256"] == ca_document["fingerprint_sha256"]
    assert [n["name"] for n in document["nodes"]] == names
    for made in document["nodes"]:
        folder = tmp_path / "nodes" / made["name"]
        assert made["folder"] == str(folder)
        assert made["files"] == [str(folder / f) for f in (
            f"{made['name']}.pem", f"{made['name']}-cert.pem", f"{made['name']}-key.pem",
            "ca.pem")]
        cert = x509.load_pem_x509_certificate((folder / f"{made['name']}-cert.pem").read_bytes())
        assert made["fingerprint_sha256"] == cert.fingerprint(hashes.SHA256()).hex(":").upper()
        assert cert.issuer == ca_cert.subject
    # again without --force: refused before any file is written, even of a new node
    again = hive_cli("certs", "node", "--ca", str(tmp_path / "ca"), "--out",
                     str(tmp_path / "nodes"), "--name", "node9", "--name", "node0")
    assert again.returncode == 2 and "node0.pem exists" in again.stderr
    assert not (tmp_path / "nodes" / "node9").exists()
    shared_ip = hive_cli("certs", "node", "--ca", str(tmp_path / "ca"), "--out",
                         str(tmp_path / "x"), "--name", "a", "--name", "b", "--ip", "10.0.0.1")
    assert shared_ip.returncode == 2 and "--ip and --dns" in shared_ip.stderr


def test_certs_progress_line_on_a_terminal(tmp_path: Path) -> None:
    import os
    import pty

    assert hive_cli("certs", "ca", "--out", str(tmp_path / "ca")).returncode == 0
    leader, follower = pty.openpty()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "hive_core.cli", "certs", "node", "--ca",
             str(tmp_path / "ca"), "--out", str(tmp_path / "n"), "--name", "a", "--name", "b",
             "--name", "c"], stdout=subprocess.PIPE, stderr=follower, timeout=30)
        os.close(follower)
        follower = -1
        seen = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the terminal closed
                break
            if not chunk:
                break
            seen += chunk
    finally:
        if follower != -1:
            os.close(follower)
        os.close(leader)
    assert done.returncode == 0
    assert b"\rmade 1/3 certificates: a" in seen and b"\rmade 3/3 certificates: c" in seen
    assert len(done.stdout.decode().splitlines()) == 12  # the files, on stdout as before


def test_certs_a_folder_that_cannot_be_written_is_exit_3(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder")
    done = hive_cli("certs", "ca", "--out", str(tmp_path / "file" / "ca"))
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr


# ------------------------------------------------------------------------- --help everywhere


def test_the_readme_documents_every_exit_code() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme[readme.index("## The `hive` command"):]
    section = section[:section.index("\n## ")]
    documented = {int(code) for code in re.findall(r"^\| (\d+) \|", section, re.MULTILINE)}
    assert documented == set(MEANINGS)


def _leaves(parser: argparse.ArgumentParser, words: tuple[str, ...] = ()
            ) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not actions:
        yield words, parser
    for action in actions:
        for name, child in action.choices.items():
            yield from _leaves(child, (*words, name))


LEAVES = sorted(words for words, _ in _leaves(build_parser()))


def test_every_subcommand_is_covered() -> None:
    assert ("cluster", "status") in LEAVES and ("certs", "node") in LEAVES
    assert ("backups", "create") in LEAVES and ("rest-api", "new-token") in LEAVES
    assert len(LEAVES) >= 12


@pytest.mark.parametrize("words", LEAVES, ids=" ".join)
def test_help_exits_0_and_says_the_exit_codes(words: tuple[str, ...]) -> None:
    done = hive_cli(*words, "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: hive {' '.join(words)}")
    assert "exit codes: 0 " in done.stdout and "; 2 " in done.stdout, done.stdout


@pytest.mark.parametrize("words", [(), ("cluster",), ("certs",), ("backups",), ("rest-api",),
                                   ("config",)], ids=lambda w: " ".join(("hive", *w)))
def test_help_of_a_command_group_exits_0(words: tuple[str, ...]) -> None:
    done = hive_cli(*words, "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: {' '.join(('hive', *words))}")
