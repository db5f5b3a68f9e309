"""A commit that returned is on disk, even when the process dies by SIGKILL right after."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

import hive_core
from hive_core.persistence import FileSessionStore, Snapshot

pytestmark = pytest.mark.timeout(30)

COMMITTED = 500

# Commits COMMITTED messages in batches, says so, then keeps writing until it is killed, so that
# the kill lands in the middle of a transaction.
CHILD = """
import sys
from pathlib import Path

import anyio

from hive_core.persistence import FileSessionStore, StoredMessage


def message(seq):
    return StoredMessage(f"t/{seq}", seq.to_bytes(4, "big") * 64, 1)


async def main():
    store = FileSessionStore(Path(sys.argv[1]))
    await store.open()
    committed = int(sys.argv[2])
    seq = 0
    while True:
        for _ in range(50):
            store.enqueue("client", seq, message(seq))
            seq += 1
        await store.commit()
        if seq == committed:
            print("COMMITTED", flush=True)


anyio.run(main, backend="asyncio")
"""


def read_line(child: subprocess.Popen[str], timeout: float) -> str:
    assert child.stdout is not None
    ready, _, _ = select.select([child.stdout], [], [], timeout)
    return child.stdout.readline() if ready else ""


async def load(data_dir: Path) -> Snapshot:
    store = FileSessionStore(data_dir)
    loaded = await store.open()
    await store.close()
    return loaded


def test_committed_messages_survive_kill_9(tmp_path: Path) -> None:
    repo = Path(hive_core.__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(repo)}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path), str(COMMITTED)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=repo,
        env=env,
    )
    try:
        assert read_line(child, timeout=20).strip() == "COMMITTED"
        time.sleep(0.1)  # let it get well into the uncommitted writes
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(timeout=10) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        assert child.stdout is not None
        child.stdout.close()

    loaded = anyio.run(load, tmp_path, backend="asyncio")

    queue = loaded.queues["client"]
    assert len(queue) >= COMMITTED
    # Whatever else reached the disk did so whole: no gaps, no torn payloads.
    assert [seq for seq, _ in queue] == list(range(len(queue)))
    for seq, stored in queue:
        assert stored.topic == f"t/{seq}"
        assert stored.payload == seq.to_bytes(4, "big") * 64
