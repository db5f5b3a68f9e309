"""A Hive node in a background thread, for extension authors' tests."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from hive_core.config import HiveConfig, parse_config
from hive_core.testing._ports import free_port

T = TypeVar("T")


class RunningNode:
    """A started node: ``host`` and ``port`` of its MQTT listener, ``stop()`` to end it."""

    def __init__(self, config: HiveConfig, data_dir: Path, extensions: Iterable[Any],
                 load_installed: bool) -> None:
        from hive_core.node import HiveNode

        self.node = HiveNode(config, data_dir, extra_extensions=list(extensions),
                             load_installed=load_installed)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._run, name="hive-node", daemon=True)
        self._ready = threading.Event()
        self._error: BaseException | None = None

    def _run(self) -> None:
        loop: asyncio.AbstractEventLoop
        try:
            import uvloop
        except ImportError:  # plain asyncio is fine for tests
            loop = asyncio.new_event_loop()
        else:
            loop = uvloop.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self.node.run(started=self._ready.set,
                                                  install_signal_handlers=False))
        except BaseException as exc:  # reported to the test thread by start()
            self._error = exc
        finally:
            self._ready.set()
            loop.close()

    def start(self, timeout: float = 20.0) -> RunningNode:
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError(f"the Hive node did not start within {timeout} s")
        if self._error is not None or not self.node.listeners:
            raise RuntimeError("the Hive node failed to start") from self._error
        return self

    @property
    def host(self) -> str:
        return self.node.listeners[0].host

    @property
    def port(self) -> int:
        return self.node.listeners[0].port

    @property
    def extensions(self) -> Any:
        return self.node.extensions

    def extension(self, name: str) -> Any:
        """What the node made of one extension: ``active``, ``version``, ``source``, ``reason``."""
        found = [r for r in self.node.extensions.manager.records if r.name == name]
        if len(found) != 1:
            raise LookupError(f"{len(found)} extensions named {name!r} in this node")
        return found[0]

    @property
    def services(self) -> Any:
        """The node's ``HiveServices``; use them through :meth:`call` (they are not thread-safe)."""
        return self.node.services

    def call(self, function: Callable[..., T], *args: Any, timeout: float = 10.0) -> T:
        """Run ``function(*args)`` on the node's event loop and return its result.

        The node runs in another thread: anything that touches it (its services, its broker)
        must run there, e.g. ``node.call(node.services.publish, "t", b"x")``.
        """
        loop = self._loop
        if loop is None or not self._thread.is_alive():
            raise RuntimeError("the Hive node is not running")

        async def run() -> T:
            return function(*args)

        return asyncio.run_coroutine_threadsafe(run(), loop).result(timeout)

    def stop(self, timeout: float = 15.0) -> None:
        loop = self._loop
        if loop is not None and self._thread.is_alive():
            loop.call_soon_threadsafe(self.node.stop)
            self._thread.join(timeout)


def start_node(data_dir: Path, extensions: Iterable[Any] = (), config_xml: str = "",
               load_installed: bool = False) -> RunningNode:
    """Start a node on a free loopback port with ``extensions`` registered (modules or objects).

    ``config_xml`` is inserted inside ``<hivemq>`` (its ``<listeners>`` is ours). Installed
    extensions (entry points) are loaded only with ``load_installed=True``.
    """
    port = free_port()
    listeners = (f"<listeners><tcp-listener><port>{port}</port>"
                 "<bind-address>127.0.0.1</bind-address></tcp-listener></listeners>")
    config = parse_config(f"<hivemq>{listeners}{config_xml}</hivemq>", source="<test node>")
    return RunningNode(config, data_dir, extensions, load_installed).start()
