"""Where the REST API can be reached from, seen from another host on the same LAN.

Two network namespaces on one bridge stand for two hosts (root, as CI runs): the node runs on
``server``, the requests come from ``neighbour``. Without <bind-address> the REST API is on
loopback only, so the neighbour's connection to the server's LAN address is refused; bound to
every interface, it answers the neighbour, but only with credentials.
"""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import HiveProcess, free_port, render_config
from netns import Host, Testbed, testbed

from hive_core.admin import hash_password

__all__ = ["testbed"]  # the fixture, imported for pytest

pytestmark = pytest.mark.timeout(90)

TOKEN = "neighbourly-" + "x9" * 16
REST = free_port()


@pytest.fixture
def hosts(testbed: Testbed) -> tuple[Host, Host]:
    """``server`` and ``neighbour``: two hosts on one LAN."""
    lan = testbed.segment()
    return testbed.host(lan), testbed.host(lan)


def start_inside(host: Host, folder: Path, rest: str) -> HiveProcess:
    folder.mkdir()
    node = HiveProcess(folder, render_config(free_port(), rest), 0, {})
    node.launcher = tuple(host.command([]))
    return node.start()


def get_from(host: Host, address: str, path: str, token: str | None = None,
             ) -> tuple[int, object]:
    """GET ``path`` from ``address``:REST, the connection made inside ``host``."""
    connection = http.client.HTTPConnection(address, REST, timeout=5)
    connection.sock = host.connect((address, REST), 5)
    try:
        connection.request("GET", path, headers={"Authorization": f"Bearer {token}"}
                           if token else {})
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def test_the_default_bind_address_is_not_reachable_from_another_host(
        hosts: tuple[Host, Host], tmp_path: Path) -> None:
    server, neighbour = hosts
    node = start_inside(server, tmp_path / "loopback",
                        f"<rest-api><enabled>true</enabled><listeners><http><port>{REST}"
                        "</port></http></listeners></rest-api>")
    try:
        assert f"Started REST API on address 127.0.0.1 and on port {REST}" in node.log
        assert server.http_json(REST, "/api/v1/health")["status"] == "UP"  # it does serve
        # the LAN itself works: a port open on the server's LAN address takes the connection
        with server.inside(lambda: socket.create_server((server.address, 0))) as listening:
            neighbour.connect(listening.getsockname()).close()
        with pytest.raises(ConnectionRefusedError):
            neighbour.connect((server.address, REST))
        with pytest.raises(ConnectionRefusedError):  # not even on its own LAN address
            server.connect((server.address, REST))
    finally:
        node.stop()


def test_bound_to_every_interface_it_answers_another_host_only_with_credentials(
        hosts: tuple[Host, Host], tmp_path: Path) -> None:
    server, neighbour = hosts
    exposed = (f"<rest-api><enabled>true</enabled><listeners><http><port>{REST}</port>"
               "<bind-address>0.0.0.0</bind-address></http></listeners>{auth}</rest-api>")
    config = tmp_path / "refused.xml"
    config.write_text(f"<hivemq>{exposed.format(auth='')}</hivemq>")
    refused = subprocess.run(
        server.command([sys.executable, "-m", "hive_core.cli", "run", "--config", str(config),
                        "--data-dir", str(tmp_path / "refused-data")]),
        capture_output=True, text=True, timeout=30)
    assert refused.returncode == 2
    assert "line 1, at hivemq/rest-api/listeners/http/bind-address: the REST API would listen " \
           "on 0.0.0.0, which is not a loopback address, without authentication" in refused.stderr
    node = start_inside(server, tmp_path / "exposed", exposed.format(
        auth=f"<auth><enabled>true</enabled><users><user><name>ops</name><password-hash>"
             f"{hash_password('s3cret')}</password-hash></user></users>"
             f"<tokens><token>{TOKEN}</token></tokens></auth>"))
    try:
        status, body = get_from(neighbour, server.address, "/api/v1/cluster/nodes")
        assert status == 401
        status, body = get_from(neighbour, server.address, "/api/v1/metrics", TOKEN[:-1] + "y")
        assert status == 401
        status, body = get_from(neighbour, server.address, "/api/v1/metrics", TOKEN)
        assert status == 200
        assert isinstance(body, dict) and body["rest_api"]["authentication_failures"] == 1
        assert get_from(neighbour, server.address, "/api/v1/health") == (200, {"status": "UP"})
        assert f"wrong credentials from {neighbour.address} (a bearer token)" in node.log
        assert (f"REST API on 0.0.0.0:{REST} takes passwords over plain HTTP: anyone on the "
                "way can read them") in node.log
    finally:
        node.stop()
