"""The data representations of spec section 1.5: integers, strings, binary data, varints.

Readers take the bytes, a position and the end of the enclosing packet and return the value
and the next position; running past `end` is a malformed packet, not a request for more bytes.
"""

from __future__ import annotations

from ._errors import InsufficientData, MalformedPacket

Buffer = bytes | bytearray | memoryview

MAX_VARIABLE_INTEGER = 268_435_455


def encode_variable_integer(value: int) -> bytes:
    """Encode a Variable Byte Integer (spec 1.5.5): 1 to 4 bytes, 7 bits each, low bits first."""
    if value < 0x80:
        if value < 0:
            raise ValueError(f"variable byte integer must not be negative: {value}")
        return bytes((value,))
    if value > MAX_VARIABLE_INTEGER:
        raise ValueError(f"variable byte integer too large: {value}")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def decode_variable_integer(data: Buffer, offset: int) -> tuple[int, int]:
    """Decode a Variable Byte Integer at `offset`; return (value, offset after it).

    Raises InsufficientData when `data` ends inside it, MalformedPacket past 4 bytes.
    """
    value = 0
    shift = 0
    end = len(data)
    for i in range(offset, offset + 4):
        if i >= end:
            raise InsufficientData("variable byte integer is incomplete")
        byte = data[i]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i + 1
        shift += 7
    raise MalformedPacket("variable byte integer longer than 4 bytes")


def read_variable_integer(data: Buffer, pos: int, end: int) -> tuple[int, int]:
    value = 0
    shift = 0
    for i in range(pos, pos + 4):
        if i >= end:
            raise MalformedPacket("variable byte integer runs past the packet")
        byte = data[i]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i + 1
        shift += 7
    raise MalformedPacket("variable byte integer longer than 4 bytes")


def read_byte(data: Buffer, pos: int, end: int) -> tuple[int, int]:
    if pos >= end:
        raise MalformedPacket("byte runs past the packet")
    return data[pos], pos + 1


def read_uint16(data: Buffer, pos: int, end: int) -> tuple[int, int]:
    if pos + 2 > end:
        raise MalformedPacket("two byte integer runs past the packet")
    return (data[pos] << 8) | data[pos + 1], pos + 2


def read_uint32(data: Buffer, pos: int, end: int) -> tuple[int, int]:
    if pos + 4 > end:
        raise MalformedPacket("four byte integer runs past the packet")
    return int.from_bytes(data[pos : pos + 4], "big"), pos + 4


def read_binary(data: Buffer, pos: int, end: int) -> tuple[bytes, int]:
    if pos + 2 > end:
        raise MalformedPacket("binary data length runs past the packet")
    stop = pos + 2 + ((data[pos] << 8) | data[pos + 1])
    if stop > end:
        raise MalformedPacket("binary data runs past the packet")
    return bytes(data[pos + 2 : stop]), stop


def decode_utf8(raw: Buffer) -> str:
    """Decode a UTF-8 Encoded String's bytes; refuse what spec 1.5.4 forbids (MQTT-1.5.4-1/2)."""
    try:
        text = str(raw, "utf-8")  # strict: ill-formed UTF-8 and encoded surrogates both fail
    except UnicodeDecodeError as exc:
        raise MalformedPacket(f"string is not valid UTF-8: {exc.reason}") from None
    if "\x00" in text:
        raise MalformedPacket("string contains U+0000")
    return text


def read_string(data: Buffer, pos: int, end: int) -> tuple[str, int]:
    if pos + 2 > end:
        raise MalformedPacket("string length runs past the packet")
    stop = pos + 2 + ((data[pos] << 8) | data[pos + 1])
    if stop > end:
        raise MalformedPacket("string runs past the packet")
    return decode_utf8(data[pos + 2 : stop]), stop


def string_bytes(text: str) -> bytes:
    """A UTF-8 Encoded String with its two byte length prefix."""
    raw = text.encode()
    size = len(raw)
    if size > 0xFFFF:
        raise ValueError("string longer than 65535 bytes")
    return size.to_bytes(2, "big") + raw


def binary_bytes(raw: bytes) -> bytes:
    """Binary Data with its two byte length prefix."""
    size = len(raw)
    if size > 0xFFFF:
        raise ValueError("binary data longer than 65535 bytes")
    return size.to_bytes(2, "big") + raw
