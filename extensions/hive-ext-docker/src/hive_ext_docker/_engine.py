"""Nodes from the Docker Engine API: running containers with the labels, on the network.

One ``GET /containers/json`` per reload, filtered by the daemon (labels, network, running); a
container's address is its IP on that network and its cluster port (the ``cluster-port-label``
label's value, else ``cluster-port``, else this node's own port). The docker SDK is blocking,
so the query runs in a thread, bounded by ``api-timeout``.
"""

from __future__ import annotations

import asyncio
import http.client
import ipaddress
import json
import os
import re
import ssl
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import docker
import docker.errors
import requests.exceptions
from hive_ext_api import ClusterNodeAddress, SettingError

from hive_ext_docker._settings import EngineSettings
from hive_ext_docker._source import Found, SourceError

DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"
_NETWORK_ID = re.compile(r"^[0-9a-f]{12,64}$")


def _labels_of(container: Mapping[str, Any]) -> Mapping[str, Any]:
    # /containers/json puts them at the top, /containers/{id}/json under Config
    labels = container.get("Labels")
    if labels is None:
        labels = (container.get("Config") or {}).get("Labels")
    if labels is not None and not isinstance(labels, Mapping):
        raise TypeError(f"labels are not an object: {_sample(labels)}")
    return labels or {}


def _name_of(container: Mapping[str, Any]) -> str:
    names = container.get("Names")
    name = names[0] if isinstance(names, list) and names else container.get("Name")
    if isinstance(name, str) and name:
        return name.lstrip("/")
    return str(container.get("Id", "?"))[:12]


def _running(container: Mapping[str, Any]) -> bool:
    state = container.get("State")
    if isinstance(state, Mapping):  # inspect data
        return bool(state.get("Running"))
    return state is None or state == "running"


def _network_entry(container: Mapping[str, Any], network: str) -> Mapping[str, Any] | None:
    networks = (container.get("NetworkSettings") or {}).get("Networks") or {}
    if not isinstance(networks, Mapping):
        raise ValueError("NetworkSettings.Networks is not an object")
    entry = networks.get(network)
    if entry is None and _NETWORK_ID.match(network):  # configured by id, or a prefix of it
        entry = next((e for e in networks.values() if isinstance(e, Mapping)
                      and str(e.get("NetworkID", "")).startswith(network)), None)
    return entry if isinstance(entry, Mapping) else None


def nodes_from_containers(containers: Any, settings: EngineSettings,
                          default_port: int | None) -> Found:
    """The cluster addresses in Engine API container data (list or inspect shape).

    Containers that are not running, lack a label or are not on the network are not nodes;
    those that are but whose address cannot be told are skipped with a reason.
    Raises :class:`SourceError` (malformed) when ``containers`` is not a list of objects.
    """
    if not isinstance(containers, list) or not all(isinstance(c, Mapping) for c in containers):
        raise SourceError("malformed", f"expected a list of containers, got {_sample(containers)}")
    found = Found()
    for container in containers:
        name = _name_of(container)
        try:
            labels = _labels_of(container)
            if not _running(container) or not all(
                    label.key in labels and label.value in (None, labels[label.key])
                    for label in settings.labels):
                continue
            entry = _network_entry(container, settings.network)
        except (AttributeError, TypeError, ValueError) as exc:
            found.skipped.append(f"container {name}: unreadable data ({exc})")
            continue
        if entry is None:
            continue
        address = entry.get("IPAddress")
        try:
            host = str(ipaddress.IPv4Address(address)) if address else ""
        except (ValueError, TypeError):
            host = ""
        if not host:
            found.skipped.append(f"container {name}: no IPv4 address on network "
                                 f"{settings.network} ({address!r})")
            continue
        port = _port_of(name, labels, settings, default_port, found)
        if port is not None:
            found.addresses.append(ClusterNodeAddress(host, port))
    found.addresses = sorted(set(found.addresses), key=_address_order)
    return found


def _port_of(name: str, labels: Mapping[str, Any], settings: EngineSettings,
             default_port: int | None, found: Found) -> int | None:
    if settings.cluster_port_label is not None and settings.cluster_port_label in labels:
        text = str(labels[settings.cluster_port_label]).strip()
        if text.isdigit() and 0 < int(text) < 65536:
            return int(text)
        found.skipped.append(f"container {name}: label {settings.cluster_port_label}={text!r} "
                             f"is not a port")
        return None
    port = settings.cluster_port or default_port
    if port is None:
        found.skipped.append(f"container {name}: no {settings.cluster_port_label} label and no "
                             f"cluster-port")
    return port


def _address_order(address: ClusterNodeAddress) -> tuple[int, int]:
    return int(ipaddress.IPv4Address(address.host)), address.port


