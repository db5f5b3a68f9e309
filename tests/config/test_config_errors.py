"""Bad config.xml files: each ConfigError names the file, the element, its line, and why."""

from __future__ import annotations

from pathlib import Path
from textwrap import dedent

import pytest

from hive_core.config import ConfigError, load_config, parse_config

# (id, config.xml, element path in the message, line, words the message must hold)
BAD_FILES: list[tuple[str, str, str, int, str]] = [
    (
        "unknown element",
        """\
        <hivemq>
            <listeners>
                <tcp-listner>
                    <port>1883</port>
                </tcp-listner>
            </listeners>
        </hivemq>
        """,
        "hivemq/listeners/tcp-listner",
        3,
        "unknown element <tcp-listner> in <listeners>; expected one of: tcp, tcp-listener",
    ),
    (
        "unknown element deep in cluster",
        """\
        <hivemq>
            <cluster>
                <failure-detection>
                    <heartbeat>
                        <intervall>5000</intervall>
                    </heartbeat>
                </failure-detection>
            </cluster>
        </hivemq>
        """,
        "hivemq/cluster/failure-detection/heartbeat/intervall",
        5,
        "unknown element <intervall> in <heartbeat>",
    ),
    (
        "port abc",
        """\
        <hivemq>
            <listeners>
                <tcp-listener>
                    <port>abc</port>
                </tcp-listener>
            </listeners>
        </hivemq>
        """,
        "hivemq/listeners/tcp-listener/port",
        4,
        "expected an integer between 0 and 65535, got 'abc'",
    ),
    (
        "port 70000 on the second listener",
        """\
        <hivemq>
            <listeners>
                <tcp-listener/>
                <websocket-listener>
                    <path>/mqtt</path>
                    <port>70000</port>
                </websocket-listener>
            </listeners>
        </hivemq>
        """,
        "hivemq/listeners/websocket-listener/port",
        6,
        "expected an integer between 0 and 65535, got '70000'",
    ),
    (
        "bad port in the second of two tcp-listeners",
        """\
        <hivemq>
            <listeners>
                <tcp-listener><port>1883</port></tcp-listener>
                <tcp-listener>
                    <port>-1</port>
                </tcp-listener>
            </listeners>
        </hivemq>
        """,
        "hivemq/listeners/tcp-listener[2]/port",
        5,
        "an integer between 0 and 65535",
    ),
    (
        "bad enum",
        """\
        <hivemq>
            <mqtt>
                <queued-messages>
                    <strategy>drop-newest</strategy>
                </queued-messages>
            </mqtt>
        </hivemq>
        """,
        "hivemq/mqtt/queued-messages/strategy",
        4,
        "expected one of: discard, discard-oldest, got 'drop-newest'",
    ),
    (
        "bad client authentication mode",
        """\
        <hivemq>
            <cluster>
                <transport>
                    <tcp>
                        <tls>
                            <client-authentication-mode>MAYBE</client-authentication-mode>
                        </tls>
                    </tcp>
                </transport>
            </cluster>
        </hivemq>
        """,
        "hivemq/cluster/transport/tcp/tls/client-authentication-mode",
        6,
        "one of: NONE, OPTIONAL, REQUIRED",
    ),
    (
        "bad boolean",
        """\
        <hivemq>
            <cluster>
                <enabled>yes</enabled>
            </cluster>
        </hivemq>
        """,
        "hivemq/cluster/enabled",
        3,
        "expected true or false, got 'yes'",
    ),
    (
        "bad TLS protocol in a list",
        """\
        <hivemq>
            <listeners>
                <tls-tcp-listener>
                    <tls>
                        <keystore><path>server.pem</path></keystore>
                        <protocols>
                            <protocol>TLSv1.3</protocol>
                            <protocol>SSLv3</protocol>
                        </protocols>
                    </tls>
                </tls-tcp-listener>
            </listeners>
        </hivemq>
        """,
        "hivemq/listeners/tls-tcp-listener/tls/protocols/protocol[2]",
        8,
        "one of: TLSv1, TLSv1.1, TLSv1.2, TLSv1.3, got 'SSLv3'",
    ),
    (
        "malformed XML",
        """\
        <hivemq>
            <listeners>
                <tcp-listener>
                    <port>1883</prot>
                </tcp-listener>
            </listeners>
        </hivemq>
        """,
        "",
        4,
        "malformed XML: Opening and ending tag mismatch: port",
    ),
    (
        "missing environment variable",
        """\
        <hivemq>
            <listeners>
                <tcp-listener>
                    <bind-address>0.0.0.0</bind-address>
                    <port>${ENV:HIVE_SURELY_UNSET_PORT}</port>
                </tcp-listener>
            </listeners>
        </hivemq>
        """,
        "hivemq/listeners/tcp-listener/port",
        5,
        "environment variable HIVE_SURELY_UNSET_PORT is not set",
    ),
    (
        "a default from the placeholder that is not a port",
        """\
        <hivemq>
            <listeners>
                <tcp-listener>
                    <port>${ENV:HIVE_SURELY_UNSET_PORT:-mqtt}</port>
                </tcp-listener>
            </listeners>
        </hivemq>
        """,
        "hivemq/listeners/tcp-listener/port",
        4,
        "port",
    ),
    (
        "a placeholder's default without its dash",
        """\
        <hivemq>
            <listeners>
                <tcp-listener>
                    <port>${ENV:HIVE_SURELY_UNSET_PORT:1883}</port>
                </tcp-listener>
            </listeners>
        </hivemq>
        """,
        "hivemq/listeners/tcp-listener/port",
        4,
        "${ENV:HIVE_SURELY_UNSET_PORT:1883} is not a placeholder: write ${ENV:NAME} or "
        "${ENV:NAME:-default}",
    ),
    (
        "missing environment variable in an attribute",
        """\
        <hivemq>
            <cluster>
                <discovery>
                    <static>
                        <node ip="10.0.0.1"/>
                        <node ip="${ENV:HIVE_SURELY_UNSET_HOST}"/>
                    </static>
                </discovery>
            </cluster>
        </hivemq>
        """,
        "hivemq/cluster/discovery/static/node[2]/@ip",
        6,
        "environment variable HIVE_SURELY_UNSET_HOST is not set",
    ),
    (
        "multicast discovery with TCP transport",
        """\
        <hivemq>
            <cluster>
                <enabled>true</enabled>
                <transport>
                    <tcp/>
                </transport>
                <discovery>
                    <multicast/>
                </discovery>
            </cluster>
        </hivemq>
        """,
        "hivemq/cluster/discovery/multicast",
        8,
        "multicast discovery does not work with TCP transport",
    ),
    (
        "static discovery with UDP transport",
        """\
        <hivemq>
            <cluster>
                <transport>
                    <udp/>
                </transport>
                <discovery>
                    <static>
                        <node><host>10.0.0.1</host></node>
                    </static>
                </discovery>
            </cluster>
        </hivemq>
        """,
        "hivemq/cluster/discovery/static",
        7,
        "UDP transport works only with multicast discovery",
    ),
    (
        "multicast discovery with multicast disabled",
        """\
        <hivemq>
            <cluster>
                <transport>
                    <udp>
                        <multicast-enabled>false</multicast-enabled>
                    </udp>
                </transport>
            </cluster>
        </hivemq>
        """,
        "hivemq/cluster/transport/udp/multicast-enabled",
        5,
        "multicast discovery needs <multicast-enabled>true</multicast-enabled>",
    ),
    (
        "two discovery mechanisms",
        """\
        <hivemq>
            <cluster>
                <discovery>
                    <static/>
                    <broadcast/>
                </discovery>
            </cluster>
        </hivemq>
        """,
        "hivemq/cluster/discovery/broadcast",
        5,
        "<discovery> takes one mechanism, got static and broadcast",
    ),
    (
        "bad port in the second static node",
        """\
        <hivemq>
            <cluster>
                <discovery>
                    <static>
                        <node>
                            <host>10.0.0.1</host>
                            <port>7800</port>
                        </node>
                        <node>
                            <host>10.0.0.2</host>
                            <port>seventy-eight-hundred</port>
                        </node>
                    </static>
                </discovery>
            </cluster>
        </hivemq>
        """,
        "hivemq/cluster/discovery/static/node[2]/port",
        11,
        "expected an integer between 0 and 65535",
    ),
    (
        "bad port attribute on the third static node",
        """\
        <hivemq>
            <cluster>
                <discovery>
                    <static>
                        <node ip="10.0.0.1"/>
                        <node><host>10.0.0.2</host></node>
                        <node ip="10.0.0.3"
                              port="x"/>
                    </static>
                </discovery>
            </cluster>
        </hivemq>
        """,
        "hivemq/cluster/discovery/static/node[3]/@port",
        8,  # libxml2 gives a start tag the line it ends on: here, the bad attribute's line
        "expected an integer between 0 and 65535, got 'x'",
    ),
    (
        "static node without host",
        """\
        <hivemq>
            <cluster>
                <discovery>
                    <static>
                        <node ip="10.0.0.1"/>
                        <node>
                            <port>7800</port>
                        </node>
                    </static>
                </discovery>
            </cluster>
        </hivemq>
        """,
        "hivemq/cluster/discovery/static/node[2]",
        6,
        "a <node> needs a <host> element or an ip attribute",
    ),
    (
        "unknown attribute",
        """\
        <hivemq>
            <cluster>
                <discovery>
                    <static>
                        <node addr="10.0.0.1"/>
                    </static>
                </discovery>
            </cluster>
        </hivemq>
        """,
        "hivemq/cluster/discovery/static/node/@addr",
        5,
        "unknown attribute 'addr' on <node>; expected one of: ip, port",
    ),
    (
        "duplicate section",
        """\
        <hivemq>
            <mqtt/>
            <restrictions/>
            <mqtt/>
        </hivemq>
        """,
        "hivemq/mqtt[2]",
        4,
        "duplicate element <mqtt>",
    ),
    (
        "same port twice",
        """\
        <hivemq>
            <listeners>
                <tcp-listener><port>1883</port></tcp-listener>
                <websocket-listener><port>1884</port></websocket-listener>
                <tcp-listener>
                    <port>1883</port>
                </tcp-listener>
            </listeners>
        </hivemq>
        """,
        "hivemq/listeners/tcp-listener[2]/port",
        6,
        "port 1883 on 0.0.0.0 is already used by listener 1",
    ),
    (
        "tls listener without tls",
        """\
        <hivemq>
            <listeners>
                <tls-tcp-listener>
                    <port>8883</port>
                </tls-tcp-listener>
            </listeners>
        </hivemq>
        """,
        "hivemq/listeners/tls-tcp-listener",
        3,
        "missing required element <tls>",
    ),
    (
        "cluster tls enabled without keystore",
        """\
        <hivemq>
            <cluster>
                <transport>
                    <tcp>
                        <tls>
                            <enabled>true</enabled>
                        </tls>
                    </tcp>
                </transport>
            </cluster>
        </hivemq>
        """,
        "hivemq/cluster/transport/tcp/tls/enabled",
        6,
        "cluster TLS is enabled but has no <server-keystore>",
    ),
    (
        "text where elements belong",
        """\
        <hivemq>
            <cluster>
                <enabled>true</enabled>
                true
            </cluster>
        </hivemq>
        """,
        "hivemq/cluster",
        4,
        "unexpected text 'true': <cluster> holds elements",
    ),
    (
        "element inside a value",
        """\
        <hivemq>
            <restrictions>
                <max-connections>
                    <value>10</value>
                </max-connections>
            </restrictions>
        </hivemq>
        """,
        "hivemq/restrictions/max-connections/value",
        4,
        "<max-connections> holds a value, not elements",
    ),
    (
        "max-connections zero",
        """\
        <hivemq>
            <restrictions>
                <max-connections>0</max-connections>
            </restrictions>
        </hivemq>
        """,
        "hivemq/restrictions/max-connections",
        3,
        "expected -1 (unlimited) or a positive integer, got '0'",
    ),
    (
        "max qos 3",
        """\
        <hivemq>
            <mqtt>
                <quality-of-service>
                    <max-qos>3</max-qos>
                </quality-of-service>
            </mqtt>
        </hivemq>
        """,
        "hivemq/mqtt/quality-of-service/max-qos",
        4,
        "expected an integer between 0 and 2, got '3'",
    ),
    (
        "heartbeat timeout not above interval",
        """\
        <hivemq>
            <cluster>
                <failure-detection>
                    <heartbeat>
                        <interval>5000</interval>
                        <timeout>5000</timeout>
                    </heartbeat>
                </failure-detection>
            </cluster>
        </hivemq>
        """,
        "hivemq/cluster/failure-detection/heartbeat",
        4,
        "heartbeat timeout (5000 ms) must be longer than its interval (5000 ms)",
    ),
    (
        "replica count zero",
        """\
        <hivemq>
            <cluster>
                <replication>
                    <replica-count>0</replica-count>
                </replication>
            </cluster>
        </hivemq>
        """,
        "hivemq/cluster/replication/replica-count",
        4,
        "expected a positive integer, got '0'",
    ),
    (
        "wrong root element",
        """\
        <config>
            <listeners/>
        </config>
        """,
        "config",
        1,
        "the root element is <config>, expected <hivemq>",
    ),
]


