"""The PROXY protocol header (HAProxy's v1 and v2), without sockets: bytes in, addresses out.

A load balancer in TCP mode hides the client's address from the node: the node's peer is the
balancer. With ``send-proxy`` (text, version 1) or ``send-proxy-v2`` (binary, version 2)
HAProxy writes one header before the client's first byte, naming the client's address and the
address it connected to. :class:`ProxyHeaderParser` reads that header from the first bytes of a
connection, however they are split, and hands back what followed it (the client's own bytes:
an MQTT CONNECT, a TLS ClientHello, a WebSocket upgrade).

Reference: haproxy's ``doc/proxy-protocol.txt``. What this parser accepts:

- version 1: ``PROXY TCP4|TCP6 <src> <dst> <sport> <dport>\\r\\n`` and ``PROXY UNKNOWN ...\\r\\n``
  (107 bytes at most);
- version 2: command PROXY or LOCAL; families INET, INET6 (addresses taken), UNIX and UNSPEC
  (no address: the connection's own endpoints are used); TLVs after the addresses are skipped.
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "MAX_V1_LENGTH",
    "MAX_V2_LENGTH",
    "V2_SIGNATURE",
    "ProxyHeader",
    "ProxyHeaderError",
    "ProxyHeaderParser",
]

V1_PREFIX = b"PROXY "
V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"
MAX_V1_LENGTH = 107
"""The longest version 1 header, CRLF included (the specification's bound)."""
MAX_V2_LENGTH = 16 + 2048
"""The longest version 2 header accepted: the 16 fixed bytes, the addresses and 2 KiB of TLVs
less those (HAProxy's own TLVs, even ``send-proxy-v2-ssl-cn``, fit well within it)."""

_V2_FIXED = 16
_ADDRESS_SIZES = {0x1: 12, 0x2: 36, 0x3: 216}  # INET, INET6, UNIX: src + dst (+ ports)

Address = tuple[str, int]


class ProxyHeaderError(ValueError):
    """The first bytes of a connection are not a valid PROXY protocol header."""


@dataclass(frozen=True, slots=True)
class ProxyHeader:
    """What a PROXY protocol header said.

    ``source`` is the client's address as the balancer saw it, ``destination`` the address the
    client connected to (the balancer's). Both are None for a LOCAL command (the balancer's own
    connection, such as a health check) and for families without an IP address (UNKNOWN,
    UNSPEC, UNIX): then the connection's own endpoints stand.
    """

    version: Literal[1, 2]
    command: Literal["PROXY", "LOCAL"]
    family: str  # TCP4, TCP6, UNKNOWN (v1); INET, INET6, UNIX, UNSPEC (v2)
    source: Address | None = None
    destination: Address | None = None
    length: int = 0  # bytes of the header


class ProxyHeaderParser:
    """Fed the first bytes of a connection, returns the header and the bytes after it.

    ``feed(data)`` returns None while the header is incomplete, ``(header, rest)`` once it is,
    and raises :class:`ProxyHeaderError` as soon as the bytes cannot be a header (they do not
    start like one, a field is invalid, or no end is found within the maximum length).
    After the header has been returned the parser must not be fed again.
    """

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> tuple[ProxyHeader, bytes] | None:
        buffer = self._buffer
        buffer += data
        head = bytes(buffer[:len(V2_SIGNATURE)])
        if V2_SIGNATURE.startswith(head):
            if len(buffer) < _V2_FIXED:
                return None
            return self._v2(buffer)
        if V1_PREFIX.startswith(head[:len(V1_PREFIX)]):
            if len(buffer) < len(V1_PREFIX):
                return None
            return self._v1(buffer)
        raise ProxyHeaderError(f"no PROXY protocol header: the connection began with {head!r}")

    def _v1(self, buffer: bytearray) -> tuple[ProxyHeader, bytes] | None:
        end = buffer.find(b"\r\n", 0, MAX_V1_LENGTH)
        if end < 0:
            if len(buffer) >= MAX_V1_LENGTH:
                raise ProxyHeaderError(f"PROXY v1 header without CRLF in {MAX_V1_LENGTH} bytes")
            if b"\n" in buffer:
                raise ProxyHeaderError("PROXY v1 header ends in LF without CR")
            return None
        length = end + 2
        header = _parse_v1(bytes(buffer[:end]), length)
        return header, bytes(buffer[length:])

    def _v2(self, buffer: bytearray) -> tuple[ProxyHeader, bytes] | None:
        version_command, family_transport, size = struct.unpack_from("!BBH", buffer, 12)
        if version_command >> 4 != 0x2:
            raise ProxyHeaderError(f"PROXY v2 header of version {version_command >> 4}")
        command = version_command & 0x0F
        if command not in (0x0, 0x1):
            raise ProxyHeaderError(f"PROXY v2 header with command {command:#x}")
        length = _V2_FIXED + size
        if length > MAX_V2_LENGTH:
            raise ProxyHeaderError(f"PROXY v2 header of {length} bytes, more than "
                                   f"{MAX_V2_LENGTH}")
        family = family_transport >> 4
        if family not in (0x0, 0x1, 0x2, 0x3) or family_transport & 0x0F > 0x2:
            raise ProxyHeaderError(f"PROXY v2 header with family {family_transport:#04x}")
        needed = _ADDRESS_SIZES.get(family, 0)
        if size < needed:
            raise ProxyHeaderError(f"PROXY v2 header of family {family_transport:#04x} with "
                                   f"{size} bytes of addresses, less than {needed}")
        if len(buffer) < length:
            return None
        rest = bytes(buffer[length:])
        name = ("UNSPEC", "INET", "INET6", "UNIX")[family]
        if command == 0x0:  # LOCAL: the balancer's own connection; addresses are ignored
            return ProxyHeader(2, "LOCAL", name, length=length), rest
        if family == 0x1:
            src, dst, sport, dport = struct.unpack_from("!4s4sHH", buffer, _V2_FIXED)
        elif family == 0x2:
            src, dst, sport, dport = struct.unpack_from("!16s16sHH", buffer, _V2_FIXED)
        else:  # UNSPEC or UNIX: no IP address to show; the connection's own endpoints stand
            return ProxyHeader(2, "PROXY", name, length=length), rest
        source = (str(ipaddress.ip_address(src)), sport)
        destination = (str(ipaddress.ip_address(dst)), dport)
        return ProxyHeader(2, "PROXY", name, source, destination, length), rest


def _parse_v1(line: bytes, length: int) -> ProxyHeader:
    """``line``: the header without its CRLF."""
    try:
        text = line.decode("ascii")
    except UnicodeDecodeError:
        raise ProxyHeaderError("PROXY v1 header with non-ASCII bytes") from None
    fields = text.split(" ")
    if len(fields) >= 2 and fields[1] == "UNKNOWN":  # the rest of the line is ignored
        return ProxyHeader(1, "PROXY", "UNKNOWN", length=length)
    if len(fields) != 6 or fields[1] not in ("TCP4", "TCP6"):
        raise ProxyHeaderError(f"PROXY v1 header not of the form "
                               f"'PROXY TCP4|TCP6 src dst sport dport': {text!r}")
    family = fields[1]
    kind = ipaddress.IPv4Address if family == "TCP4" else ipaddress.IPv6Address
    try:
        source_ip, destination_ip = kind(fields[2]), kind(fields[3])
    except ValueError:
        raise ProxyHeaderError(f"PROXY v1 header with an invalid {family} address: "
                               f"{text!r}") from None
    return ProxyHeader(1, "PROXY", family, (str(source_ip), _v1_port(fields[4], text)),
                       (str(destination_ip), _v1_port(fields[5], text)), length)


def _v1_port(field: str, text: str) -> int:
    # Decimal, 0 to 65535, no sign and no leading zero (the specification's form).
    if not field.isdigit() or not field.isascii() or (len(field) > 1 and field[0] == "0") \
            or int(field) > 65535:
        raise ProxyHeaderError(f"PROXY v1 header with an invalid port {field!r}: {text!r}")
    return int(field)
