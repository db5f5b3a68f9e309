"""Java key stores (JKS and JCEKS) read directly, as HiveMQ's ``config.xml`` examples use them.

The layout (big-endian throughout): magic, version (1 or 2), entry count, the entries, and a
SHA-1 digest over the password (UTF-16BE), the words "Mighty Aphrodite" and everything before.
An entry is a tag (1 private key, 2 trusted certificate, 3 JCEKS secret key), an alias, a
timestamp, and then either a protected key with its certificate chain or one certificate.

A private key is a DER ``EncryptedPrivateKeyInfo`` around a PKCS#8 key. JKS protects it with
Sun's own scheme (a SHA-1 key stream over the UTF-16BE password and a 20-byte salt, then a
SHA-1 check of password and key); JCEKS with PBEWithMD5AndTripleDES (Sun's variant of PKCS#5
PBES1: each half of the salt hashed with the password, MD5, ``iterations`` times, gives the
3DES key and IV). Both are read with ``cryptography``; pyjks reads them too but depends on
pycryptodomex, twofish and javaobj and has not been released since 2020.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from dataclasses import dataclass, field

from cryptography import x509
from cryptography.hazmat.decrepit.ciphers.algorithms import TripleDES
from cryptography.hazmat.primitives import padding, serialization
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from cryptography.hazmat.primitives.ciphers import Cipher, modes

__all__ = ["JavaKeyStore", "JavaKeyStoreError", "PrivateKeyEntry", "java_store_kind",
           "load_java_store"]

MAGIC = {0xFEEDFEED: "JKS", 0xCECECECE: "JCEKS"}
_WHITENER = b"Mighty Aphrodite"
# The DER content of the two algorithm identifiers' OIDs.
_SUN_JKS_OID = bytes.fromhex("2b060104012a02110101")  # 1.3.6.1.4.1.42.2.17.1.1
_SUN_JCE_OID = bytes.fromhex("2b060104012a021301")  # 1.3.6.1.4.1.42.2.19.1 (MD5 + 3DES)
_PRIVATE_KEY, _TRUSTED_CERT, _SECRET_KEY = 1, 2, 3


class JavaKeyStoreError(ValueError):
    """A Java key store that cannot be read; the message says why (no path: the caller adds it)."""


@dataclass(frozen=True)
class PrivateKeyEntry:
    alias: str
    protected: bytes
    """The DER EncryptedPrivateKeyInfo, as stored."""
    chain: tuple[x509.Certificate, ...]
    """The certificate first, then the certificates that signed it."""


@dataclass(frozen=True)
class JavaKeyStore:
    kind: str
    """"JKS" or "JCEKS"."""
    private_keys: tuple[PrivateKeyEntry, ...] = ()
    trusted: tuple[x509.Certificate, ...] = ()
    secret_key_aliases: tuple[str, ...] = field(default=())

    def certificates(self) -> list[x509.Certificate]:
        """Every certificate a trust store built from this one trusts, as Java's trust manager
        does: the trusted-certificate entries and each key entry's own certificate."""
        return [*self.trusted, *(entry.chain[0] for entry in self.private_keys if entry.chain)]

    def private_key(self, entry: PrivateKeyEntry, password: str) -> PrivateKeyTypes:
        """The key of ``entry``, unprotected with ``password`` (the key's, often the store's)."""
        algorithm, parameters, data = _encrypted_private_key_info(entry.protected)
        if algorithm == _SUN_JKS_OID:
            plain = _jks_unprotect(data, password)
        elif algorithm == _SUN_JCE_OID:
            plain = _jce_unprotect(data, parameters, password)
        else:
            raise JavaKeyStoreError(f"the key {entry.alias!r} is protected by an algorithm Hive "
                                    f"does not know (OID bytes {algorithm.hex()})")
        try:
            return serialization.load_der_private_key(plain, None)
        except ValueError as exc:
            raise JavaKeyStoreError(f"the key {entry.alias!r} does not parse once unprotected "
                                    "(wrong private-key password?)") from exc


def java_store_kind(head: bytes) -> str | None:
    """"JKS" or "JCEKS" when ``head`` (a file's first four bytes) is a Java key store's magic."""
    if len(head) < 4:
        return None
    return MAGIC.get(struct.unpack(">I", head[:4])[0])


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, size: int) -> bytes:
        if size < 0 or self.at + size > len(self.data):
            raise JavaKeyStoreError("the file ends in the middle of an entry (truncated?)")
        chunk = self.data[self.at:self.at + size]
        self.at += size
        return chunk

    def u16(self) -> int:
        return int(struct.unpack(">H", self.take(2))[0])

    def u32(self) -> int:
        return int(struct.unpack(">I", self.take(4))[0])

    def utf(self) -> str:
        # Java's modified UTF-8; aliases and certificate types are plain text in practice.
        return self.take(self.u16()).decode("utf-8", errors="replace")

    def certificate(self, version: int) -> x509.Certificate:
        kind = self.utf() if version == 2 else "X.509"
        der = self.take(self.u32())
        if kind != "X.509":
            raise JavaKeyStoreError(f"a {kind} certificate (only X.509 is used for TLS)")
        try:
            return x509.load_der_x509_certificate(der)
        except ValueError as exc:
            raise JavaKeyStoreError(f"a certificate that does not parse: {exc}") from exc


