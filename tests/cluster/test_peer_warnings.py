"""A peer that cannot be reached is warned about (once a minute per address), not logged at DEBUG;
a node reached under a second address is one member, not a new one at every reload."""

from __future__ import annotations

import asyncio
import logging

import pytest

from cluster.test_membership import PORT, Node, address, full_mesh, until

from ._memory_network import MemoryNetwork

RELOADS = 0.05  # seconds between two reloads of the test's seed discovery


def test_an_unreachable_peer_is_warned_about_once_not_at_every_reload(
        caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        network = MemoryNetwork()
        lonely = Node("n1", [address("n1"), address("ghost")], network.transport("n1", PORT))
        ghost = Node("ghost", [], network.transport("ghost", PORT))
        try:
            await lonely.start()
            await asyncio.sleep(20 * RELOADS)  # about 20 dials of the ghost, all refused
            warnings = [r for r in caplog.records if "cannot reach cluster node" in r.message]
            assert len(warnings) == 1, caplog.text
            assert warnings[0].levelno == logging.WARNING
            assert "ghost:7800: connection refused" in warnings[0].getMessage()
            # once it is reached, its next outage is warned about at once
            await ghost.start()
            await until(full_mesh([lonely, ghost]), what="the ghost joining")
            await ghost.stop()
            await until(lambda: not lonely.peers, what="the ghost leaving")
            await until(lambda: len([r for r in caplog.records
                                     if "cannot reach cluster node" in r.message]) == 2,
                        timeout=1.0, what="a second warning")
        finally:
            await ghost.stop()
            await lonely.stop()

    with caplog.at_level(logging.INFO, "hive.cluster"):
        asyncio.run(main())
