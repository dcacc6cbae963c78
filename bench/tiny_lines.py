"""Peak memory on a flood of tiny lines: N one-word lines (each an entry of kind other), read by a
follower with a parse worker into a fresh store, as the daemon does.

    .venv/bin/python bench/tiny_lines.py                 # 1,000,000 lines
    .venv/bin/python bench/tiny_lines.py --lines 200000

Prints the time, entries/s and the peak resident set of the daemon's process and of the worker
(getrusage: the worker's figure is read once it has exited, as RUSAGE_CHILDREN).
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import tempfile
import time
from pathlib import Path

from forwarder.clock import SystemClock
from forwarder.config import DatabaseConfig, LogSourceConfig, StoreConfig
from forwarder.sources.parsing import ParseWorker
from forwarder.sources.tail import DatabaseFollower
from forwarder.store import Store


async def run(lines: int, root: Path) -> tuple[float, int]:
    (root / "pg.log").write_bytes(b"word\n" * lines)
    store = Store(StoreConfig(path=root / "s.db"), SystemClock())
    await store.start()
    worker = ParseWorker()
    try:
        db = DatabaseConfig(id="main", name="main", host="h", log=LogSourceConfig(path=str(root / "*.log")))
        follower = DatabaseFollower(db, await store.register_database(db), store, SystemClock(), worker)
        started = time.perf_counter()
        await follower.poll()
        await follower.drain()
        return time.perf_counter() - started, store.head_id
    finally:
        await worker.aclose()
        await store.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        seconds, stored = asyncio.run(run(args.lines, Path(tmp)))
    daemon_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    worker_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"{args.lines:,} one-word lines: {stored:,} entries stored in {seconds:.1f} s ({stored / seconds:,.0f}/s)")
    print(f"peak RSS: daemon process {daemon_mb:.0f} MiB, parse worker {worker_mb:.0f} MiB")


if __name__ == "__main__":
    main()
