"""A throwaway PKI for TLS tests: a CA, a server certificate for 127.0.0.1/localhost, and a client
certificate, written as PEM files and as PKCS#12 bundles into a folder.

    pki = make_pki(tmp_path)
    pki.server_pem      # chain and key in one PEM file: a <keystore><path>
    pki.server_p12      # the same as PKCS#12, protected by pki.password
    pki.ca_pem          # the trust anchor for clients, and the <truststore> for client certs
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["PKI", "make_pki"]

PASSWORD = "changeit"


@dataclass(frozen=True)
class PKI:
    folder: Path
    password: str
    ca_pem: Path
    ca_p12: Path
    server_pem: Path
    server_cert_pem: Path
    server_key_pem: Path
    server_p12: Path
    client_cert_pem: Path
    client_key_pem: Path
    client_p12: Path
    stranger_cert_pem: Path
    stranger_key_pem: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _certificate(subject: str, key: ec.EllipticCurvePrivateKey, issuer: x509.Name,
                 issuer_key: ec.EllipticCurvePrivateKey, *, ca: bool = False,
                 server: bool = False) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(digital_signature=True, content_commitment=False,
                          key_encipherment=False, data_encipherment=False, key_agreement=False,
                          key_cert_sign=True, crl_sign=True, encipher_only=False,
                          decipher_only=False), critical=True)
    else:
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
            critical=False)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _p12(name: str, key: ec.EllipticCurvePrivateKey | None, cert: x509.Certificate | None,
         chain: list[x509.Certificate], password: str) -> bytes:
    return pkcs12.serialize_key_and_certificates(
        name.encode(), key, cert, chain or None,
        serialization.BestAvailableEncryption(password.encode()))


def make_pki(folder: Path, password: str = PASSWORD) -> PKI:
    """Write a CA, a server and a client certificate (and one from another CA) into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("Hive Test CA")
    ca = _certificate("Hive Test CA", ca_key, ca_name, ca_key, ca=True)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = _certificate("localhost", server_key, ca_name, ca_key, server=True)
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = _certificate("hive-test-client", client_key, ca_name, ca_key)
    other_key = ec.generate_private_key(ec.SECP256R1())
    other_name = _name("Some Other CA")
    stranger_key = ec.generate_private_key(ec.SECP256R1())
    stranger = _certificate("stranger", stranger_key, other_name, other_key)

    files = {
        "ca.pem": _pem(ca),
        "ca.p12": pkcs12.serialize_key_and_certificates(
            b"ca", None, None, [ca], serialization.BestAvailableEncryption(password.encode())),
        "server.pem": _pem(server) + _pem(ca) + _key_pem(server_key),
        "server-cert.pem": _pem(server) + _pem(ca),
        "server-key.pem": _key_pem(server_key),
        "server.p12": _p12("server", server_key, server, [ca], password),
        "client-cert.pem": _pem(client),
        "client-key.pem": _key_pem(client_key),
        "client.p12": _p12("client", client_key, client, [ca], password),
        "stranger-cert.pem": _pem(stranger),
        "stranger-key.pem": _key_pem(stranger_key),
    }
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return PKI(
        folder=folder, password=password, ca_pem=folder / "ca.pem", ca_p12=folder / "ca.p12",
        server_pem=folder / "server.pem", server_cert_pem=folder / "server-cert.pem",
        server_key_pem=folder / "server-key.pem", server_p12=folder / "server.p12",
        client_cert_pem=folder / "client-cert.pem", client_key_pem=folder / "client-key.pem",
        client_p12=folder / "client.p12", stranger_cert_pem=folder / "stranger-cert.pem",
        stranger_key_pem=folder / "stranger-key.pem",
    )
