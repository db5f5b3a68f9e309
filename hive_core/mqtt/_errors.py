"""Why the codec refuses bytes: each refusal carries the reason code to answer with."""

from __future__ import annotations

from ._types import ReasonCode


class InsufficientData(Exception):
    """Not enough bytes yet to decode a whole packet."""


class MQTTError(Exception):
    """Base of every codec refusal; `reason_code` is what a CONNACK or DISCONNECT should carry."""

    default_reason_code = ReasonCode.UNSPECIFIED_ERROR

    def __init__(self, message: str, reason_code: ReasonCode | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.reason_code: ReasonCode = (
            self.default_reason_code if reason_code is None else reason_code
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, reason_code={self.reason_code.name})"


class MalformedPacket(MQTTError):
    """The bytes cannot be parsed according to the specification."""

    default_reason_code = ReasonCode.MALFORMED_PACKET


class ProtocolError(MQTTError):
    """The packet parses, but breaks a rule of the protocol."""

    default_reason_code = ReasonCode.PROTOCOL_ERROR


class PacketTooLarge(MQTTError):
    """The packet is larger than the maximum packet size in force."""

    default_reason_code = ReasonCode.PACKET_TOO_LARGE
