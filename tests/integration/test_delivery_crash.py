"""SIGKILL the daemon at random moments during ingest and delivery: every entry is stored exactly once
and delivered at least once, with at most one batch of duplicates per kill.

The harness (tests/crash.py) is shared with the long run, `bench/crash.py` (100 rounds). Here:
20 rounds, each killing the daemon either while it reads and stores a burst of numbered entries or
while it delivers them, with seeded kill moments; CRASH_TEST_SEED picks another set of them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.crash import BATCH, run_crash

ROUNDS = 20
SEED = int(os.environ.get("CRASH_TEST_SEED", "20261122"))


@pytest.mark.timeout(300)  # about 60-90 s on two busy cores: 20 restarts of a real daemon
def test_sigkill_during_ingest_and_delivery_loses_nothing_stores_nothing_twice(tmp_path: Path) -> None:
    report = run_crash(tmp_path, ROUNDS, SEED)
    print("\n" + report.summary())  # shown with -s: what the run exercised

    problems = report.problems()
    assert not problems, "\n".join([*problems, report.summary(), "daemon log: " + report.daemon_log_tail])
    assert report.stored == report.delivered == report.written > 0
    assert len(report.kills) == ROUNDS
    # The seeded moments reach both phases, and some kills land with a request awaiting its answer
    # (the case that makes duplicates), so the bound below is tested, not vacuous.
    assert {k.phase for k in report.kills} == {"ingest", "delivery"}
    assert any(k.in_flight for k in report.kills)
    assert all(k.duplicates <= BATCH for k in report.kills)
