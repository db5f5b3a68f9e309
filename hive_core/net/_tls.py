"""TLS contexts from HiveMQ-style key stores: PEM files, PKCS#12 bundles, Java JKS and JCEKS."""

from __future__ import annotations

import os
import ssl
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    pkcs12,
)

from hive_core.net._java_keystore import JavaKeyStoreError, java_store_kind, load_java_store

if TYPE_CHECKING:
    from hive_core.config import ClusterTls

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


def _java_kind(path: Path) -> str | None:
    """"JKS" or "JCEKS" when the file is a Java key store, whatever its name."""
    try:
        with path.open("rb") as file:
            return java_store_kind(file.read(4))
    except OSError:
        return None  # not readable: the loader says so


def _java_to_pem(path: Path, kind: str, what: str, password: str | None,
                 private_key_password: str | None) -> tuple[bytes, bytes, list[bytes]]:
    """(key, certificate, chain) PEM from a JKS or JCEKS store; a trust store gives no key."""
    try:
        store = load_java_store(path.read_bytes(), password)
        if what == "trust store":
            certificates = store.certificates()
            if not certificates:
                raise JavaKeyStoreError("it holds no certificate")
            return b"", b"", [c.public_bytes(Encoding.PEM) for c in certificates]
        if not store.private_keys:
            secret = (f" (only secret keys: {', '.join(store.secret_key_aliases)})"
                      if store.secret_key_aliases else "")
            raise JavaKeyStoreError(f"it holds no private key entry{secret}")
        entry = store.private_keys[0]
        key_password = private_key_password or password
        if key_password is None:
            raise JavaKeyStoreError(f"the key {entry.alias!r} needs a <private-key-password> "
                                    "or <password>")
        key = store.private_key(entry, key_password)
    except JavaKeyStoreError as exc:
        raise TLSConfigError(f"cannot read {what} {path} (Java {kind}): {exc}") from exc
    except OSError as exc:
        raise TLSConfigError(f"cannot read {what} {path}: {exc}") from exc
    key_pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    chain = [c.public_bytes(Encoding.PEM) for c in entry.chain]
    return key_pem, chain[0] if chain else b"", chain[1:]


def _pkcs12_to_pem(path: Path, password: str | None) -> tuple[bytes, bytes, list[bytes]]:
    try:
        key, cert, extra = pkcs12.load_key_and_certificates(
            path.read_bytes(), password.encode() if password else None)
    except (ValueError, OSError) as exc:
        raise TLSConfigError(f"cannot read PKCS#12 store {path}: {exc}") from exc
    key_pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()) if key else b""
    cert_pem = cert.public_bytes(Encoding.PEM) if cert else b""
    return key_pem, cert_pem, [c.public_bytes(Encoding.PEM) for c in extra or ()]


def _limit(context: ssl.SSLContext, protocols: Sequence[str], cipher_suites: Sequence[str]) -> None:
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


def _load_keystore(context: ssl.SSLContext, keystore: str | os.PathLike[str],
                   password: str | None, private_key_password: str | None) -> None:
    path = Path(keystore)
    kind = _java_kind(path)
    try:
        if kind is not None or _is_pkcs12(path):
            key_pem, cert_pem, chain = (
                _java_to_pem(path, kind, "key store", password, private_key_password)
                if kind is not None else _pkcs12_to_pem(path, password))
            with tempfile.TemporaryDirectory() as folder:
                bundle = Path(folder) / "keystore.pem"
                bundle.touch(0o600)
                bundle.write_bytes(cert_pem + b"".join(chain) + key_pem)
                context.load_cert_chain(bundle)
        else:
            context.load_cert_chain(path, password=private_key_password or password)
    except (ssl.SSLError, OSError) as exc:
        raise TLSConfigError(f"cannot load key store {path}: {exc}") from exc


