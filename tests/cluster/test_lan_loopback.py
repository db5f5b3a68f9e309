"""LAN discovery on loopback: announcers in one process, the plugins' hooks, real `hive run` nodes.

Each test takes a random group in 239.0.0.0/8 and free ports, so tests running side by side (and
a developer's own nodes on the default 228.8.8.8:45588) never hear each other.
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import HiveProcess, free_port

from cluster._nodes import cluster_nodes, metrics, wait_for
from hive_core.broker._services import NodeServices
from hive_core.config import parse_config
from hive_core.plugins import ExtensionManager, Extensions
from hive_core.plugins._lan import (
    Announcer,
    AnnouncerSettings,
    NoSuchInterface,
    broadcast_channel,
    encode,
    interface_for,
    multicast_channel,
)
from hive_core.plugins._lan._announcement import Announcement, AnnouncementKind
from hive_ext_api import ClusterNodeAddress, ExtensionContext, ExtensionRefused

FAST = 0.2  # seconds between announcements in these tests


def random_group() -> str:
    return f"239.{random.randint(1, 254)}.{random.randint(0, 255)}.{random.randint(1, 254)}"


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("0.0.0.0", 0))
        return int(sock.getsockname()[1])


def free_udp_range(count: int) -> int:
    """The first of ``count`` consecutive UDP ports that are free now."""
    for _ in range(100):
        base = random.randint(20000, 60000 - count)
        socks = []
        try:
            for port in range(base, base + count):
                sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                socks.append(sock)
                sock.bind(("0.0.0.0", port))
            return base
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
    raise RuntimeError(f"no {count} free consecutive UDP ports")


def run(main: Callable[[], Awaitable[None]], timeout: float = 20.0) -> None:
    asyncio.run(asyncio.wait_for(main(), timeout))


async def until(check: Callable[[], bool], timeout: float = 5.0) -> float:
    begun = time.monotonic()
    while not check():
        if time.monotonic() - begun > timeout:
            raise AssertionError("not in time")
        await asyncio.sleep(0.01)
    return time.monotonic() - begun


class Errors:
    def __init__(self) -> None:
        self.value = 0

    def inc(self) -> None:
        self.value += 1


def multicast_announcer(group: str, port: int, cluster: str = "hive",
                        bind_address: str | None = "127.0.0.1",
                        errors: Errors | None = None) -> Announcer:
    settings = AnnouncerSettings("multicast", cluster, FAST, lambda: multicast_channel(
        group, port, interface_for(bind_address), 1))
    return Announcer(settings, logging.getLogger("test.lan"),
                     errors.inc if errors is not None else None)


def address(port: int) -> ClusterNodeAddress:
    return ClusterNodeAddress("127.0.0.1", port)


# ------------------------------------------------------------------------------ interfaces


@pytest.mark.parametrize(("bind_address", "by_default"), [
    (None, True), ("0.0.0.0", True), ("127.0.0.1", False), ("localhost", False)])
def test_the_interface_is_the_bind_address_one_or_loopback(bind_address: str | None,
                                                           by_default: bool) -> None:
    interface = interface_for(bind_address)
    assert (interface.name, interface.address, interface.chosen_by_default) == (
        "lo", "127.0.0.1", by_default)


def test_an_interface_address_must_be_ipv4_and_present() -> None:
    with pytest.raises(ValueError, match="IPv6"):
        interface_for("::1")
    with pytest.raises(NoSuchInterface, match=r"192\.0\.2\.254"):
        interface_for("192.0.2.254")
    with pytest.raises(NoSuchInterface, match="cannot resolve"):
        interface_for("no-such-host.invalid")


# ------------------------------------------------------------------------------ announcers


def test_a_starting_node_knows_the_others_when_its_start_returns() -> None:
    group, port = random_group(), free_udp_port()

    async def main() -> None:
        a, b, c = (multicast_announcer(group, port) for _ in range(3))
        await a.start("a", address(1))
        await b.start("b", address(2))
        assert b.addresses() == [address(1)]  # a answered b's probe during b's start
        await c.start("c", address(3))
        assert c.addresses() == [address(1), address(2)]
        await until(lambda: a.addresses() == [address(2), address(3)])
        await c.stop()  # says LEAVE: dropped at once, not after the expiry
        waited = await until(lambda: (a.addresses(), b.addresses()) == ([address(2)], [address(1)]))
        assert waited < a.roster.expiry / 2
        await a.stop()
        await b.stop()

    run(main)


def test_a_silent_node_ages_out() -> None:
    group, port = random_group(), free_udp_port()

    async def main() -> None:
        a, b = multicast_announcer(group, port), multicast_announcer(group, port)
        await a.start("a", address(1))
        await b.start("b", address(2))
        assert a.addresses() == [address(2)]
        assert b._task is not None
        b._task.cancel()  # b stops announcing without a word, as if killed
        b._transport.abort()  # type: ignore[union-attr]
        await asyncio.sleep(0.05)  # what b sent last has arrived
        last_heard = a.roster._nodes["b"].last_heard
        await until(lambda: a.addresses() == [], timeout=10)
        silent = time.monotonic() - last_heard
        assert a.roster.expiry < silent < a.roster.expiry + 2.0  # slack for a busy machine
        await a.stop()

    run(main)


def test_two_clusters_on_one_group_stay_apart(caplog: pytest.LogCaptureFixture) -> None:
    group, port = random_group(), free_udp_port()

    async def main() -> None:
        a, b = multicast_announcer(group, port, "red"), multicast_announcer(group, port, "red")
        other = multicast_announcer(group, port, "blue")
        for announcer, name, number in ((a, "a", 1), (other, "x", 9), (b, "b", 2)):
            await announcer.start(name, address(number))
        await asyncio.sleep(3 * FAST)
        assert (a.addresses(), b.addresses(), other.addresses()) == (
            [address(2)], [address(1)], [])
        for announcer in (a, b, other):
            await announcer.stop()

    with caplog.at_level(logging.INFO, "test.lan"):
        run(main)
    assert "ignoring nodes of cluster 'red' (this is 'blue')" in caplog.text


def test_garbage_on_the_group_is_warned_about_counted_and_survived(
        caplog: pytest.LogCaptureFixture) -> None:
    group, port = random_group(), free_udp_port()
    errors = Errors()

    async def main() -> None:
        a = multicast_announcer(group, port, errors=errors)
        b = multicast_announcer(group, port)
        await a.start("a", address(1))
        sender = multicast_channel(group, port, interface_for("127.0.0.1"), 1)
        try:
            broken = encode(Announcement(AnnouncementKind.ANNOUNCE, "hive", "z", "h", 5))[:-1]
            for datagram in (broken, broken, b"not discovery at all"):
                sender.sock.sendto(datagram, (group, port))
            await until(lambda: errors.value == 2)
        finally:
            sender.close()
        await b.start("b", address(2))  # still listening after the garbage
        await until(lambda: a.addresses() == [address(2)])
        await a.stop()
        await b.stop()

    with caplog.at_level(logging.WARNING, "test.lan"):
        run(main)
    warnings = [r.getMessage() for r in caplog.records if "malformed" in r.getMessage()]
    assert len(warnings) == 1 and "host is cut short or empty" in warnings[0]


def test_an_address_no_interface_has_is_retried_and_counted(
        caplog: pytest.LogCaptureFixture) -> None:
    errors = Errors()

    async def main() -> None:
        a = multicast_announcer(random_group(), free_udp_port(), bind_address="192.0.2.254",
                                errors=errors)
        await a.start("a", address(1))
        assert a.running and a.addresses() == []
        await until(lambda: errors.value >= 3)  # tried again every interval
        await a.stop()

    with caplog.at_level(logging.WARNING, "test.lan"):
        run(main)
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1  # rate-limited: once a minute
    assert "no network interface of this host has the address 192.0.2.254" in warned[0]


def test_broadcast_nodes_take_the_first_free_ports_and_hear_every_port() -> None:
    base = free_udp_range(3)
    errors = Errors()

    def broadcaster(count: Errors | None = None) -> Announcer:
        settings = AnnouncerSettings("broadcast", "hive", FAST, lambda: broadcast_channel(
            "127.255.255.255", base, 2, interface_for(None)))
        return Announcer(settings, logging.getLogger("test.lan"),
                         count.inc if count is not None else None)

    async def main() -> None:
        nodes = [broadcaster() for _ in range(3)]
        for number, announcer in enumerate(nodes, 1):
            await announcer.start(f"n{number}", address(number))
        ports = sorted(int(a.description.split(" port ")[1].split()[0]) for a in nodes)
        assert ports == [base, base + 1, base + 2]
        for number, announcer in enumerate(nodes, 1):
            await until(lambda a=announcer, n=number: a.addresses() == [  # type: ignore[misc]
                address(i) for i in (1, 2, 3) if i != n])
        extra = broadcaster(errors)  # the range is full on this interface
        await extra.start("n4", address(4))
        assert errors.value == 1 and not extra.addresses()
        for announcer in [*nodes, extra]:
            await announcer.stop()

    run(main)


# ------------------------------------------------------------------------------ the plugins


def context_for(xml: str, services: NodeServices) -> ExtensionContext:
    return ExtensionContext("lan", Path("."), services, logging.getLogger("test.lan"),
                            parse_config(f"<hivemq><cluster><enabled>true</enabled>{xml}"
                                         "</cluster></hivemq>"))


def started_extensions(xml: str) -> tuple[Extensions, NodeServices]:
    services = NodeServices("n")
    extensions = Extensions(ExtensionManager(discover_installed=False))

    async def start() -> None:
        await extensions.start(lambda _name: context_for(xml, services))

    asyncio.run(start())
    return extensions, services


def test_only_the_configured_mechanism_answers() -> None:
    async def ask(extensions: Extensions) -> tuple[Any, float]:
        return (await extensions.discovery_reload(),
                await extensions.discovery_reload_interval(60.0))

    static = ("<transport><tcp><bind-address>127.0.0.1</bind-address></tcp></transport>"
              "<discovery><static/></discovery>")
    extensions, _ = started_extensions(static)
    assert asyncio.run(ask(extensions)) == ([], 5.0)  # static's own answer, nobody else's
    broadcast = ("<transport><tcp><bind-address>127.0.0.1</bind-address></tcp></transport>"
                 "<discovery><broadcast><announce-interval>700</announce-interval>"
                 "</broadcast></discovery>")
    extensions, services = started_extensions(broadcast)
    assert asyncio.run(ask(extensions)) == ([], 0.7)
    assert set(services.metrics.counters) == {"discovery.broadcast.errors"}
    assert set(services.metrics.gauges) == {"discovery.broadcast.nodes"}


def test_the_plugins_run_a_cluster_of_hooks() -> None:
    group, port = random_group(), free_udp_port()
    xml = (f"<transport><udp><bind-address>127.0.0.1</bind-address><multicast-address>{group}"
           f"</multicast-address><multicast-port>{port}</multicast-port></udp></transport>"
           "<discovery><multicast><announce-interval>200</announce-interval></multicast>"
           "</discovery>")
    (one, one_services), (two, two_services) = started_extensions(xml), started_extensions(xml)

    async def main() -> None:
        await one.discovery_init(address(1), "one")
        await two.discovery_init(address(2), "two")
        assert await two.discovery_reload() == [address(1)]
        assert await one.discovery_reload() == [address(2)]
        assert one_services.metrics.gauges["discovery.multicast.nodes"][0]() == 1
        await two.discovery_destroy(address(2))
        await until(lambda: one_services.metrics.gauges["discovery.multicast.nodes"][0]() == 0)
        assert await one.discovery_reload() == []  # two said it leaves
        await one.stop(lambda _name: context_for(xml, one_services))
        await two.stop(lambda _name: context_for(xml, two_services))

    run(main)
    assert one_services.metrics.counters["discovery.multicast.errors"].value == 0


def test_an_ipv6_bind_address_is_refused_naming_the_setting(
        caplog: pytest.LogCaptureFixture) -> None:
    from hive_core.plugins.broadcast_discovery import BroadcastDiscovery

    xml = "<transport><tcp><bind-address>::1</bind-address></tcp></transport>" \
          "<discovery><broadcast/></discovery>"
    with pytest.raises(ExtensionRefused, match=r"<transport><tcp><bind-address> ::1 is IPv6"):
        BroadcastDiscovery().hive_extension_start(context_for(xml, NodeServices("n")))


# ------------------------------------------------------------------------------ real nodes


NODE_BODY = """<cluster><enabled>true</enabled>{transport}{discovery}
<failure-detection><heartbeat><interval>300</interval><timeout>1500</timeout></heartbeat>
</failure-detection></cluster>
<rest-api><enabled>true</enabled><listeners><http><port>{rest}</port>
<bind-address>127.0.0.1</bind-address></http></listeners></rest-api>
<persistence><mode>in-memory</mode></persistence>"""


@pytest.mark.parametrize("mechanism", ["multicast", "broadcast"])
def test_three_hive_nodes_on_loopback_form_a_cluster(hive_factory: Any, mechanism: str) -> None:
    group, mport, bport = random_group(), free_udp_port(), free_udp_range(3)
    nodes: list[HiveProcess] = []
    for _ in range(3):
        cport, rest = free_port(), free_port()
        if mechanism == "multicast":
            transport = (f"<transport><udp><bind-address>127.0.0.1</bind-address><bind-port>"
                         f"{cport}</bind-port><multicast-address>{group}</multicast-address>"
                         f"<multicast-port>{mport}</multicast-port></udp></transport>")
            discovery = ("<discovery><multicast><announce-interval>250</announce-interval>"
                         "</multicast></discovery>")
        else:
            transport = (f"<transport><tcp><bind-address>127.0.0.1</bind-address><bind-port>"
                         f"{cport}</bind-port></tcp></transport>")
            discovery = (f"<discovery><broadcast><port>{bport}</port><port-range>2</port-range>"
                         "<announce-interval>250</announce-interval></broadcast></discovery>")
        body = NODE_BODY.format(transport=transport, discovery=discovery, rest=rest)
        nodes.append(hive_factory(body=body, start=False, rest=rest))
    for node in nodes:
        node.start()
    for node in nodes:
        wait_for(lambda n=node: len(cluster_nodes(n)) == 3, 10,  # type: ignore[misc]
                 f"{node.folder.name} sees 3 members")
    assert f"{mechanism.capitalize()} discovery on interface lo (127.0.0.1)" in nodes[0].log
    assert "not in this Hive yet" not in nodes[0].log
    for node in nodes:  # the plugin's metrics, as an operator reads them
        counted = metrics(node)["extensions"]
        assert counted[f"discovery.{mechanism}.nodes"] == 2, counted
        assert counted[f"discovery.{mechanism}.errors"] == 0, counted
