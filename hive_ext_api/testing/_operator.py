"""A discovery extension as an operator runs it: three real `hive run` nodes with only this
discovery, against the real service.

A test module subclasses :class:`OperatorContract` and gives, as fixtures, the files each node
finds in its data folder (``extension_files``), the names of the live nodes' entries in the
service (``live_entries``) and a node's entry name (``entry_name``), and how to take the service
away and bring it back (``outage``). The nodes are hive-broker's ``hive_processes``;
``GET /api/v1/cluster/nodes`` on every node is the judge, ``GET /api/v1/metrics`` shows what was
counted. The tests take a minute or two: mark them (``pytestmark``) as the suite's slow ones.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, ClassVar

import pytest

Check = Callable[..., None]


class OperatorContract:
    """The tests (see the module docstring); the subclass sets the class attributes and
    overrides the fixtures that raise :class:`NotImplementedError`, and may add checks of its
    own at three moments (the fixtures ``after_a_kill``, ``after_a_clean_stop`` and
    ``after_the_outage``)."""

    NAME: ClassVar[str] = ""
    """The extension's name (``s3-discovery``)."""
    SERVICE: ClassVar[str] = ""
    """The service's name (``S3``): in the lines the tests print, and lower-case in the property
    they record (``s3_3_node_cluster_formed_s``)."""
    GONE_WITHIN: ClassVar[float] = 10.0
    """Seconds after a kill -9 within which the dead node's entry is no longer live."""
    GONE: ClassVar[str] = "entry went"
    """How the service drops a dead node's entry, in the line printed with the seconds it took
    (``record was deleted``)."""
    DEREGISTERED: ClassVar[str] = ""
    """A pattern of the line a node logs when a clean stop removed its entry (``{entry}``: the
    entry's name, escaped)."""
    OUTAGE_FAILED: ClassVar[str] = ""
    """A pattern of the line each node logs when the service is away."""

    @pytest.fixture
    def extension_files(self) -> dict[str, str]:
        """The files of each node's ``data/extensions`` folder (``s3-discovery/s3discovery.
        properties``): the extension's settings, with entries that go soon after a kill."""
        raise NotImplementedError

    @pytest.fixture
    def outage_files(self, extension_files: dict[str, str]) -> dict[str, str]:
        """The files for the outage test (the same, unless entries must outlive the outage)."""
        return extension_files

    @pytest.fixture
    def live_entries(self) -> Callable[[], set[str]]:
        """The names of the live nodes' entries in the service now."""
        raise NotImplementedError

    @pytest.fixture
    def entry_name(self) -> Callable[[str], str]:
        """The name a node's entry has in the service, from its node id."""
        raise NotImplementedError

    @pytest.fixture
    def outage(self) -> tuple[Callable[[], object], Callable[[], object]]:
        """Take the service away; bring it back (on the same port)."""
        raise NotImplementedError

    @pytest.fixture
    def after_a_kill(self) -> Check:
        """``check(dead, survivors)``, once the dead node's entry is no longer live."""
        return lambda dead, survivors: None

    @pytest.fixture
    def after_a_clean_stop(self) -> Check:
        """``check(stopped)``, once the stopped node's entry is gone."""
        return lambda stopped: None

    @pytest.fixture
    def after_the_outage(self) -> Check:
        """``check(nodes)``, once every node is live in the service again."""
        return lambda nodes: None

    def test_three_nodes_form_a_cluster_the_dead_drop_out_and_the_restarted_rejoin(
            self, hive_processes: Any, extension_files: dict[str, str],
            live_entries: Callable[[], set[str]], entry_name: Callable[[str], str],
            after_a_kill: Check, after_a_clean_stop: Check,
            record_property: Callable[[str, object], None]) -> None:
        a, b, c = trio = [hive_processes.add(extension_files=extension_files) for _ in range(3)]
        formed, after_serving = hive_processes.form(trio)
        record_property(f"{self.SERVICE.lower()}_3_node_cluster_formed_s", round(formed, 2))
        print(f"\n{self.SERVICE} discovery: 3 nodes launched together agreed on 3 members after "
              f"{formed:.2f} s ({after_serving:.2f} s after the last one served)")
        ids = {node.node_id for node in trio}
        assert a.members() == ids
        assert live_entries() == {entry_name(node_id) for node_id in ids}

        # kill -9: the others drop it (heartbeat), and its entry goes
        dead = entry_name(c.node_id)
        c.kill()
        hive_processes.agree([a, b], 2, timeout=10)
        gone = hive_processes.wait_until(lambda: dead not in live_entries(), self.GONE_WITHIN,
                                         "the dead node's entry goes")
        print(f"{self.SERVICE} discovery: a killed node's {self.GONE} {gone:.2f} s after the kill")
        after_a_kill(c, [a, b])

        # restarted, same data folder and node id: it rejoins
        rejoined = hive_processes.join(c, trio)
        print(f"{self.SERVICE} discovery: the restarted node rejoined in {rejoined:.2f} s")
        assert dead in live_entries()

        # a clean stop deregisters at once
        assert c.terminate() == 0
        assert dead not in live_entries()
        after_a_clean_stop(c)
        c.wait_for_log(self.DEREGISTERED.format(entry=re.escape(dead)))
        hive_processes.agree([a, b], 2, timeout=10)

    def test_an_outage_keeps_the_cluster_counts_the_errors_and_new_nodes_join_after_it(
            self, hive_processes: Any, outage_files: dict[str, str],
            live_entries: Callable[[], set[str]], entry_name: Callable[[str], str],
            outage: tuple[Callable[[], object], Callable[[], object]],
            after_the_outage: Check) -> None:
        trio = [hive_processes.add(extension_files=outage_files) for _ in range(3)]
        hive_processes.form(trio)
        assert all(node.extension_metric(f"{self.NAME}.errors") == 0 for node in trio)

        # three more reloads fail on every node while the service is away
        stop, start = outage
        hive_processes.ride_out_an_outage(trio, stop, start, self.NAME,
                                          failed=self.OUTAGE_FAILED, min_failed=4)
        hive_processes.wait_until(
            lambda: live_entries() == {entry_name(node.node_id) for node in trio}, 10,
            "every node live in the service again")
        after_the_outage(trio)

        newcomer = hive_processes.add(extension_files=outage_files)
        joined = hive_processes.join(newcomer, [*trio, newcomer])
        print(f"\n{self.SERVICE} discovery: after the outage a new node joined in {joined:.2f} s")
        assert live_entries() == {entry_name(node.node_id) for node in [*trio, newcomer]}
