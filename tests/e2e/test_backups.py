"""Backups of a running node and their live import, against real `hive run` processes:
the REST API (``/api/v1/management/backups``), `hive backups ...`, paho clients."""

from __future__ import annotations

import base64
import dataclasses
import http.client
import json
import os
import shutil
import subprocess
import sys
import time

import pytest
from conftest import free_port
from e2e._backup_helpers import (
    BACKUPS,
    backup_folder,
    client,
    hive_cli,
    message,
    rest,
    rest_on,
    retained,
    wait_backup,
    write_backup,
)
from e2e._session_helpers import PahoClient, retained_on

from hive_core import __version__
from hive_core.admin import hash_password
from hive_ext_api import StoredInflight, StoredSubscription
from hive_ext_api.backup import BackupReader, ClientState, RetainedState

pytestmark = pytest.mark.timeout(90)


def _node(hive_factory, more: str = ""):  # type: ignore[no-untyped-def]
    port = free_port()
    return hive_factory(body=rest_on(port, more), rest=port)


def test_create_list_read_back_then_import_into_a_fresh_node(hive_factory):
    source = _node(hive_factory)
    url = f"http://127.0.0.1:{source.ports['rest']}"
    keeper = PahoClient(source.port, "keeper", expiry=3600).connect()
    keeper.subscribe("jobs/#", qos=1)
    keeper.disconnect()
    publisher = PahoClient(source.port, "publisher").connect()
    for n in range(3):
        publisher.publish(f"jobs/{n}", f"job {n}".encode(), qos=1)
    publisher.publish("state/a", b"A", qos=1, retain=True)
    publisher.publish("state/b", b"B", qos=1, retain=True)
    publisher.close()

    made = hive_cli("backups", "create", "--rest", url, "--json")
    assert made.returncode == 0, made.stderr
    backup = json.loads(made.stdout)
    assert backup["state"] == "COMPLETED"
    assert backup["counts"] == {"clients": 1, "retained": 2, "queued": 3}
    path = backup_folder(source) / backup["id"] / backup["file"]
    assert path.name == f"{backup['id']}.hive-{__version__}.backup"
    assert path.stat().st_size == backup["bytes"]
    reader = BackupReader(path)
    records = list(reader.records())
    clients = [r for r in records if isinstance(r, ClientState)]
    assert [c.session.client_id for c in clients] == ["keeper"]
    assert [m.payload for _seq, m in clients[0].queue] == [b"job 0", b"job 1", b"job 2"]
    assert list(clients[0].session.subscriptions) == ["jobs/#"]
    assert clients[0].version > 0
    assert sorted(r.message.topic for r in records if isinstance(r, RetainedState)) == \
        ["state/a", "state/b"]
    listed = hive_cli("backups", "list", "--rest", url, "--json")
    assert listed.returncode == 0, listed.stderr
    assert [item["id"] for item in json.loads(listed.stdout)] == [backup["id"]]
    table = hive_cli("backups", "list", "--rest", url)
    assert backup["id"] in table.stdout and "COMPLETED" in table.stdout

    # A fresh node, the backup placed in its backup folder, imported with the CLI.
    target = _node(hive_factory)
    shutil.copytree(path.parent, backup_folder(target) / backup["id"])
    began = time.monotonic()
    imported = hive_cli("backups", "import", backup["id"], "--rest",
                        f"http://127.0.0.1:{target.ports['rest']}", "--interval", "0.05")
    assert imported.returncode == 0, imported.stderr
    assert f"Backup {backup['id']}: RESTORE_COMPLETED" in imported.stdout
    assert "imported: 1 sessions (3 queued messages), 2 retained messages" in imported.stdout
    assert f"{backup['id']}: RESTORE_IN_PROGRESS" in imported.stderr  # progress was shown
    assert time.monotonic() - began < 10
    status = hive_cli("backups", "status", backup["id"], "--rest",
                      f"http://127.0.0.1:{target.ports['rest']}", "--json")
    assert status.returncode == 0 and json.loads(status.stdout)["restore"]["records_read"] == 3
    target.wait_for_log(r"Import of backup \S+ completed in \d+ ms: 1 sessions imported")

    back = PahoClient(target.port, "keeper", clean=False, expiry=3600).connect()
    assert back.session_present is True
    assert [back.next_message().payload for _ in range(3)] == [b"job 0", b"job 1", b"job 2"]
    back.close()
    assert retained_on(target.port, "state/#") == {"state/a": b"A", "state/b": b"B"}


