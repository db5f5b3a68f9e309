"""The address a node tells other nodes to dial: never 127.0.0.1 for a LAN cluster unless asked.

Issue 9: without <bind-address> a node advertised ``gethostbyname(gethostname())``, which is
127.0.0.1 or Debian's 127.0.1.1 on most hosts: peers on other hosts dialled themselves. Now the
order is: external-address / host-discovery-address, a bind address naming one interface,
127.0.0.1 when discovery stays on this host, else the default route's address; with no default
route the node refuses to start and names the settings. Hosts without and with a default route
are network namespaces (root, as CI runs).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import free_port
from netns import Testbed, testbed

from hive_core.config import parse_config
from hive_core.net import AdvertisedAddress, advertised_address, default_route_address
from hive_core.node import cluster_settings

__all__ = ["testbed"]  # the fixture, imported for pytest

pytestmark = pytest.mark.timeout(60)


def _cluster(body: str):  # type: ignore[no-untyped-def]
    return parse_config(f"<hivemq><cluster><enabled>true</enabled>{body}</cluster></hivemq>"
                        ).cluster


# A cluster reachable from other hosts needs a shared secret (issue 8).
SECRET = "<authentication><shared-secret>a-secret-for-tests-only</shared-secret></authentication>"
LAN_STATIC = ("<transport><tcp/></transport><discovery><static><node ip=\"10.20.0.1\"/>"
              f"<node ip=\"10.20.0.2\"/></static></discovery>{SECRET}")


def _kernel_default_address() -> str | None:
    """What `ip` says: the IPv4 address of the default route's interface (source if given)."""
    routes = json.loads(subprocess.run(["ip", "-j", "-4", "route", "show", "default"],
                                       capture_output=True, text=True, check=True).stdout)
    if not routes:
        return None
    if routes[0].get("prefsrc"):
        return str(routes[0]["prefsrc"])
    links = json.loads(subprocess.run(["ip", "-j", "-4", "addr", "show", "dev", routes[0]["dev"]],
                                      capture_output=True, text=True, check=True).stdout)
    return str(links[0]["addr_info"][0]["local"])


@pytest.mark.parametrize(("body", "bind", "expected"), [
    ("<transport><tcp><external-address>203.0.113.7</external-address></tcp></transport>"
     f"<discovery><static/></discovery>{SECRET}", "0.0.0.0", "203.0.113.7"),
    ("<host-discovery-address>198.51.100.9</host-discovery-address>" + LAN_STATIC,
     "0.0.0.0", "198.51.100.9"),
    (LAN_STATIC, "10.20.0.1", "10.20.0.1"),
    ("<discovery><broadcast/></discovery>", "0.0.0.0", "127.0.0.1"),  # stays on loopback
    ("", "0.0.0.0", "127.0.0.1"),  # multicast on loopback, the bare <cluster>
    ("<transport><tcp/></transport><discovery><static><node><host>127.0.0.1</host><port>1"
     "</port></node><node><host>localhost</host><port>2</port></node></static></discovery>",
     "0.0.0.0", "127.0.0.1"),
])
def test_the_advertised_address_follows_the_config(body: str, bind: str, expected: str) -> None:
    assert advertised_address(_cluster(body), bind)[0] == expected


def test_a_lan_cluster_without_bind_address_advertises_the_default_routes_address() -> None:
    expected = _kernel_default_address()
    if expected is None:  # a machine without a default route: refused, see below
        with pytest.raises(AdvertisedAddress):
            advertised_address(_cluster(LAN_STATIC), "0.0.0.0")
        return
    host, why = advertised_address(_cluster(LAN_STATIC), "0.0.0.0")
    assert host == expected
    assert not host.startswith("127.")
    assert "default route" in why
    # what the node really puts in its HELLO and hands to discovery
    config = parse_config(f"<hivemq><cluster><enabled>true</enabled>{LAN_STATIC}</cluster>"
                          "</hivemq>")
    assert cluster_settings(config).external_host == expected


def test_inside_namespaces_the_default_route_decides(testbed: Testbed) -> None:
    lan = testbed.segment()
    routed, isolated = testbed.host(lan), testbed.host(lan)
    testbed.route(routed, "add", "default", "dev", "eth0")
    assert routed.inside(default_route_address) == routed.address
    assert isolated.inside(default_route_address) is None
    cluster = _cluster(LAN_STATIC)
    assert routed.inside(lambda: advertised_address(cluster, "0.0.0.0"))[0] == routed.address
    with pytest.raises(AdvertisedAddress, match=r"no <transport><tcp><bind-address> and no "
                       r"<external-address>, and this host has no default route"):
        isolated.inside(lambda: advertised_address(cluster, "0.0.0.0"))


def _run_inside(host, folder: Path, body: str):  # type: ignore[no-untyped-def]
    config = folder / "config.xml"
    config.write_text(f"<hivemq><listeners><tcp-listener><port>{free_port()}</port>"
                      f"</tcp-listener></listeners>{body}</hivemq>")
    return host.popen([sys.executable, "-m", "hive_core.cli", "run", "--config", str(config),
                       "--data-dir", str(folder / "data")], stdout=subprocess.PIPE,
                      stderr=subprocess.PIPE, text=True)


def test_hive_run_on_a_host_without_default_route_refuses_and_says_what_to_set(
        testbed: Testbed, tmp_path: Path) -> None:
    isolated = testbed.host(testbed.segment())
    proc = _run_inside(isolated, tmp_path, f"<cluster><enabled>true</enabled>{LAN_STATIC}"
                                           "</cluster>")
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 1
    assert "hive: cannot start: no <transport><tcp><bind-address> and no <external-address>" \
        in stderr


def test_hive_run_on_a_lan_host_advertises_its_lan_address(testbed: Testbed,
                                                           tmp_path: Path) -> None:
    lan = testbed.segment()
    host = testbed.host(lan)
    testbed.route(host, "add", "default", "dev", "eth0")
    rest = free_port()
    proc = _run_inside(host, tmp_path, f"<cluster><enabled>true</enabled>{LAN_STATIC}</cluster>"
                       "<rest-api><enabled>true</enabled><listeners><http>"
                       f"<port>{rest}</port><bind-address>127.0.0.1</bind-address></http>"
                       "</listeners></rest-api><persistence><mode>in-memory</mode></persistence>")
    try:
        deadline = time.monotonic() + 20
        members = None
        while time.monotonic() < deadline and members is None:
            try:
                members = host.http_json(rest, "/api/v1/cluster/nodes")["items"]
            except OSError:
                time.sleep(0.2)
        assert members is not None, "the node did not serve its REST API"
        [own] = [m for m in members if m["this_node"]]
        assert own["address"] == host.address
    finally:
        proc.terminate()
        proc.communicate(timeout=15)
