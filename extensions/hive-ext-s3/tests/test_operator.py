"""As an operator runs it: three real `hive run` nodes, only S3 discovery, a real S3 API.

Each node finds its settings where the README says (``data/extensions/s3-discovery/
s3discovery.properties``); the story is hive_ext_api's operator contract, on a bucket's records.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from hive_ext_api.testing import OperatorContract

from s3_server import S3Server

pytestmark = [pytest.mark.operator, pytest.mark.timeout(240)]

PREFIX = "operator/nodes/"
PROPERTIES = "s3-discovery/s3discovery.properties"


class TestOperator(OperatorContract):
    """A node's entry is its record; a dead node's record ages out of the bucket."""

    NAME, SERVICE, GONE_WITHIN, GONE = "s3-discovery", "S3", 15.0, "record was deleted"
    DEREGISTERED = r"s3-discovery: removed this node's record {entry}"
    OUTAGE_FAILED = r"s3-discovery: cannot \w+ .*; retrying"

    @pytest.fixture
    def extension_files(self, s3: S3Server, bucket: str) -> dict[str, str]:
        """Records expire 4 s after their last update, rewritten every second."""
        return {PROPERTIES: s3.properties(bucket, file_prefix=PREFIX, file_expiration="4",
                                          update_interval="1")}

    @pytest.fixture
    def outage_files(self, s3: S3Server, bucket: str) -> dict[str, str]:
        """Records outlive the outage (30 s), so nothing ages out while S3 is away."""
        return {PROPERTIES: s3.properties(bucket, file_prefix=PREFIX, file_expiration="30",
                                          update_interval="1")}

    @pytest.fixture
    def live_entries(self, s3: S3Server, bucket: str) -> Callable[[], set[str]]:
        return lambda: set(s3.keys(bucket, PREFIX))

    @pytest.fixture
    def entry_name(self) -> Callable[[str], str]:
        return lambda node_id: PREFIX + node_id

    @pytest.fixture
    def outage(self, s3: S3Server) -> tuple[Callable[[], object], Callable[[], object]]:
        """Back on the same port, the records still there, as with a real S3."""
        return s3.stop, s3.start

    @pytest.fixture
    def after_a_kill(self, hive_processes: Any) -> Callable[..., None]:
        def a_survivor_says_so(dead: Any, survivors: list[Any]) -> None:
            # once the deletion is back from S3 (a moment after the record went)
            hive_processes.wait_until(
                lambda: any(re.search(rf"node {dead.node_id} .* expired, deleted", node.log)
                            for node in survivors), 5,
                "a survivor logs that the dead node's record expired")
        return a_survivor_says_so