def test_live_import_keeps_what_the_node_has_and_adds_what_it_lacks(hive_factory):
    node = _node(hive_factory)
    # What the node has: a connected client, a disconnected session, a retained message.
    keeper = PahoClient(node.port, "keeper", expiry=3600).connect()
    keeper.subscribe("keeper/own", qos=1)
    sleeper = PahoClient(node.port, "sleeper", expiry=3600).connect()
    sleeper.subscribe("sleeper/own", qos=1)
    sleeper.disconnect()
    publisher = PahoClient(node.port, "publisher").connect()
    publisher.publish("state/a", b"live", qos=1, retain=True)

    now = time.time()
    write_backup(backup_folder(node), "20260101-000000", [
        client("keeper", {"backup/keeper": 1}, [message("backup/keeper", b"old")]),
        client("sleeper", {"backup/sleeper": 1}, [message("backup/sleeper", b"old")]),
        client("restored", {"jobs/#": 1}, [message("jobs/1", b"kept"),
                                          message("jobs/2", b"stale", expiry_at=now - 5),
                                          message("jobs/3", b"kept too")]),
        client("gone", {"jobs/#": 1}, expiry=10, disconnected_at=now - 100),
        retained("state/a", b"from backup"),
        retained("state/b", b"from backup"),
        retained("state/c", b"stale", expiry_at=now - 5),
    ])
    status, body = rest(node, f"{BACKUPS}/20260101-000000", "POST")
    assert status == 202 and body["backup"]["state"] == "RESTORE_IN_PROGRESS"
    backup = wait_backup(node, "20260101-000000")
    assert backup["state"] == "RESTORE_COMPLETED", backup
    assert backup["restore"] == {
        "sessions_imported": 1, "sessions_existing": 2, "sessions_expired": 1,
        "queued_imported": 2, "queued_expired": 1, "retained_imported": 1,
        "retained_existing": 1, "retained_expired": 1, "records_read": 7, "records_total": 7}

    # The connected client kept its session and its connection.
    assert not keeper.disconnected.is_set()
    publisher.publish("keeper/own", b"still mine", qos=1)
    assert keeper.next_message().payload == b"still mine"
    publisher.publish("backup/keeper", b"not subscribed", qos=1)
    keeper.no_message(0.3)
    # The disconnected session kept its own subscriptions, not the backup's.
    publisher.publish("sleeper/own", b"for sleeper", qos=1)
    sleeper = PahoClient(node.port, "sleeper", clean=False, expiry=3600).connect()
    assert sleeper.session_present is True
    assert sleeper.next_message().payload == b"for sleeper"
    sleeper.no_message(0.3)
    # The absent session came in whole: its queue at its positions, its subscription live.
    publisher.publish("jobs/4", b"after the import", qos=1)
    restored = PahoClient(node.port, "restored", clean=False, expiry=3600).connect()
    assert restored.session_present is True
    assert [restored.next_message().payload for _ in range(3)] == \
        [b"kept", b"kept too", b"after the import"]
    # The expired session was not brought back.
    gone = PahoClient(node.port, "gone", clean=False, expiry=3600).connect()
    assert gone.session_present is False
    assert retained_on(node.port, "state/#") == {"state/a": b"live",
                                                 "state/b": b"from backup"}
    for c in (keeper, sleeper, restored, gone, publisher):
        c.close()


