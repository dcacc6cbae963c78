"""The parse worker process stays small: it loads what parsing needs, not the daemon's libraries."""

from __future__ import annotations

import pickle
import subprocess
import sys

from forwarder.sources.parse_worker import w_call, w_close, w_count, w_init, w_open
from forwarder.sources.parsing import ParseWorker, ReaderSpec, WorkerReader
from forwarder.store.lines import Identity

# What the daemon needs and a worker must not pay for (each costs resident memory in every worker).
DAEMON_ONLY = ("prometheus_client", "asyncio", "aiohttp", "pydantic", "forwarder.metrics", "forwarder.store.store")


def test_what_the_daemon_sends_a_worker_loads_none_of_the_daemons_libraries() -> None:
    """A spawned worker imports only what unpickling its calls needs; unpickle them in a fresh
    interpreter, as the worker does, and look at what got imported."""
    spec = ReaderSpec("stderr", "%m [%p] ", "UTC", Identity(code=1, database_id="main", database_name="main", host="h"))
    sent = pickle.dumps([spec, w_init, w_open, w_call, w_close, w_count])
    probe = (
        "import pickle, sys; pickle.loads(sys.stdin.buffer.read()); "
        f"print(','.join(m for m in {DAEMON_ONLY!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], input=sent, capture_output=True, check=True, timeout=60)
    assert out.stdout.decode().strip() == ""


async def test_a_worker_parses_entries_into_rows() -> None:
    worker = ParseWorker()
    try:
        spec = ReaderSpec(
            "stderr", "%m [%p] ", "UTC", Identity(code=1, database_id="main", database_name="main", host="h")
        )
        reader = await worker.open(spec, full_text=False)
        assert isinstance(reader, WorkerReader)
        data = b'2026-11-22 10:00:00.000 UTC [100] ERROR:  relation "t1" does not exist\n'
        rows = await reader.feed(data, 0.0) + await reader.flush()
        assert len(rows) == 1
        assert reader.committed_offset == len(data)
        await reader.aclose()
        assert await worker.reader_count() == 0
    finally:
        await worker.aclose()
