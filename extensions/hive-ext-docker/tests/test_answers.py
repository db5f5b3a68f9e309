"""What needs no server: node addresses from Engine API data and from DNS responses, how failures
are classified, and how the discovery runner counts and logs them."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import dns.exception
import dns.message
import dns.resolver
import pytest
import requests.exceptions
from hive_ext_api import ClusterNodeAddress

from hive_ext_docker import (
    DockerDiscovery,
    EngineSettings,
    Found,
    Label,
    SourceError,
    nodes_from_containers,
    nodes_from_response,
)
from hive_ext_docker._dns import classify as classify_dns
from hive_ext_docker._engine import classify as classify_engine

NETWORK_ID = "614362d12bb6eb8c4bb41bf8bd98bfbdfbeee1514ea3ff81942e80b467c4e265"

# The shape of `GET /containers/json` (dockerd 20.10, API 1.41), trimmed.
LISTED = json.loads("""[
  {"Id": "b33b71e5757d0a", "Names": ["/hive-1"], "State": "running", "Status": "Up 3 seconds",
   "Labels": {"hive.cluster": "prod", "hive.port": "7801"},
   "NetworkSettings": {"Networks": {"hive-net": {"NetworkID": "NETWORK_ID",
                                                 "IPAddress": "10.213.7.3",
                                                 "Gateway": "10.213.7.1", "IPPrefixLen": 24}}}},
  {"Id": "c44c82f6868e1b", "Names": ["/hive-2"], "State": "running",
   "Labels": {"hive.cluster": "prod"},
   "NetworkSettings": {"Networks": {"other": {"NetworkID": "ffff", "IPAddress": "10.9.0.2"},
                                    "hive-net": {"NetworkID": "NETWORK_ID",
                                                 "IPAddress": "10.213.7.2"}}}},
  {"Id": "d55d93a7979f2c", "Names": ["/elsewhere"], "State": "running",
   "Labels": {"hive.cluster": "prod"},
   "NetworkSettings": {"Networks": {"other": {"NetworkID": "ffff", "IPAddress": "10.9.0.3"}}}},
  {"Id": "e66ea4b8a8a03d", "Names": ["/staging"], "State": "running",
   "Labels": {"hive.cluster": "staging"},
   "NetworkSettings": {"Networks": {"hive-net": {"NetworkID": "NETWORK_ID",
                                                 "IPAddress": "10.213.7.4"}}}}
]""".replace("NETWORK_ID", NETWORK_ID))

# The shape of `GET /containers/{id}/json` (docker inspect), trimmed.
INSPECTED = {
    "Id": "b33b71e5757d0a", "Name": "/hive-1",
    "State": {"Status": "running", "Running": True, "Pid": 4242},
    "Config": {"Labels": {"hive.cluster": "prod", "hive.port": "7801"}},
    "NetworkSettings": {"Networks": {"hive-net": {"NetworkID": NETWORK_ID,
                                                  "IPAddress": "10.213.7.3"}}},
}


def _engine(**more: Any) -> EngineSettings:
    return EngineSettings(labels=(Label("hive.cluster", "prod"),), network="hive-net", **more)


def test_listed_containers_with_the_label_on_the_network() -> None:
    found = nodes_from_containers(LISTED, _engine(cluster_port_label="hive.port"), 7800)
    assert found.addresses == [ClusterNodeAddress("10.213.7.2", 7800),
                               ClusterNodeAddress("10.213.7.3", 7801)]
    assert found.skipped == []


def test_the_port_comes_from_the_label_then_cluster_port_then_the_own_port() -> None:
    hosts_ports = {(a.host, a.port) for a in nodes_from_containers(
        LISTED, _engine(cluster_port=9000, cluster_port_label="hive.port"), 7800).addresses}
    assert hosts_ports == {("10.213.7.2", 9000), ("10.213.7.3", 7801)}
    assert {a.port for a in nodes_from_containers(LISTED, _engine(), 7800).addresses} == {7800}
    none = nodes_from_containers(LISTED, _engine(cluster_port_label="hive.port"), None)
    assert none.addresses == [ClusterNodeAddress("10.213.7.3", 7801)]
    assert none.skipped == ["container hive-2: no hive.port label and no cluster-port"]


def test_inspect_data_is_read_too() -> None:
    stopped = {**INSPECTED, "Id": "x", "State": {"Running": False}}
    found = nodes_from_containers([INSPECTED, stopped], _engine(cluster_port_label="hive.port"),
                                  None)
    assert found.addresses == [ClusterNodeAddress("10.213.7.3", 7801)]


def test_the_network_may_be_named_by_its_id() -> None:
    settings = EngineSettings(labels=(Label("hive.cluster"),), network=NETWORK_ID[:12])
    hosts = [a.host for a in nodes_from_containers(LISTED, settings, 7800).addresses]
    assert hosts == ["10.213.7.2", "10.213.7.3", "10.213.7.4"]


def test_every_label_must_match() -> None:
    settings = EngineSettings(labels=(Label("hive.cluster"), Label("hive.port", "7801")),
                              network="hive-net")
    assert [a.host for a in nodes_from_containers(LISTED, settings, 1).addresses] == [
        "10.213.7.3"]


@pytest.mark.parametrize("data", [{"message": "page not found"}, "text", None, [1, 2],
                                  [{"Id": "a"}, "b"]])
def test_an_answer_that_is_no_container_list_is_malformed(data: Any) -> None:
    with pytest.raises(SourceError) as raised:
        nodes_from_containers(data, _engine(), 7800)
    assert raised.value.kind == "malformed"


@pytest.mark.parametrize(("entry", "why"), [
    ({"NetworkSettings": {"Networks": {"hive-net": {"IPAddress": ""}}}}, "no IPv4 address"),
    ({"NetworkSettings": {"Networks": {"hive-net": {"IPAddress": "fd00::2"}}}},
     "no IPv4 address"),
    ({"NetworkSettings": {"Networks": ["hive-net"]}}, "unreadable data"),
    ({"Labels": ["hive.cluster=prod"]}, "unreadable data"),
    ({"Labels": {"hive.cluster": "prod", "hive.port": "99999"}}, "hive.port='99999' is not"),
])
def test_an_entry_that_makes_no_sense_is_skipped_with_the_reason(entry: dict[str, Any],
                                                                 why: str) -> None:
    container = {**LISTED[0], **entry}
    found = nodes_from_containers([container, LISTED[1]], _engine(cluster_port_label="hive.port"),
                                  7800)
    assert found.addresses == [ClusterNodeAddress("10.213.7.2", 7800)]
    assert len(found.skipped) == 1 and "container hive-1" in found.skipped[0]
    assert why in found.skipped[0]


@pytest.mark.parametrize(("exc", "kind"), [
    (requests.exceptions.ConnectionError("refused"), "unreachable"),
    (requests.exceptions.ReadTimeout("read timed out"), "timeout"),
    (requests.exceptions.ConnectTimeout("connect timed out"), "timeout"),
    (requests.exceptions.JSONDecodeError("Expecting value", "x", 0), "malformed"),
    (requests.exceptions.ChunkedEncodingError("broken"), "malformed"),
    (RuntimeError("something else"), "malformed"),
])
def test_engine_failures_are_classified(exc: Exception, kind: str) -> None:
    assert classify_engine(exc).kind == kind


# ------------------------------------------------------------------ DNS answers


def _response(answers: str, name: str = "tasks.hive.") -> dns.message.Message:
    return dns.message.from_text(f"""id 1