def test_a_damaged_missing_or_too_new_backup_fails_with_its_reason(hive_factory):
    node = _node(hive_factory)
    url = f"http://127.0.0.1:{node.ports['rest']}"
    folder = backup_folder(node)
    assert rest(node, f"{BACKUPS}/20990101-000000", "POST")[0] == 404  # no such folder
    assert rest(node, f"{BACKUPS}/..", "POST")[0] == 404
    assert rest(node, BACKUPS, "DELETE")[0] == 405

    (folder / "empty").mkdir(parents=True)
    assert rest(node, f"{BACKUPS}/empty", "POST")[0] == 202
    backup = wait_backup(node, "empty")
    assert backup["state"] == "RESTORE_FAILED" and "no backup file" in backup["reason"]

    path = write_backup(folder, "damaged", [
        retained("state/first", b"x"),
        client("restored", {"jobs/#": 1}, [message("jobs/1", b"a payload to damage")])])
    data = bytearray(path.read_bytes())
    at = data.index(base64.b64encode(b"a payload to damage"))
    data[at] ^= 0x01
    path.write_bytes(bytes(data))
    failed = hive_cli("backups", "import", "damaged", "--rest", url)
    assert failed.returncode == 3, failed.stderr
    assert "RESTORE_FAILED" in failed.stderr and "CRC mismatch" in failed.stderr
    # Checked whole before anything is applied: not even the record before the damage.
    assert retained_on(node.port, "state/#") == {}

    newer = write_backup(folder, "newer", [retained("state/x", b"x")])
    data = bytearray(newer.read_bytes())
    data[data.index(b'"format": 1') + len(b'"format": ')] = ord("9")
    newer.write_bytes(bytes(data))
    assert rest(node, f"{BACKUPS}/newer", "POST")[0] == 202
    backup = wait_backup(node, "newer")
    assert backup["state"] == "RESTORE_FAILED"
    assert "backup format 9 is newer than this Hive reads" in backup["reason"]
    node.wait_for_log(r"Import of backup newer failed: .*format 9")
    assert rest(node, BACKUPS)[0] == 200
    listing = rest(node, BACKUPS)[1]
    states = {item["id"]: item["state"] for item in listing["items"]}
    assert states == {"empty": "RESTORE_FAILED", "damaged": "RESTORE_FAILED",
                      "newer": "RESTORE_FAILED"}
    assert hive_cli("backups", "status", "nope", "--rest", url).returncode == 1

    # One backup or import at a time: a second one asked for meanwhile is refused (409).
    write_backup(folder, "large", [client(f"c{n}", {f"dev/{n}/#": 1}, [message(f"dev/{n}", b"x")])
                                   for n in range(3000)])
    assert rest(node, f"{BACKUPS}/large", "POST")[0] == 202
    status, body = rest(node, BACKUPS, "POST")
    assert status == 409 and "large is RESTORE_IN_PROGRESS" in body["detail"]
    backup = wait_backup(node, "large", timeout=60)
    assert backup["state"] == "RESTORE_COMPLETED"
    assert backup["restore"]["sessions_imported"] == 3000


def test_backups_need_credentials_when_rest_auth_is_on(hive_factory):
    password = "backup operator"
    auth = ("<auth><enabled>true</enabled><users><user><name>ops</name>"
            f"<password-hash>{hash_password(password)}</password-hash></user></users></auth>")
    node = _node(hive_factory, auth)
    assert rest(node, BACKUPS, "POST")[0] == 401
    assert rest(node, BACKUPS)[0] == 401
    assert rest(node, f"{BACKUPS}/x", "POST")[0] == 401
    assert not backup_folder(node).exists()
    basic = "Basic " + base64.b64encode(f"ops:{password}".encode()).decode()
    status, body = rest(node, BACKUPS, "POST", {"Authorization": basic})
    assert status == 202
    url = f"http://127.0.0.1:{node.ports['rest']}"
    refused = hive_cli("backups", "status", body["backup"]["id"], "--rest", url)
    assert refused.returncode == 1 and "401" in refused.stderr
    shown = subprocess.run([sys.executable, "-m", "hive_core.cli", "backups", "status",
                            body["backup"]["id"], "--rest", url, "--user", "ops", "--json"],
                           capture_output=True, text=True, timeout=30,
                           env={**os.environ, "HIVE_REST_PASSWORD": password})
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["state"] in ("RUNNING", "COMPLETED")


def test_a_node_without_an_embedded_store_backs_up_its_live_state(hive_factory):
    port = free_port()
    node = hive_factory(body=rest_on(port) + "<persistence><mode>in-memory</mode></persistence>",
                        rest=port)
    keeper = PahoClient(node.port, "keeper", expiry=3600).connect()
    keeper.subscribe("jobs/#", qos=1)
    keeper.disconnect()
    publisher = PahoClient(node.port, "publisher").connect()
    publisher.publish("jobs/1", b"queued", qos=1)
    publisher.publish("state/a", b"A", qos=1, retain=True)
    publisher.close()
    status, body = rest(node, BACKUPS, "POST")
    assert status == 202
    backup = wait_backup(node, body["backup"]["id"])
    assert backup["state"] == "COMPLETED", backup
    assert backup["counts"] == {"clients": 1, "retained": 1, "queued": 1}
    records = list(BackupReader(backup_folder(node) / backup["id"] / backup["file"]).records())
    assert [m.payload for r in records if isinstance(r, ClientState) for _s, m in r.queue] == \
        [b"queued"]
    assert not (node.data_dir / "persistence").exists()


