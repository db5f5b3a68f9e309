"""The Engine API mode against a real dockerd: which containers are nodes, and every way the
daemon can fail (gone, hung, answering garbage), alone and inside a running node."""

from __future__ import annotations

import asyncio
import contextlib
import socketserver
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hive_ext_api import ClusterNodeAddress
from hive_ext_api.testing import cluster_xml

import hive_ext_docker
from _testbed import (
    BridgeNetwork,
    Containers,
    Dockerd,
    counter,
    free_port,
    make_tls_files,
    wait_for,
)
from hive_ext_docker import (
    EngineSettings,
    EngineSource,
    Label,
    SettingError,
    SourceError,
    nodes_from_containers,
)

SLEEP = ["/usr/bin/sleep", "infinity"]


def _settings(dockerd: Dockerd | str, network: str, label: str, **more: Any) -> EngineSettings:
    host = dockerd if isinstance(dockerd, str) else dockerd.url
    key, _, value = label.partition("=")
    return EngineSettings(labels=(Label(key, value or None),), network=network,
                          docker_host=host, **more)


def _find(source: EngineSource, default_port: int | None = 7800) -> Any:
    return asyncio.run(source.find(default_port))


def test_running_labelled_containers_on_the_network_are_the_nodes(
        dockerd: Dockerd, containers: Containers, network: BridgeNetwork) -> None:
    cluster = f"c-{uuid.uuid4().hex[:8]}"
    plain = containers.run(SLEEP, {"hive.cluster": cluster}, network.name)
    ported = containers.run(SLEEP, {"hive.cluster": cluster, "hive.port": "7911"}, network.name)
    containers.run(SLEEP, {"hive.cluster": "another"}, network.name)  # other label value
    containers.run(SLEEP, {"unrelated": "1"}, network.name)  # no label
    containers.run(SLEEP, {"hive.cluster": cluster}, None)  # not on the network
    stopped = containers.run(SLEEP, {"hive.cluster": cluster}, network.name)
    containers.client.kill(stopped)

    source = EngineSource(_settings(dockerd, network.name, f"hive.cluster={cluster}",
                                    cluster_port_label="hive.port"))
    found = _find(source, default_port=7800)
    assert found.skipped == []
    assert set(found.addresses) == {
        ClusterNodeAddress(containers.ip(plain, network.name), 7800),
        ClusterNodeAddress(containers.ip(ported, network.name), 7911)}

    # a label without a value matches any value; cluster-port beats the node's own port
    any_value = EngineSource(_settings(dockerd, network.name, "hive.cluster", cluster_port=7801))
    assert len(_find(any_value).addresses) == 3
    assert {a.port for a in _find(any_value).addresses} == {7801}
    source.close()
    any_value.close()


def test_inspect_data_gives_the_same_addresses_as_the_list(
        dockerd: Dockerd, containers: Containers, network: BridgeNetwork) -> None:
    ids = [containers.run(SLEEP, {"hive.cluster": "x", "hive.port": str(7900 + i)}, network.name)
           for i in range(2)]
    settings = _settings(dockerd, network.name, "hive.cluster=x", cluster_port_label="hive.port")
    listed = _find(EngineSource(settings)).addresses
    inspected = nodes_from_containers([containers.inspect(i) for i in ids], settings, None)
    assert inspected.addresses == listed and len(listed) == 2
    by_id = nodes_from_containers(
        [containers.inspect(i) for i in ids],
        EngineSettings(labels=settings.labels, network=network.id[:12],
                       cluster_port_label="hive.port"), None)
    assert by_id.addresses == listed  # the network given by (a prefix of) its id


def test_a_container_with_a_bad_port_label_is_skipped_not_fatal(
        dockerd: Dockerd, containers: Containers, network: BridgeNetwork) -> None:
    good = containers.run(SLEEP, {"hive.cluster": "y"}, network.name)
    containers.run(SLEEP, {"hive.cluster": "y", "hive.port": "seven"}, network.name)
    found = _find(EngineSource(_settings(dockerd, network.name, "hive.cluster=y",
                                         cluster_port_label="hive.port")))
    assert found.addresses == [ClusterNodeAddress(containers.ip(good, network.name), 7800)]
    assert len(found.skipped) == 1 and "hive.port='seven' is not a port" in found.skipped[0]