def _sample(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """The exception, what caused it, and exceptions urllib3 tucks into ``args``."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        current = todo.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        todo += [e for e in (current.__cause__, current.__context__) if e is not None]
        todo += [a for a in current.args if isinstance(a, BaseException)]


def classify(exc: BaseException) -> SourceError:
    """Map what the docker SDK (requests, urllib3) raised to a :class:`SourceError`."""
    chain = list(_chain(exc))
    if any(isinstance(e, requests.exceptions.Timeout | TimeoutError) for e in chain):
        return SourceError("timeout", str(exc))
    if any(isinstance(e, ConnectionError) for e in chain):
        # before the garbled answers: http.client's RemoteDisconnected (the daemon closed the
        # connection without an answer, as one shutting down does) is both
        return SourceError("unreachable", str(exc))
    if any(isinstance(e, requests.exceptions.JSONDecodeError | json.JSONDecodeError
                      | http.client.HTTPException | requests.exceptions.ChunkedEncodingError
                      | requests.exceptions.ContentDecodingError) for e in chain):
        return SourceError("malformed", str(exc))
    api_error = next((e for e in chain if isinstance(e, docker.errors.APIError)), None)
    if api_error is not None:
        return SourceError("refused", f"HTTP {api_error.status_code}: "
                                      f"{api_error.explanation or api_error}")
    if any(isinstance(e, requests.exceptions.HTTPError) for e in chain):
        return SourceError("refused", str(exc))
    if any(isinstance(e, requests.exceptions.SSLError | ssl.SSLError) for e in chain):
        return SourceError("refused", f"TLS: {exc}")  # a certificate one side does not accept
    if any(isinstance(e, requests.exceptions.ConnectionError | ConnectionError
                      | FileNotFoundError) for e in chain):
        return SourceError("unreachable", str(exc))
    return SourceError("malformed", f"{type(exc).__name__}: {exc}")


class _EngineClient(docker.APIClient):  # type: ignore[misc]
    """The SDK's client, but the daemon's CA (``DOCKER_CERT_PATH``) is what verifies it.

    requests lets ``REQUESTS_CA_BUNDLE`` / ``CURL_CA_BUNDLE`` replace a session's CA file on
    every request, which would make a TLS daemon's certificate fail to verify.
    """

    def merge_environment_settings(self, url: Any, proxies: Any, stream: Any, verify: Any,
                                   cert: Any) -> Any:
        settings = super().merge_environment_settings(url, proxies, stream, verify, cert)
        if isinstance(self.verify, str):
            settings["verify"] = self.verify
        return settings


class EngineSource:
    """The Docker Engine API at ``docker-host`` (else ``$DOCKER_HOST``, else the local socket)."""

    def __init__(self, settings: EngineSettings, environ: Mapping[str, str] | None = None) -> None:
        """Raises :class:`SettingError` when the TLS files the environment names are unusable."""
        self.settings = settings
        self._environ = dict(os.environ if environ is None else environ)
        self._client_arguments = self._arguments()
        self._client: _EngineClient | None = None  # used in the query thread only
        # one thread: a query that hangs is never joined by a second one
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="docker-discovery")
        self._query: Future[Any] | None = None
        self._filters = {"label": [label.filter() for label in settings.labels],
                         "network": [settings.network], "status": ["running"]}

    @property
    def docker_host(self) -> str:
        return (self.settings.docker_host or self._environ.get("DOCKER_HOST")
                or DEFAULT_DOCKER_HOST)

    def describe(self) -> str:
        labels = ",".join(label.filter() for label in self.settings.labels)
        return (f"Docker Engine API {self.docker_host} (running containers labelled {labels} "
                f"on network {self.settings.network})")

    def _arguments(self) -> dict[str, Any]:
        # DOCKER_HOST, DOCKER_TLS_VERIFY and DOCKER_CERT_PATH, as the docker CLI reads them
        try:
            kwargs: dict[str, Any] = docker.utils.kwargs_from_env(environment=self._environ)
        except docker.errors.TLSParameterError as exc:
            where = self._environ.get("DOCKER_CERT_PATH") or "~/.docker"
            raise SettingError(f"DOCKER_CERT_PATH={where} (with DOCKER_TLS_VERIFY): needs "
                               f"ca.pem, cert.pem and key.pem: {exc}") from None
        if self.settings.docker_host is not None:
            kwargs["base_url"] = self.settings.docker_host
        return kwargs

    def _connect(self) -> _EngineClient:
        # "auto": asks the daemon which API version it speaks (once per connection)
        return _EngineClient(version="auto", timeout=self.settings.api_timeout,
                             **self._client_arguments)

    def _list(self) -> Any:
        """Runs in the query thread."""
        try:
            if self._client is None:
                self._client = self._connect()
            return self._client.containers(filters=self._filters)
        except Exception:
            self._drop_client()  # the next query connects (and negotiates) afresh
            raise

    def _drop_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            client.close()

    async def find(self, default_port: int | None) -> Found:
        if self._query is not None and not self._query.done():
            raise SourceError("timeout", "the previous query still waits for the daemon")
        self._query = self._thread.submit(self._list)
        try:
            # the SDK's own timeout applies per connect and per read: bound the whole query too
            containers = await asyncio.wait_for(asyncio.wrap_future(self._query),
                                                self.settings.api_timeout + 0.5)
        except TimeoutError:
            raise SourceError("timeout", f"no answer within {self.settings.api_timeout:g} s "
                                         f"(api-timeout)") from None
        except Exception as exc:
            raise classify(exc) from exc
        return nodes_from_containers(containers, self.settings, default_port)

    def close(self) -> None:
        """Closes the connection after a query still running; does not wait for it."""
        self._thread.submit(self._drop_client)
        self._thread.shutdown(wait=False)
