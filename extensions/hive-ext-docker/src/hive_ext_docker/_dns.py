"""Nodes from DNS: the A records of one name, as Docker's embedded DNS serves ``tasks.<service>``.

Every A record (CNAMEs followed) is a node at ``cluster-port`` (else this node's own port). The
resolver is ``resolver-address``:``resolver-port`` when set (Docker's is 127.0.0.11:53 inside a
container), else the system's; nothing is cached, so a task that went away is gone at the next
reload.
"""

from __future__ import annotations

import ipaddress
from typing import Any

import dns.asyncresolver
import dns.exception
import dns.message
import dns.name
import dns.rcode
import dns.rdatatype
import dns.resolver
from hive_ext_api import ClusterNodeAddress, SettingError

from hive_ext_docker._settings import DnsSettings
from hive_ext_docker._source import Found, SourceError


def nodes_from_response(response: dns.message.Message, port: int | None) -> Found:
    """The addresses in a DNS response to an A query (following CNAMEs), sorted, once each.

    Raises :class:`SourceError` (malformed) when the response is not an answer to a query.
    """
    if not isinstance(response, dns.message.QueryMessage):
        raise SourceError("malformed", f"not a query response: {type(response).__name__}")
    try:
        chain = response.resolve_chaining()
    except dns.exception.DNSException as exc:
        raise SourceError("malformed", f"{type(exc).__name__}: {exc}") from None
    found = Found()
    if chain.answer is None or chain.answer.rdtype != dns.rdatatype.A:
        return found  # the name exists but has no A record: no nodes
    if port is None:
        found.skipped.append(f"{len(chain.answer)} A records of {chain.canonical_name}: "
                             f"no cluster-port to pair them with")
        return found
    hosts = sorted({ipaddress.IPv4Address(rdata.address) for rdata in chain.answer})
    found.addresses = [ClusterNodeAddress(str(host), port) for host in hosts]
    return found


def classify(exc: BaseException, name: str) -> SourceError:
    """Map what dnspython raised to a :class:`SourceError`."""
    if isinstance(exc, dns.resolver.NXDOMAIN):
        return SourceError("refused", f"{name}: no such name (NXDOMAIN)")
    if isinstance(exc, dns.exception.Timeout):
        return SourceError("timeout", f"{name}: {exc}")
    if isinstance(exc, dns.resolver.NoNameservers):
        return _classify_servers(exc, name)
    if isinstance(exc, OSError):
        return SourceError("unreachable", f"{name}: {exc}")
    return SourceError("malformed", f"{name}: {type(exc).__name__}: {exc}")


def _classify_servers(exc: dns.resolver.NoNameservers, name: str) -> SourceError:
    """Every resolver failed: unreachable, an error rcode, or a garbled answer."""
    errors: list[Any] = list(exc.kwargs.get("errors") or [])
    problems = [error[3] for error in errors if len(error) > 3]
    if problems and all(isinstance(p, OSError) for p in problems):
        return SourceError("unreachable", f"{name}: {exc}")
    # a reply that does not parse (BadPointer, ShortHeader, TrailingJunk, FormError, ...);
    # over UDP dnspython drops such a reply as a stray packet, so only TCP replies get here
    if any(isinstance(p, dns.exception.DNSException)
           and not isinstance(p, dns.exception.Timeout | dns.message.Truncated)
           for p in problems):
        return SourceError("malformed", f"{name}: {exc}")
    return SourceError("refused", f"{name}: {exc}")


class DnsSource:
    """The A records of ``dns-name``, asked of the configured or the system's resolver."""

    def __init__(self, settings: DnsSettings) -> None:
        self.settings = settings
        try:
            resolver = dns.asyncresolver.Resolver(configure=settings.resolver_address is None)
        except dns.resolver.NoResolverConfiguration:
            raise SettingError("resolver-address is required: this system has no resolver "
                               "configured (/etc/resolv.conf)") from None
        # the port is given to nameservers as they are set: port first, then (again) the servers
        resolver.port = settings.resolver_port
        servers = [settings.resolver_address] if settings.resolver_address is not None else [
            str(getattr(server, "address", server)) for server in resolver.nameservers]
        resolver.nameservers = servers
        resolver.cache = None  # a task that went away must be gone at the next reload
        self._resolver = resolver

    def describe(self) -> str:
        servers = ", ".join(str(getattr(server, "address", server))
                            for server in self._resolver.nameservers)
        return f"DNS {self.settings.name} A (resolver {servers} port {self.settings.resolver_port})"

    async def find(self, default_port: int | None) -> Found:
        name = self.settings.name
        try:
            answer = await self._resolver.resolve(
                dns.name.from_text(name), "A", search=False, raise_on_no_answer=False,
                lifetime=self.settings.resolution_timeout)
        except Exception as exc:
            raise classify(exc, name) from exc
        return nodes_from_response(answer.response, self.settings.cluster_port or default_port)

    def close(self) -> None:
        """Nothing to let go of: every query opens its own socket."""