def _bad_records() -> list[tuple[str, ClientState | RetainedState, str]]:
    """Records no MQTT client could have made, each with what the refusal must say."""
    def with_subscription(**fields: object) -> ClientState:
        state = client("planted", {})
        sub = StoredSubscription("#", 1)
        state.session.subscriptions["#"] = dataclasses.replace(sub, **fields)  # type: ignore[arg-type]
        return state

    def with_inflight(packet_id: int) -> ClientState:
        state = client("planted", {"a/#": 1})
        state.inflight.append(StoredInflight("planted", packet_id, "out", "publish",
                                             message("a/b", b"x")))
        return state

    wildcard = client("planted", {"w/#": 1})
    wildcard.session.subscriptions["w/+#"] = StoredSubscription("w/+#", 1)
    return [
        ("sub-id", with_subscription(subscription_id=-1), "subscription identifier -1"),
        ("sub-id-big", with_subscription(subscription_id=268_435_456), "268435456"),
        ("sub-qos", with_subscription(qos=3), "QoS 3"),
        ("filter", wildcard, "must be the whole last level"),
        ("sys", retained("$SYS/broker/uptime", b"forged"), "under $SYS"),
        ("wildcard-topic", retained("w/+/#", b"x"), "wildcard"),
        ("empty-topic", retained("", b"x"), "topic name is empty"),
        ("queued-sys", client("planted", {"#": 1}, [message("$SYS/x", b"x")]), "under $SYS"),
        ("packet-id-0", with_inflight(0), "packet identifier 0 is outside 1..65535"),
        ("packet-id-70000", with_inflight(70_000), "packet identifier 70000"),
    ]


def test_records_against_mqtts_rules_are_refused_naming_the_record(hive_factory):
    """Issue 20 (3): an imported subscription identifier -1 made every PUBLISH end in 0x83;
    retained $SYS, wildcard and empty topics and packet ids 0 and 70,000 got in."""
    port = free_port()
    node = hive_factory(body=rest_on(port) + "<mqtt><packets><max-packet-size>1000"
                        "</max-packet-size></packets></mqtt>", rest=port)
    folder = backup_folder(node)
    node_limits = [("payload", retained("big/payload", b"x" * 2000), "max-packet-size (1000"),
                   ("levels", client("planted", {"a/" * 300 + "#": 1}), "deeper than 200")]
    for name, bad, why in [*_bad_records(), *node_limits]:
        write_backup(folder, name, [retained("fine/first", b"ok"), bad])
        assert rest(node, f"{BACKUPS}/{name}", "POST")[0] == 202
        backup = wait_backup(node, name)
        assert backup["state"] == "RESTORE_FAILED", (name, backup)
        assert "record 2" in backup["reason"] and why in backup["reason"], (name, backup)
        assert str(folder) not in backup["reason"]  # no server paths in answers
    # Nothing of any file got in, and the node publishes as before.
    assert retained_on(node.port, "#") == {}
    assert retained_on(node.port, "$SYS/#") == {}
    listener = PahoClient(node.port, "listener").connect()
    listener.subscribe("#", qos=1)
    publisher = PahoClient(node.port, "publisher").connect()
    publisher.publish("after/import", b"still works", qos=1)
    assert listener.next_message().payload == b"still works"
    listener.close()
    publisher.close()


def _post(port: int, path: str, headers: dict[str, str]) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.putrequest("POST", path, skip_host=True)
        for name, value in headers.items():
            connection.putheader(name, value)
        connection.putheader("Content-Length", "0")
        connection.endheaders()
        answer = connection.getresponse()
        answer.read()
        return answer.status
    finally:
        connection.close()


def test_cross_site_and_rebound_writes_are_refused(hive_factory):
    """Issue 20 (4): with <auth> off (loopback), create and import answered 202 to
    ``Host: evil.example`` and ``Origin: http://evil.example``, and to a form's POST."""
    node = _node(hive_factory)
    port = node.ports["rest"]
    own = f"127.0.0.1:{port}"
    json_type = {"Content-Type": "application/json"}
    write_backup(backup_folder(node), "fine", [retained("fine/x", b"x")])
    for path in (BACKUPS, f"{BACKUPS}/fine"):
        assert _post(port, path, {"Host": f"evil.example:{port}", **json_type}) == 403
        assert _post(port, path, {"Host": own, "Origin": "http://evil.example",
                                  **json_type}) == 403
        assert _post(port, path, {"Host": own, "Origin": "null", **json_type}) == 403
        assert _post(port, path, {"Host": own, "Sec-Fetch-Site": "cross-site",
                                  **json_type}) == 403
        assert _post(port, path, {"Host": own}) == 415
        assert _post(port, path, {"Host": own, "Content-Type": "text/plain"}) == 415
        assert _post(port, path, {"Host": own,
                                  "Content-Type": "application/x-www-form-urlencoded"}) == 415
    # Nothing was made, nothing imported.
    assert [(b["id"], b["state"]) for b in rest(node, BACKUPS)[1]["items"]] == [
        ("fine", "COMPLETED")]
    # The node's own names, and a same-origin page, may.
    assert _post(port, BACKUPS, {"Host": f"localhost:{port}",
                                 "Origin": f"http://localhost:{port}", **json_type}) == 202
