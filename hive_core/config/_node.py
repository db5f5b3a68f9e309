"""Hive additions about this node: <persistence> and <extensions>."""

from __future__ import annotations

from typing import Literal

from pydantic_xml import element, wrapped

from ._base import ConfigModel, NonNegativeInt, XmlBool

__all__ = ["Extensions", "Persistence"]


class Persistence(ConfigModel, tag="persistence"):
    """How this node stores sessions, queued and retained messages."""

    mode: Literal["file", "in-memory"] = element(tag="mode", default="file")
    """file: kept in <data>/persistence/sessions.db; in-memory: nothing kept."""
    commit_interval: NonNegativeInt = element(tag="commit-interval", default=2)
    """Milliseconds to gather writes into one commit; 0 commits every write at once."""
    sync: XmlBool = element(tag="sync", default=True)
    """fsync each commit."""


class Extensions(ConfigModel, tag="extensions"):
    """<extensions><disabled><extension>name</extension>...</disabled></extensions>."""

    disabled: tuple[str, ...] = wrapped("disabled", element(tag="extension"), default=())
    """Names of installed extensions (built-in or entry point) not to load."""
