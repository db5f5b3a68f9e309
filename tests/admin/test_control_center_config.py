"""<control-center>: what the config accepts and refuses, and how long a login lasts, against a
real `hive run` node over HTTP (the pages themselves are tested in a browser:
test_control_center.py)."""

from __future__ import annotations

import http.cookiejar
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from email.message import Message
from typing import Any

import pytest
from conftest import free_port

from hive_core.config import ConfigError, parse_config

PASSWORD = "the operator's password"
pytestmark = pytest.mark.timeout(60)


def password_hash() -> str:
    return subprocess.run([sys.executable, "-m", "hive_core.cli", "rest-api", "hash-password",
                           "--password-stdin"], input=PASSWORD + "\n", capture_output=True,
                          text=True, check=True, timeout=30).stdout.strip()


def section(port: int, hashed: str, extra: str = "") -> str:
    return ("<control-center><enabled>true</enabled>"
            f"<listeners><http><port>{port}</port></http></listeners>{extra}"
            f"<users><user><name>ops</name><password-hash>{hashed}</password-hash></user></users>"
            "</control-center><persistence><mode>in-memory</mode></persistence>")


class Browser:
    """Cookies kept, redirects not followed: what a login answers is seen as it is."""

    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"
        self.jar = http.cookiejar.CookieJar()

        class NoRedirect(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *args: Any, **kwargs: Any) -> None:
                return None

        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar),
                                                  NoRedirect)

    def call(self, path: str, data: bytes | None = None,
             headers: dict[str, str] | None = None) -> tuple[int, Message, bytes]:
        request = urllib.request.Request(self.base + path, data=data, headers=headers or {})
        try:
            with self.opener.open(request, timeout=10) as answer:
                return answer.status, answer.headers, answer.read()
        except urllib.error.HTTPError as error:
            return error.code, error.headers, error.read()

    def log_in(self, password: str = PASSWORD) -> tuple[int, Message]:
        form = urllib.parse.urlencode({"user": "ops", "password": password}).encode()
        status, headers, _body = self.call("/login", form)
        return status, headers


def test_off_by_default_and_refused_without_users_or_with_a_user_twice() -> None:
    assert parse_config("<hivemq></hivemq>").control_center.enabled is False
    with pytest.raises(ConfigError, match=r"control-center/enabled.*nobody could log in"):
        parse_config("<hivemq><control-center><enabled>true</enabled></control-center></hivemq>")
    hashed = password_hash()
    twice = (f"<user><name>ops</name><password-hash>{hashed}</password-hash></user>" * 2)
    with pytest.raises(ConfigError, match=r"users/user\[2\]/name.*configured twice"):
        parse_config(f"<hivemq><control-center><enabled>true</enabled><users>{twice}</users>"
                     "</control-center></hivemq>")
    with pytest.raises(ConfigError, match="password-hash"):
        parse_config("<hivemq><control-center><enabled>true</enabled><users><user><name>ops"
                     "</name><password-hash>secret</password-hash></user></users>"
                     "</control-center></hivemq>")
    with pytest.raises(ConfigError, match="session-timeout"):
        parse_config(f"<hivemq>{section(8080, hashed, '<session-timeout>1</session-timeout>')}"
                     "</hivemq>")
    default = parse_config(f"<hivemq>{section(8080, hashed)}</hivemq>").control_center
    assert default.session_timeout == 3600
    listener = default.effective_listeners()[0]
    assert (listener.bind_address, listener.port) == ("127.0.0.1", 8080)


def test_a_login_ends_after_the_session_timeout_without_use(hive_factory: Any) -> None:
    port = free_port()
    node = hive_factory(body=section(port, password_hash(),
                                     "<session-timeout>5</session-timeout>"))
    node.wait_for_log(f"Started control center on address 127.0.0.1 and on port {port}")
    browser = Browser(port)
    status, headers = browser.log_in("wrong")
    assert (status, headers.get("Location")) == (303, "/login?failed=1")
    status, headers = browser.log_in()
    assert (status, headers.get("Location")) == (303, "/")
    assert "HttpOnly" in headers["Set-Cookie"] and "SameSite=Strict" in headers["Set-Cookie"]
    for _ in range(3):  # used every 2 s: the login lives on past its 5 s
        assert browser.call("/cc/api/me")[0] == 200
        time.sleep(2)
    assert browser.call("/cc/api/me")[0] == 200
    # A change of state needs the pages' header (a form on another site cannot send it).
    assert browser.call("/cc/api/clients/x/disconnect", b"")[0] == 403
    time.sleep(6)  # unused for longer than the timeout
    assert browser.call("/cc/api/me")[0] == 401
    status, headers, _body = browser.call("/")
    assert (status, headers.get("Location")) == (303, "/login")
    assert "control center: user 'ops' logged in" in node.log
