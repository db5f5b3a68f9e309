"""Scrypt password hashes: a random salt per user, salt and hash stored as base64."""

from __future__ import annotations

import base64
import binascii
import os

from cryptography.exceptions import InvalidKey
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

# RFC 7914's interactive-login cost: about 16 MiB and a few tens of milliseconds per check.
SCRYPT_N = 2**14
SCRYPT_R = 8
SCRYPT_P = 1
HASH_LENGTH = 32
SALT_LENGTH = 16


def _kdf(salt: bytes) -> Scrypt:
    return Scrypt(salt=salt, length=HASH_LENGTH, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P)


def hash_password(password: bytes, salt: bytes | None = None) -> tuple[str, str]:
    """Return ``(salt, hash)``, both base64, for ``password`` (a fresh salt unless given)."""
    salt = os.urandom(SALT_LENGTH) if salt is None else salt
    derived = _kdf(salt).derive(password)
    return base64.b64encode(salt).decode("ascii"), base64.b64encode(derived).decode("ascii")


def decode_base64(text: str, what: str) -> bytes:
    """The bytes of a base64 field of the users file; ValueError names the field when it is not."""
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"{what} is not valid base64") from exc


def verify_password(password: bytes, salt: bytes, expected: bytes) -> bool:
    """True when ``password`` derives to ``expected`` with ``salt`` (constant-time comparison)."""
    try:
        _kdf(salt).verify(password, expected)
    except InvalidKey:
        return False
    return True