def test_over_tls_with_the_docker_cli_variables(
        dockerd: Dockerd, containers: Containers, network: BridgeNetwork,
        tmp_path: Path) -> None:
    """DOCKER_TLS_VERIFY and DOCKER_CERT_PATH are honoured as the docker CLI honours them."""
    node = containers.run(SLEEP, {"hive.cluster": "tls"}, network.name)
    assert dockerd.tls_dir is not None
    settings = _settings(f"tcp://127.0.0.1:{dockerd.tls_port}", network.name, "hive.cluster=tls")
    source = EngineSource(settings, environ={
        "DOCKER_TLS_VERIFY": "1", "DOCKER_CERT_PATH": str(dockerd.tls_dir / "client")})
    assert _find(source).addresses == [ClusterNodeAddress(containers.ip(node, network.name), 7800)]
    source.close()
    with pytest.raises(SourceError) as raised:  # plain HTTP to the TLS port
        _find(EngineSource(settings, environ={}))
    assert raised.value.kind == "refused", raised.value
    with pytest.raises(SettingError, match=r"DOCKER_CERT_PATH=.*needs ca\.pem, cert\.pem and"):
        EngineSource(settings, environ={"DOCKER_TLS_VERIFY": "1",
                                        "DOCKER_CERT_PATH": str(dockerd.tls_dir)})  # no files
    other_ca = make_tls_files(tmp_path / "another-ca")
    with pytest.raises(SourceError) as raised:  # a daemon certificate from another CA
        _find(EngineSource(settings, environ={"DOCKER_TLS_VERIFY": "1",
                                              "DOCKER_CERT_PATH": str(other_ca / "client")}))
    assert raised.value.kind == "refused" and "TLS" in raised.value.detail, raised.value


def test_no_daemon_at_the_socket_is_unreachable(tmp_path: Path) -> None:
    source = EngineSource(_settings(f"unix://{tmp_path}/missing.sock", "n", "a=b"))
    with pytest.raises(SourceError) as raised:
        _find(source)
    assert raised.value.kind == "unreachable"


def test_no_daemon_at_a_tcp_address_is_unreachable() -> None:
    source = EngineSource(_settings(f"tcp://127.0.0.1:{free_port()}", "n", "a=b"))
    with pytest.raises(SourceError) as raised:
        _find(source)
    assert raised.value.kind == "unreachable"


def test_a_hung_daemon_is_a_timeout_and_answers_again_after(
        dockerd: Dockerd, containers: Containers, network: BridgeNetwork) -> None:
    node = containers.run(SLEEP, {"hive.cluster": "z"}, network.name)
    source = EngineSource(_settings(dockerd, network.name, "hive.cluster=z", api_timeout=1.0))
    assert len(_find(source).addresses) == 1
    dockerd.pause()
    try:
        begun = time.monotonic()
        with pytest.raises(SourceError) as first:
            _find(source)
        assert first.value.kind == "timeout"
        assert time.monotonic() - begun < 2.5  # bounded by api-timeout, not the SDK's 60 s
    finally:
        dockerd.resume()
    wait_for(lambda: _answers(source), 10, "the source answers again after the daemon resumed")
    assert _find(source).addresses == [ClusterNodeAddress(containers.ip(node, network.name), 7800)]


def _answers(source: EngineSource) -> bool:
    try:
        _find(source)
    except SourceError:
        return False
    return True


# ------------------------------------------------------------------ a daemon answering garbage


class _Garbage(socketserver.StreamRequestHandler):
    """Answers every request as the server's ``answers`` says for its path; ``DRIP`` sends a
    header line every 0.3 s, forever (each read is quick, the answer never ends)."""

    def handle(self) -> None:
        request = self.rfile.readline().decode(errors="replace")
        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
            pass  # headers
        path = request.split(" ")[1] if " " in request else "/"
        answers: dict[str, bytes] = self.server.answers  # type: ignore[attr-defined]
        for prefix, raw in answers.items():
            if prefix in path:
                if raw == DRIP:
                    self._drip()
                self.wfile.write(raw)
                return
        self.wfile.write(_http(b'{"ApiVersion": "1.41"}'))

    def _drip(self) -> None:
        self.wfile.write(b"HTTP/1.1 200 OK\r\n")
        stop: threading.Event = self.server.stop  # type: ignore[attr-defined]
        while not stop.wait(0.3):
            with contextlib.suppress(OSError):
                self.wfile.write(b"X-Wait: 1\r\n")


DRIP = b"<drip>"


def _http(body: bytes, status: str = "200 OK", kind: str = "application/json") -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n"
            f"Connection: close\r\n\r\n").encode() + body


@contextlib.contextmanager
def garbage_daemon(answers: dict[str, bytes]) -> Iterator[str]:
    folder = Path(tempfile.mkdtemp(prefix="hdg-", dir="/tmp"))
    path = folder / "docker.sock"
    server = socketserver.ThreadingUnixStreamServer(str(path), _Garbage)
    server.answers = answers  # type: ignore[attr-defined]
    server.stop = threading.Event()  # type: ignore[attr-defined]
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"unix://{path}"
    finally:
        server.stop.set()  # type: ignore[attr-defined]
        server.shutdown()
        server.server_close()
        path.unlink(missing_ok=True)
        folder.rmdir()


