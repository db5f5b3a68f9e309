"""The tests of a discovery extension's hooks, the extension started by hand (no node) on a
working service.

A test module subclasses :class:`DiscoveryHooksContract` and gives, as fixtures, how to start
the extension (``start_discovery``), entries of the service that are not nodes'
(``foreign_entries``) and every entry's name in the service (``entry_names``). The tests are
async (anyio): the extension's refresher lives in the test's loop; the module's conftest gives
``anyio_backend`` (``asyncio``, as the node's).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, ClassVar

import anyio
import pytest

from hive_ext_api import ClusterNodeAddress

A = ClusterNodeAddress("127.0.0.1", 17801)
"""The cluster address of the first node a test starts by hand."""
B = ClusterNodeAddress("127.0.0.1", 17802)
"""The second's."""

SCENARIO_S = 60  # a test's deadline: a hook that hangs fails the test, it does not stall it


class DiscoveryHooksContract:
    """The tests (see the module docstring); the subclass sets the class attributes and
    overrides the fixtures that raise :class:`NotImplementedError`."""

    MALFORMED_COUNTER: ClassVar[str] = ""
    """The metric that counts entries that are not nodes' (``s3-discovery.records.malformed``)."""
    NOT_A_NODE: ClassVar[str] = ""
    """The words of the warning about an entry that is not a node's (``not a node record``)."""

    @pytest.fixture
    def start_discovery(self) -> Callable[..., Any]:
        """``start_discovery(metrics=None)``: the extension on the working service, started by
        hand (``PollingDiscovery.start``); ``metrics``: hive-broker's ``hive_metrics``, or
        None."""
        raise NotImplementedError

    @pytest.fixture
    def foreign_entries(self) -> dict[str, str]:
        """Entries written into the service that are not nodes' (another program's, a record of
        a later format): each one's name, and a part of the warning it gets."""
        raise NotImplementedError

    @pytest.fixture
    def entry_names(self) -> Callable[[], set[str]]:
        """The name of every entry in the service now, a node's or not."""
        raise NotImplementedError

    @pytest.mark.anyio
    async def test_reload_answers_every_live_node(
            self, start_discovery: Callable[..., Any]) -> None:
        with anyio.fail_after(SCENARIO_S):
            a, b = start_discovery(), start_discovery()
            await a.hive_discovery_init(A, "node-a")
            await b.hive_discovery_init(B, "node-b")
            assert sorted(await a.hive_discovery_reload() or [], key=str) == [A, B]
            assert sorted(await b.hive_discovery_reload() or [], key=str) == [A, B]
            await b.hive_discovery_destroy()
            assert await a.hive_discovery_reload() == [A]
            for node in (a, b):
                await node.hive_extension_stop()

    @pytest.mark.anyio
    async def test_foreign_entries_are_skipped_counted_and_logged_once(
            self, start_discovery: Callable[..., Any], foreign_entries: dict[str, str],
            entry_names: Callable[[], set[str]], caplog: pytest.LogCaptureFixture,
            hive_metrics: Any) -> None:
        with anyio.fail_after(SCENARIO_S):
            node = start_discovery(hive_metrics)
            await node.hive_discovery_init(A, "node-a")
            with caplog.at_level(logging.WARNING):
                for _ in range(3):
                    assert await node.hive_discovery_reload() == [A]
            assert hive_metrics[self.MALFORMED_COUNTER] == len(foreign_entries)
            assert caplog.text.count(self.NOT_A_NODE) == len(foreign_entries)
            for warning in foreign_entries.values():
                assert warning in caplog.text
            assert set(foreign_entries) <= entry_names()  # never removed
            await node.hive_discovery_destroy()
            await node.hive_extension_stop()