opcode QUERY
rcode NOERROR
flags QR RD RA
;QUESTION
{name} IN A
;ANSWER
{answers}
""")


def test_a_records_are_the_nodes_sorted_and_once_each() -> None:
    found = nodes_from_response(_response(
        "tasks.hive. 600 IN A 10.0.0.6\ntasks.hive. 600 IN A 10.0.0.10\n"
        "tasks.hive. 600 IN A 10.0.0.5"), 7800)
    assert found.addresses == [ClusterNodeAddress(f"10.0.0.{i}", 7800) for i in (5, 6, 10)]


def test_cnames_are_followed() -> None:
    found = nodes_from_response(_response(
        "tasks.hive. 60 IN CNAME hive.internal.\nhive.internal. 60 IN A 10.0.0.7"), 7800)
    assert found.addresses == [ClusterNodeAddress("10.0.0.7", 7800)]


def test_no_a_record_is_no_node() -> None:
    assert nodes_from_response(_response(""), 7800).addresses == []
    assert nodes_from_response(
        _response("other.name. 60 IN A 10.0.0.7"), 7800).addresses == []  # not the question


def test_records_without_a_port_are_skipped() -> None:
    found = nodes_from_response(_response("tasks.hive. 60 IN A 10.0.0.7"), None)
    assert found.addresses == [] and "no cluster-port" in found.skipped[0]


def test_a_message_that_is_not_a_query_response_is_malformed() -> None:
    update = dns.message.from_text("id 1\nopcode UPDATE\nrcode NOERROR\n")
    with pytest.raises(SourceError) as raised:
        nodes_from_response(update, 7800)
    assert raised.value.kind == "malformed"


QUERY = dns.message.make_query("tasks.hive", "A")


@pytest.mark.parametrize(("exc", "kind"), [
    (dns.resolver.NXDOMAIN(), "refused"),
    (dns.resolver.LifetimeTimeout(timeout=1.0, errors=[]), "timeout"),
    (dns.resolver.NoNameservers(request=QUERY, errors=[
        ("Do53:127.0.0.1@53", False, 53, ConnectionRefusedError(111, "refused"), None)]),
     "unreachable"),
    (dns.resolver.NoNameservers(request=QUERY, errors=[
        ("Do53:127.0.0.1@53", False, 53, "SERVFAIL", None)]), "refused"),
    (dns.resolver.NoNameservers(request=QUERY, errors=[
        ("Do53:127.0.0.1@53", True, 53, dns.message.ShortHeader(), None)]), "malformed"),
    (OSError("network is unreachable"), "unreachable"),
    (dns.exception.DNSException("odd"), "malformed"),
])
def test_dns_failures_are_classified(exc: Exception, kind: str) -> None:
    assert classify_dns(exc, "tasks.hive").kind == kind


# ------------------------------------------------------------------ the runner


class ScriptedSource:
    """A source answering from a list: Found objects, or SourceErrors to raise."""

    def __init__(self, *answers: Found | SourceError) -> None:
        self.answers = list(answers)
        self.ports: list[int | None] = []

    def describe(self) -> str:
        return "the script"

    async def find(self, default_port: int | None) -> Found:
        self.ports.append(default_port)
        answer = self.answers.pop(0)
        if isinstance(answer, SourceError):
            raise answer
        return answer

    def close(self) -> None:
        pass


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


A = ClusterNodeAddress("10.0.0.1", 7800)
B = ClusterNodeAddress("10.0.0.2", 7800)


def test_failures_answer_no_news_are_counted_and_logged_once_a_minute(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    source = ScriptedSource(Found([A, B]), *[SourceError("unreachable", "no socket")] * 4,
                            SourceError("timeout", "slow"), Found([A]))
    discovery = DockerDiscovery(source, logging.getLogger("t"), clock=clock)
    discovery.own_address = A

    async def reloads() -> list[Any]:
        answers = []
        for step in range(7):
            clock.now += 1 if step != 4 else 61  # the 5th reload comes a minute later
            answers.append(await discovery.reload())
        return answers

    with caplog.at_level(logging.INFO):
        answers = asyncio.run(reloads())
    assert answers == [[A, B], None, None, None, None, None, [A]]
    assert source.ports == [7800] * 7  # the node's own port is the default
    assert discovery.counts == {"query.success": 2, "query.failed": 5, "errors.unreachable": 4,
                                "errors.timeout": 1}
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == ("docker-discovery: cannot query the script: unreachable: no socket; "
                        "retrying (while this lasts, one summary every 60 s)")
    assert lines[1] == ("docker-discovery: still failing for 63 s (4 failed calls, 3 since the "
                        "last report); last: cannot query the script: unreachable: no socket")
    assert lines[2] == "docker-discovery: answering again after 65.0 s and 5 failed calls"
    assert len(lines) == 3
    assert discovery.resolved == 1


def test_skipped_entries_are_counted_each_time_logged_once_and_a_missing_self_said_once(
        caplog: pytest.LogCaptureFixture) -> None:
    bad, worse = "container x: no IPv4 address", "container y: no hive.port label"
    source = ScriptedSource(Found([B], [bad]), Found([B], [bad]), Found([B], [bad, worse]),
                            Found([B]), Found([B], [bad]))
    discovery = DockerDiscovery(source, logging.getLogger("t"))
    discovery.own_address = A
    with caplog.at_level(logging.INFO):
        for _ in range(5):
            assert asyncio.run(discovery.reload()) == [B]
    assert discovery.counts["errors.malformed"] == 5
    skipped = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert skipped == [f"docker-discovery: skipped {bad}", f"docker-discovery: skipped {worse}",
                       f"docker-discovery: skipped {bad}"]  # again after it had gone away
    missing = [r for r in caplog.records if "is not among" in r.getMessage()]
    assert len(missing) == 1
    assert "this node (10.0.0.1:7800) is not among the 1 nodes the script lists" in (
        missing[0].getMessage())
