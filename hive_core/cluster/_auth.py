"""Nodes prove to each other that they hold the cluster's shared secret, then sign every write.

Sans-IO, like the frame codec. Both ends of a new link send AUTH_CHALLENGE, a fresh random
nonce, before anything else. From the secret and the two nonces each end derives the link's key.
The dialling node proves first (AUTH_PROOF, an HMAC naming its role, so that a proof is never
valid in the other direction); the accepting node answers with its own proof only once the
dialler's is right. So whoever merely reaches a node's port learns a nonce and nothing else, not
even a value to test guesses of the secret against. A peer whose first frame is anything else,
or whose proof is wrong, is refused.

A proof alone would not be enough: the handshake could be relayed. A stranger that makes a node
dial it (by announcing itself on broadcast or multicast discovery, say) could pass that node's
own challenge and proof to a second link it opened to the node, and then speak freely on a link
the node believes authenticated. So after the proofs every write travels as a record: its
length, its bytes and an HMAC of (sequence number, bytes) under a key of the link and direction.
A record that does not verify closes the link: nobody without the secret can inject, alter,
replay, reorder or reflect a frame. Records are signed, not encrypted; TLS is for that.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import logging
import secrets
import struct
from typing import Any

from hive_core.cluster._wire import FrameDecoder, FrameKind, WireError, encode_frame
from hive_core.plugins import WarningGate

__all__ = ["AUTH_VERSION", "AuthenticationFailed", "Handshake", "PeerAuthentication",
           "RecordOpener", "RecordSealer", "cluster_key"]

log = logging.getLogger("hive.cluster")

AUTH_VERSION = 1
"""The handshake and record format; a peer announcing another one is refused."""
NONCE_BYTES = 32
HANDSHAKE_FRAME_MAX = 1024
"""No frame before the proof is larger (a challenge is about 60 bytes, a proof about 50)."""
RECORD_MAX = 1024 * 1024
"""The most bytes one record carries; a longer write is cut into several records."""
KDF_ITERATIONS = 600_000
"""PBKDF2-HMAC-SHA256 rounds (OWASP's figure): an offline guess of a secret from a recorded
handshake costs as much; about 0.2 s once per node start."""

_TAG = hashlib.sha256().digest_size
_u32 = struct.Struct(">I")
_u64 = struct.Struct(">Q")
_DIALER, _ACCEPTOR = b"dialer", b"acceptor"


class AuthenticationFailed(Exception):
    """The peer did not prove it holds the secret (the message says how): close the link."""


@functools.lru_cache(maxsize=4)
def cluster_key(secret: str) -> bytes:
    """The key every link key derives from; slow to compute on purpose (see KDF_ITERATIONS)."""
    return hashlib.pbkdf2_hmac("sha256", secret.encode(), b"hive-cluster-secret-v1",
                               KDF_ITERATIONS)


def _mac(key: bytes, message: bytes) -> bytes:
    return hmac.digest(key, message, "sha256")


class RecordSealer:
    """Writes of one direction of a link as signed records."""

    def __init__(self, key: bytes) -> None:
        self._key = key
        self._sequence = 0

    def seal(self, data: bytes) -> bytes:
        out: list[bytes] = []
        for at in range(0, len(data), RECORD_MAX):
            chunk = data[at:at + RECORD_MAX]
            tag = _mac(self._key, _u64.pack(self._sequence) + chunk)
            self._sequence += 1
            out += (_u32.pack(len(chunk)), chunk, tag)
        return b"".join(out)


class RecordOpener:
    """Bytes of one direction of a link in, the bytes of every record that verified out."""

    def __init__(self, key: bytes) -> None:
        self._key = key
        self._sequence = 0
        self._rest = bytearray()  # the start of a record that has not fully arrived
        self._need = 0  # how long _rest must grow before that record is whole

    def open(self, data: bytes) -> bytes:
        """What ``data`` completes; raises AuthenticationFailed on a record that does not verify."""
        rest = self._rest
        if rest:
            rest += data
            if len(rest) < self._need:
                return b""
            buffer = bytes(rest)
            rest.clear()
        else:
            buffer = data
        size = len(buffer)
        at = 0
        need = 4
        payloads: list[bytes] = []
        while size - at >= 4:
            length = _u32.unpack_from(buffer, at)[0]
            if length > RECORD_MAX:
                raise AuthenticationFailed(f"a record of {length} bytes (at most {RECORD_MAX})")
            end = at + 4 + length + _TAG
            if end > size:
                need = end - at
                break
            chunk = buffer[at + 4:end - _TAG]
            expected = _mac(self._key, _u64.pack(self._sequence) + chunk)
            if not hmac.compare_digest(expected, buffer[end - _TAG:end]):
                raise AuthenticationFailed(f"record {self._sequence} is not signed with this "
                                           "link's key (altered or injected on the way)")
            self._sequence += 1
            payloads.append(chunk)
            at = end
        if at < size:
            rest += memoryview(buffer)[at:]
            self._need = need
        return payloads[0] if len(payloads) == 1 else b"".join(payloads)


class Handshake:
    """One end of one link proving itself and checking the peer: bytes in, bytes to write out.

    Send :meth:`challenge` as soon as the link is open, then :meth:`feed` every byte received
    until it reports the peer proven; from then on write through :attr:`sealer` and read
    through :attr:`opener`.
    """

    def __init__(self, key: bytes, dialer: bool, nonce: bytes | None = None) -> None:
        self._key = key
        self.dialer = dialer
        self._nonce = nonce if nonce is not None else secrets.token_bytes(NONCE_BYTES)
        self._buffer = bytearray()
        self._peer_proof: bytes | None = None  # what the peer must send: known after its nonce
        self._own_proof = b""
        self.sealer: RecordSealer | None = None
        self.opener: RecordOpener | None = None
        self.proven = False

    def challenge(self) -> bytes:
        return encode_frame(FrameKind.AUTH_CHALLENGE,
                            {"version": AUTH_VERSION, "nonce": self._nonce})

    def feed(self, data: bytes) -> tuple[bytes, bytes | None]:
        """(bytes to write now, bytes received past the handshake: None until the peer is
        proven). Raises AuthenticationFailed."""
        buffer = self._buffer
        buffer += data
        out = b""
        while len(buffer) >= 4:
            size = _u32.unpack_from(buffer)[0]
            if not 1 <= size <= HANDSHAKE_FRAME_MAX:
                raise AuthenticationFailed(f"it sent a frame of {size} bytes before "
                                           "authenticating")
            if len(buffer) < 4 + size:
                break
            frame = bytes(buffer[:4 + size])
            del buffer[:4 + size]
            out += self._frame(frame)
            if self.proven:
                rest = bytes(buffer)
                buffer.clear()
                return out, rest
        return out, None

    def _frame(self, frame: bytes) -> bytes:
        try:
            name = FrameKind(frame[4]).name
        except ValueError:
            name = f"a frame of unknown kind {frame[4]}"
        try:
            decoded = FrameDecoder().feed(frame)
        except WireError as exc:
            raise AuthenticationFailed(f"its {name} frame does not decode: {exc}") from exc
        kind, body = decoded[0] if decoded else (None, None)
        if kind is FrameKind.AUTH_CHALLENGE and self._peer_proof is None:
            return self._challenged(body)
        if kind is FrameKind.AUTH_PROOF and self._peer_proof is not None:
            self._check(body)
            return b"" if self.dialer else self._own_proof  # the acceptor proves second
        raise AuthenticationFailed(f"it sent {name} before authenticating")

    def _challenged(self, body: Any) -> bytes:
        if not isinstance(body, dict) or not isinstance(body.get("nonce"), bytes):
            raise AuthenticationFailed("its challenge is malformed")
        if body.get("version") != AUTH_VERSION:
            raise AuthenticationFailed(f"it speaks cluster authentication version "
                                       f"{body.get('version')!r}, this node {AUTH_VERSION}")
        nonce = body["nonce"]
        if len(nonce) != NONCE_BYTES or nonce == self._nonce:  # equal: our own, reflected
            raise AuthenticationFailed("its challenge is not a fresh nonce")
        dialer_nonce, acceptor_nonce = (self._nonce, nonce) if self.dialer else (nonce,
                                                                                 self._nonce)
        link = _mac(self._key, b"hive-cluster-link-v1" + dialer_nonce + acceptor_nonce)
        own, peer = (_DIALER, _ACCEPTOR) if self.dialer else (_ACCEPTOR, _DIALER)
        self._peer_proof = _mac(link, b"proof of the " + peer)
        self.sealer = RecordSealer(_mac(link, b"records of the " + own))
        self.opener = RecordOpener(_mac(link, b"records of the " + peer))
        self._own_proof = encode_frame(FrameKind.AUTH_PROOF,
                                       {"proof": _mac(link, b"proof of the " + own)})
        return self._own_proof if self.dialer else b""

    def _check(self, body: Any) -> None:
        assert self._peer_proof is not None
        proof = body.get("proof") if isinstance(body, dict) else None
        if not isinstance(proof, bytes) or not hmac.compare_digest(proof, self._peer_proof):
            raise AuthenticationFailed("its proof is wrong: its shared secret is not this "
                                       "node's")
        self.proven = True


class PeerAuthentication:
    """What every link of one node shares: the key (None without a shared secret), how long a
    peer has to prove itself, and the log and count of the links refused."""

    def __init__(self, secret: str | None, timeout: float) -> None:
        self.key = cluster_key(secret) if secret else None
        self.timeout = timeout
        self.failures = 0
        # One warning per remote host and minute: a stranger knocking again is counted only.
        self._warnings = WarningGate(log, 60.0, counter=self._count)

    def _count(self) -> None:
        self.failures += 1

    def handshake(self, dialer: bool) -> Handshake | None:
        """A handshake for a new link; None when the cluster has no shared secret."""
        return None if self.key is None else Handshake(self.key, dialer)

    def refused(self, peer: tuple[str, int] | None, outbound: bool, why: str) -> None:
        """Log (rate-limited) and count a link closed because its peer did not authenticate."""
        where = f"{peer[0]}:{peer[1]}" if peer else "an unknown address"
        self._warnings.warn(peer[0] if peer else "", "refused the cluster link %s %s: %s "
                            "(every node needs the same <cluster><authentication>"
                            "<shared-secret>)", "to" if outbound else "from", where, why)
