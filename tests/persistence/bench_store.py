"""Commits/s and messages/s of FileSessionStore for enqueue+commit batches of 1, 100 and 1000.

Run: python tests/persistence/bench_store.py [data_dir]   (not collected by pytest)
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import anyio

from hive_core.persistence import FileSessionStore, StoredMessage

PAYLOAD = b"x" * 100
SECONDS = 2.0


async def bench(data_dir: Path, batch: int, sync: bool) -> tuple[float, float]:
    store = FileSessionStore(data_dir, sync=sync)
    await store.open()
    message = StoredMessage("bench/topic", PAYLOAD, 1)
    seq = commits = 0
    started = time.perf_counter()
    while (elapsed := time.perf_counter() - started) < SECONDS:
        for _ in range(batch):
            store.enqueue("bench", seq, message)
            seq += 1
        await store.commit()
        commits += 1
    await store.close()
    return commits / elapsed, seq / elapsed


async def main() -> None:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="hive-bench-"))
    print(f"data folder {root}, {len(PAYLOAD)}-byte payloads, {SECONDS:.0f} s per row")
    print(f"{'sync':>6} {'batch':>6} {'commits/s':>10} {'messages/s':>11}")
    for sync in (True, False):
        for batch in (1, 100, 1000):
            commits, messages = await bench(root / f"{sync}-{batch}", batch, sync)
            mode = "FULL" if sync else "NORMAL"
            print(f"{mode:>6} {batch:>6} {commits:>10.0f} {messages:>11.0f}")


if __name__ == "__main__":
    anyio.run(main, backend="asyncio")
