"""Cluster transport over TLS, as an operator sets it up: certificates from `hive certs`, real
`hive run` nodes on loopback, mutual authentication, and a node from another CA kept out.
"""

from __future__ import annotations

import contextlib
import re
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import HiveProcess, free_port
from e2e.certs import make_pki
from e2e.rawclient import RawClient

from cluster.test_cluster_authentication import intrusion
from hive_core.mqtt import Publish

pytestmark = pytest.mark.timeout(30)

PASSWORD = "cluster-secret"
HANDSHAKE_FAILED = r"WARNING - cluster TLS handshake with 127\.0\.0\.1:{port} failed: {reason}"


def hive_certs(*args: str | Path, stdin: str | None = None) -> None:
    """Run `hive certs ...` as the operator would."""
    subprocess.run([sys.executable, "-m", "hive_core.cli", "certs", *map(str, args)],
                   check=True, capture_output=True, timeout=20, input=stdin, text=True)


def make_ca(folder: Path) -> Path:
    hive_certs("ca", "--out", folder)
    return folder


def make_node(ca: Path, name: str, folder: Path) -> Path:
    hive_certs("node", "--ca", ca, "--name", name, "--ip", "127.0.0.1", "--dns", "localhost",
               "--out", folder, "--p12", "--password-stdin", stdin=PASSWORD + "\n")
    return folder


def pem_stores(folder: Path, name: str, trust: Path | None = None) -> str:
    """Key store and trust stores as PEM files; client auth with the server key store."""
    ca = trust or folder / "ca.pem"
    return (f"<server-keystore><path>{folder / name}.pem</path></server-keystore>"
            f"<server-certificate-truststore><path>{ca}</path></server-certificate-truststore>"
            "<client-authentication-mode>REQUIRED</client-authentication-mode>"
            f"<client-certificate-truststore><path>{ca}</path></client-certificate-truststore>")


def pkcs12_stores(folder: Path, name: str) -> str:
    """Every store as PKCS#12, the client-authentication key store named explicitly."""
    def store(tag: str, path: Path) -> str:
        return f"<{tag}><path>{path}</path><password>{PASSWORD}</password></{tag}>"

    return (store("server-keystore", folder / f"{name}.p12")
            + store("server-certificate-truststore", folder / "ca.p12")
            + "<client-authentication-mode>REQUIRED</client-authentication-mode>"
            + store("client-authentication-keystore", folder / f"{name}.p12")
            + store("client-certificate-truststore", folder / "ca.p12"))


def tls_cluster_body(own_port: int, all_ports: list[int], stores: str) -> str:
    nodes = "".join(f"<node><host>127.0.0.1</host><port>{p}</port></node>" for p in all_ports)
    return (
        "<cluster><enabled>true</enabled>"
        f"<transport><tcp><bind-address>127.0.0.1</bind-address><bind-port>{own_port}"
        f"</bind-port><tls><enabled>true</enabled>{stores}</tls></tcp></transport>"
        f"<discovery><static>{nodes}</static></discovery>"
        "</cluster>"
        "<persistence><mode>in-memory</mode></persistence>"
    )


def cluster_sizes(node: HiveProcess) -> list[int]:
    return [int(size) for size in re.findall(r"Cluster size = (\d+)", node.log)]


def wait_for_size(node: HiveProcess, size: int) -> None:
    node.wait_for_log(rf"Cluster size = {size}, members")


