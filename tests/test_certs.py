"""`hive certs` and the TLS contexts node links use, checked with in-memory handshakes.

A handshake here is two ssl.SSLObjects over MemoryBIOs: no sockets, no threads, and a refusal
raises on whichever side refuses, as it would on a node link.
"""

from __future__ import annotations

import os
import ssl
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID

from hive_core.certs import CertsError, load_ca, make_ca, make_node_certificate, write_node
from hive_core.cli import main
from hive_core.config import parse_config
from hive_core.net import (
    TLSConfigError,
    client_context,
    cluster_contexts,
    handshake_failure,
    server_context,
)

PASSWORD = "s3cret"


def handshake(server: ssl.SSLContext, client: ssl.SSLContext,
              server_hostname: str = "127.0.0.1") -> tuple[ssl.SSLObject, ssl.SSLObject]:
    """Run a TLS handshake in memory; returns (accepting, dialing) or raises ssl.SSLError."""
    pipes = [ssl.MemoryBIO() for _ in range(4)]
    accepting = server.wrap_bio(pipes[0], pipes[1], server_side=True)
    dialing = client.wrap_bio(pipes[2], pipes[3], server_hostname=server_hostname)
    done = {id(accepting): False, id(dialing): False}
    # Each side's output is the other's input: (side, its outgoing pipe, the peer's incoming).
    sides = ((dialing, pipes[3], pipes[0]), (accepting, pipes[1], pipes[2]))
    for _ in range(20):
        for side, outgoing, peer_incoming in sides:
            if not done[id(side)]:
                try:
                    side.do_handshake()
                    done[id(side)] = True
                except ssl.SSLWantReadError:
                    pass
            peer_incoming.write(outgoing.read())
        if all(done.values()):
            return accepting, dialing
    raise AssertionError("handshake did not finish")


def common_name(certificate: dict) -> str:  # type: ignore[type-arg]
    return str(dict(item[0] for item in certificate["subject"])["commonName"])


