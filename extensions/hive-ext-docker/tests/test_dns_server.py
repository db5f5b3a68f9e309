"""The DNS mode against a real dnsmasq: A records are the nodes, changes show at the next query,
and a resolver that is gone, refuses or answers garbage is classified (alone and in a node)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import dns.flags
import dns.message
import dns.rcode
import pytest
from hive_ext_api import ClusterNodeAddress
from hive_ext_api.testing import cluster_xml

import hive_ext_docker
from _testbed import Dnsmasq, counter, free_port, wait_for
from hive_ext_docker import DnsSettings, DnsSource, SourceError

NAME = "tasks.hive"


def _source(port: int, name: str = NAME, **more: Any) -> DnsSource:
    return DnsSource(DnsSettings(name=name, resolver_address="127.0.0.1", resolver_port=port,
                                 **more))


def _find(source: DnsSource, default_port: int | None = 7800) -> Any:
    return asyncio.run(source.find(default_port))


def test_the_a_records_of_the_name_are_the_nodes(dnsmasq: Dnsmasq) -> None:
    dnsmasq.set_records(NAME, ["127.31.0.12", "127.31.0.10", "127.31.0.11"])
    found = _find(_source(dnsmasq.port))
    assert found.addresses == [ClusterNodeAddress(f"127.31.0.{i}", 7800) for i in (10, 11, 12)]
    assert found.skipped == []
    assert _find(_source(dnsmasq.port, cluster_port=7900)).addresses[0].port == 7900


def test_a_record_that_goes_away_is_gone_at_the_next_query(dnsmasq: Dnsmasq) -> None:
    source = _source(dnsmasq.port)
    dnsmasq.set_records(NAME, ["127.31.0.10", "127.31.0.11"])
    assert len(_find(source).addresses) == 2
    dnsmasq.set_records(NAME, ["127.31.0.11"])
    wait_for(lambda: len(_find(source).addresses) == 1, 5, "the removed record disappears")
    dnsmasq.set_records(NAME, [])
    wait_for(lambda: _refused(source), 5, "no record left: dnsmasq (no upstream) refuses")


def _refused(source: DnsSource) -> bool:
    try:
        _find(source)
    except SourceError as exc:
        return exc.kind == "refused"
    return False


def test_an_unknown_name_is_refused(dnsmasq: Dnsmasq) -> None:
    with pytest.raises(SourceError) as raised:
        _find(_source(dnsmasq.port, name="tasks.nothing-here"))
    assert raised.value.kind == "refused"  # dnsmasq without upstream: REFUSED


def test_a_stopped_resolver_is_a_timeout_and_answers_again_after(dnsmasq: Dnsmasq) -> None:
    dnsmasq.set_records(NAME, ["127.31.0.10"])
    source = _source(dnsmasq.port, resolution_timeout=1.0)
    assert len(_find(source).addresses) == 1
    dnsmasq.stop()
    begun = time.monotonic()
    with pytest.raises(SourceError) as raised:
        _find(source)
    assert raised.value.kind == "timeout"
    assert time.monotonic() - begun < 2.0  # bounded by resolution-timeout
    dnsmasq.start()  # the same port
    assert len(_find(source).addresses) == 1


def _udp_and_tcp_on_one_port() -> tuple[socket.socket, socket.socket, int]:
    for _ in range(50):
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        udp.bind(("127.0.0.1", 0))
        port = int(udp.getsockname()[1])
        tcp = socket.socket()
        try:
            tcp.bind(("127.0.0.1", port))
        except OSError:  # taken for TCP by someone else: another port
            udp.close()
            tcp.close()
            continue
        return udp, tcp, port
    raise RuntimeError("no port free for both UDP and TCP on 127.0.0.1")


@contextlib.contextmanager
def fake_resolver(answer: Any, tcp_answer: Any = None) -> Iterator[int]:
    """A resolver on 127.0.0.1 answering each UDP query with ``answer(query_bytes)`` and each
    TCP query with ``tcp_answer(query_bytes)``, on one port."""
    udp, tcp, port = _udp_and_tcp_on_one_port()
    udp.settimeout(0.2)
    tcp.listen()
    tcp.settimeout(0.2)
    stop = threading.Event()

    def serve_udp() -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                data, peer = udp.recvfrom(4096)
                udp.sendto(answer(data), peer)

    def serve_tcp() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError):
                connection, _ = tcp.accept()
                with connection:
                    connection.settimeout(2)
                    size = struct.unpack("!H", connection.recv(2))[0]
                    reply = tcp_answer(connection.recv(size))
                    connection.sendall(struct.pack("!H", len(reply)) + reply)

    threads = [threading.Thread(target=serve_udp, daemon=True),
               threading.Thread(target=serve_tcp, daemon=True)]
    for thread in threads:
        thread.start()
    try:
        yield port
    finally:
        stop.set()
        for thread in threads:
            thread.join(5)
        udp.close()
        tcp.close()


def _rcode(code: dns.rcode.Rcode) -> Any:
    def answer(data: bytes) -> bytes:
        response = dns.message.make_response(dns.message.from_wire(data))
        response.set_rcode(code)
        return response.to_wire()
    return answer


def _garbage_with_the_query_id(data: bytes) -> bytes:
    return data[:2] + b"\x81\x80\x00\x01\x00\x05\x00\x00\x00\x00\xde\xad"  # 5 answers promised


def _truncated(data: bytes) -> bytes:
    """"Too big for UDP, ask over TCP"."""
    response = dns.message.make_response(dns.message.from_wire(data))
    response.flags |= dns.flags.TC
    return response.to_wire()


@pytest.mark.parametrize(("answer", "tcp_answer", "kind"), [
    (_rcode(dns.rcode.SERVFAIL), None, "refused"),
    (_rcode(dns.rcode.REFUSED), None, "refused"),
    (_rcode(dns.rcode.NXDOMAIN), None, "refused"),
    # dnspython drops a UDP reply it cannot parse as a stray packet: it ends as a timeout
    (_garbage_with_the_query_id, None, "timeout"),
    (lambda data: b"\x00\x01garbage", None, "timeout"),
    # over TCP (after a truncated UDP answer) garbage is garbage
    (_truncated, _garbage_with_the_query_id, "malformed"),
])
def test_error_and_garbage_answers_are_classified(answer: Any, tcp_answer: Any,
                                                  kind: str) -> None:
    with fake_resolver(answer, tcp_answer) as port, pytest.raises(SourceError) as raised:
        _find(_source(port, resolution_timeout=1.0))
    assert raised.value.kind == kind, raised.value


# ------------------------------------------------------------------ inside a running node


def test_a_node_counts_resolver_failures_and_resolves_again(
        hive_node_factory: Any, monkeypatch: pytest.MonkeyPatch, dnsmasq: Dnsmasq,
        caplog: pytest.LogCaptureFixture) -> None:
    dnsmasq.set_records(NAME, ["127.31.0.10", "127.31.0.11"])
    for key, value in {"MODE": "dns", "DNS_NAME": NAME, "RESOLVER_ADDRESS": "127.0.0.1",
                       "RESOLVER_PORT": str(dnsmasq.port), "RESOLUTION_TIMEOUT": "0.5",
                       "CLUSTER_PORT": "7800"}.items():
        monkeypatch.setenv(f"HIVE_DOCKER_DISCOVERY_{key}", value)
    plugin = hive_ext_docker.create_plugin()
    with caplog.at_level("INFO"):
        node = hive_node_factory(extensions=[plugin], config_xml=cluster_xml(free_port()))
        wait_for(lambda: counter(node, "docker-discovery.query.success") >= 1, 10, "a query")
        assert plugin.discovery is not None and plugin.discovery.resolved == 2  # the gauge
        dnsmasq.stop()
        wait_for(lambda: counter(node, "docker-discovery.errors.timeout") >= 2, 15,
                 "timeouts counted while the resolver is gone")
        dnsmasq.start()
        successes = counter(node, "docker-discovery.query.success")
        wait_for(lambda: counter(node, "docker-discovery.query.success") > successes, 15,
                 "the resolver answers again")
    messages = [r.getMessage() for r in caplog.records if "docker-discovery" in r.getMessage()]
    assert sum(": timeout: " in m for m in messages) == 1, messages  # once, not once a reload
    assert any("answering again after" in m for m in messages), messages
    assert node.call(lambda: len(node.services.cluster_members())) == 1