def _load_truststore(context: ssl.SSLContext, truststore: str | os.PathLike[str],
                     password: str | None) -> None:
    path = Path(truststore)
    kind = _java_kind(path)
    try:
        if kind is not None or _is_pkcs12(path):
            _, cert_pem, chain = (_java_to_pem(path, kind, "trust store", password, None)
                                  if kind is not None else _pkcs12_to_pem(path, password))
            if not cert_pem and not chain:
                raise TLSConfigError(f"trust store {path} holds no certificate")
            context.load_verify_locations(cadata=(cert_pem + b"".join(chain)).decode())
        else:
            context.load_verify_locations(path)
    except (ssl.SSLError, OSError) as exc:
        raise TLSConfigError(f"cannot load trust store {path}: {exc}") from exc


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
    """A server-side context. A PEM key store holds the certificate chain and the key.

    With ``client_authentication`` OPTIONAL or REQUIRED, a client's certificate is checked
    against ``truststore`` (which is then required).
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _limit(context, protocols, cipher_suites)
    _load_keystore(context, keystore, keystore_password, private_key_password)
    if truststore is not None:
        _load_truststore(context, truststore, truststore_password)
    mode = client_authentication.upper()
    if mode not in _CLIENT_AUTH:
        raise TLSConfigError(f"client-authentication-mode {mode!r}: use NONE, OPTIONAL or REQUIRED")
    if mode != "NONE" and truststore is None:
        raise TLSConfigError(f"client-authentication-mode {mode} needs a truststore")
    context.verify_mode = _CLIENT_AUTH[mode]
    return context


def client_context(
    truststore: str | os.PathLike[str],
    truststore_password: str | None = None,
    keystore: str | os.PathLike[str] | None = None,
    keystore_password: str | None = None,
    private_key_password: str | None = None,
    protocols: Sequence[str] = (),
    cipher_suites: Sequence[str] = (),
    check_hostname: bool = False,
) -> ssl.SSLContext:
    """A client-side context: the server's chain must lead to ``truststore``.

    ``keystore`` (optional) is the certificate presented when the server asks for one.
    ``check_hostname`` also requires the address dialled (name or IP) in the server
    certificate's subject alternative names; off by default, see :func:`cluster_contexts`.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = check_hostname
    context.verify_mode = ssl.CERT_REQUIRED
    _limit(context, protocols, cipher_suites)
    _load_truststore(context, truststore, truststore_password)
    if keystore is not None:
        _load_keystore(context, keystore, keystore_password, private_key_password)
    return context


def cluster_contexts(tls: ClusterTls, check_hostname: bool = False,
                     ) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """The (accepting, dialing) contexts for node links, from ``<transport><tcp><tls>``.

    The accepting side presents ``server-keystore`` and, with client-authentication-mode
    OPTIONAL or REQUIRED, checks the dialing node against ``client-certificate-truststore``
    (default: ``server-certificate-truststore``, as one cluster CA usually signs every node).
    The dialing side checks the accepting node against ``server-certificate-truststore`` and
    presents ``client-authentication-keystore`` (default: ``server-keystore``) when asked.

    Trust means "the chain leads to the trust store", not "the certificate names the address
    dialled": static discovery addresses nodes by IP, which changes with every redeploy, so
    requiring it in each certificate's SAN would tie certificates to addresses. The trust
    store should therefore hold only the cluster's own CA. ``check_hostname=True`` adds the
    name check for operators who issue certificates per address.

    A server-certificate-truststore is required: without one the only choice would be the
    system's public CAs, and any certificate a public CA signed could then join the cluster.
    """
    if tls.server_keystore is None:
        raise TLSConfigError("cluster TLS is enabled but has no <server-keystore>")
    if tls.server_certificate_truststore is None:
        raise TLSConfigError(
            "cluster TLS needs a <server-certificate-truststore>: the CA certificate(s) that "
            "signed the other nodes' certificates")
    server_store = tls.server_keystore
    server_trust = tls.server_certificate_truststore
    client_trust = tls.client_certificate_truststore or server_trust
    accepting = server_context(
        server_store.path, server_store.password, server_store.private_key_password,
        client_trust.path if tls.client_authentication_mode != "NONE" else None,
        client_trust.password, tls.client_authentication_mode, tls.protocols,
        tls.cipher_suites)
    client_store = tls.client_authentication_keystore or server_store
    dialing = client_context(
        server_trust.path, server_trust.password, client_store.path, client_store.password,
        client_store.private_key_password, tls.protocols, tls.cipher_suites, check_hostname)
    return accepting, dialing
