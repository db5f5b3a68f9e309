"""Built-in plugin: DNS cluster discovery, the nodes from the addresses of one name.

``<discovery><dns><discovery-address>`` names it; every reload interval the system's resolver
(the one every program on the host or in the pod uses: ``/etc/resolv.conf`` with its search
domains, ``/etc/hosts``) resolves it, and each IPv4 address is a node at the cluster port. A
Kubernetes headless service answers with one address per ready pod (every pod with
``publishNotReadyAddresses``), Docker's embedded DNS with one per task of ``tasks.<service>``.

Nothing is cached here, so a node whose record went is not proposed at the next reload (the
core drops a member on failure detection, not on discovery). A resolution that fails or takes
longer than ``resolution-timeout`` answers "no news": the node keeps its members, logs the
outage when it begins, once a minute while it lasts, and when the name resolves again.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket

from hive_ext_api import ClusterNodeAddress, ExtensionContext, OutageLog, hookimpl

log = logging.getLogger("hive.discovery.dns")

SERVICE = "DNS discovery"
_NO_SUCH_NAME = (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME))


class DnsDiscovery:
    def __init__(self) -> None:
        self.name: str | None = None
        self.port = 0
        self.timeout = 3.0
        self.interval = 30.0
        self.outage = OutageLog(log, SERVICE)
        self.last: list[ClusterNodeAddress] | None = None
        self._own: ClusterNodeAddress | None = None
        self._told_own_missing = False

    @hookimpl
    def hive_extension_start(self, context: ExtensionContext) -> None:
        cluster = getattr(context.node_config, "cluster", None)
        if cluster is None or not cluster.enabled or cluster.discovery_kind != "dns":
            return
        discovery = cluster.effective_discovery()
        self.name = discovery.discovery_address
        self.port = discovery.port or cluster.effective_transport().bind_port
        self.timeout = float(discovery.resolution_timeout)
        self.interval = float(discovery.reload_interval)
        log.info("DNS discovery: the nodes are the addresses of %s at port %d, resolved every "
                 "%g s", self.name, self.port, self.interval)

    @hookimpl
    def hive_discovery_init(self, own_address: ClusterNodeAddress) -> None:
        if self.name is not None:
            self._own = own_address

    @hookimpl
    async def hive_discovery_reload(self) -> list[ClusterNodeAddress] | None:
        if self.name is None:
            return None
        try:
            async with asyncio.timeout(self.timeout):
                answers = await asyncio.get_running_loop().getaddrinfo(
                    self.name, None, family=socket.AF_INET, type=socket.SOCK_STREAM)
        except TimeoutError:
            self.outage.failed(f"resolve {self.name}", f"no answer within {self.timeout:g} s")
            return None
        except socket.gaierror as exc:
            reason = "no such name, or no IPv4 address" if exc.errno in _NO_SUCH_NAME \
                else str(exc)
            self.outage.failed(f"resolve {self.name}", reason)
            return None
        except OSError as exc:
            self.outage.failed(f"resolve {self.name}", str(exc))
            return None
        self.outage.answered()
        hosts = sorted({ipaddress.IPv4Address(answer[4][0]) for answer in answers})
        nodes = [ClusterNodeAddress(str(host), self.port) for host in hosts]
        if nodes != self.last:
            log.info("DNS discovery: %s resolves to %s", self.name,
                     ", ".join(str(host) for host in hosts))
            self.last = nodes
        self._check_own(nodes)
        return nodes

    def _check_own(self, nodes: list[ClusterNodeAddress]) -> None:
        own = self._own
        if own is None or self._told_own_missing or own in nodes:
            return
        self._told_own_missing = True  # once: a setup problem, not a passing one
        log.warning("DNS discovery: this node (%s:%d) is not among the addresses of %s: other "
                    "nodes will not find it through discovery (is its record published, and "
                    "is the cluster's bind or external address the one the name lists?)",
                    own.host, own.port, self.name)

    @hookimpl
    def hive_discovery_reload_interval(self) -> float | None:
        return self.interval if self.name is not None else None


def create_plugin() -> DnsDiscovery:
    """One instance per node: nodes in one process (tests) must not share the state."""
    return DnsDiscovery()
