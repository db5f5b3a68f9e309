"""<rest-api>: loopback unless told otherwise, and no exposed listener without authentication.

Issue 8: the REST API listened on every interface without authentication. Now the default is
127.0.0.1, and a config that puts a listener on any other address without <auth> (or, for
<https>, client certificates) is refused at start, naming the element and its line.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_to_exit

from hive_core.admin import hash_password
from hive_core.config import ConfigError, HttpListener, HttpsListener, is_loopback, parse_config

pytestmark = pytest.mark.timeout(60)

TOKEN = "t" * 32
HASH = str(hash_password("s3cret"))


def rest_api(inner: str, enabled: str = "true") -> str:
    return f"<hivemq><rest-api><enabled>{enabled}</enabled>{inner}</rest-api></hivemq>"


def http_on(address: str) -> str:
    return f"<listeners><http><bind-address>{address}</bind-address></http></listeners>"


TOKEN_AUTH = f"<auth><enabled>true</enabled><tokens><token>{TOKEN}</token></tokens></auth>"
HTTPS_TLS = "<tls><keystore><path>server.pem</path></keystore>{more}</tls>"


def test_the_default_listener_is_loopback_http_on_8888() -> None:
    config = parse_config(rest_api(""))
    [listener] = config.rest_api.effective_listeners()
    assert type(listener) is HttpListener
    assert (listener.bind_address, listener.port) == ("127.0.0.1", 8888)
    assert parse_config(rest_api("<listeners><http><port>0</port></http></listeners>")
                        ).rest_api.listeners[0].bind_address == "127.0.0.1"
    assert config.rest_api.auth.enabled is False


@pytest.mark.parametrize(("address", "loopback"), [
    ("127.0.0.1", True), ("127.8.9.10", True), ("::1", True), ("[::1]", True),
    ("localhost", True), ("0.0.0.0", False), ("::", False), ("10.1.2.3", False),
    ("192.168.0.9", False), ("broker.example.com", False),
])
def test_which_addresses_count_as_loopback(address: str, loopback: bool) -> None:
    assert is_loopback(address) is loopback
    xml = rest_api(http_on(address))
    if loopback:
        parse_config(xml)
    else:
        with pytest.raises(ConfigError, match="not a loopback address, without authentication"):
            parse_config(xml)


def test_an_exposed_listener_is_refused_naming_its_element_and_line() -> None:
    xml = ("<hivemq>\n<rest-api>\n<enabled>true</enabled>\n<listeners>\n"
           "<http><port>1</port></http>\n"
           "<https><port>2</port>" + HTTPS_TLS.format(more="") + "</https>\n"
           "<http><port>3</port>\n<bind-address>0.0.0.0</bind-address></http>\n"
           "</listeners>\n</rest-api>\n</hivemq>\n")
    with pytest.raises(ConfigError) as refused:
        parse_config(xml, source="conf/config.xml")
    assert refused.value.line == 8
    assert refused.value.path == "hivemq/rest-api/listeners/http[2]/bind-address"
    assert str(refused.value).startswith(
        "conf/config.xml, line 8, at hivemq/rest-api/listeners/http[2]/bind-address: the REST "
        "API would listen on 0.0.0.0, which is not a loopback address, without authentication")
    https = xml.replace("<https><port>2</port>",
                        "<https><port>2</port><bind-address>10.0.0.7</bind-address>")
    with pytest.raises(ConfigError) as refused:
        parse_config(https.replace("0.0.0.0", "127.0.0.1"))
    assert refused.value.path == "hivemq/rest-api/listeners/https/bind-address"
    assert refused.value.line == 6


def test_hive_run_refuses_an_exposed_rest_api_before_it_starts(tmp_path: Path) -> None:
    config = tmp_path / "config.xml"
    config.write_text("<hivemq>\n  <rest-api>\n    <enabled>true</enabled>\n    <listeners>\n"
                      "      <http>\n        <bind-address>0.0.0.0</bind-address>\n"
                      "      </http>\n    </listeners>\n  </rest-api>\n</hivemq>\n")
    done = run_to_exit(config)
    assert done.returncode == 2
    assert (f"hive: {config}, line 6, at hivemq/rest-api/listeners/http/bind-address: the REST "
            "API would listen on 0.0.0.0") in done.stderr
    assert "Started Hive" not in done.stdout


def test_exposed_is_accepted_with_authentication_or_required_client_certificates() -> None:
    parse_config(rest_api(http_on("0.0.0.0") + TOKEN_AUTH))
    users = (f"<auth><enabled>true</enabled><users><user><name>ops</name><password-hash>{HASH}"
             "</password-hash></user></users></auth>")
    parse_config(rest_api(http_on("::") + users))
    mutual = HTTPS_TLS.format(more="<truststore><path>ca.pem</path></truststore>"
                                   "<client-authentication-mode>REQUIRED"
                                   "</client-authentication-mode>")
    config = parse_config(rest_api("<listeners><https><bind-address>0.0.0.0</bind-address>"
                                   f"{mutual}</https></listeners>"))
    [listener] = config.rest_api.listeners
    assert isinstance(listener, HttpsListener) and listener.port == 8889
    optional = mutual.replace("REQUIRED", "OPTIONAL")
    with pytest.raises(ConfigError, match="listeners/https/bind-address"):
        parse_config(rest_api(f"<listeners><https><bind-address>0.0.0.0</bind-address>{optional}"
                              "</https></listeners>"))


def test_a_disabled_rest_api_is_not_checked() -> None:
    parse_config(rest_api(http_on("0.0.0.0"), enabled="false"))


@pytest.mark.parametrize(("auth", "path", "problem"), [
    ("<auth><enabled>true</enabled></auth>", "auth/enabled",
     "authentication is enabled but no <users> or <tokens> are configured"),
    (f"<auth><tokens><token>{TOKEN}</token></tokens></auth>", "auth/tokens",
     "<tokens> are configured but <auth><enabled> is not true"),
    (f"<auth><enabled>false</enabled><users><user><name>a</name><password-hash>{HASH}"
     "</password-hash></user></users></auth>", "auth/users",
     "<users> are configured but <auth><enabled> is not true"),
    ("<auth><enabled>true</enabled><tokens><token>short</token></tokens></auth>",
     "auth/tokens/token", "a token has at least 32 characters (this one has 5)"),
    (f"<auth><enabled>true</enabled><tokens><token>{TOKEN}</token><token>{'x' * 40}!</token>"
     "</tokens></auth>", "auth/tokens/token[2]", "a token has only letters, digits"),
    (f"<auth><enabled>true</enabled><users><user><name>a:b</name><password-hash>{HASH}"
     "</password-hash></user></users></auth>", "auth/users/user/name", "has no colon"),
    (f"<auth><enabled>true</enabled><users><user><name>a</name><password-hash>{HASH}"
     f"</password-hash></user><user><name>a</name><password-hash>{HASH}</password-hash>"
     "</user></users></auth>", "auth/users/user[2]/name", "user 'a' is configured twice"),
    ("<auth><enabled>true</enabled><users><user><name>a</name><password-hash>s3cret"
     "</password-hash></user></users></auth>", "auth/users/user/password-hash",
     "not a password hash"),
])
def test_a_wrong_auth_section_is_refused_naming_the_element(auth: str, path: str,
                                                            problem: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config(rest_api(auth))
    assert refused.value.path == f"hivemq/rest-api/{path}"
    assert problem in refused.value.problem
    assert "s3cret" not in str(refused.value) and TOKEN not in str(refused.value)
