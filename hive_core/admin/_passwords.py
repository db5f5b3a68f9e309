"""Password hashes and tokens for the REST API: made here, checked here, stored hashed.

The hash format (PHC strings such as ``$scrypt$ln=15,r=8,p=1$SALT$HASH``) is the config's
:class:`~hive_core.config.PasswordHash`; this module runs the key derivation (hashlib, which
releases the GIL while it works, so a check may run on a worker thread).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets

from hive_core.config import PasswordHash

__all__ = ["ALGORITHMS", "hash_password", "new_token", "verify_password"]

ALGORITHMS = ("scrypt", "pbkdf2-sha256")

# scrypt at 2**15 x 8: 32 MiB and about 0.1 s per check; pbkdf2-sha256 at OWASP's 2023 count.
SCRYPT_DEFAULTS = (("ln", 15), ("r", 8), ("p", 1))
PBKDF2_DEFAULTS = (("i", 600_000),)
SALT_LENGTH = 16
DIGEST_LENGTH = 32


def _derive(password: bytes, algorithm: str, parameters: dict[str, int], salt: bytes,
            length: int) -> bytes:
    if algorithm == "scrypt":
        n, r, p = 2 ** parameters["ln"], parameters["r"], parameters["p"]
        # hashlib's default limit (32 MiB) is below what the config allows; give it room
        return hashlib.scrypt(password, salt=salt, n=n, r=r, p=p, dklen=length,
                              maxmem=2 * 128 * r * n + 2**20)
    return hashlib.pbkdf2_hmac("sha256", password, salt, parameters["i"], dklen=length)


def hash_password(password: str, algorithm: str = "scrypt") -> PasswordHash:
    """A fresh hash of ``password`` (UTF-8) with a random salt, at the default cost."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}: use {' or '.join(ALGORITHMS)}")
    parameters = SCRYPT_DEFAULTS if algorithm == "scrypt" else PBKDF2_DEFAULTS
    salt = os.urandom(SALT_LENGTH)
    digest = _derive(password.encode("utf-8"), algorithm, dict(parameters), salt, DIGEST_LENGTH)
    return PasswordHash(algorithm, parameters, salt, digest)  # type: ignore[arg-type]


def verify_password(password: bytes, hashed: PasswordHash) -> bool:
    """Whether ``password`` derives to ``hashed`` (compared in constant time)."""
    derived = _derive(password, hashed.algorithm, dict(hashed.parameters), hashed.salt,
                      len(hashed.digest))
    return hmac.compare_digest(derived, hashed.digest)


def new_token() -> str:
    """A random bearer token: 32 bytes from the OS, URL-safe base64 (43 characters)."""
    return secrets.token_urlsafe(32)