@pytest.fixture
def pki(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A CA and two nodes made with the CLI, in process; the second also as PKCS#12 (its
    password from the environment, never the command line)."""
    assert main(["certs", "ca", "--out", str(tmp_path / "ca")]) == 0
    assert main(["certs", "node", "--ca", str(tmp_path / "ca"), "--name", "node1",
                 "--ip", "127.0.0.1", "--dns", "localhost", "--out",
                 str(tmp_path / "node1")]) == 0
    with monkeypatch.context() as env:
        env.setenv("HIVE_CERTS_PASSWORD", PASSWORD)
        assert main(["certs", "node", "--ca", str(tmp_path / "ca"), "--name", "node2",
                     "--ip", "127.0.0.1", "--out", str(tmp_path / "node2"), "--p12"]) == 0
    return tmp_path


def test_the_p12_password_is_read_from_standard_input_not_the_command_line(
        pki: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "hive_core.cli", "certs", "node", "--ca",
                           str(pki / "ca"), "--name", "node3", "--out", str(pki / "node3"),
                           "--p12", "--password-stdin"], input="from stdin\n",
                          capture_output=True, text=True, timeout=60,
                          env={k: v for k, v in os.environ.items()
                               if k != "HIVE_CERTS_PASSWORD"})
    assert done.returncode == 0, done.stderr
    key, certificate, _ = pkcs12.load_key_and_certificates(
        (pki / "node3/node3.p12").read_bytes(), b"from stdin")
    assert key is not None and certificate is not None


def test_a_password_on_the_command_line_is_refused(
        pki: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["certs", "node", "--ca", str(pki / "ca"), "--name", "n", "--p12",
                 "--password", PASSWORD, "--out", str(pki / "n")]) == 2
    assert "--password no longer takes the password on the command line" in \
        capsys.readouterr().err
    assert not (pki / "n").exists()


def test_ca_and_node_files_are_written_and_keys_are_private(pki: Path) -> None:
    assert sorted(p.name for p in (pki / "ca").iterdir()) == ["ca-key.pem", "ca.pem"]
    assert sorted(p.name for p in (pki / "node2").iterdir()) == [
        "ca.p12", "ca.pem", "node2-cert.pem", "node2-key.pem", "node2.p12", "node2.pem"]
    for secret in (pki / "ca/ca-key.pem", pki / "node1/node1.pem", pki / "node1/node1-key.pem",
                   pki / "node2/node2.p12"):
        assert stat.S_IMODE(secret.stat().st_mode) == 0o600, secret
    assert stat.S_IMODE((pki / "ca/ca.pem").stat().st_mode) == 0o644


def test_node_certificate_names_its_addresses_and_serves_both_ends(pki: Path) -> None:
    cert = x509.load_pem_x509_certificate((pki / "node1/node1-cert.pem").read_bytes())
    ca = x509.load_pem_x509_certificate((pki / "ca/ca.pem").read_bytes())
    cert.verify_directly_issued_by(ca)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert san.get_values_for_type(x509.DNSName) == ["localhost"]
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert set(usages) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


def test_nodes_of_one_ca_authenticate_each_other(pki: Path) -> None:
    accepting, dialing = handshake(
        server_context(pki / "node1/node1.pem", truststore=pki / "ca/ca.pem",
                       client_authentication="REQUIRED"),
        client_context(pki / "node2/ca.pem", keystore=pki / "node2/node2.pem"))
    assert common_name(dialing.getpeercert()) == "node1"
    assert common_name(accepting.getpeercert()) == "node2"


def test_pkcs12_stores_load_and_authenticate(pki: Path) -> None:
    key, cert, chain = pkcs12.load_key_and_certificates(
        (pki / "node2/node2.p12").read_bytes(), PASSWORD.encode())
    assert key is not None and cert is not None
    assert key.public_key() == cert.public_key()
    assert [c.subject for c in chain] == [load_ca(pki / "ca").certificate.subject]
    accepting, dialing = handshake(
        server_context(pki / "node2/node2.p12", PASSWORD, truststore=pki / "node2/ca.p12",
                       truststore_password=PASSWORD, client_authentication="REQUIRED"),
        client_context(pki / "node2/ca.p12", PASSWORD, keystore=pki / "node2/node2.p12",
                       keystore_password=PASSWORD))
    assert common_name(accepting.getpeercert()) == "node2"
    assert common_name(dialing.getpeercert()) == "node2"


def test_a_wrong_pkcs12_password_is_a_clear_error(pki: Path) -> None:
    with pytest.raises(TLSConfigError, match=r"cannot read PKCS#12 store .*node2\.p12"):
        server_context(pki / "node2/node2.p12", "wrong")


def test_a_node_of_another_ca_is_refused_by_both_ends(pki: Path, tmp_path: Path) -> None:
    stranger = make_node_certificate(make_ca("Someone Else"), "stranger", ["127.0.0.1"])
    write_node(stranger, "stranger", tmp_path / "stranger")
    # The dialing node does not trust the stranger it dialled...
    with pytest.raises(ssl.SSLCertVerificationError) as refused:
        handshake(server_context(tmp_path / "stranger/stranger.pem"),
                  client_context(pki / "ca/ca.pem", keystore=pki / "node1/node1.pem"))
    # The stranger sends its CA along, which does not help: it is not in the trust store.
    assert handshake_failure(refused.value) in (
        "certificate verify failed: self-signed certificate in certificate chain",
        "certificate verify failed: self signed certificate in certificate chain")  # OpenSSL 1
    # ... and an accepting node does not let the stranger in.
    with pytest.raises(ssl.SSLError) as kept_out:
        handshake(server_context(pki / "node1/node1.pem", truststore=pki / "ca/ca.pem",
                                 client_authentication="REQUIRED"),
                  client_context(pki / "ca/ca.pem", keystore=tmp_path / "stranger/stranger.pem"))
    assert "certificate verify failed" in handshake_failure(kept_out.value)


def test_host_names_are_checked_only_when_asked(pki: Path, tmp_path: Path) -> None:
    ca = load_ca(pki / "ca")
    write_node(make_node_certificate(ca, "bare"), "bare", tmp_path / "bare")  # no SAN at all
    server = server_context(tmp_path / "bare/bare.pem")
    handshake(server, client_context(pki / "ca/ca.pem"))  # chain only: accepted
    with pytest.raises(ssl.SSLCertVerificationError, match="IP address mismatch"):
        handshake(server, client_context(pki / "ca/ca.pem", check_hostname=True))
    handshake(server_context(pki / "node1/node1.pem"),
              client_context(pki / "ca/ca.pem", check_hostname=True))


def test_existing_files_are_kept_unless_forced(pki: Path, capsys: pytest.CaptureFixture[str],
                                               ) -> None:
    before = (pki / "ca/ca-key.pem").read_bytes()
    assert main(["certs", "ca", "--out", str(pki / "ca")]) == 2
    assert "ca.pem exists; give --force" in capsys.readouterr().err
    assert (pki / "ca/ca-key.pem").read_bytes() == before
    assert main(["certs", "ca", "--out", str(pki / "ca"), "--force"]) == 0
    assert (pki / "ca/ca-key.pem").read_bytes() != before


def test_bad_node_arguments_are_refused(pki: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ca = str(pki / "ca")
    assert main(["certs", "node", "--ca", ca, "--name", "n", "--ip", "300.1.1.1",
                 "--out", str(pki / "n")]) == 2
    assert "--ip" in capsys.readouterr().err
    assert main(["certs", "node", "--ca", ca, "--name", "n", "--p12",
                 "--out", str(pki / "n")]) == 2  # no terminal to prompt on here
    assert "--p12 needs the PKCS#12 stores' password: set $HIVE_CERTS_PASSWORD or give " \
        "--password-stdin" in capsys.readouterr().err
    assert main(["certs", "node", "--ca", str(pki / "nowhere"), "--name", "n",
                 "--out", str(pki / "n")]) == 2
    assert "cannot read the CA" in capsys.readouterr().err
    with pytest.raises(CertsError):
        load_ca(pki / "node1")


def cluster_tls(pki: Path, inner: str) -> str:
    return parse_config(
        "<hivemq><cluster><enabled>true</enabled><transport><tcp>"
        "<bind-address>127.0.0.1</bind-address><tls>"
        f"<enabled>true</enabled>{inner}</tls></tcp></transport></cluster></hivemq>"
    ).cluster.effective_transport().tls  # type: ignore[union-attr,return-value]


def test_cluster_contexts_default_to_the_server_stores(pki: Path) -> None:
    tls = cluster_tls(pki, (
        f"<server-keystore><path>{pki}/node1/node1.pem</path></server-keystore>"
        f"<server-certificate-truststore><path>{pki}/ca/ca.pem</path>"
        "</server-certificate-truststore>"
        "<client-authentication-mode>REQUIRED</client-authentication-mode>"))
    accepting, dialing = cluster_contexts(tls)  # type: ignore[arg-type]
    assert accepting.verify_mode == ssl.CERT_REQUIRED
    assert dialing.verify_mode == ssl.CERT_REQUIRED and not dialing.check_hostname
    # One node dialling another with the same settings: each presents node1.pem.
    server_end, client_end = handshake(accepting, dialing)
    assert common_name(server_end.getpeercert()) == common_name(client_end.getpeercert())


def test_cluster_contexts_honour_protocols(pki: Path) -> None:
    tls = cluster_tls(pki, (
        "<protocols><protocol>TLSv1.2</protocol></protocols>"
        f"<server-keystore><path>{pki}/node1/node1.pem</path></server-keystore>"
        f"<server-certificate-truststore><path>{pki}/ca/ca.pem</path>"
        "</server-certificate-truststore>"))
    accepting, dialing = cluster_contexts(tls)  # type: ignore[arg-type]
    assert accepting.maximum_version == dialing.maximum_version == ssl.TLSVersion.TLSv1_2
    server_end, _ = handshake(accepting, dialing)
    assert server_end.version() == "TLSv1.2"


def test_cluster_contexts_honour_cipher_suites_and_the_client_side_stores(pki: Path) -> None:
    tls = cluster_tls(pki, (
        "<protocols><protocol>TLSv1.2</protocol></protocols><cipher-suites>"
        "<cipher-suite>ECDHE-ECDSA-AES128-GCM-SHA256</cipher-suite></cipher-suites>"
        f"<server-keystore><path>{pki}/node1/node1.pem</path></server-keystore>"
        f"<server-certificate-truststore><path>{pki}/ca/ca.pem</path>"
        "</server-certificate-truststore>"
        "<client-authentication-mode>REQUIRED</client-authentication-mode>"
        f"<client-authentication-keystore><path>{pki}/node2/node2.p12</path>"
        f"<password>{PASSWORD}</password></client-authentication-keystore>"
        f"<client-certificate-truststore><path>{pki}/node2/ca.p12</path>"
        f"<password>{PASSWORD}</password></client-certificate-truststore>"))
    accepting, dialing = cluster_contexts(tls)  # type: ignore[arg-type]
    server_end, client_end = handshake(accepting, dialing)
    assert server_end.cipher()[0] == "ECDHE-ECDSA-AES128-GCM-SHA256"  # type: ignore[index]
    assert common_name(server_end.getpeercert()) == "node2"  # the dialling side's own store
    assert common_name(client_end.getpeercert()) == "node1"


def test_cluster_tls_without_a_server_truststore_is_refused(pki: Path) -> None:
    tls = cluster_tls(pki, f"<server-keystore><path>{pki}/node1/node1.pem</path>"
                           "</server-keystore>")
    with pytest.raises(TLSConfigError, match="needs a <server-certificate-truststore>"):
        cluster_contexts(tls)  # type: ignore[arg-type]