@pytest.mark.parametrize(
    ("xml", "path", "line", "words"),
    [case[1:] for case in BAD_FILES],
    ids=[case[0] for case in BAD_FILES],
)
def test_bad_file(tmp_path: Path, xml: str, path: str, line: int, words: str) -> None:
    config_file = tmp_path / "config.xml"
    config_file.write_text(dedent(xml))
    with pytest.raises(ConfigError) as caught:
        load_config(config_file)
    error = caught.value
    message = str(error)
    assert message.startswith(f"{config_file}, line {line}"), message
    assert error.line == line
    assert words in message
    if path:
        assert f"at {path}:" in message
        assert error.path == path
        element = path.rsplit("/", 1)[-1].split("[")[0].lstrip("@")
        assert element in message


def test_malformed_xml_names_the_element() -> None:
    with pytest.raises(ConfigError, match=r"<string>, line 2: malformed XML: .*port"):
        parse_config("<hivemq>\n<listeners><tcp-listener><port>1</prot>")


def test_the_earliest_of_several_problems_is_reported() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(
            "<hivemq>\n<mqtt><quality-of-service><max-qos>9</max-qos></quality-of-service></mqtt>"
            "\n<listeners><tcp-listener><port>x</port></tcp-listener></listeners>\n</hivemq>"
        )
    assert caught.value.line == 2
    assert caught.value.path == "hivemq/mqtt/quality-of-service/max-qos"


