"""About this node: <overload-protection>, and Hive's additions <persistence> and <extensions>."""

from __future__ import annotations

from typing import Literal

from pydantic_xml import element, wrapped

from ._base import ConfigModel, NonNegativeInt, XmlBool

__all__ = ["Extensions", "OverloadProtection", "Persistence"]


class Persistence(ConfigModel, tag="persistence"):
    """How this node stores sessions, queued and retained messages."""

    mode: Literal["file", "in-memory"] = element(tag="mode", default="file")
    """file: kept in <data>/persistence/sessions.db; in-memory: nothing kept."""
    commit_interval: NonNegativeInt = element(tag="commit-interval", default=2)
    """Milliseconds to gather writes into one commit; 0 commits every write at once."""
    sync: XmlBool = element(tag="sync", default=True)
    """fsync each commit."""
    delivery_hold: NonNegativeInt = element(tag="delivery-hold", default=50)
    """Milliseconds a QoS 1 delivery sent at once to a persistent session may wait for its
    PUBACK before it is written (and, with replica-count above 1, before its ops go to the
    backups); one acknowledged sooner is never written nor replicated; 0 writes it with the
    next commit."""

    @property
    def hold_seconds(self) -> float:
        """``delivery_hold`` in seconds."""
        return self.delivery_hold / 1000


class Extensions(ConfigModel, tag="extensions"):
    """<extensions><disabled><extension>name</extension>...</disabled></extensions>."""

    disabled: tuple[str, ...] = wrapped("disabled", element(tag="extension"), default=())
    """Names of installed extensions (built-in or entry point) not to load."""


class OverloadProtection(ConfigModel, tag="overload-protection"):
    """What a node does when it gets more work than it can do (README, "Overload protection").

    The node measures its pressure ten times a second: how late its event loop runs, the
    messages waiting for delivery to connected clients, the bytes waiting for other nodes, how
    long the disk takes to commit, its memory, and the pressure other nodes announce. While it
    is under pressure, the clients that send the most stop being read (each gets a fair share
    of what the node can take), and the other nodes hold back their own heaviest senders
    instead of forwarding more; reading resumes as the pressure falls.
    """

    enabled: XmlBool = element(tag="enabled", default=True)
    """Whether the node protects itself that way; false: every client is read as fast as it
    sends, whatever the node's pressure."""
