"""REST API authentication against real `hive run` processes: 401s, counting, HTTPS, the CLI."""

from __future__ import annotations

import base64
import http.client
import json
import os
import re
import socket
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import HiveProcess, free_port
from e2e.certs import make_pki

from hive_core.admin import hash_password

pytestmark = pytest.mark.timeout(60)

PASSWORD = "correct horse battery"
TOKEN = "tok_" + "A1b2" * 10  # 44 characters
TOKEN_VARIABLE = "HIVE_TEST_REST_TOKEN"
HEALTH, METRICS, NODES = "/api/v1/health", "/api/v1/metrics", "/api/v1/cluster/nodes"
HASH = str(hash_password(PASSWORD))


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def bearer(token: str) -> str:
    return f"Bearer {token}"


OPS = basic("ops", PASSWORD)


def auth_xml(users: bool = True, tokens: bool = True) -> str:
    inner = ""
    if users:
        inner += (f"<users><user><name>ops</name><password-hash>{HASH}</password-hash></user>"
                  "</users>")
    if tokens:
        inner += f"<tokens><token>${{ENV:{TOKEN_VARIABLE}}}</token></tokens>"
    return f"<auth><enabled>true</enabled>{inner}</auth>"


def rest_body(port: int, auth: str, listener: str = "http", more: str = "") -> str:
    return (f"<rest-api><enabled>true</enabled>{auth}<listeners><{listener}><port>{port}</port>"
            f"<bind-address>127.0.0.1</bind-address>{more}</{listener}></listeners></rest-api>")


class Answer:
    def __init__(self, response: http.client.HTTPResponse) -> None:
        self.status = response.status
        self.challenges = response.headers.get_all("www-authenticate") or []
        self.body: Any = json.loads(response.read())


def call(port: int, path: str, authorization: str | None = None,
         context: ssl.SSLContext | None = None) -> Answer:
    connection: http.client.HTTPConnection
    if context is None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    else:
        connection = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=context)
    try:
        connection.request("GET", path, headers={"Authorization": authorization}
                           if authorization else {})
        return Answer(connection.getresponse())
    finally:
        connection.close()


@pytest.fixture
def secured(hive_factory: Any, monkeypatch: pytest.MonkeyPatch) -> HiveProcess:
    """A node whose REST API takes user ops (Basic) and a token from the environment."""
    monkeypatch.setenv(TOKEN_VARIABLE, TOKEN)
    rest = free_port()
    node: HiveProcess = hive_factory(body=rest_body(rest, auth_xml()), rest=rest)
    return node


def hive_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hive_core.cli", *args], capture_output=True,
                          text=True, timeout=30, stdin=subprocess.DEVNULL,
                          env={**os.environ, **(env or {})})


def test_without_credentials_only_health_answers_and_only_with_its_status(secured) -> None:
    port = secured.ports["rest"]
    for path in (METRICS, NODES, "/api/v1/nope"):  # no route is told apart without credentials
        answer = call(port, path)
        assert answer.status == 401, path
        assert answer.challenges == ['Basic realm="hive", charset="UTF-8"', 'Bearer realm="hive"']
        assert answer.body == {"title": "Unauthorized", "detail": f"{path} needs credentials"}
    assert call(port, HEALTH).body == {"status": "UP"}
    full = call(port, HEALTH, OPS)
    assert full.status == 200 and set(full.body) == {"status", "node_id", "version", "cluster"}
    assert call(port, HEALTH, basic("ops", "wrong")).status == 401
    assert "REST API authentication: HTTP Basic for 1 user(s) and Bearer for 1 token(s)" \
        in secured.log


def test_right_credentials_get_200_by_basic_and_by_bearer(secured) -> None:
    port = secured.ports["rest"]
    by_password = call(port, NODES, OPS)
    assert by_password.status == 200 and by_password.body["items"][0]["this_node"] is True
    assert call(port, NODES, OPS).status == 200  # remembered: no second derivation needed
    by_token = call(port, METRICS, bearer(TOKEN))
    assert by_token.status == 200
    assert by_token.body["rest_api"] == {"authentication_enabled": True,
                                         "authentication_failures": 0,
                                         "unauthenticated_requests": 0}
    assert call(port, METRICS, "bearer  " + TOKEN).status == 200  # scheme names ignore case


