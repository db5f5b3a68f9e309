"""Backups in a cluster: a live import on one node reaches the others (ownership, routes), and
a clustered node keeps a copy of its previous data in ``cluster-backup/`` at each start."""

from __future__ import annotations

import pytest
from conftest import HiveProcess
from e2e._backup_helpers import (
    BACKUPS,
    backup_folder,
    client,
    message,
    rest,
    wait_backup,
    write_backup,
)
from e2e._session_helpers import PahoClient

from cluster._nodes import (
    cluster_body,
    distinct_free_ports,
    wait_for,
    wait_for_members,
    wait_for_route,
)
from hive_ext_api.backup import ClientState, RetainedState, data_folder_stores, read_store

pytestmark = pytest.mark.timeout(90)

IN_MEMORY = "<persistence><mode>in-memory</mode></persistence>"


def file_backed_cluster(hive_factory, count: int) -> list[HiveProcess]:  # type: ignore[no-untyped-def]
    """``count`` nodes listing each other, each with the embedded store in its data folder."""
    ports = distinct_free_ports(3 * count)
    cluster_ports, mqtt_ports, rest_ports = ports[:count], ports[count:-count], ports[-count:]
    nodes = [hive_factory(body=cluster_body(port, cluster_ports, rest).replace(IN_MEMORY, ""),
                          port=mqtt, cluster=port, rest=rest)
             for port, mqtt, rest in zip(cluster_ports, mqtt_ports, rest_ports, strict=True)]
    wait_for_members(nodes, count)
    return nodes


def test_an_import_on_one_node_is_routed_to_and_fetched_from_the_others(hive_factory):
    first, second = file_backed_cluster(hive_factory, 2)
    # A session the cluster holds on the other node: the backup's copy must not replace it.
    remote = PahoClient(second.port, "remote", expiry=3600).connect()
    remote.subscribe("remote/own", qos=1)
    write_backup(backup_folder(first), "20260101-000000", [
        client("restored", {"jobs/#": 1}, [message("jobs/0", b"queued")]),
        client("remote", {"backup/remote": 1}, [message("backup/remote", b"old")])])
    wait_for(lambda: rest(first, f"{BACKUPS}/20260101-000000", "POST")[0] == 202, 5,
             "the import starts")
    backup = wait_backup(first, "20260101-000000")
    assert backup["state"] == "RESTORE_COMPLETED", backup
    restore = backup["restore"]
    assert (restore["sessions_imported"], restore["sessions_existing"]) == (1, 1)
    first.wait_for_log(r"Import of backup 20260101-000000 completed")

    # The other node routes the imported subscription to the importing node...
    wait_for_route(second, first, "jobs/#")
    publisher = PahoClient(second.port, "publisher").connect()
    publisher.publish("jobs/1", b"routed", qos=1)
    publisher.publish("remote/own", b"still remote", qos=1)
    assert remote.next_message().payload == b"still remote"
    # ...and knows the session is there: a reconnect on it fetches the session whole.
    restored = PahoClient(second.port, "restored", clean=False, expiry=3600).connect()
    assert restored.session_present is True
    assert [restored.next_message().payload for _ in range(2)] == [b"queued", b"routed"]
    for c in (remote, publisher, restored):
        c.close()


def _stores(node: HiveProcess) -> tuple[set[str], set[str]]:
    """(client ids, retained topics) of the copy in cluster-backup/."""
    clients, topics = set(), set()
    for state in read_store(node.data_dir / "cluster-backup" / "persistence" / "sessions.db"):
        if isinstance(state, ClientState):
            clients.add(state.session.client_id)
        elif isinstance(state, RetainedState):
            topics.add(state.message.topic)
    return clients, topics


def test_a_clustered_node_copies_its_previous_data_into_cluster_backup(hive_factory):
    (node,) = file_backed_cluster(hive_factory, 1)
    assert "Copied the node's persistent data" not in node.log  # nothing to copy yet
    keeper = PahoClient(node.port, "keeper", expiry=3600).connect()
    keeper.subscribe("jobs/#", qos=1)
    keeper.publish("state/one", b"1", qos=1, retain=True)
    keeper.close()
    node.restart()
    node.wait_for_log(r"Copied the node's persistent data \(persistence: \d+ files")
    assert _stores(node) == ({"keeper"}, {"state/one"})
    assert node.data_dir / "cluster-backup" / "persistence" / "sessions.db" in \
        data_folder_stores(node.data_dir)

    publisher = PahoClient(node.port, "publisher").connect()
    publisher.publish("state/two", b"2", qos=1, retain=True)
    publisher.close()
    node.restart()
    node.wait_for_log(r"\(the previous copy replaced\)")
    assert _stores(node) == ({"keeper"}, {"state/one", "state/two"})
    left = sorted(p.name for p in node.data_dir.iterdir() if "cluster-backup" in p.name)
    assert left == ["cluster-backup"]  # one copy, no half-made one beside it

    # Not clustered: no copy.
    plain = hive_factory()
    PahoClient(plain.port, "keeper", expiry=3600).connect().close()
    plain.restart()
    assert not (plain.data_dir / "cluster-backup").exists()
    assert "Copied the node's persistent data" not in plain.log


def test_an_imported_session_is_replicated_and_survives_its_node(hive_factory):
    first, second = file_backed_cluster(hive_factory, 2)
    write_backup(backup_folder(first), "20260101-000000", [
        client("restored", {"jobs/#": 1}, [message("jobs/0", b"queued")])])
    assert rest(first, f"{BACKUPS}/20260101-000000", "POST")[0] == 202
    assert wait_backup(first, "20260101-000000")["state"] == "RESTORE_COMPLETED"
    # A completed import is committed, and so on the node's backup (replica-count 2).
    first.kill()
    second.wait_for_log(r"Took over the 1 persistent sessions of failed node")
    restored = PahoClient(second.port, "restored", clean=False, expiry=3600).connect()
    assert restored.session_present is True
    assert restored.next_message().payload == b"queued"
    restored.close()
