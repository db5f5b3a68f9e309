"""Backups over the REST API and the CLI, for the tests of tests/e2e and tests/cluster.

Import it as ``from e2e._backup_helpers import ...`` (tests/ is on sys.path).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from conftest import HiveProcess

from hive_ext_api import StoredMessage, StoredSession, StoredSubscription
from hive_ext_api.backup import BackupWriter, ClientState, RetainedState, backup_file_name

__all__ = ["BACKUPS", "backup_folder", "client", "hive_cli", "message", "rest",
           "rest_on", "retained", "wait_backup", "write_backup"]

BACKUPS = "/api/v1/management/backups"


def rest_on(port: int, more: str = "") -> str:
    return (f"<rest-api><enabled>true</enabled>{more}<listeners><http><port>{port}</port>"
            "<bind-address>127.0.0.1</bind-address></http></listeners></rest-api>")


def rest(node: HiveProcess, path: str, method: str = "GET",
         headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """(status, JSON body) of one call; an HTTP error status is returned, not raised."""
    headers = {"Content-Type": "application/json", **(headers or {})}
    request = urllib.request.Request(f"http://127.0.0.1:{node.ports['rest']}{path}",
                                     method=method, headers=headers,
                                     data=b"" if method == "POST" else None)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


def wait_backup(node: HiveProcess, backup_id: str, timeout: float = 20.0) -> dict[str, Any]:
    """Poll GET .../backups/<id> until it is no longer running; the backup document."""
    deadline = time.monotonic() + timeout
    while True:
        status, body = rest(node, f"{BACKUPS}/{backup_id}")
        assert status == 200, body
        backup = body["backup"]
        if backup["state"] not in ("RUNNING", "RESTORE_IN_PROGRESS"):
            return dict(backup)
        assert time.monotonic() < deadline, f"backup {backup_id} still {backup['state']}"
        time.sleep(0.05)


def hive_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hive_core.cli", *args], capture_output=True,
                          text=True, timeout=timeout)


def backup_folder(node: HiveProcess) -> Path:
    """Where ``hive run`` keeps a node's backups by default: ``backup`` beside its data."""
    return node.data_dir.parent / "backup"


def message(topic: str, payload: bytes, qos: int = 1, expiry_at: float | None = None,
            retain: bool = False) -> StoredMessage:
    return StoredMessage(topic, payload, qos, retain, b"", expiry_at, "backup-test")


def client(client_id: str, filters: dict[str, int], queue: Sequence[StoredMessage] = (),
           expiry: int = 3600, disconnected_at: float | None = None,
           first_seq: int = 1000) -> ClientState:
    session = StoredSession(client_id, 5, expiry,
                            time.time() - 1 if disconnected_at is None else disconnected_at)
    for topic_filter, qos in filters.items():
        session.subscriptions[topic_filter] = StoredSubscription(topic_filter, qos)
    return ClientState(session, time.time_ns(),
                       [(first_seq + i, m) for i, m in enumerate(queue)])


def retained(topic: str, payload: bytes, expiry_at: float | None = None) -> RetainedState:
    return RetainedState(message(topic, payload, expiry_at=expiry_at, retain=True),
                         time.time_ns())


def write_backup(folder: Path, backup_id: str,
                 states: list[ClientState | RetainedState]) -> Path:
    """A backup file as the recovery tool would write it, in ``folder/<id>/``."""
    path = folder / backup_id / backup_file_name(backup_id, "test")
    with BackupWriter(path, source="test") as out:
        for state in states:
            if isinstance(state, ClientState):
                out.add_client(state)
            else:
                out.add_retained(state)
    return path
