"""As an operator runs it: three real `hive run` nodes, only S3 discovery, a real S3 API.

Each node finds its settings where the README says (``data/extensions/s3-discovery/
s3discovery.properties``); ``GET /api/v1/cluster/nodes`` on every node is the judge, and
``GET /api/v1/metrics`` shows what was counted. The nodes are hive-broker's ``hive_processes``.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from s3_server import S3Server

pytestmark = [pytest.mark.operator, pytest.mark.timeout(240)]

PREFIX = "operator/nodes/"
PROPERTIES = "s3-discovery/s3discovery.properties"


def keys(s3: S3Server, bucket: str) -> set[str]:
    client: Any = s3.client()
    return {item["Key"] for item in
            client.list_objects_v2(Bucket=bucket, Prefix=PREFIX).get("Contents", [])}


def test_three_nodes_form_a_cluster_the_dead_age_out_and_the_restarted_rejoin(
        hive_processes: Any, s3: S3Server, bucket: str,
        record_property: pytest.RecordProperty) -> None:
    # records expire 4 s after their last update, rewritten every second
    files = {PROPERTIES: s3.properties(bucket, file_prefix=PREFIX, file_expiration="4",
                                       update_interval="1")}
    a, b, c = trio = [hive_processes.add(extension_files=files) for _ in range(3)]
    begun = time.monotonic()
    serving = hive_processes.start_together(trio)
    hive_processes.agree(trio, 3)
    formed = time.monotonic() - begun
    record_property("s3_3_node_cluster_formed_s", round(formed, 2))
    print(f"\nS3 discovery: 3 nodes launched together agreed on 3 members after {formed:.2f} s "
          f"({time.monotonic() - serving:.2f} s after the last one served)")
    ids = {node.node_id for node in trio}
    assert a.members() == ids
    assert keys(s3, bucket) == {PREFIX + node_id for node_id in ids}

    # kill -9: the others drop it (heartbeat), and its record ages out of the bucket
    dead_key = PREFIX + c.node_id
    c.kill()
    hive_processes.agree([a, b], 2, timeout=10)
    aged = hive_processes.wait_until(lambda: dead_key not in keys(s3, bucket), 15,
                                     "the dead node's record goes")
    print(f"S3 discovery: a killed node's record was deleted {aged:.2f} s after the kill")
    # the node that deleted it says so once the deletion is back from S3 (a moment later)
    hive_processes.wait_until(lambda: any(re.search(rf"node {c.node_id} .* expired, deleted",
                                                    node.log) for node in (a, b)), 5,
                              "a survivor logs that the dead node's record expired")

    # restarted, same data folder and node id: it rejoins
    begun = time.monotonic()
    c.start()
    hive_processes.agree(trio, 3)
    print(f"S3 discovery: the restarted node rejoined in {time.monotonic() - begun:.2f} s")
    assert dead_key in keys(s3, bucket)

    # a clean stop deregisters at once
    assert c.terminate() == 0
    assert dead_key not in keys(s3, bucket)
    c.wait_for_log(rf"s3-discovery: removed this node's record {re.escape(dead_key)}")
    hive_processes.agree([a, b], 2, timeout=10)


def test_an_s3_outage_keeps_the_cluster_counts_the_errors_and_new_nodes_join_after_it(
        hive_processes: Any, s3: S3Server, bucket: str) -> None:
    # Records outlive the outage here (30 s), so nothing ages out while S3 is away.
    files = {PROPERTIES: s3.properties(bucket, file_prefix=PREFIX, file_expiration="30",
                                       update_interval="1")}
    trio = [hive_processes.add(extension_files=files) for _ in range(3)]
    hive_processes.start_together(trio)
    hive_processes.agree(trio, 3)
    assert all(node.extension_metric("s3-discovery.errors") == 0 for node in trio)

    s3.stop()
    try:
        for node in trio:
            node.wait_for_log(r"s3-discovery: cannot \w+ .*; retrying", timeout=10)
        time.sleep(3)  # three more reloads fail on every node
        for node in trio:
            assert len(node.members()) == 3, node.log
            assert node.extension_metric("s3-discovery.errors") >= 4, node.log
            assert "Traceback" not in node.log
    finally:
        s3.start()  # on the same port: the records are still there, as with a real S3
    for node in trio:
        recovered = node.wait_for_log(
            r"s3-discovery: answering again after [\d.]+ s and (\d+) failed calls")
        assert int(recovered.group(1)) >= 4, node.log

    newcomer = hive_processes.add(extension_files=files)
    begun = time.monotonic()
    newcomer.start()
    hive_processes.agree([*trio, newcomer], 4)
    print(f"\nS3 discovery: after the outage a new node joined in "
          f"{time.monotonic() - begun:.2f} s")
    assert keys(s3, bucket) == {PREFIX + node.node_id for node in [*trio, newcomer]}