def test_unreadable_file_is_a_config_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.xml"
    with pytest.raises(ConfigError, match=r"nope\.xml: cannot read the file"):
        load_config(missing)


def test_a_doctype_is_refused() -> None:
    xml = (
        '<?xml version="1.0"?>\n<!DOCTYPE hivemq [<!ENTITY x SYSTEM "file:///etc/passwd">]>\n'
        "<hivemq><cluster><node-name>&x;</node-name></cluster></hivemq>"
    )
    with pytest.raises(ConfigError, match="line 2: a DOCTYPE is not allowed"):
        parse_config(xml)


@pytest.mark.parametrize("where", [
    "<listeners><tcp-listener><port>${ENV:HIVE_TEST_SECRET}</port></tcp-listener></listeners>",
    "<cluster><discovery><broadcast><broadcast-address>${ENV:HIVE_TEST_SECRET}"
    "</broadcast-address></broadcast></discovery></cluster>",
])
def test_a_value_from_the_environment_is_not_printed(
        where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A config error names the variable, not its value: it may be a password."""
    monkeypatch.setenv("HIVE_TEST_SECRET", "hunter2-db-password")
    with pytest.raises(ConfigError) as caught:
        parse_config(f"<hivemq>{where}</hivemq>")
    assert "hunter2" not in str(caught.value)
    assert "${ENV:HIVE_TEST_SECRET}" in str(caught.value)
