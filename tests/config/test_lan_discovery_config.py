"""The elements of multicast and broadcast discovery: defaults, and refusals naming the element."""

from __future__ import annotations

import pytest

from hive_core.config import ConfigError, parse_config
from hive_core.config._cluster import BroadcastDiscovery, MulticastDiscovery, UdpTransport


def cluster(xml: str) -> object:
    return parse_config(f"<hivemq><cluster><enabled>true</enabled>{xml}</cluster></hivemq>").cluster


def test_a_bare_cluster_is_udp_multicast_with_the_defaults() -> None:
    bare = cluster("")
    transport, discovery = bare.effective_transport(), bare.effective_discovery()  # type: ignore[attr-defined]
    assert isinstance(transport, UdpTransport) and isinstance(discovery, MulticastDiscovery)
    assert (transport.bind_address, transport.multicast_address, transport.multicast_port,
            transport.multicast_ttl) == (None, "228.8.8.8", 45588, 1)
    assert (discovery.announce_interval, discovery.cluster_name) == (2000, "hive")


def test_broadcast_defaults_and_given_values() -> None:
    discovery = cluster("<discovery><broadcast/></discovery>").effective_discovery()  # type: ignore[attr-defined]
    assert isinstance(discovery, BroadcastDiscovery)
    assert (discovery.broadcast_address, discovery.port, discovery.port_range,
            discovery.announce_interval, discovery.cluster_name) == (
        "255.255.255.255", 8555, 5, 2000, "hive")
    given = cluster("<discovery><broadcast><broadcast-address>10.1.2.255</broadcast-address>"
                    "<port>9000</port><port-range>0</port-range><announce-interval>250"
                    "</announce-interval><cluster-name>blue</cluster-name></broadcast>"
                    "</discovery>").effective_discovery()  # type: ignore[attr-defined]
    assert (given.broadcast_address, given.port, given.port_range, given.announce_interval,
            given.cluster_name) == ("10.1.2.255", 9000, 0, 250, "blue")


UDP = "<transport><udp>{}</udp></transport>"
BROADCAST = "<discovery><broadcast>{}</broadcast></discovery>"
REFUSED = {
    "unicast group": (UDP.format("<multicast-address>10.0.0.1</multicast-address>"),
                      "transport/udp/multicast-address", "not an IPv4 multicast address"),
    "IPv6 group": (UDP.format("<multicast-address>ff02::1</multicast-address>"),
                   "transport/udp/multicast-address", "not an IPv4 multicast address"),
    "multicast port 0": (UDP.format("<multicast-port>0</multicast-port>"),
                         "transport/udp/multicast-port", "from 1 to 65535"),
    "TTL over 255": (UDP.format("<multicast-ttl>256</multicast-ttl>"),
                     "transport/udp/multicast-ttl", "255"),
    "announce interval 0": ("<discovery><multicast><announce-interval>0</announce-interval>"
                            "</multicast></discovery>",
                            "discovery/multicast/announce-interval", "1"),
    "long cluster name": ("<discovery><multicast><cluster-name>" + "x" * 51 +
                          "</cluster-name></multicast></discovery>",
                          "discovery/multicast/cluster-name", "1 to 50 characters, got 51"),
    "broadcast address not IPv4": (BROADCAST.format(
        "<broadcast-address>everyone</broadcast-address>"),
        "discovery/broadcast/broadcast-address", "not an IPv4 broadcast address"),
    "broadcast port 0": (BROADCAST.format("<port>0</port>"), "discovery/broadcast/port",
                         "from 1 to 65535"),
    "range past the last port": (BROADCAST.format("<port>65533</port><port-range>5</port-range>"),
                                 "discovery/broadcast/port-range", "goes past port 65535"),
}


@pytest.mark.parametrize(("xml", "path", "words"), REFUSED.values(), ids=REFUSED.keys())
def test_a_wrong_value_is_refused_naming_the_element(xml: str, path: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        cluster(xml)
    assert f"at hivemq/cluster/{path}:" in str(caught.value)
    assert words in str(caught.value)
