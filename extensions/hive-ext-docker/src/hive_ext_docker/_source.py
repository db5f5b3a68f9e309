"""What a place to find nodes in (the Engine API, a DNS name) answers, and how it fails."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol

from hive_ext_api import ClusterNodeAddress

ErrorKind = Literal["unreachable", "timeout", "refused", "malformed"]
ERROR_KINDS: tuple[ErrorKind, ...] = ("unreachable", "timeout", "refused", "malformed")
"""unreachable: no connection, or one closed without an answer; timeout: no answer in time;
refused: an error answer (HTTP error status, DNS SERVFAIL / REFUSED / NXDOMAIN); malformed: an
answer that makes no sense."""


class SourceError(Exception):
    """A query that brought no node list; ``kind`` classifies it, ``detail`` says what happened."""

    def __init__(self, kind: ErrorKind, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind: ErrorKind = kind
        self.detail = detail


@dataclass(slots=True)
class Found:
    """The addresses of one successful query, and the entries that had to be skipped (why)."""

    addresses: list[ClusterNodeAddress] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


class NodeSource(Protocol):
    """Where the nodes are listed: the Docker Engine API, or a DNS name."""

    def describe(self) -> str:
        """For log lines: what is asked, and where."""
        ...

    async def find(self, default_port: int | None) -> Found:
        """The nodes listed now; ``default_port`` is for entries that carry none.

        Raises :class:`SourceError` when the query brought no list; never anything else.
        """
        ...

    def close(self) -> None:
        """Let go of connections (the extension stops)."""
        ...
