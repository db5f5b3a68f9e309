"""The PROXY protocol header parser (hive_core/net/_proxy_header.py), without sockets.

The examples are the specification's (haproxy doc/proxy-protocol.txt): its worst-case v1 lines
and the v2 layouts of sections 2.2 and 2.2.7, built here byte by byte.
"""

from __future__ import annotations

import ipaddress
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hive_core.net._proxy_header import (
    MAX_V1_LENGTH,
    MAX_V2_LENGTH,
    V2_SIGNATURE,
    ProxyHeader,
    ProxyHeaderError,
    ProxyHeaderParser,
)

CONNECT = bytes.fromhex("101000044d5154540402003c0004") + b"abcd"  # an MQTT 3.1.1 CONNECT
FFFF6 = ":".join(["ffff"] * 8)


def parse(data: bytes) -> tuple[ProxyHeader, bytes]:
    parsed = ProxyHeaderParser().feed(data)
    assert parsed is not None
    return parsed


def v2(command: int, family: int, body: bytes) -> bytes:
    return V2_SIGNATURE + bytes([0x20 | command, family]) + struct.pack("!H", len(body)) + body


def inet(src: str, dst: str, sport: int, dport: int) -> bytes:
    return (ipaddress.ip_address(src).packed + ipaddress.ip_address(dst).packed
            + struct.pack("!HH", sport, dport))


# ---------------------------------------------------------------- version 1