@pytest.mark.parametrize(("answers", "kind"), [
    ({"/version": b"SSH-2.0-OpenSSH_9.2\r\n"}, "malformed"),
    ({"/containers/json": b"\x00\xff garbage \x00\r\n\r\n"}, "malformed"),
    ({"/containers/json": _http(b"<html>not json</html>", kind="text/html")}, "malformed"),
    ({"/containers/json": _http(b'{"message": "containers are not a dict"}')}, "malformed"),
    ({"/containers/json": _http(b'[{"Id": 1, "NetworkSettings": "x"}, 5]')}, "malformed"),
    ({"/containers/json": _http(b'{"message": "boom"}', "500 Internal Server Error")},
     "refused"),
    ({"/version": _http(b'{"message": "client version too old"}', "400 Bad Request")},
     "refused"),
    # a daemon on its way down closes the connection without an answer: gone, not garbled
    ({"/containers/json": b""}, "unreachable"),
])
def test_garbage_from_the_daemon_is_classified(answers: dict[str, bytes], kind: str) -> None:
    with garbage_daemon(answers) as url:
        source = EngineSource(_settings(url, "n", "a=b"))
        with pytest.raises(SourceError) as raised:
            _find(source)
    assert raised.value.kind == kind, raised.value


def test_a_daemon_that_never_finishes_its_answer_is_not_asked_twice() -> None:
    """Each read is quick, so only the query's own bound ends the wait; while the thread still
    waits, the next reload does not start another one."""
    with garbage_daemon({"/containers/json": DRIP}) as url:
        source = EngineSource(_settings(url, "n", "a=b", api_timeout=1.0))
        begun = time.monotonic()
        with pytest.raises(SourceError) as first:
            _find(source)
        assert first.value.kind == "timeout" and "api-timeout" in first.value.detail
        assert 1.4 < time.monotonic() - begun < 3
        begun = time.monotonic()
        with pytest.raises(SourceError) as second:
            _find(source)
        assert second.value.kind == "timeout" and "previous query" in second.value.detail
        assert time.monotonic() - begun < 0.5
        source.close()


def test_a_container_entry_that_makes_no_sense_is_skipped() -> None:
    body = (b'[{"Id": "abc", "Names": ["/odd"], "State": "running", "Labels": {"a": "b"},'
            b' "NetworkSettings": {"Networks": {"n": {"IPAddress": "not-an-ip"}}}}]')
    with garbage_daemon({"/containers/json": _http(body)}) as url:
        found = _find(EngineSource(_settings(url, "n", "a=b")))
    assert found.addresses == []
    assert found.skipped == ["container odd: no IPv4 address on network n ('not-an-ip')"]


# ------------------------------------------------------------------ inside a running node


def test_a_node_counts_and_rate_limits_engine_failures_and_keeps_running(
        hive_node_factory: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("HIVE_DOCKER_DISCOVERY_MODE", "engine")
    monkeypatch.setenv("HIVE_DOCKER_DISCOVERY_DOCKER_HOST", f"unix://{tmp_path}/gone.sock")
    monkeypatch.setenv("HIVE_DOCKER_DISCOVERY_LABEL", "hive.cluster=t")
    monkeypatch.setenv("HIVE_DOCKER_DISCOVERY_NETWORK", "n")
    plugin = hive_ext_docker.create_plugin()
    with caplog.at_level("INFO"):
        node = hive_node_factory(extensions=[plugin], config_xml=cluster_xml(free_port()))
        wait_for(lambda: counter(node, "docker-discovery.errors.unreachable") >= 3, 15,
                 "three failed reloads counted")
    assert counter(node, "docker-discovery.query.failed") >= 3
    assert counter(node, "docker-discovery.query.success") == 0
    assert node.call(lambda: len(node.services.cluster_members())) == 1  # still up, alone
    warnings = [r.getMessage() for r in caplog.records
                if r.levelname == "WARNING" and "docker-discovery" in r.getMessage()]
    assert len(warnings) == 1, warnings  # once a minute, not once a reload
    assert "unreachable" in warnings[0] and "gone.sock" in warnings[0]


def test_a_node_finds_the_nodes_again_when_the_daemon_comes_back(
        hive_node_factory: Any, monkeypatch: pytest.MonkeyPatch, dockerd: Dockerd,
        containers: Containers, network: BridgeNetwork, caplog: pytest.LogCaptureFixture) -> None:
    """The Engine API hangs, then answers again: counted as timeouts, then a recovery line."""
    containers.run(SLEEP, {"hive.cluster": "back"}, network.name)
    for key, value in {"MODE": "engine", "DOCKER_HOST": dockerd.url, "API_TIMEOUT": "1",
                       "LABEL": "hive.cluster=back", "NETWORK": network.name}.items():
        monkeypatch.setenv(f"HIVE_DOCKER_DISCOVERY_{key}", value)
    plugin = hive_ext_docker.create_plugin()
    with caplog.at_level("INFO"):
        node = hive_node_factory(extensions=[plugin], config_xml=cluster_xml(free_port()))
        wait_for(lambda: counter(node, "docker-discovery.query.success") >= 1, 10, "a reload")
        dockerd.pause()
        try:
            wait_for(lambda: counter(node, "docker-discovery.errors.timeout") >= 2, 15,
                     "timeouts counted while the daemon hangs")
        finally:
            dockerd.resume()
        successes = counter(node, "docker-discovery.query.success")
        wait_for(lambda: counter(node, "docker-discovery.query.success") > successes, 15,
                 "a reload succeeds again")
    assert any("answering again after" in r.getMessage() for r in caplog.records)
    assert node.call(lambda: len(node.services.cluster_members())) == 1
