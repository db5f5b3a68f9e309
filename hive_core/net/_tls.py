"""TLS contexts from HiveMQ-style key stores: PEM files or PKCS#12 bundles."""

from __future__ import annotations

import os
import ssl
import tempfile
from collections.abc import Sequence
from pathlib import Path

from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    pkcs12,
)

_PROTOCOLS = {
    "TLSv1": ssl.TLSVersion.TLSv1,
    "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
_CLIENT_AUTH = {
    "NONE": ssl.CERT_NONE,
    "OPTIONAL": ssl.CERT_OPTIONAL,
    "REQUIRED": ssl.CERT_REQUIRED,
}


class TLSConfigError(Exception):
    """A key store or trust store that cannot be used; the message says which and why."""


def _is_pkcs12(path: Path) -> bool:
    return path.suffix.lower() in (".p12", ".pfx")


def _pkcs12_to_pem(path: Path, password: str | None) -> tuple[bytes, bytes, list[bytes]]:
    try:
        key, cert, extra = pkcs12.load_key_and_certificates(
            path.read_bytes(), password.encode() if password else None)
    except (ValueError, OSError) as exc:
        raise TLSConfigError(f"cannot read PKCS#12 store {path}: {exc}") from exc
    key_pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()) if key else b""
    cert_pem = cert.public_bytes(Encoding.PEM) if cert else b""
    return key_pem, cert_pem, [c.public_bytes(Encoding.PEM) for c in extra or ()]


def server_context(
    keystore: str | os.PathLike[str],
    keystore_password: str | None = None,
    private_key_password: str | None = None,
    truststore: str | os.PathLike[str] | None = None,
    truststore_password: str | None = None,
    client_authentication: str = "NONE",
    protocols: Sequence[str] = (),
    cipher_suites: Sequence[str] = (),
) -> ssl.SSLContext:
    """A server-side context. A PEM key store holds the certificate chain and the key."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    if protocols:
        versions = []
        for name in protocols:
            if name not in _PROTOCOLS:
                raise TLSConfigError(f"unsupported TLS protocol {name!r}: "
                                     "use TLSv1, TLSv1.1, TLSv1.2 or TLSv1.3")
            versions.append(_PROTOCOLS[name])
        context.minimum_version = min(versions)
        context.maximum_version = max(versions)
    if cipher_suites:
        try:
            context.set_ciphers(":".join(cipher_suites))
        except ssl.SSLError as exc:
            raise TLSConfigError(f"no usable cipher suite in {list(cipher_suites)}") from exc
    keystore = Path(keystore)
    try:
        if _is_pkcs12(keystore):
            key_pem, cert_pem, chain = _pkcs12_to_pem(keystore, keystore_password)
            with tempfile.TemporaryDirectory() as folder:
                bundle = Path(folder) / "server.pem"
                bundle.touch(0o600)
                bundle.write_bytes(cert_pem + b"".join(chain) + key_pem)
                context.load_cert_chain(bundle)
        else:
            context.load_cert_chain(keystore, password=private_key_password or keystore_password)
    except (ssl.SSLError, OSError) as exc:
        raise TLSConfigError(f"cannot load key store {keystore}: {exc}") from exc
    if truststore is not None:
        truststore = Path(truststore)
        try:
            if _is_pkcs12(truststore):
                _, cert_pem, chain = _pkcs12_to_pem(truststore, truststore_password)
                context.load_verify_locations(cadata=(cert_pem + b"".join(chain)).decode())
            else:
                context.load_verify_locations(truststore)
        except (ssl.SSLError, OSError) as exc:
            raise TLSConfigError(f"cannot load trust store {truststore}: {exc}") from exc
    mode = client_authentication.upper()
    if mode not in _CLIENT_AUTH:
        raise TLSConfigError(f"client-authentication-mode {mode!r}: use NONE, OPTIONAL or REQUIRED")
    if mode != "NONE" and truststore is None:
        raise TLSConfigError(f"client-authentication-mode {mode} needs a truststore")
    context.verify_mode = _CLIENT_AUTH[mode]
    return context
