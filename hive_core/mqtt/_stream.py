"""A connection's byte stream to packets, with PUBLISH decoded inline for speed."""

from __future__ import annotations

from ._decode import check_publish_topic, decode_body
from ._errors import MalformedPacket, PacketTooLarge, ProtocolError
from ._packets import Connect, Packet, Publish
from ._properties import read_property_block
from ._types import PacketType, Properties, PropertyId
from ._wire import Buffer, decode_utf8

MAX_PACKET_SIZE = 268_435_460  # 1 + 4 byte remaining length + 268,435,455

_SUBSCRIPTION_IDENTIFIER = PropertyId.SUBSCRIPTION_IDENTIFIER

# Packet types each side may receive (spec 2.1.2, "Direction of flow").
_SERVER_RECEIVES = frozenset({1, 3, 4, 5, 6, 7, 8, 10, 12, 14, 15})
_CLIENT_RECEIVES = frozenset({2, 3, 4, 5, 6, 7, 9, 11, 13, 14, 15})


class PacketDecoder:
    """Turns one connection's byte stream into packets.

    On a server connection (`server=True`) the first packet must be CONNECT, which sets
    `protocol_version`; giving `protocol_version` up front means that CONNECT was already seen.
    `max_packet_size` may be changed between calls to `feed`; `max_connect_size` bounds the
    CONNECT alone (a server refuses a bigger one on its fixed header, before its body is
    buffered). After `feed` raises, the connection is to be closed: the decoder's state is lost.
    """

    __slots__ = ("_buffer", "_connected", "max_connect_size", "max_packet_size",
                 "protocol_version", "server")

    def __init__(
        self,
        protocol_version: int | None = None,
        max_packet_size: int = MAX_PACKET_SIZE,
        server: bool = True,
        max_connect_size: int = MAX_PACKET_SIZE,
    ) -> None:
        self.protocol_version = protocol_version
        self.max_packet_size = max_packet_size
        self.max_connect_size = max_connect_size
        self.server = server
        self._connected = protocol_version is not None
        # The partial tail of the last read; b"" when there is none, so an idle connection keeps
        # no buffer and a read of whole packets is parsed where it lies, without a copy.
        self._buffer: bytearray | bytes = b""

    def feed(self, data: Buffer) -> list[Packet]:
        """Append `data` and return every packet now complete, in order; keep the partial tail."""
        buffer = self._with_tail(data)
        end = len(buffer)
        packets: list[Packet] = []
        if end < 2:
            self._keep(buffer, 0)
            return packets
        append = packets.append
        version = self.protocol_version
        max_size = self.max_packet_size
        if not self._connected and self.server:
            max_size = min(max_size, self.max_connect_size)
        view = memoryview(buffer)
        pos = 0
        try:
            while end - pos >= 2:
                first = buffer[pos]
                start = pos + 2
                remaining = buffer[pos + 1]
                if remaining & 0x80:
                    remaining &= 0x7F
                    shift = 7
                    complete = False
                    while start < end:
                        byte = buffer[start]
                        start += 1
                        remaining |= (byte & 0x7F) << shift
                        if byte < 0x80:
                            complete = True
                            break
                        if shift == 21:
                            raise MalformedPacket("remaining length longer than 4 bytes")
                        shift += 7
                    if not complete:
                        break
                stop = start + remaining
                if stop - pos > max_size:
                    raise PacketTooLarge(
                        f"packet of {stop - pos} bytes exceeds the maximum of {max_size}"
                    )
                if stop > end:
                    break
                if first >> 4 == 3 and version is not None:
                    # The hot path: PUBLISH decoded inline.
                    qos = (first >> 1) & 0x03
                    if qos == 3:
                        raise MalformedPacket("PUBLISH with QoS 3 (MQTT-3.3.1-4)")
                    if first & 0x08 and not qos and version != 3:
                        raise MalformedPacket("PUBLISH with DUP set and QoS 0 (MQTT-3.3.1-2)")
                    p = start + 2
                    if p > stop:
                        raise MalformedPacket("string length runs past the packet")
                    topic_stop = p + ((buffer[start] << 8) | buffer[start + 1])
                    if topic_stop > stop:
                        raise MalformedPacket("string runs past the packet")
                    try:
                        topic = buffer[p:topic_stop].decode()
                    except UnicodeDecodeError:
                        topic = decode_utf8(view[p:topic_stop])  # raises MalformedPacket
                    if "\x00" in topic:
                        raise MalformedPacket("string contains U+0000")
                    p = topic_stop
                    packet_id = None
                    if qos:
                        if p + 2 > stop:
                            raise MalformedPacket("packet identifier runs past the packet")
                        packet_id = (buffer[p] << 8) | buffer[p + 1]
                        if not packet_id:
                            raise ProtocolError(
                                "PUBLISH with QoS > 0 and packet identifier 0 (MQTT-2.2.1-3)"
                            )
                        p += 2
                    properties: Properties
                    if version == 5:
                        if p < stop and buffer[p] == 0:
                            properties = {}
                            p += 1
                        else:
                            properties, p = read_property_block(view, p, stop, PacketType.PUBLISH)
                            if self.server and _SUBSCRIPTION_IDENTIFIER in properties:
                                raise ProtocolError(
                                    "PUBLISH from a client with a subscription identifier"
                                    " (MQTT-3.3.4-6)"
                                )
                    else:
                        properties = {}
                    if not topic or "+" in topic or "#" in topic:
                        check_publish_topic(topic, properties, version)
                    append(
                        Publish(
                            topic,
                            bytes(view[p:stop]),
                            qos,
                            bool(first & 0x01),
                            bool(first & 0x08),
                            packet_id,
                            properties,
                        )
                    )
                else:
                    append(self._decode_other(first, view, start, stop))
                    version = self.protocol_version
                    max_size = self.max_packet_size
                pos = stop
        except BaseException:
            # A traceback may still hold slices of `view`; the connection is over anyway.
            self._buffer = b""
            raise
        view.release()
        self._keep(buffer, pos)
        return packets

    def _with_tail(self, data: Buffer) -> bytearray | bytes:
        """What to parse: ``data`` after the tail of the last read (``data`` itself if none)."""
        tail = self._buffer
        if tail:
            assert isinstance(tail, bytearray)
            tail += data
            return tail
        return data if isinstance(data, bytes) else bytes(data)

    def _keep(self, buffer: bytearray | bytes, pos: int) -> None:
        """Keep what follows ``pos`` in ``buffer`` (an incomplete packet) for the next read."""
        if pos == len(buffer):
            self._buffer = b""
        elif buffer is self._buffer:
            assert isinstance(buffer, bytearray)
            if pos:
                del buffer[:pos]
        else:
            self._buffer = bytearray(buffer[pos:])

    def release(self) -> None:
        """Drop the partial tail: the connection is over and its bytes are not wanted."""
        self._buffer = b""

    def _decode_other(self, first: int, view: memoryview, start: int, stop: int) -> Packet:
        kind = first >> 4
        if 0 < kind < 15 and kind not in (_SERVER_RECEIVES if self.server else _CLIENT_RECEIVES):
            sender = "client" if self.server else "server"
            raise ProtocolError(f"{PacketType(kind).name} may not be sent by the {sender}")
        if kind == 1:
            if self._connected:
                raise ProtocolError("second CONNECT on a connection (MQTT-3.1.0-2)")
            if self.server:
                # Known before the rest is checked, so a refusal can answer in the right version.
                self.protocol_version = _peek_connect_version(view, start, stop)
            packet = decode_body(first, view, start, stop, None)
            assert isinstance(packet, Connect)
            self.protocol_version = packet.protocol_version
            self._connected = True
            return packet
        if self.server and not self._connected:
            raise ProtocolError("the first packet must be CONNECT (MQTT-3.1.0-1)")
        if kind == 14 and not self.server and (self.protocol_version or 4) < 5:
            raise ProtocolError("DISCONNECT may not be sent by an MQTT 3 server")
        return decode_body(first, view, start, stop, self.protocol_version)


def _peek_connect_version(data: Buffer, pos: int, end: int) -> int | None:
    """The protocol level of a CONNECT body if its name and level are a supported pair."""
    if end - pos >= 7 and data[pos : pos + 6] == b"\x00\x04MQTT":
        level = data[pos + 6]
        return level if level in (4, 5) else None
    if end - pos >= 9 and data[pos : pos + 8] == b"\x00\x06MQIsdp" and data[pos + 8] == 3:
        return 3
    return None