def test_v1_tcp4_the_specifications_example() -> None:
    header, rest = parse(b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n" + CONNECT)
    assert header == ProxyHeader(1, "PROXY", "TCP4", ("192.168.0.1", 56324),
                                 ("192.168.0.11", 443), 47)
    assert rest == CONNECT


def test_v1_worst_cases_fit() -> None:
    tcp4 = b"PROXY TCP4 255.255.255.255 255.255.255.255 65535 65535\r\n"
    tcp6 = f"PROXY TCP6 {FFFF6} {FFFF6} 65535 65535\r\n".encode()
    unknown = f"PROXY UNKNOWN {FFFF6} {FFFF6} 65535 65535\r\n".encode()
    assert (len(tcp4), len(tcp6), len(unknown)) == (56, 104, MAX_V1_LENGTH)
    assert parse(tcp4)[0].source == ("255.255.255.255", 65535)
    assert parse(tcp6)[0].source == (FFFF6, 65535)
    assert parse(unknown) == (ProxyHeader(1, "PROXY", "UNKNOWN", length=107), b"")


def test_v1_unknown_alone_keeps_the_connections_own_addresses() -> None:
    header, rest = parse(b"PROXY UNKNOWN\r\n" + CONNECT)
    assert (header.family, header.source, header.destination, rest) == ("UNKNOWN", None, None,
                                                                        CONNECT)


def test_v1_tcp6_addresses_are_normalised() -> None:
    header, _ = parse(b"PROXY TCP6 2001:db8:0:0::1 ::1 1 65535\r\n")
    assert header.source == ("2001:db8::1", 1)
    assert header.destination == ("::1", 65535)


@pytest.mark.parametrize("line", [
    b"PROXY TCP4 192.168.0.1 192.168.0.11 56324\r\n",  # a field missing
    b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443 x\r\n",  # one too many
    b"PROXY TCP4  192.168.0.1 192.168.0.11 56324 443\r\n",  # two spaces
    b"PROXY TCP4 192.168.0.256 192.168.0.11 56324 443\r\n",
    b"PROXY TCP4 ::1 ::1 56324 443\r\n",  # IPv6 under TCP4
    b"PROXY TCP6 127.0.0.1 127.0.0.1 56324 443\r\n",  # IPv4 under TCP6
    b"PROXY TCP4 192.168.0.1 192.168.0.11 65536 443\r\n",
    b"PROXY TCP4 192.168.0.1 192.168.0.11 -1 443\r\n",
    b"PROXY TCP4 192.168.0.1 192.168.0.11 056324 443\r\n",  # leading zero
    b"PROXY TCP4 192.168.0.1 192.168.0.11 +5 443\r\n",
    b"PROXY UDP4 192.168.0.1 192.168.0.11 56324 443\r\n",
    b"PROXY tcp4 192.168.0.1 192.168.0.11 56324 443\r\n",
    b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\n",  # LF without CR
    b"PROXY TCP4 192.168.0.\xc3\xa9 192.168.0.11 56324 443\r\n",
])
def test_v1_malformed_lines_are_refused(line: bytes) -> None:
    with pytest.raises(ProxyHeaderError):
        ProxyHeaderParser().feed(line)


def test_v1_without_crlf_in_107_bytes_is_refused_at_once() -> None:
    parser = ProxyHeaderParser()
    assert parser.feed(b"PROXY UNKNOWN " + b"x" * (MAX_V1_LENGTH - 15)) is None  # 106 bytes
    with pytest.raises(ProxyHeaderError, match="without CRLF in 107 bytes"):
        parser.feed(b"xx\r\n")


# ---------------------------------------------------------------- version 2


def test_v2_proxy_tcp4() -> None:
    data = v2(0x1, 0x11, inet("10.0.0.7", "10.0.0.1", 50000, 1883))
    header, rest = parse(data + CONNECT)
    assert header == ProxyHeader(2, "PROXY", "INET", ("10.0.0.7", 50000), ("10.0.0.1", 1883),
                                 16 + 12)
    assert rest == CONNECT


def test_v2_proxy_tcp6() -> None:
    header, _ = parse(v2(0x1, 0x21, inet("2001:db8::7", "2001:db8::1", 50000, 1883)))
    assert (header.family, header.source, header.destination) == (
        "INET6", ("2001:db8::7", 50000), ("2001:db8::1", 1883))


def test_v2_tlvs_after_the_addresses_are_skipped() -> None:
    tlvs = (b"\x01" + struct.pack("!H", 2) + b"h2"  # PP2_TYPE_ALPN
            + b"\x04" + struct.pack("!H", 3) + b"\x00\x00\x00"  # PP2_TYPE_NOOP
            + b"\x20" + struct.pack("!H", 5) + b"\x01\x00\x00\x00\x00")  # PP2_TYPE_SSL
    data = v2(0x1, 0x11, inet("192.0.2.1", "192.0.2.2", 1, 2) + tlvs)
    header, rest = parse(data + CONNECT)
    assert header.source == ("192.0.2.1", 1)
    assert header.length == len(data)
    assert rest == CONNECT


def test_v2_local_is_the_balancers_own_connection() -> None:
    # HAProxy's health checks: LOCAL, family UNSPEC, no address block.
    header, rest = parse(v2(0x0, 0x00, b"") + CONNECT)
    assert header == ProxyHeader(2, "LOCAL", "UNSPEC", None, None, 16)
    assert rest == CONNECT
    # LOCAL with addresses: still the connection's own endpoints
    header, _ = parse(v2(0x0, 0x11, inet("10.0.0.7", "10.0.0.1", 1, 2)))
    assert (header.command, header.source) == ("LOCAL", None)


def test_v2_unspec_and_unix_keep_the_connections_own_addresses() -> None:
    assert parse(v2(0x1, 0x00, b""))[0] == ProxyHeader(2, "PROXY", "UNSPEC", length=16)
    unix = b"/run/client.sock".ljust(108, b"\x00") + b"/run/hive.sock".ljust(108, b"\x00")
    header, _ = parse(v2(0x1, 0x31, unix))
    assert (header.family, header.source) == ("UNIX", None)


@pytest.mark.parametrize(("data", "reason"), [
    (V2_SIGNATURE + b"\x11\x11\x00\x0c" + bytes(12), "version 1"),
    (V2_SIGNATURE + b"\x22\x11\x00\x0c" + bytes(12), "command 0x2"),
    (V2_SIGNATURE + b"\x21\x41\x00\x0c" + bytes(12), "family 0x41"),
    (V2_SIGNATURE + b"\x21\x13\x00\x0c" + bytes(12), "family 0x13"),
    (V2_SIGNATURE + b"\x21\x11\x00\x0b" + bytes(11), "less than 12"),
    (V2_SIGNATURE + b"\x21\x21\x00\x0c" + bytes(12), "less than 36"),
])
def test_v2_malformed_headers_are_refused(data: bytes, reason: str) -> None:
    with pytest.raises(ProxyHeaderError, match=reason):
        ProxyHeaderParser().feed(data)


def test_v2_too_long_is_refused_from_its_fixed_part() -> None:
    parser = ProxyHeaderParser()
    size = MAX_V2_LENGTH - 16 + 1
    with pytest.raises(ProxyHeaderError, match=f"{MAX_V2_LENGTH + 1} bytes"):
        parser.feed(V2_SIGNATURE + b"\x21\x11" + struct.pack("!H", size))
    longest = v2(0x1, 0x11, inet("10.0.0.7", "10.0.0.1", 1, 2) + bytes(MAX_V2_LENGTH - 28))
    assert parse(longest)[0].length == MAX_V2_LENGTH


# ---------------------------------------------------------------- either


@pytest.mark.parametrize("data", [
    CONNECT,  # a client that connected past the balancer
    b"\x16\x03\x01\x02\x00\x01",  # a TLS ClientHello
    b"GET /mqtt HTTP/1.1\r\n",
    b"PROXY\tTCP4",  # a tab, not a space
    b"\r\n\r\n\x00\r\nQUIT!",  # a damaged v2 signature
])
def test_anything_else_is_refused(data: bytes) -> None:
    with pytest.raises(ProxyHeaderError):
        ProxyHeaderParser().feed(data)


def test_garbage_is_refused_from_its_first_byte() -> None:
    with pytest.raises(ProxyHeaderError, match=r"began with b'\\x10'"):
        ProxyHeaderParser().feed(b"\x10")


HEADERS = [
    b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n",
    f"PROXY UNKNOWN {FFFF6} {FFFF6} 65535 65535\r\n".encode(),
    v2(0x1, 0x11, inet("10.0.0.7", "10.0.0.1", 50000, 1883) + b"\x04\x00\x01\x00"),
    v2(0x1, 0x21, inet("2001:db8::7", "2001:db8::1", 50000, 1883)),
    v2(0x0, 0x00, b""),
]


@pytest.mark.parametrize("data", HEADERS)
def test_every_strict_prefix_asks_for_more(data: bytes) -> None:
    for end in range(len(data)):
        assert ProxyHeaderParser().feed(data[:end]) is None, end


@given(st.sampled_from(HEADERS), st.lists(st.integers(0, 200), max_size=12),
       st.binary(max_size=40))
def test_any_fragmentation_gives_the_same_header_and_rest(data: bytes, cuts: list[int],
                                                          after: bytes) -> None:
    stream = data + after
    whole = parse(stream)
    points = sorted({min(c, len(stream)) for c in cuts} | {len(stream)})
    parser = ProxyHeaderParser()
    start, result = 0, None
    for point in points:
        result = parser.feed(stream[start:point])
        start = point
        if result is not None:
            break
    assert result is not None
    header, rest = result
    assert header == whole[0]
    assert rest + stream[start:] == after
