"""<rest-api>: the HTTP API an operator (or `hive cluster status`) asks about the node."""

from __future__ import annotations

from pydantic import model_validator
from pydantic_xml import element, wrapped

from ._base import ConfigModel, Port, XmlBool, misplaced

__all__ = ["HttpListener", "RestApi"]


class HttpListener(ConfigModel, tag="http"):
    """One plain HTTP listener of the REST API; port 0 asks the OS for a free one."""

    port: Port = element(tag="port", default=8888)
    """The TCP port; 0 asks the system for a free one."""
    bind_address: str = element(tag="bind-address", default="0.0.0.0")
    """The local address; 0.0.0.0: every interface (127.0.0.1 keeps it local)."""
    name: str | None = element(tag="name", default=None)
    """A name for the logs."""


class RestApi(ConfigModel, tag="rest-api"):
    """<rest-api>: off unless enabled; enabled with no <listeners> means HTTP on 0.0.0.0:8888."""

    enabled: XmlBool = element(tag="enabled", default=False)
    """Whether the node serves its REST API (health, cluster members, metrics)."""
    listeners: tuple[HttpListener, ...] = wrapped("listeners", element(tag="http"), default=())
    """Where it listens; none: HTTP on 0.0.0.0:8888."""

    def effective_listeners(self) -> tuple[HttpListener, ...]:
        return self.listeners or (HttpListener(),)

    @model_validator(mode="after")
    def _ports_are_distinct(self) -> RestApi:
        taken: set[tuple[str, int]] = set()
        for position, listener in enumerate(self.listeners, start=1):
            key = (listener.bind_address, listener.port)
            if listener.port and key in taken:
                raise misplaced(f"listeners/http[{position}]/port",
                                f"port {listener.port} on {listener.bind_address} is already "
                                "used by another REST API listener")
            taken.add(key)
        return self
