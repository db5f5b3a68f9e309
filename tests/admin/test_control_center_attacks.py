"""The control center under attack (issue 20): what it reads before a login, where a download
path may lead, which cookie an HTTP listener sets, what a malformed upload answers. Against a
real `hive run` node over HTTP; the pages' own defects are tested in the browser
(test_control_center.py)."""

from __future__ import annotations

import contextlib
import http.client
import socket
import ssl
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from conftest import free_port
from e2e.certs import make_pki

from admin.test_control_center_config import Browser, password_hash
from hive_ext_api import StoredMessage, StoredSession
from hive_ext_api.backup import BackupWriter, ClientState, RetainedState, encode_client

pytestmark = pytest.mark.timeout(60)
UPLOAD = "/cc/api/backups/upload"
ACTION = {"X-Hive-Control-Center": "1", "Content-Type": "application/octet-stream"}


def section(port: int, https: str = "") -> str:
    return ("<control-center><enabled>true</enabled>"
            f"<listeners><http><port>{port}</port></http>{https}</listeners>"
            f"<users><user><name>ops</name><password-hash>{password_hash()}</password-hash>"
            "</user></users></control-center>")


@pytest.fixture
def center(hive_factory: Any) -> tuple[Any, int]:
    port = free_port()
    node = hive_factory(body=section(port))
    node.wait_for_log(f"Started control center on address 127.0.0.1 and on port {port}")
    return node, port


def _head_only(port: int, headers: str, size: int) -> bytes:
    """POST an upload's head announcing ``size`` bytes, send none of them, read the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(f"POST {UPLOAD} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{headers}"
                     f"Content-Type: application/octet-stream\r\n"
                     f"Content-Length: {size}\r\n\r\n".encode())
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = sock.recv(4096)  # a timeout here: the node waits for the body
            if not chunk:
                break
            answer += chunk
        return answer


def test_an_upload_is_refused_on_its_head_and_streamed_once_accepted(center) -> None:
    """Issue 20 (2): the body (up to 256 MiB) was read into memory before the login check."""
    node, port = center
    assert _head_only(port, "", 200 * 2**20).startswith(b"HTTP/1.1 401 ")
    browser = Browser(port)
    assert browser.log_in()[0] == 303
    cookie = next(iter(browser.jar))
    logged_in = f"Cookie: {cookie.name}={cookie.value}\r\n"
    assert _head_only(port, logged_in, 200 * 2**20).startswith(b"HTTP/1.1 403 ")
    # Accepted: the body goes to a file beside the backups, and is gone when cut off.
    folder = node.data_dir.parent / "backup"
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(f"POST {UPLOAD} HTTP/1.1\r\nHost: 127.0.0.1\r\n{logged_in}"
                     f"X-Hive-Control-Center: 1\r\nContent-Length: {10 * 2**20}\r\n\r\n".encode()
                     + b"x" * 2**20)
        deadline = time.monotonic() + 5
        while not list(folder.glob(".upload-*")):
            assert time.monotonic() < deadline, "no upload file"
            time.sleep(0.05)
    deadline = time.monotonic() + 5
    while list(folder.glob(".upload-*")):
        assert time.monotonic() < deadline, "the cut upload's file stayed"
        time.sleep(0.05)
    path = folder.parent / "whole.backup"
    with BackupWriter(path, source="t") as out:
        out.add_retained(RetainedState(StoredMessage("a/b", b"x", 1, True), 1))
    status, _headers, body = browser.call(UPLOAD, path.read_bytes(), ACTION)
    assert status == 201, body
    assert not list(folder.glob(".upload-*"))


def test_a_download_path_stays_in_the_backup_folder(center) -> None:
    """Issue 20 (5): ``/cc/api/backups/../file`` sent a *.backup from the folder's parent."""
    node, port = center
    (node.data_dir.parent / "backup").mkdir(exist_ok=True)
    outside = node.data_dir.parent / "secret.backup"
    outside.write_bytes(b"HIVEBKP1 not yours")
    browser = Browser(port)
    browser.log_in()
    cookie = next(iter(browser.jar))
    for path in ("/cc/api/backups/../file", "/cc/api/backups/%2e%2e/file",
                 "/cc/api/backups/./file"):
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        connection.request("GET", path, headers={"Cookie": f"{cookie.name}={cookie.value}"})
        answer = connection.getresponse()
        body = answer.read()
        connection.close()
        assert answer.status == 404, (path, answer.status, body)
        assert b"not yours" not in body