def test_wrong_credentials_get_401_are_counted_and_logged_at_most_every_10_s(secured) -> None:
    port = secured.ports["rest"]
    begun = time.monotonic()
    wrong = [basic("ops", "wrong"), basic("ops", PASSWORD + "x"), basic("nobody", PASSWORD),
             bearer(TOKEN + "x"), bearer(TOKEN[:-1]), "Basic !!notbase64!!",
             "Digest username=ops", basic("ops", "")]
    for authorization in wrong:
        answer = call(port, METRICS, authorization)
        assert answer.status == 401, authorization
        assert answer.body["detail"] == "the credentials are wrong"
        assert len(answer.challenges) == 2
    assert call(port, METRICS).status == 401
    assert call(port, NODES).status == 401
    elapsed = time.monotonic() - begun
    counted = call(port, METRICS, bearer(TOKEN)).body["rest_api"]
    assert counted == {"authentication_enabled": True, "authentication_failures": len(wrong),
                       "unauthenticated_requests": 2}
    time.sleep(0.3)  # the log is read from the process's output by a thread
    warnings = re.findall(r"WARNING - REST API: wrong credentials from 127\.0\.0\.1 \((.*)\)",
                          secured.log)
    assert 1 <= len(warnings) <= 1 + int(elapsed // 10)
    assert warnings[0] == "user 'ops'"
    assert len(re.findall(r"REST API: request for /api/v1/\S+ from 127\.0\.0\.1 without "
                          "credentials", secured.log)) == 1
    assert PASSWORD not in secured.log and TOKEN not in secured.log


def test_a_password_check_does_not_hold_up_other_requests(secured) -> None:
    """Wrong passwords cost a key derivation each, on one worker thread: a token request
    sent after a burst of them is answered before the burst is through."""
    port = secured.ports["rest"]
    answered: dict[str, float] = {}

    def ask(name: str, authorization: str) -> None:
        assert call(port, METRICS, authorization).status in (200, 401)
        answered[name] = time.monotonic()

    burst = [threading.Thread(target=ask, args=(f"wrong{i}", basic("ops", f"nope{i}")))
             for i in range(8)]
    for thread in burst:
        thread.start()
    time.sleep(0.05)
    ask("token", bearer(TOKEN))
    for thread in burst:
        thread.join(30)
    assert len(answered) == 9
    assert answered["token"] < max(answered[f"wrong{i}"] for i in range(8))


def test_pipelined_requests_behind_a_password_check_are_answered_in_order(secured) -> None:
    request = ("GET {path} HTTP/1.1\r\nhost: x\r\n{auth}\r\n")
    data = "".join([request.format(path=NODES, auth=f"authorization: {OPS}\r\n"),
                    request.format(path=METRICS, auth=""),
                    request.format(path=HEALTH, auth=f"authorization: {OPS}\r\n")])
    with socket.create_connection(("127.0.0.1", secured.ports["rest"]), timeout=10) as sock:
        sock.sendall(data.encode())
        sock.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    answer = b"".join(chunks)
    statuses = re.findall(rb"HTTP/1\.1 (\d{3}) ", answer)
    assert statuses == [b"200", b"401", b"200"]
    assert answer.index(b'"items"') < answer.index(b"Unauthorized") < answer.index(b'"node_id"')


def test_hive_cluster_status_sends_a_user_or_a_token(secured) -> None:
    url = f"http://127.0.0.1:{secured.ports['rest']}"
    refused = hive_cli("cluster", "status", "--rest", url)
    assert refused.returncode == 1
    assert "answered 401 Unauthorized (give --user, or set $HIVE_REST_TOKEN)" in refused.stderr
    by_user = hive_cli("cluster", "status", "--rest", url, "--user", "ops",
                       env={"HIVE_REST_PASSWORD": PASSWORD})
    assert by_user.returncode == 0, by_user.stderr
    assert by_user.stdout.startswith("Cluster size: 1,")
    by_token = hive_cli("cluster", "status", "--rest", url, env={"HIVE_REST_TOKEN": TOKEN})
    assert by_token.returncode == 0, by_token.stderr
    assert by_token.stdout.splitlines()[:2] == by_user.stdout.splitlines()[:2]


def test_an_https_listener_with_tokens_and_the_cli_trusting_its_ca(
        hive_factory, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    monkeypatch.setenv(TOKEN_VARIABLE, TOKEN)
    port = free_port()
    tls = (f"<tls><keystore><path>{pki.server_p12}</path><password>{pki.password}</password>"
           "</keystore><protocols><protocol>TLSv1.3</protocol></protocols></tls>")
    node = hive_factory(body=rest_body(port, auth_xml(users=False), "https", tls))
    assert re.search(rf"Started REST API over HTTPS on address 127\.0\.0\.1 and on port {port}",
                     node.log)
    trusting = ssl.create_default_context(cafile=str(pki.ca_pem))
    assert call(port, NODES, context=trusting).challenges == ['Bearer realm="hive"']
    assert call(port, NODES, bearer(TOKEN), context=trusting).status == 200
    too_old = ssl.create_default_context(cafile=str(pki.ca_pem))
    too_old.maximum_version = ssl.TLSVersion.TLSv1_2
    with pytest.raises(ssl.SSLError):
        call(port, HEALTH, context=too_old)
    with pytest.raises((http.client.RemoteDisconnected, ConnectionResetError)):
        call(port, HEALTH)  # plain HTTP to the TLS port
    url = f"https://127.0.0.1:{port}"
    done = hive_cli("cluster", "status", "--rest", url, "--cacert", str(pki.ca_pem),
                    env={"HIVE_REST_TOKEN": TOKEN})
    assert done.returncode == 0, done.stderr
    untrusted = hive_cli("cluster", "status", "--rest", url, env={"HIVE_REST_TOKEN": TOKEN})
    assert untrusted.returncode == 1 and "CERTIFICATE_VERIFY_FAILED" in untrusted.stderr


def test_https_with_client_certificates_required_needs_no_other_credentials(
        hive_factory, tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    port = free_port()
    tls = (f"<tls><keystore><path>{pki.server_pem}</path></keystore><truststore>"
           f"<path>{pki.ca_pem}</path></truststore>"
           "<client-authentication-mode>REQUIRED</client-authentication-mode></tls>")
    hive_factory(body=rest_body(port, "", "https", tls))
    with_certificate = ssl.create_default_context(cafile=str(pki.ca_pem))
    with_certificate.load_cert_chain(pki.client_cert_pem, pki.client_key_pem)
    assert call(port, NODES, context=with_certificate).status == 200
    stranger = ssl.create_default_context(cafile=str(pki.ca_pem))
    stranger.load_cert_chain(pki.stranger_cert_pem, pki.stranger_key_pem)
    for context in (ssl.create_default_context(cafile=str(pki.ca_pem)), stranger):
        with pytest.raises((ssl.SSLError, ConnectionResetError, http.client.RemoteDisconnected)):
            call(port, NODES, context=context)
