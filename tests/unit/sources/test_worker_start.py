"""A parse worker that cannot start: the reader says why (the worker's own message, no traceback,
not "reading the log failed"), keeps its place, and tries again later with a doubling wait."""

from __future__ import annotations

import logging
import os
import signal
import sys
from pathlib import Path

import pytest

from forwarder.clock import FakeClock
from forwarder.config import DatabaseConfig, LogSourceConfig
from forwarder.sources import parsing
from forwarder.sources.parsing import ParseWorker
from forwarder.sources.tail import WORKER_RETRY_FIRST_SECONDS, WORKER_RETRY_MAX_SECONDS, DatabaseFollower
from forwarder.store import Store
from tests.harness import all_messages

ENTRY = b'2026-11-22 10:00:00.000 UTC [100] ERROR:  relation "t1" does not exist\n'


async def test_a_worker_that_cannot_start_is_reported_as_such_and_retried_later(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="forwarder.sources.tail")
    clock = FakeClock()
    (tmp_path / "pg.log").write_bytes(ENTRY)
    db = DatabaseConfig(
        id="main", name="main", host="h", log=LogSourceConfig(path=str(tmp_path / "*.log"), line_prefix="%m [%p] ")
    )
    worker = ParseWorker()
    f = DatabaseFollower(db, await store.register_database(db), store, clock, worker)
    starts = 0
    real_start = parsing._Process.start.__func__  # type: ignore[attr-defined]

    async def counted_start(cls: type[parsing._Process]) -> parsing._Process:
        nonlocal starts
        starts += 1
        return await real_start(cls)  # type: ignore[no-any-return]

    monkeypatch.setattr(parsing._Process, "start", classmethod(counted_start))
    interpreter = sys.executable
    monkeypatch.setattr(sys, "executable", "/nonexistent/python3")  # as a closed interpreter directory
    try:
        await f.poll_or_start_over()
        assert starts == 1
        assert f.status.state == "error" and "cannot start a parse worker" in (f.status.reason or "")
        records = [r for r in caplog.records if r.name == "forwarder.sources.tail"]
        assert [(r.getMessage(), r.exc_info) for r in records] == [
            ("the parse worker cannot start; reading waits and tries again", None)
        ]
        assert "cannot start a parse worker (/nonexistent/python3)" in records[0].__dict__["error"]

        # Not at every poll: after a wait that doubles at each failure.
        await f.poll_or_start_over()
        assert starts == 1
        waited = WORKER_RETRY_FIRST_SECONDS
        for attempt in range(2, 10):
            clock.advance(waited - 0.001)  # not yet due
            await f.poll_or_start_over()
            assert starts == attempt - 1
            clock.advance(0.001)
            await f.poll_or_start_over()
            assert starts == attempt
            waited = min(waited * 2, WORKER_RETRY_MAX_SECONDS)
        assert waited == WORKER_RETRY_MAX_SECONDS
        # Repeats are summed up once a minute, never with a traceback.
        records = [r for r in caplog.records if r.name == "forwarder.sources.tail"]
        assert len(records) >= 2 and all(r.exc_info is None for r in records)
        assert all(r.getMessage().startswith("the parse worker cannot start") for r in records)

        monkeypatch.setattr(sys, "executable", interpreter)  # fixed by the operator
        clock.advance(waited)
        await f.poll_or_start_over()
        assert (f.status.state, f.status.reason) == ("reading", None)
        assert caplog.records[-1].getMessage() == "the parse worker started; reading again"
        await f.drain()
        assert await all_messages(store) == ['relation "t1" does not exist']
        assert "reading the log failed" not in caplog.messages
    finally:
        await worker.aclose()


async def test_a_worker_killed_under_several_databases_is_logged_once_and_each_reads_on(
    store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Run for real with 32 databases on one worker, each kill logged "reading the log failed", with
    # its traceback, 32 times: once per database reading through it.
    caplog.set_level(logging.INFO, logger="forwarder.sources")
    worker = ParseWorker()
    followers = []
    for name in ("a", "b", "c"):
        (tmp_path / f"{name}.log").write_bytes(ENTRY)
        db = DatabaseConfig(
            id=name,
            name=name,
            host="h",
            log=LogSourceConfig(path=str(tmp_path / f"{name}.log"), line_prefix="%m [%p] "),
        )
        followers.append(DatabaseFollower(db, await store.register_database(db), store, FakeClock(), worker))
    try:
        for f in followers:
            await f.poll_or_start_over()
        pid = worker.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        for f in followers:
            (tmp_path / f"{f.db.id}.log").write_bytes(ENTRY * 2)
            await f.poll_or_start_over()
            assert f.status.state == "error"
        for f in followers:
            await f.poll_or_start_over()
            assert f.status.state == "reading"
        warned = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert [r.getMessage() for r in warned] == [
            "the parse worker exited unasked; another starts and reading resumes from the stored offsets"
        ]
        assert warned[0].__dict__["status"] == -signal.SIGKILL and warned[0].exc_info is None
    finally:
        for f in followers:
            await f.drain()
        await worker.aclose()
