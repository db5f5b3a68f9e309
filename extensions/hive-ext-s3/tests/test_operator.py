"""As an operator runs it: three real `hive run` nodes, only S3 discovery, a real S3 API.

Each node finds its settings where the README says (``data/extensions/s3-discovery/
s3discovery.properties``); ``GET /api/v1/cluster/nodes`` on every node is the judge, and
``GET /api/v1/metrics`` shows what was counted. The nodes are hive-broker's ``hive_processes``.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from s3_server import S3Server

pytestmark = [pytest.mark.operator, pytest.mark.timeout(240)]

PREFIX = "operator/nodes/"
PROPERTIES = "s3-discovery/s3discovery.properties"


def test_three_nodes_form_a_cluster_the_dead_age_out_and_the_restarted_rejoin(
        hive_processes: Any, s3: S3Server, bucket: str,
        record_property: pytest.RecordProperty) -> None:
    # records expire 4 s after their last update, rewritten every second
    files = {PROPERTIES: s3.properties(bucket, file_prefix=PREFIX, file_expiration="4",
                                       update_interval="1")}
    a, b, c = trio = [hive_processes.add(extension_files=files) for _ in range(3)]
    formed, after_serving = hive_processes.form(trio)
    record_property("s3_3_node_cluster_formed_s", round(formed, 2))
    print(f"\nS3 discovery: 3 nodes launched together agreed on 3 members after {formed:.2f} s "
          f"({after_serving:.2f} s after the last one served)")
    ids = {node.node_id for node in trio}
    assert a.members() == ids
    assert set(s3.keys(bucket, PREFIX)) == {PREFIX + node_id for node_id in ids}

    # kill -9: the others drop it (heartbeat), and its record ages out of the bucket
    dead_key = PREFIX + c.node_id
    c.kill()
    hive_processes.agree([a, b], 2, timeout=10)
    aged = hive_processes.wait_until(lambda: dead_key not in s3.keys(bucket, PREFIX), 15,
                                     "the dead node's record goes")
    print(f"S3 discovery: a killed node's record was deleted {aged:.2f} s after the kill")
    # the node that deleted it says so once the deletion is back from S3 (a moment later)
    hive_processes.wait_until(lambda: any(re.search(rf"node {c.node_id} .* expired, deleted",
                                                    node.log) for node in (a, b)), 5,
                              "a survivor logs that the dead node's record expired")

    # restarted, same data folder and node id: it rejoins
    rejoined = hive_processes.join(c, trio)
    print(f"S3 discovery: the restarted node rejoined in {rejoined:.2f} s")
    assert dead_key in s3.keys(bucket, PREFIX)

    # a clean stop deregisters at once
    assert c.terminate() == 0
    assert dead_key not in s3.keys(bucket, PREFIX)
    c.wait_for_log(rf"s3-discovery: removed this node's record {re.escape(dead_key)}")
    hive_processes.agree([a, b], 2, timeout=10)


def test_an_s3_outage_keeps_the_cluster_counts_the_errors_and_new_nodes_join_after_it(
        hive_processes: Any, s3: S3Server, bucket: str) -> None:
    # Records outlive the outage here (30 s), so nothing ages out while S3 is away.
    files = {PROPERTIES: s3.properties(bucket, file_prefix=PREFIX, file_expiration="30",
                                       update_interval="1")}
    trio = [hive_processes.add(extension_files=files) for _ in range(3)]
    hive_processes.form(trio)
    assert all(node.extension_metric("s3-discovery.errors") == 0 for node in trio)

    # three more reloads fail on every node while S3 is away; it comes back on the same port,
    # the records still there, as with a real S3
    hive_processes.ride_out_an_outage(trio, s3.stop, s3.start, "s3-discovery",
                                      failed=r"s3-discovery: cannot \w+ .*; retrying",
                                      min_failed=4)

    newcomer = hive_processes.add(extension_files=files)
    joined = hive_processes.join(newcomer, [*trio, newcomer])
    print(f"\nS3 discovery: after the outage a new node joined in {joined:.2f} s")
    assert set(s3.keys(bucket, PREFIX)) == {PREFIX + node.node_id for node in [*trio, newcomer]}
