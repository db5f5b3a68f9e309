"""A Java key store (HiveMQ's examples use .jks files) is refused with how to convert it, not with
OpenSSL's "[SSL] PEM lib": for listeners and for cluster TLS, key stores and trust stores."""

from __future__ import annotations

import hashlib
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import free_port, render_config

from hive_core.config import parse_config
from hive_core.net import TLSConfigError, client_context, cluster_contexts, server_context

pytestmark = pytest.mark.timeout(30)

JKS_MAGIC, JCEKS_MAGIC = 0xFEEDFEED, 0xCECECECE


def java_store(path: Path, magic: int = JKS_MAGIC, password: str = "changeit") -> Path:
    """An empty Java key store as keytool writes one: magic, version 2, no entries, and the
    SHA-1 integrity digest over the password (UTF-16BE), "Mighty Aphrodite" and the body."""
    body = struct.pack(">III", magic, 2, 0)
    digest = hashlib.sha1(password.encode("utf-16-be") + b"Mighty Aphrodite" + body).digest()
    path.write_bytes(body + digest)
    return path


def _says_how_to_convert(message: str, path: Path, kind: str = "JKS") -> None:
    assert f"{path} is a Java {kind} key store, which Hive does not read" in message
    p12 = path.with_suffix(".p12")
    assert (f"keytool -importkeystore -srckeystore {path} -srcstoretype {kind} "
            f"-destkeystore {p12} -deststoretype PKCS12") in message
    assert f"openssl pkcs12 -in {p12} -out {path.with_suffix('.pem')} -nodes" in message
    assert "PEM lib" not in message


def test_a_jks_key_store_says_jks_is_not_read_and_how_to_convert(tmp_path: Path) -> None:
    store = java_store(tmp_path / "server.jks")
    with pytest.raises(TLSConfigError) as refused:
        server_context(store, "changeit")
    _says_how_to_convert(str(refused.value), store)
    assert str(refused.value).startswith("key store ")


def test_found_by_its_magic_number_whatever_its_name(tmp_path: Path) -> None:
    store = java_store(tmp_path / "keystore.bin", JCEKS_MAGIC)
    with pytest.raises(TLSConfigError) as refused:
        server_context(store)
    _says_how_to_convert(str(refused.value), store, "JCEKS")


def test_a_jks_trust_store_too(tmp_path: Path) -> None:
    trust = java_store(tmp_path / "trust.jks")
    with pytest.raises(TLSConfigError) as refused:
        client_context(trust, "changeit")
    assert str(refused.value).startswith(f"trust store {trust} is a Java JKS key store")


def test_seed_004s_cluster_tls_with_jks_files(tmp_path: Path) -> None:
    server, trust = java_store(tmp_path / "server.jks"), java_store(tmp_path / "trust.jks")
    config = parse_config(
        "<hivemq><cluster><enabled>true</enabled><transport><tcp>"
        "<bind-address>127.0.0.1</bind-address><tls><enabled>true</enabled>"
        f"<server-keystore><path>{server}</path><password>changeit</password>"
        "</server-keystore><server-certificate-truststore>"
        f"<path>{trust}</path></server-certificate-truststore></tls></tcp></transport>"
        "<discovery><static/></discovery></cluster></hivemq>")
    tls = config.cluster.effective_transport().tls  # type: ignore[union-attr]
    assert tls is not None
    with pytest.raises(TLSConfigError) as refused:
        cluster_contexts(tls)
    _says_how_to_convert(str(refused.value), server)


def test_hive_run_with_a_jks_listener_key_store_exits_with_the_advice(tmp_path: Path) -> None:
    store = java_store(tmp_path / "broker.jks")
    config = tmp_path / "config.xml"
    config.write_text(render_config(0, listeners=(
        f"<tls-tcp-listener><port>{free_port()}</port><bind-address>127.0.0.1</bind-address>"
        f"<tls><keystore><path>{store}</path><password>changeit</password></keystore></tls>"
        "</tls-tcp-listener>")))
    result = subprocess.run([sys.executable, "-m", "hive_core.cli", "run", "--config",
                             str(config), "--data-dir", str(tmp_path / "data")],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert result.stderr.startswith(f"hive: TLS: key store {store} is a Java JKS key store")
    _says_how_to_convert(result.stderr, store)
    assert "Traceback" not in result.stdout + result.stderr
