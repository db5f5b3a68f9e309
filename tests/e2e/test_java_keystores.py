"""Java key stores (HiveMQ's examples use .jks files) are read as they are: JKS and JCEKS stores
made by a real `keytool`, for a TLS listener's key store, a trust store with client
authentication REQUIRED, and the cluster's node links; real TLS clients connect."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cluster.test_cluster_tls import routed_across, tls_cluster_body
from conftest import HiveProcess, free_port, render_config, run_to_exit
from e2e.certs import PKI, make_pki
from e2e.test_listeners import assert_client_certificates_required, clients  # noqa: F401

from hive_core.net import TLSConfigError, client_context, server_context

pytestmark = pytest.mark.timeout(60)

STORE_PASSWORD = "store-secret"
KEY_PASSWORD = "key-secret"  # different from the store's, as keytool allows for JKS and JCEKS


def keytool(*args: str | Path) -> None:
    done = subprocess.run(["keytool", *map(str, args)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def import_key(p12: Path, p12_password: str, alias: str, store: Path, kind: str) -> Path:
    """A JKS or JCEKS key store holding the PKCS#12 bundle's key and chain, as an operator
    converts one (the key under its own password)."""
    keytool("-importkeystore", "-noprompt", "-srckeystore", p12, "-srcstoretype", "PKCS12",
            "-srcstorepass", p12_password, "-srcalias", alias, "-destkeystore", store,
            "-deststoretype", kind, "-deststorepass", STORE_PASSWORD, "-destkeypass",
            KEY_PASSWORD)
    return store


def trust_store(ca_pem: Path, store: Path, kind: str) -> Path:
    keytool("-importcert", "-noprompt", "-alias", "ca", "-file", ca_pem, "-keystore", store,
            "-storetype", kind, "-storepass", STORE_PASSWORD)
    return store


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PKI:
    return make_pki(tmp_path_factory.mktemp("pki"))


def java_listener(port: int, keystore: Path, truststore: Path | None = None,
                  client_auth: str = "NONE") -> str:
    trust = "" if truststore is None else (
        f"<truststore><path>{truststore}</path><password>{STORE_PASSWORD}</password>"
        "</truststore>")
    return (f"<tls-tcp-listener><port>{port}</port><bind-address>127.0.0.1</bind-address>"
            f"<tls><keystore><path>{keystore}</path><password>{STORE_PASSWORD}</password>"
            f"<private-key-password>{KEY_PASSWORD}</private-key-password></keystore>{trust}"
            f"<client-authentication-mode>{client_auth}</client-authentication-mode></tls>"
            "</tls-tcp-listener>")


@pytest.mark.parametrize("kind", ["JKS", "JCEKS"])
def test_a_listener_serves_tls_from_a_keytool_key_store(
        kind: str, pki: PKI, tmp_path: Path, hive_factory: Callable[..., HiveProcess],
        clients: Any) -> None:  # noqa: F811
    store = import_key(pki.server_p12, pki.password, "server", tmp_path / "server.jks", kind)
    assert store.read_bytes()[:4] == (b"\xfe\xed\xfe\xed" if kind == "JKS" else b"\xce" * 4)
    port = free_port()
    hive_factory(listeners=java_listener(port, store))
    subscriber = clients(port, tls={"ca_certs": str(pki.ca_pem)}).connect()
    subscriber.subscribe("jks/t")
    publisher = clients(port, tls={"ca_certs": str(pki.ca_pem)}).connect()
    publisher.publish("jks/t", kind.encode())
    subscriber.expect("jks/t", kind.encode())


@pytest.mark.parametrize("kind", ["JKS", "JCEKS"])
def test_a_key_keytool_generated_itself(kind: str, tmp_path: Path,
                                        hive_factory: Callable[..., HiveProcess],
                                        clients: Any) -> None:  # noqa: F811
    """An RSA key made by keytool (not imported), its certificate exported for the client."""
    store, cert = tmp_path / f"broker.{kind.lower()}", tmp_path / "broker.pem"
    keytool("-genkeypair", "-keyalg", "RSA", "-keysize", "2048", "-alias", "broker",
            "-dname", "CN=localhost", "-ext", "SAN=ip:127.0.0.1,dns:localhost", "-validity", "2",
            "-storetype", kind, "-keystore", store, "-storepass", STORE_PASSWORD,
            "-keypass", KEY_PASSWORD)
    keytool("-exportcert", "-rfc", "-alias", "broker", "-keystore", store, "-storetype", kind,
            "-storepass", STORE_PASSWORD, "-file", cert)
    port = free_port()
    hive_factory(listeners=java_listener(port, store))
    client = clients(port, tls={"ca_certs": str(cert)}).connect()
    client.subscribe("rsa/t")
    client.publish("rsa/t", b"keytool's own key")
    client.expect("rsa/t", b"keytool's own key")


@pytest.mark.parametrize(("key_kind", "trust_kind"), [("JKS", "JKS"), ("JCEKS", "JKS"),
                                                       ("JKS", "JCEKS")])
def test_client_authentication_required_against_a_java_trust_store(
        key_kind: str, trust_kind: str, pki: PKI, tmp_path: Path,
        hive_factory: Callable[..., HiveProcess], clients: Any) -> None:  # noqa: F811
    store = import_key(pki.server_p12, pki.password, "server", tmp_path / "server.ks", key_kind)
    trust = trust_store(pki.ca_pem, tmp_path / "trust.ks", trust_kind)
    port = free_port()
    node = hive_factory(listeners=java_listener(port, store, trust, "REQUIRED"))
    assert_client_certificates_required(clients, port, pki, "mutual/t", b"trusted")
    assert "Traceback" not in node.log


def test_seed_004s_cluster_tls_with_jks_files(tmp_path: Path, pki: PKI,
                                             hive_factory: Callable[..., HiveProcess]) -> None:
    """Two nodes whose node links use JKS key and trust stores, client auth REQUIRED."""
    folder = tmp_path / "stores"
    folder.mkdir()
    # The server certificate serves both ends here: make_pki's has serverAuth only, so each
    # node gets a key store of its own made from `hive certs` output.
    subprocess.run([sys.executable, "-m", "hive_core.cli", "certs", "ca", "--out",
                    str(folder / "ca")], check=True, capture_output=True, timeout=20)
    bodies = []
    ports = [free_port(), free_port()]
    for index, kind in enumerate(("JKS", "JCEKS")):
        name = f"node{index + 1}"
        subprocess.run([sys.executable, "-m", "hive_core.cli", "certs", "node", "--ca",
                        str(folder / "ca"), "--name", name, "--ip", "127.0.0.1", "--out",
                        str(folder / name), "--p12"],
                       check=True, capture_output=True, timeout=20,
                       env={**os.environ, "HIVE_CERTS_PASSWORD": "p12-secret"})
        key = import_key(folder / name / f"{name}.p12", "p12-secret", name,
                         folder / f"{name}.{kind.lower()}", kind)
        trust = trust_store(folder / "ca" / "ca.pem", folder / f"{name}-trust.jks", "JKS")
        stores = (f"<server-keystore><path>{key}</path><password>{STORE_PASSWORD}</password>"
                  f"<private-key-password>{KEY_PASSWORD}</private-key-password>"
                  f"</server-keystore><server-certificate-truststore><path>{trust}</path>"
                  f"<password>{STORE_PASSWORD}</password></server-certificate-truststore>"
                  "<client-authentication-mode>REQUIRED</client-authentication-mode>")
        bodies.append(tls_cluster_body(ports[index], ports, stores))
    one, two = hive_factory(body=bodies[0]), hive_factory(body=bodies[1])
    packet = routed_across(one, two, "jks/#", "jks/cluster", b"over TLS")
    assert packet.payload == b"over TLS"
    assert "TLS handshake" not in one.log + two.log


def test_wrong_passwords_name_the_store_and_the_password(pki: PKI, tmp_path: Path) -> None:
    store = import_key(pki.server_p12, pki.password, "server", tmp_path / "s.jceks", "JCEKS")
    with pytest.raises(TLSConfigError, match=rf"key store {store} \(Java JCEKS\): wrong "
                                             "password, or the store is damaged"):
        server_context(store, "not-the-password", KEY_PASSWORD)
    with pytest.raises(TLSConfigError, match=r"wrong private-key password"):
        server_context(store, STORE_PASSWORD, "not-the-key-password")
    with pytest.raises(TLSConfigError, match=r"wrong private-key password"):
        server_context(store, STORE_PASSWORD)  # the key's password is not the store's


def test_hive_run_with_a_wrong_key_store_password_exits_with_the_reason(
        pki: PKI, tmp_path: Path) -> None:
    store = import_key(pki.server_p12, pki.password, "server", tmp_path / "broker.jks", "JKS")
    config = tmp_path / "config.xml"
    config.write_text(render_config(0, listeners=(
        f"<tls-tcp-listener><port>{free_port()}</port><bind-address>127.0.0.1</bind-address>"
        f"<tls><keystore><path>{store}</path><password>wrong</password></keystore></tls>"
        "</tls-tcp-listener>")))
    result = run_to_exit(config)
    assert result.returncode == 2
    assert result.stderr.startswith(f"hive: TLS: cannot read key store {store} (Java JKS): "
                                    "wrong password")
    assert "Traceback" not in result.stdout + result.stderr


def test_a_trust_store_without_a_password_is_read_unchecked(pki: PKI, tmp_path: Path) -> None:
    """keytool -list reads a store without its password (skipping the integrity check);
    a <truststore> without <password> does the same, a wrong one is refused."""
    trust = trust_store(pki.ca_pem, tmp_path / "trust.jks", "JKS")
    assert isinstance(client_context(trust), ssl.SSLContext)
    with pytest.raises(TLSConfigError, match=rf"trust store {trust} \(Java JKS\): wrong"):
        client_context(trust, "wrong")
