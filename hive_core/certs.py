"""``hive certs``: a private CA for a cluster, and node certificates it signs.

    hive certs ca --out ca/
    hive certs node --ca ca/ --name node1 --ip 10.0.0.1 --dns node1.internal --out node1/ \
        [--p12 [--password-stdin]]
    hive certs node --ca ca/ --name node1 --name node2 --name node3 --out nodes/

With several --name, each node's files go into its own folder under --out (nodes/node1/...),
with a progress line on standard error when that is a terminal; --ip and --dns then do not
apply (they name one node's addresses).

A CA folder holds ``ca.pem`` (the certificate: every node's trust store) and ``ca-key.pem``.
A node folder holds ``NAME.pem`` (certificate chain and key: a key store), ``NAME-cert.pem``,
``NAME-key.pem`` and a copy of ``ca.pem``; with ``--p12`` also ``NAME.p12`` (key store) and
``ca.p12`` (trust store), both protected by the password: from ``$HIVE_CERTS_PASSWORD``, else
standard input with ``--password-stdin``, else a prompt (never the command line, which other
users see in the process list). Files holding a key are made 0600.
Keys are ECDSA P-256. Node certificates serve both ends of a node link (serverAuth and
clientAuth), so one certificate is a node's server keystore and its client-authentication one.
"""

from __future__ import annotations

import argparse
import datetime
import getpass
import ipaddress
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from hive_core.exit_codes import FAILED, USAGE, epilog

__all__ = [
    "CertificateAuthority",
    "CertsError",
    "NodeCertificate",
    "add_certs_command",
    "fingerprint",
    "load_ca",
    "make_ca",
    "make_node_certificate",
    "write_ca",
    "write_node",
]

CA_CERT = "ca.pem"
CA_KEY = "ca-key.pem"
CA_DAYS = 3650
NODE_DAYS = 825


class CertsError(Exception):
    """A CA or node certificate that cannot be made or written; the message says why."""


@dataclass(frozen=True)
class CertificateAuthority:
    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate


@dataclass(frozen=True)
class NodeCertificate:
    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate
    chain: tuple[x509.Certificate, ...]
    """The CA certificates above ``certificate``, nearest first."""


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _key_usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True, content_commitment=False, key_encipherment=False,
        data_encipherment=False, key_agreement=False, key_cert_sign=cert_sign,
        crl_sign=cert_sign, encipher_only=False, decipher_only=False)


