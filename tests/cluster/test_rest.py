"""The REST API and `hive cluster status`, against real `hive run` processes."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
from conftest import free_port

from cluster._nodes import cluster_nodes, get, metrics, node_id, start_cluster, wait_for_members
from hive_core import __version__

pytestmark = pytest.mark.timeout(30)

REST_STARTED = r"Started REST API on address (\S+) and on port (\d+)"


def rest_on(port: int, enabled: str = "true") -> str:
    return (f"<rest-api><enabled>{enabled}</enabled><listeners><http><port>{port}</port>"
            "<bind-address>127.0.0.1</bind-address></http></listeners></rest-api>")


def hive_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hive_core.cli", *args], capture_output=True,
                          text=True, timeout=20)


def raw_http(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(request)
        sock.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_port_0_is_logged_and_a_single_node_answers_health_nodes_and_metrics(hive_factory):
    node = hive_factory(body=rest_on(0))
    found = node.wait_for_log(REST_STARTED)
    assert found.group(1) == "127.0.0.1"
    node.ports["rest"] = int(found.group(2))
    health = get(node, "/api/v1/health")
    assert health["status"] == "UP" and health["version"] == __version__
    assert health["node_id"] == node_id(node) and health["cluster"]["enabled"] is False
    assert cluster_nodes(node) == [{"id": node_id(node), "state": "RUNNING", "address": None,
                                    "port": None, "version": __version__, "this_node": True}]
    document = metrics(node)
    assert document["broker"]["connections_current"] == 0
    assert "cluster" not in document


def test_the_rest_api_is_off_unless_enabled(hive_factory):
    node = hive_factory()
    assert not re.search(REST_STARTED, node.log)
    port = free_port()
    node = hive_factory(body=rest_on(port, "false"))
    assert not re.search(REST_STARTED, node.log)
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/health", timeout=2)


def test_unknown_paths_other_methods_bad_requests_and_keep_alive(hive_factory):
    port = free_port()
    hive_factory(body=rest_on(port))
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/nope", timeout=5)
    assert missing.value.code == 404
    post = urllib.request.Request(f"http://127.0.0.1:{port}/api/v1/health", data=b"{}",
                                  method="POST")
    with pytest.raises(urllib.error.HTTPError) as wrong_method:
        urllib.request.urlopen(post, timeout=5)
    assert wrong_method.value.code == 405 and wrong_method.value.headers["allow"] == "GET"
    # Two requests pipelined on one connection: two answers, in order.
    answer = raw_http(port, b"GET /api/v1/health HTTP/1.1\r\nhost: x\r\n\r\n"
                            b"GET /api/v1/cluster/nodes/ HTTP/1.1\r\nhost: x\r\n\r\n")
    assert answer.count(b"HTTP/1.1 200 ") == 2
    assert answer.index(b'"status"') < answer.index(b'"items"')
    assert raw_http(port, b"NOT HTTP AT ALL\r\n\r\n").startswith(b"HTTP/1.1 400 ")


def test_rest_port_already_taken_stops_the_start_with_a_clear_error(hive_factory):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        node = hive_factory(body=rest_on(port), start=False)
        with pytest.raises(RuntimeError, match="cannot start"):
            node.start()


def test_cluster_status_prints_every_member_as_each_node_sees_it(hive_factory):
    nodes = start_cluster(hive_factory, 3)
    wait_for_members(nodes, 3)
    ids = [node_id(n) for n in nodes]
    for node, own in zip(nodes, ids, strict=True):
        members = {m["id"]: m for m in cluster_nodes(node)}
        assert set(members) == set(ids)
        assert [m for m in members.values() if m["this_node"]] == [members[own]]
        for peer, other in zip(ids, nodes, strict=True):
            assert members[peer]["state"] == "RUNNING"
            assert members[peer]["version"] == __version__
            assert (members[peer]["address"], members[peer]["port"]) == \
                ("127.0.0.1", other.ports["cluster"])
    result = hive_cli("cluster", "status", "--rest", f"http://127.0.0.1:{nodes[1].ports['rest']}")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"Cluster size: 3, as node {ids[1]} (*) sees it")
    assert lines[1].split()[:4] == ["NODE", "STATE", "VERSION", "ADDRESS"]
    rows = {line.split()[0].rstrip("*"): line.split() for line in lines[2:5]}
    assert set(rows) == set(ids)
    assert rows[ids[1]][0] == ids[1] + "*"  # the node asked
    assert rows[ids[0]][0] == ids[0]
    assert rows[ids[2]][1:4] == [
        "RUNNING", __version__, f"127.0.0.1:{nodes[2].ports['cluster']}"]
    document = json.loads(json.dumps(metrics(nodes[0])))
    assert document["cluster"]["members"] == 3 and document["cluster"]["connections"] == 2


def test_cluster_status_without_a_node_to_ask_fails_with_a_hint():
    result = hive_cli("cluster", "status", "--rest", f"http://127.0.0.1:{free_port()}",
                      "--timeout", "2")
    assert result.returncode == 1
    assert "cannot reach the REST API" in result.stderr and "<rest-api>" in result.stderr