def publish_until_received(publisher: RawClient, subscriber: RawClient, topic: str,
                           payload: bytes, timeout: float = 10.0) -> Publish:
    """QoS 0 publishes until one crosses: the subscription needs a moment to reach the
    publisher's node, and no log line says when it has."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        publisher.publish(topic, payload)
        packet = subscriber.receive(timeout=0.3)
        if isinstance(packet, Publish):
            return packet
    raise AssertionError(f"nothing on {topic} within {timeout} s")


def routed_across(one: HiveProcess, two: HiveProcess, topic_filter: str, topic: str,
                  payload: bytes) -> Publish:
    """Once both nodes see a cluster of two: what a subscriber of ``topic_filter`` on ``two``
    gets of what a client of ``one`` publishes."""
    for node in (one, two):
        wait_for_size(node, 2)
    with RawClient(two.port) as subscriber, RawClient(one.port) as publisher:
        subscriber.connect(5, client_id="sub")
        subscriber.subscribe(topic_filter)
        publisher.connect(5, client_id="pub")
        return publish_until_received(publisher, subscriber, topic, payload)


def test_two_nodes_with_mutual_tls_form_a_cluster_and_route(
        hive_factory: Callable[..., HiveProcess], tmp_path: Path) -> None:
    ca = make_ca(tmp_path / "ca")
    pem_folder, p12_folder = make_node(ca, "node1", tmp_path / "n1"), make_node(
        ca, "node2", tmp_path / "n2")
    ports = [free_port(), free_port()]
    one = hive_factory(body=tls_cluster_body(ports[0], ports, pem_stores(pem_folder, "node1")))
    two = hive_factory(body=tls_cluster_body(ports[1], ports,
                                             pkcs12_stores(p12_folder, "node2")))
    packet = routed_across(one, two, "secure/#", "secure/hello", b"over TLS")
    assert (packet.topic, packet.payload) == ("secure/hello", b"over TLS")
    assert "TLS handshake" not in one.log + two.log
    # The node link really is TLS: plain bytes on the cluster port are refused, and said so.
    with socket.create_connection(("127.0.0.1", ports[0]), timeout=5) as plain:
        plain.sendall(b"HELLO, plain text\r\n" * 20)
        plain.settimeout(5)
        with contextlib.suppress(OSError):
            plain.recv(100)  # an alert, or the end of the stream
    one.wait_for_log(HANDSHAKE_FAILED.format(port=r"\d+", reason="the other end does not "
                                                                 "speak TLS"))
    assert max(cluster_sizes(one)) == max(cluster_sizes(two)) == 2


def test_a_node_with_a_certificate_from_another_ca_is_kept_out(
        hive_factory: Callable[..., HiveProcess], tmp_path: Path) -> None:
    ca = make_ca(tmp_path / "ca")
    folders = [make_node(ca, f"node{i}", tmp_path / f"n{i}") for i in (1, 2)]
    other_ca = make_ca(tmp_path / "other-ca")
    stranger = make_node(other_ca, "node3", tmp_path / "n3")
    ports = [free_port() for _ in range(3)]
    members = [hive_factory(body=tls_cluster_body(ports[i], ports,
                                                  pem_stores(folders[i], f"node{i + 1}")))
               for i in (0, 1)]
    for node in members:
        wait_for_size(node, 2)
    # The stranger trusts the cluster's CA, so only its own certificate is wrong: the members
    # must refuse it (client-authentication-mode REQUIRED) and refuse to trust it as a server.
    outsider = hive_factory(body=tls_cluster_body(
        ports[2], ports, pem_stores(stranger, "node3", trust=ca / "ca.pem")))
    for index, node in enumerate(members):
        # It dialled us: its certificate does not lead to our CA.
        node.wait_for_log(HANDSHAKE_FAILED.format(
            port=r"\d+", reason="certificate verify failed: "), timeout=10)
        # It was told so (under TLS 1.3 on its first read, after its side of the handshake).
        outsider.wait_for_log(HANDSHAKE_FAILED.format(
            port=ports[index], reason=r"the other node (does not trust|refused) this node's "
                                      r"certificate"), timeout=10)
    assert set(cluster_sizes(outsider)) == {1}
    for node in members:
        assert max(cluster_sizes(node)) == 2


def tls_stranger(port: int, trust: Path, certificate: Path | None = None,
                 key: Path | None = None) -> bytes:
    """A TLS client on a node's cluster port that trusts the node and sends issue 8's
    intrusion; the plain bytes it got back."""
    context = ssl.create_default_context(cafile=str(trust))
    context.check_hostname = False
    if certificate is not None:
        context.load_cert_chain(certificate, key)
    received = b""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        try:
            with context.wrap_socket(raw) as tls:
                tls.sendall(b"".join(intrusion(port)))
                while chunk := tls.recv(65536):
                    received += chunk
        except (ssl.SSLError, OSError):
            pass  # refused: at the handshake (TLS 1.2) or on the first read (TLS 1.3)
    return received


def test_a_stranger_with_a_certificate_from_another_ca_or_none_gets_nothing(
        hive_factory: Callable[..., HiveProcess], tmp_path: Path) -> None:
    ca = make_ca(tmp_path / "ca")
    folders = [make_node(ca, f"node{i}", tmp_path / f"n{i}") for i in (1, 2)]
    ports = [free_port() for _ in range(2)]
    one, two = [hive_factory(body=tls_cluster_body(ports[i], ports,
                                                   pem_stores(folders[i], f"node{i + 1}")))
                for i in (0, 1)]
    for node in (one, two):
        wait_for_size(node, 2)
    pki = make_pki(tmp_path / "other-pki")  # its "stranger" certificate: from another CA
    with RawClient(two.port) as watcher:
        watcher.connect(5, client_id="watcher")
        watcher.subscribe("#")
        time.sleep(0.5)  # the subscription reaches node one (no log line says when)
        assert tls_stranger(ports[0], ca / "ca.pem", pki.stranger_cert_pem,
                            pki.stranger_key_pem) == b""
        one.wait_for_log(HANDSHAKE_FAILED.format(port=r"\d+", reason="certificate verify failed: "))
        assert tls_stranger(ports[0], ca / "ca.pem") == b""
        one.wait_for_log(HANDSHAKE_FAILED.format(port=r"\d+", reason="the dialing node sent no "
                                                                     "certificate"))
        assert watcher.receive(timeout=1.0) is None  # nothing injected reached anyone
        with RawClient(one.port) as publisher:  # while a real message does
            publisher.connect(5, client_id="publisher")
            packet = publish_until_received(publisher, watcher, "real/one", b"real")
            assert (packet.topic, packet.payload) == ("real/one", b"real")
    assert "intruder" not in one.log + two.log
    assert max(cluster_sizes(one)) == max(cluster_sizes(two)) == 2