def make_ca(common_name: str = "Hive Cluster CA", days: int = CA_DAYS) -> CertificateAuthority:
    """A self-signed CA that may sign node certificates only (path length 0)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = _now()
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(cert_sign=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                       critical=False)
        .sign(key, hashes.SHA256())
    )
    return CertificateAuthority(key, certificate)


def make_node_certificate(ca: CertificateAuthority, name: str, ips: Sequence[str] = (),
                          dns_names: Sequence[str] = (), days: int = NODE_DAYS,
                          ) -> NodeCertificate:
    """A node's key and certificate, signed by ``ca``, good for both ends of a TLS link.

    ``ips`` and ``dns_names`` go into the subject alternative names; a cluster that checks
    only the chain (Hive's default) does not need them, one that checks host names does.
    """
    try:
        addresses = [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    except ValueError as exc:
        raise CertsError(f"--ip: {exc}") from exc
    alt_names: list[x509.GeneralName] = [*addresses, *(x509.DNSName(d) for d in dns_names)]
    key = ec.generate_private_key(ec.SECP256R1())
    now = _now()
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca.certificate.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(min(now + datetime.timedelta(days=days),
                             ca.certificate.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                              ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                       critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
            ca.key.public_key()), critical=False)
    )
    if alt_names:
        builder = builder.add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
    return NodeCertificate(key, builder.sign(ca.key, hashes.SHA256()), (ca.certificate,))


# ---------------------------------------------------------------------------------- files


def _pem(certificate: x509.Certificate) -> bytes:
    return certificate.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _write(path: Path, data: bytes, secret: bool, force: bool) -> None:
    if path.exists() and not force:
        raise CertsError(f"{path} exists; give --force to replace it")
    mode = 0o600 if secret else 0o644
    # Created with its final mode: a key is never readable by others, not even for a moment.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    os.chmod(path, mode)  # O_CREAT's mode is masked by the umask, and ignored for old files


def write_ca(ca: CertificateAuthority, folder: Path, force: bool = False) -> list[Path]:
    """Write ``ca.pem`` and ``ca-key.pem`` (0600) into ``folder``; return the paths."""
    folder.mkdir(parents=True, exist_ok=True)
    cert, key = folder / CA_CERT, folder / CA_KEY
    for path in (cert, key):  # check both first: never half a CA
        if path.exists() and not force:
            raise CertsError(f"{path} exists; give --force to replace it")
    _write(key, _key_pem(ca.key), secret=True, force=True)
    _write(cert, _pem(ca.certificate), secret=False, force=True)
    return [cert, key]


def load_ca(folder: Path) -> CertificateAuthority:
    """The CA ``write_ca`` left in ``folder``."""
    try:
        certificate = x509.load_pem_x509_certificate((folder / CA_CERT).read_bytes())
        key = serialization.load_pem_private_key((folder / CA_KEY).read_bytes(), None)
    except (OSError, ValueError, TypeError) as exc:
        raise CertsError(f"cannot read the CA in {folder}: {exc}") from exc
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise CertsError(f"{folder / CA_KEY}: not an EC key made by `hive certs ca`")
    if key.public_key() != certificate.public_key():
        raise CertsError(f"{folder / CA_KEY} is not the key of {folder / CA_CERT}")
    return CertificateAuthority(key, certificate)


def fingerprint(certificate: x509.Certificate) -> str:
    """The SHA-256 fingerprint as ``openssl x509 -fingerprint -sha256`` shows it."""
    return certificate.fingerprint(hashes.SHA256()).hex(":").upper()


def node_file_names(name: str, p12: bool) -> list[str]:
    """The files ``write_node`` writes for node ``name``."""
    names = [f"{name}.pem", f"{name}-cert.pem", f"{name}-key.pem", CA_CERT]
    return [*names, f"{name}.p12", "ca.p12"] if p12 else names


def write_node(node: NodeCertificate, name: str, folder: Path, p12_password: str | None = None,
               force: bool = False) -> list[Path]:
    """Write the node's PEM files (and PKCS#12 stores when a password is given)."""
    folder.mkdir(parents=True, exist_ok=True)
    chain = _pem(node.certificate) + b"".join(_pem(c) for c in node.chain)
    key = _key_pem(node.key)
    trust = b"".join(_pem(c) for c in node.chain[-1:])
    files: list[tuple[Path, bytes, bool]] = [
        (folder / f"{name}.pem", chain + key, True),
        (folder / f"{name}-cert.pem", chain, False),
        (folder / f"{name}-key.pem", key, True),
        (folder / CA_CERT, trust, False),
    ]
    if p12_password is not None:
        protect = serialization.BestAvailableEncryption(p12_password.encode())
        files.append((folder / f"{name}.p12", pkcs12.serialize_key_and_certificates(
            name.encode(), node.key, node.certificate, list(node.chain), protect), True))
        files.append((folder / "ca.p12", pkcs12.serialize_key_and_certificates(
            b"ca", None, None, list(node.chain[-1:]), protect), False))
    for path, _, _ in files:
        if path.exists() and not force:
            raise CertsError(f"{path} exists; give --force to replace it")
    for path, data, secret in files:
        _write(path, data, secret, force=True)
    return [path for path, _, _ in files]


# ---------------------------------------------------------------------------------- command


def _described(certificate: x509.Certificate, paths: list[Path]) -> dict[str, Any]:
    return {"files": [str(path) for path in paths],
            "fingerprint_sha256": fingerprint(certificate),
            "not_after": certificate.not_valid_after_utc.isoformat()}


def _ca_command(args: argparse.Namespace) -> int:
    ca = make_ca(args.name, args.days)
    paths = write_ca(ca, args.out, args.force)
    if args.json:
        print(json.dumps({"folder": str(args.out), **_described(ca.certificate, paths)},
                         indent=2))
    else:
        print("\n".join(str(path) for path in paths))
    return 0


class _Progress:
    """``made 3/10 certificates: node3`` on one terminal line, rewritten in place; silent
    when standard error is not a terminal."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.shown = total > 1 and sys.stderr.isatty()

    def step(self, done: int, name: str) -> None:
        if self.shown:
            print(f"\rmade {done}/{self.total} certificates: {name}\x1b[K", end="",
                  file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.shown:
            print(file=sys.stderr, flush=True)


PASSWORD_VARIABLE = "HIVE_CERTS_PASSWORD"


def _p12_password(args: argparse.Namespace) -> str:
    """The PKCS#12 stores' password: the environment, standard input, or a prompt."""
    if args.password_stdin:
        password: str | None = sys.stdin.readline().rstrip("\r\n")
    else:
        password = os.environ.get(PASSWORD_VARIABLE)
    if password is None:
        if not sys.stdin.isatty():
            raise CertsError(f"--p12 needs the PKCS#12 stores' password: set "
                             f"${PASSWORD_VARIABLE} or give --password-stdin (no terminal to "
                             "prompt on)")
        password = getpass.getpass("PKCS#12 password: ")
        if getpass.getpass("Again: ") != password:
            raise CertsError("the passwords differ")
    if not password:
        raise CertsError("--p12 needs a password that is not empty")
    return password


def _node_command(args: argparse.Namespace) -> int:
    if args.password is not None:
        raise CertsError("--password no longer takes the password on the command line (other "
                         "users see it in the process list, and it stays in the shell's "
                         f"history): set ${PASSWORD_VARIABLE}, give --password-stdin, or "
                         "answer the prompt")
    if args.password_stdin and not args.p12:
        raise CertsError("--password-stdin goes with --p12")
    password = _p12_password(args) if args.p12 else None
    names: list[str] = args.name
    if len(set(names)) != len(names):
        raise CertsError("--name: each node's name once")
    several = len(names) > 1
    if several and (args.ip or args.dns):
        raise CertsError("--ip and --dns name one node's addresses: give them with one --name")
    folders = {name: args.out / name if several else args.out for name in names}
    for name, folder in folders.items():  # check all first: never some nodes of a batch
        for file_name in node_file_names(name, args.p12):
            if (folder / file_name).exists() and not args.force:
                raise CertsError(f"{folder / file_name} exists; give --force to replace it")
    ca = load_ca(args.ca)
    made: list[dict[str, Any]] = []
    progress = _Progress(len(names))
    try:
        for done, name in enumerate(names, 1):
            node = make_node_certificate(ca, name, args.ip, args.dns, args.days)
            paths = write_node(node, name, folders[name], password, args.force)
            made.append({"name": name, "folder": str(folders[name]),
                         **_described(node.certificate, paths)})
            progress.step(done, name)
    finally:
        progress.close()
    if args.json:
        print(json.dumps({"ca_fingerprint_sha256": fingerprint(ca.certificate),
                          "nodes": made}, indent=2))
    else:
        print("\n".join(path for node_made in made for path in node_made["files"]))
    return 0


def _run(args: argparse.Namespace) -> int:
    try:
        return int(args.certs_handler(args))
    except CertsError as exc:
        print(f"hive certs: {exc}", file=sys.stderr)
        return USAGE
    except OSError as exc:  # a folder or file that cannot be written
        print(f"hive certs: {exc}", file=sys.stderr)
        return FAILED


def add_certs_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``certs ca`` and ``certs node`` to the ``hive`` command."""
    certs = commands.add_parser("certs", help="make a cluster CA and node certificates")
    kinds = certs.add_subparsers(dest="certs_command", metavar="COMMAND")
    codes = epilog(USAGE, FAILED, c2="a usage error, a CA that cannot be read, or a file that "
                                     "exists (give --force)",
                   c3="a folder or file could not be written")
    ca = kinds.add_parser("ca", help="make a CA that signs the cluster's node certificates",
                          epilog=codes)
    ca.add_argument("--out", type=Path, required=True, help="folder for ca.pem and ca-key.pem")
    ca.add_argument("--name", default="Hive Cluster CA", help="the CA's common name")
    ca.add_argument("--days", type=int, default=CA_DAYS, help=f"validity (default {CA_DAYS})")
    ca.add_argument("--force", action="store_true", help="replace files that exist")
    ca.add_argument("--json", action="store_true",
                    help="print the files written and the CA's fingerprint as JSON")
    ca.set_defaults(certs_handler=_ca_command)
    node = kinds.add_parser("node", help="make nodes' keys and certificates, signed by the CA",
                            epilog=codes)
    node.add_argument("--ca", type=Path, required=True, help="folder `hive certs ca` wrote")
    node.add_argument("--name", action="append", required=True,
                      help="the node's name: common name and file names; give it once per "
                           "node to make several (each in OUT/NAME/)")
    node.add_argument("--ip", action="append", default=[], help="an IP address for the SAN; "
                      "may be given several times")
    node.add_argument("--dns", action="append", default=[], help="a DNS name for the SAN; "
                      "may be given several times")
    node.add_argument("--out", type=Path, required=True, help="folder for the node's files")
    node.add_argument("--p12", action="store_true",
                      help="also write NAME.p12 (key store) and ca.p12 (trust store)")
    node.add_argument("--password-stdin", action="store_true",
                      help=f"read the PKCS#12 stores' password from standard input (else "
                           f"${PASSWORD_VARIABLE}, else a prompt)")
    node.add_argument("--password", default=None, help=argparse.SUPPRESS)  # refused: see above
    node.add_argument("--days", type=int, default=NODE_DAYS,
                      help=f"validity (default {NODE_DAYS}, never past the CA's)")
    node.add_argument("--force", action="store_true", help="replace files that exist")
    node.add_argument("--json", action="store_true",
                      help="print each node's files and certificate fingerprint as JSON")
    node.set_defaults(certs_handler=_node_command)
    certs.set_defaults(handler=_run)
