"""The Consul agent through py-consul: this node's service instance and its TTL check, and the
healthy instances of the service.

Every call is blocking (py-consul's client is ``requests``); the extension runs them off the
node's event loop. Failures come out as :class:`ConsulUnavailable` whose message says what went
wrong in Consul's terms, never as a traceback.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Any, TypeVar

import requests

try:  # python-consul has the same import name, and an older API
    version("py-consul")
    import consul
except (ImportError, PackageNotFoundError) as missing:
    raise ImportError("hive-ext-consul needs the distribution py-consul (pip install py-consul; "
                      "not python-consul, which has the same import name)",
                      name="py-consul") from missing

from hive_ext_consul._config import ConsulSettings

T = TypeVar("T")

REQUEST_TIMEOUT_S = 2.0  # a reload must end well within the node's 5 s hook deadline
RECORD_VERSION = "1"  # the meta this extension writes; other versions are skipped
NODE_ID_META = "hive-node-id"
VERSION_META = "hive-record-version"


class ConsulUnavailable(Exception):
    """The agent could not be asked, or refused; the message says why, in Consul's terms."""


class AgentRefused(ConsulUnavailable):
    """The agent answered, with an error (it is reachable)."""


@dataclass(frozen=True, slots=True)
class Instance:
    """One healthy instance of the service, as the catalog has it."""

    instance_id: str
    node_id: str
    host: str
    port: int


class MalformedInstance(ValueError):
    """A healthy instance of the service that is not a Hive node this extension can use."""


def consul_client(settings: ConsulSettings) -> Any:
    """A py-consul client as the settings say (no request is made)."""
    verify: bool | str = settings.tls_verify
    if settings.tls_ca_file is not None:
        verify = str(settings.tls_ca_file)
    cert = None
    if settings.tls_cert_file is not None and settings.tls_key_file is not None:
        cert = (str(settings.tls_cert_file), str(settings.tls_key_file))
    client = consul.Consul(host=settings.host, port=settings.port, scheme=settings.scheme,
                           dc=settings.datacenter, verify=verify, cert=cert,
                           connections_timeout=REQUEST_TIMEOUT_S)
    if settings.acl_token is not None:
        client.token = settings.acl_token  # the file wins over CONSUL_HTTP_TOKEN
    return client


def describe(exc: Exception, url: str) -> str:
    """What went wrong, in Consul's terms, for the log."""
    if isinstance(exc, consul.ConsulException) and str(exc).startswith("Failed to decode"):
        return f"the answer of {url} is not Consul's (not JSON)"
    if isinstance(exc, consul.ACLPermissionDenied):
        return f"permission denied ({exc}): check consul-acl-token and its policy"
    if isinstance(exc, consul.ACLDisabled):
        return f"the agent refused the request (401 {exc})"
    if isinstance(exc, consul.ConsulException):
        return f"the agent answered {exc}"
    if isinstance(exc, requests.exceptions.SSLError):
        return f"TLS with {url} failed: {exc}"
    if isinstance(exc, requests.exceptions.Timeout):
        return f"{url} did not answer within {REQUEST_TIMEOUT_S:g} s"
    if isinstance(exc, requests.exceptions.RequestException):
        return f"cannot reach Consul at {url}: {exc}"
    if isinstance(exc, (ValueError, KeyError, TypeError)):
        return f"the answer of {url} is not Consul's ({type(exc).__name__}: {exc})"
    return f"{type(exc).__name__}: {exc}"


def instance_from(entry: Any) -> Instance:
    """The instance of one ``/v1/health/service`` entry; :class:`MalformedInstance` says why not."""
    if not isinstance(entry, dict) or not isinstance(entry.get("Service"), dict):
        raise MalformedInstance("not a service entry")
    service = entry["Service"]
    instance_id = service.get("ID")
    meta = service.get("Meta") or {}
    if not isinstance(instance_id, str) or not isinstance(meta, dict):
        raise MalformedInstance("no ID or Meta")
    if meta.get(VERSION_META) != RECORD_VERSION:
        raise MalformedInstance(f"{VERSION_META} is {meta.get(VERSION_META)!r}, this extension "
                                f"reads {RECORD_VERSION}")
    node_id = meta.get(NODE_ID_META)
    host = service.get("Address") or (entry.get("Node") or {}).get("Address")
    port = service.get("Port")
    if not isinstance(node_id, str) or not node_id:
        raise MalformedInstance(f"no {NODE_ID_META}")
    if not isinstance(host, str) or not host:
        raise MalformedInstance("no address")
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
        raise MalformedInstance(f"port {port!r} is not a TCP port")
    return Instance(instance_id, node_id, host, port)


class ServiceInstance:
    """This node's instance of the service on the agent, with its TTL check."""

    def __init__(self, client: Any, settings: ConsulSettings) -> None:
        self.client = client
        self.settings = settings

    def _call(self, call: Callable[[], T]) -> T:
        try:
            return call()
        except consul.ConsulException as exc:
            raise AgentRefused(describe(exc, self.settings.url)) from exc
        except Exception as exc:
            raise ConsulUnavailable(describe(exc, self.settings.url)) from exc

    @staticmethod
    def instance_id(node_id: str, service_name: str) -> str:
        return f"{service_name}-{node_id}"

    def register(self, node_id: str, host: str, port: int) -> None:
        """Register (or register again) this node's instance, its check passing from the start."""
        settings = self.settings
        check: dict[str, str] = {"TTL": f"{settings.ttl_s:g}s", "Status": "passing",
                                 "Notes": f"Hive node {node_id}: passes while the node runs"}
        if settings.deregister_critical_after_s > 0:
            check["DeregisterCriticalServiceAfter"] = f"{settings.deregister_critical_after_s:g}s"
        done = self._call(lambda: self.client.agent.service.register(
            settings.service_name, service_id=self.instance_id(node_id, settings.service_name),
            address=host, port=port, tags=["hive"],
            meta={NODE_ID_META: node_id, VERSION_META: RECORD_VERSION}, check=check))
        if done is not True:
            raise AgentRefused("the agent did not accept the registration")
        # An agent keeps the status of a check it already has (a restarted node's is critical).
        self.keep_passing(node_id)

    def keep_passing(self, node_id: str) -> None:
        """Mark the TTL check passing; :class:`ConsulUnavailable` when the agent does not know
        it (it restarted, or the instance was removed)."""
        check_id = f"service:{self.instance_id(node_id, self.settings.service_name)}"
        done = self._call(lambda: self.client.agent.check.ttl_pass(check_id))
        if done is not True:
            raise AgentRefused(f"the agent has no check {check_id}")

    def deregister(self, node_id: str) -> None:
        instance_id = self.instance_id(node_id, self.settings.service_name)
        self._call(lambda: self.client.agent.service.deregister(instance_id))

    def healthy(self) -> list[Any]:
        """The raw entries of the service's instances whose checks all pass."""
        _, entries = self._call(lambda: self.client.health.service(
            self.settings.service_name, passing=True))
        if not isinstance(entries, list):
            raise ConsulUnavailable(f"the answer of {self.settings.url} is not Consul's (a "
                                    f"{type(entries).__name__}, not a list of instances)")
        return entries