def load_java_store(data: bytes, password: str | None) -> JavaKeyStore:
    """Parse a JKS or JCEKS store; with ``password``, check its integrity digest first."""
    if len(data) < 32:
        raise JavaKeyStoreError("too short to be a Java key store")
    kind = java_store_kind(data)
    if kind is None:
        raise JavaKeyStoreError("not a Java key store (no JKS or JCEKS magic number)")
    body, digest = data[:-20], data[-20:]
    if password is not None:
        expected = hashlib.sha1(password.encode("utf-16-be") + _WHITENER + body).digest()
        if not hmac.compare_digest(expected, digest):
            raise JavaKeyStoreError("wrong password, or the store is damaged "
                                    "(its integrity digest does not match)")
    reader = _Reader(body)
    reader.take(4)
    version = reader.u32()
    if version not in (1, 2):
        raise JavaKeyStoreError(f"unknown {kind} version {version}")
    keys: list[PrivateKeyEntry] = []
    trusted: list[x509.Certificate] = []
    secrets: list[str] = []
    for _ in range(reader.u32()):
        tag = reader.u32()
        alias = reader.utf()
        reader.take(8)  # the entry's creation time
        if tag == _PRIVATE_KEY:
            protected = reader.take(reader.u32())
            chain = tuple(reader.certificate(version) for _ in range(reader.u32()))
            keys.append(PrivateKeyEntry(alias, protected, chain))
        elif tag == _TRUSTED_CERT:
            trusted.append(reader.certificate(version))
        elif tag == _SECRET_KEY and kind == "JCEKS":
            # A serialized Java object of unknown length: nothing after it can be found.
            secrets.append(alias)
            break
        else:
            raise JavaKeyStoreError(f"entry {alias!r} has an unknown tag {tag}")
    return JavaKeyStore(kind, tuple(keys), tuple(trusted), tuple(secrets))


def _der(data: bytes, at: int, tag: int) -> tuple[bytes, int]:
    """The content of the DER element of ``tag`` at ``at``, and where the next one starts."""
    if at + 2 > len(data) or data[at] != tag:
        raise JavaKeyStoreError("a protected key that is not DER EncryptedPrivateKeyInfo")
    size, at = data[at + 1], at + 2
    if size & 0x80:
        count = size & 0x7F
        size, at = int.from_bytes(data[at:at + count], "big"), at + count
    if at + size > len(data):
        raise JavaKeyStoreError("a protected key that is cut short")
    return data[at:at + size], at + size


def _encrypted_private_key_info(der: bytes) -> tuple[bytes, bytes, bytes]:
    """(algorithm OID content, algorithm parameters element, encrypted data)."""
    outer, _ = _der(der, 0, 0x30)
    algorithm, after = _der(outer, 0, 0x30)
    encrypted, _ = _der(outer, after, 0x04)
    oid, parameters_at = _der(algorithm, 0, 0x06)
    return oid, algorithm[parameters_at:], encrypted


def _jks_unprotect(data: bytes, password: str) -> bytes:
    if len(data) < 41:
        raise JavaKeyStoreError("a JKS protected key too short to hold one")
    secret = password.encode("utf-16-be")
    salt, encrypted, check = data[:20], data[20:-20], data[-20:]
    stream, block = bytearray(), salt
    while len(stream) < len(encrypted):
        block = hashlib.sha1(secret + block).digest()
        stream += block
    plain = bytes(a ^ b for a, b in zip(encrypted, stream, strict=False))
    if not hmac.compare_digest(hashlib.sha1(secret + plain).digest(), check):
        raise JavaKeyStoreError("wrong private-key password (the key's check digest does not "
                                "match)")
    return plain


def _jce_unprotect(data: bytes, parameters: bytes, password: str) -> bytes:
    sequence, _ = _der(parameters, 0, 0x30)
    salt, after = _der(sequence, 0, 0x04)
    count, _ = _der(sequence, after, 0x02)
    iterations = int.from_bytes(count, "big")
    if len(salt) != 8 or not 0 < iterations <= 10_000_000:
        raise JavaKeyStoreError("a JCEKS protected key with unusable PBE parameters")
    halves = [bytearray(salt[:4]), bytearray(salt[4:])]
    if halves[0] == halves[1]:
        # Sun's PBES1Core "inverts" an all-equal first half with an index slip (salt[3 - 1]):
        # reproduced, or such keys would not open.
        first = halves[0]
        for i in range(2):
            first[i], first[2] = first[3 - i], first[i]
    secret = bytes(ord(char) & 0x7F for char in password)  # Java's PBEKey keeps 7-bit ASCII
    derived = b""
    for half in halves:
        block = bytes(half)
        for _ in range(iterations):
            block = hashlib.md5(block + secret).digest()
        derived += block
    decryptor = Cipher(TripleDES(derived[:24]), modes.CBC(derived[24:])).decryptor()
    padded = decryptor.update(data) + decryptor.finalize()
    unpadder = padding.PKCS7(64).unpadder()
    try:
        return unpadder.update(padded) + unpadder.finalize()
    except ValueError as exc:
        raise JavaKeyStoreError("wrong private-key password (the key does not decrypt)") from exc