def test_malformed_upload_records_get_400_with_the_record_and_no_server_path(center) -> None:
    """Issue 20 (8): 200,000-deep JSON and a list as a topic filter gave 500 and a traceback;
    upload errors showed the server's absolute paths."""
    node, port = center
    browser = Browser(port)
    browser.log_in()
    path = node.data_dir.parent / "bad.backup"
    deep = b"[" * 200_000 + b"]" * 200_000
    listed = encode_client(ClientState(StoredSession("c", 5, 60, None), 1)).replace(
        b'"subscriptions":[]', b'"subscriptions":[[["a"],1,0,0,0,null]]')
    for kind, body, why in ((2, deep, b"JSON nested too deep"), (1, listed, b"TypeError")):
        with BackupWriter(path, source="t") as out:
            out.add_raw(kind, body)
        status, _headers, answer = browser.call(UPLOAD, path.read_bytes(), ACTION)
        assert status == 400, answer
        assert b"record 1" in answer and why in answer, answer
        assert str(node.data_dir.parent).encode() not in answer
        assert b"Traceback" not in answer
    status, _headers, answer = browser.call(UPLOAD, b"not a backup at all", ACTION)
    assert status == 400 and str(node.data_dir.parent).encode() not in answer, answer
    assert "Traceback" not in node.log


def test_the_http_listeners_cookie_is_not_secure_beside_an_https_one(
        hive_factory: Any, tmp_path: Path) -> None:
    """Issue 20 (7): with an <https> listener too, the HTTP login's cookie carried Secure, so a
    browser on another host dropped it and the login failed silently."""
    pki = make_pki(tmp_path / "pki")
    port, tls_port = free_port(), free_port()
    https = (f"<https><port>{tls_port}</port><tls><keystore><path>{pki.server_p12}</path>"
             f"<password>{pki.password}</password></keystore></tls></https>")
    node = hive_factory(body=section(port, https))
    node.wait_for_log(f"Started control center over HTTPS on address 127.0.0.1 and on port "
                      f"{tls_port}")
    status, headers = Browser(port).log_in()
    assert status == 303 and "Secure" not in headers["Set-Cookie"], headers["Set-Cookie"]
    connection = http.client.HTTPSConnection(
        "127.0.0.1", tls_port, timeout=10,
        context=ssl.create_default_context(cafile=str(pki.ca_pem)))
    connection.request("POST", "/login", "user=ops&password=the+operator%27s+password",
                       {"Content-Type": "application/x-www-form-urlencoded"})
    answer = connection.getresponse()
    answer.read()
    connection.close()
    assert answer.status == 303 and "; Secure" in answer.headers["Set-Cookie"]


def test_password_guessing_is_slowed_per_user_and_address_and_logged_sparingly(center) -> None:
    """Risk (issue 20): 8 parallel guessers got 8.1 guesses/s, and 197 WARNING lines in 20 s."""
    node, port = center
    outcomes: list[str] = []
    until = time.monotonic() + 4

    def guess(_: int) -> None:
        while time.monotonic() < until:
            status, headers = Browser(port).log_in("wrong")
            assert status == 303
            outcomes.append(headers["Location"])

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(guess, range(8)))
    checked = outcomes.count("/login?failed=1")
    assert set(outcomes) == {"/login?failed=1", "/login?wait=1"}
    assert checked <= 8, (checked, len(outcomes))  # 5 free, then after 1 s, 2 s, 4 s...
    # Now the address waits, even with the right password; the page says so.
    status, headers = Browser(port).log_in()
    assert (status, headers["Location"]) == (303, "/login?wait=1")
    assert "Too many failed logins" in Browser(port).call("/login?wait=1")[2].decode()
    warnings = [line for line in node.log.splitlines()
                if "WARNING" in line and "control center" in line]
    assert 1 <= len(warnings) <= 3, warnings


def test_a_trickled_request_head_is_cut_off_and_one_address_holds_few_connections(
        center) -> None:
    """Risk (issue 20): one header byte every 10 s kept a connection open forever (200 of
    200 after 50 s)."""
    node, port = center
    trickling = [socket.create_connection(("127.0.0.1", port), timeout=2) for _ in range(3)]
    head = b"GET /login HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 30
    started = time.monotonic()
    closed_after: list[float] = []
    try:
        for byte in head:
            for sock in list(trickling):
                try:
                    sock.sendall(bytes([byte]))
                    sock.settimeout(0.01)
                    answer = sock.recv(4096)
                except TimeoutError:
                    continue
                except OSError:
                    answer = b""
                assert answer == b"" or answer.startswith(b"HTTP/1.1 408 "), answer
                closed_after.append(time.monotonic() - started)
                trickling.remove(sock)
                sock.close()
            if not trickling:
                break
            time.sleep(0.5)
    finally:
        for sock in trickling:
            sock.close()
    assert len(closed_after) == 3 and max(closed_after) < 13, closed_after
    # 40 connections from one address: 32 are served, the others closed at once.
    held = [socket.create_connection(("127.0.0.1", port), timeout=2) for _ in range(40)]
    try:
        served = 0
        for sock in held:
            with contextlib.suppress(OSError):  # closed at once: not served
                sock.sendall(b"GET /login HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                served += sock.recv(12).startswith(b"HTTP/1.1 200")
        assert served == 32, served
    finally:
        for sock in held:
            sock.close()
    time.sleep(0.3)
    assert Browser(port).call("/login")[0] == 200  # once they are gone, the address is served
    assert node.log.count("holds 32 connections already") == 1
