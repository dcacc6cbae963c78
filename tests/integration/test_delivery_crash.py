"""SIGKILL the daemon at random moments while lines are written and delivered: at-least-once holds.

A writer appends PostgreSQL stderr entries numbered 0, 1, 2, ... (the number lives in the message,
kept by `full_text`). One webhook destination, created through the API, delivers them to a strict
receiver running on its own event-loop thread in the test process, which verifies every request's
signature with stripe. Each round writes a random number of entries, waits a random 0-300 ms (the
kill moment, from a seeded RNG), SIGKILLs the daemon and restarts it. Afterwards:

- every entry arrived at least once, and each entry was stored as exactly one line (one line id);
- duplicates (arrivals beyond the first) are at most one batch (500 lines) per kill;
- a delivery id always carried the same lines (a retry, also after a restart, resends the batch).
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.daemonproc import DaemonProcess, LoopThread
from tests.integration.test_rotation import PREFIX, Writer
from tests.receivers import WebhookReceiver
from tests.receivers_base import hold

ROUNDS = 24
BATCH = 500  # SPEC 8: lines per webhook batch
SEED = int(os.environ.get("CRASH_TEST_SEED", "20261122"))  # another seed: another set of kill moments


@pytest.fixture
def receiver() -> Iterator[tuple[WebhookReceiver, LoopThread]]:
    thread = LoopThread()
    recv = WebhookReceiver(tolerance=300)
    thread.run(recv.start())
    try:
        yield recv, thread
    finally:
        thread.run(recv.aclose())
        thread.close()


def entry_number(entry: dict[str, Any]) -> int:
    """The writer's entry number from `relation "table_N" does not exist`."""
    return int(entry["message"].split('"')[1].removeprefix("table_"))


def arrivals(recv: WebhookReceiver) -> Counter[int]:
    """How often each entry number arrived in an accepted request."""
    out: Counter[int] = Counter()
    for delivery in list(recv.accepted):  # a copy: the receiver's thread appends
        out.update(entry_number(e) for e in delivery.body["entries"])
    return out


def test_sigkill_during_delivery_loses_nothing_and_repeats_at_most_a_batch_per_kill(
    tmp_path: Path, receiver: tuple[WebhookReceiver, LoopThread]
) -> None:
    recv, _ = receiver
    logs = tmp_path / "pglog"
    logs.mkdir()
    w = Writer(logs / "postgresql.log")
    d = DaemonProcess(
        tmp_path / "fwd",
        [
            {
                "id": "db",
                "name": "db",
                "full_text": True,  # the entry numbers live in the message text
                "log": {"path": str(logs / "*.log"), "line_prefix": PREFIX, "poll_interval_seconds": 0.05},
            }
        ],
        allowed_networks=("127.0.0.0/8",),
    )
    rng = random.Random(SEED)
    started = time.monotonic()
    kills = 0
    mid_delivery = 0  # kills that fell while written entries were still on their way
    try:
        d.start()
        created = d.send(
            "POST", "/v1/log-destinations", {"type": "webhook", "name": "crash", "config": {"url": recv.url}}
        )
        recv.secret = created["secret"]  # set before any line exists: nothing can be sent earlier
        # Each answer is held 0-150 ms, as a real receiver's would be: kills also fall mid-request,
        # between sending a batch and committing its outcome (the case that makes duplicates).
        holds = random.Random(SEED + 1)
        recv.script.extend(hold(holds.uniform(0, 0.15)) for _ in range(10_000))
        for _ in range(ROUNDS):
            w.entries(rng.randint(50, 1500))
            time.sleep(rng.uniform(0, 0.3))  # the kill moment
            d.stop(signal.SIGKILL)
            kills += 1
            if len(arrivals(recv)) < w.n:
                mid_delivery += 1
            d.start()
        total = w.n

        deadline = time.monotonic() + 45
        got = arrivals(recv)
        while len(got) < total and time.monotonic() < deadline:
            time.sleep(0.2)
            got = arrivals(recv)

        missing = sorted(set(range(total)) - set(got))
        tail = "" if not missing else "; daemon log: " + d.log_path.read_text()[-3000:]
        assert not missing, f"{len(missing)} of {total} entries never arrived, first {missing[:20]}{tail}"
        assert set(got) == set(range(total))
        assert not recv.errors, recv.errors[:5]

        # Ingest is exactly-once: each entry is one stored line, so every repeat is a redelivery.
        line_of: dict[int, set[str]] = defaultdict(set)
        for delivery in list(recv.accepted):
            for e in delivery.body["entries"]:
                line_of[entry_number(e)].add(e["id"])
        stored_twice = {n: ids for n, ids in line_of.items() if len(ids) > 1}
        assert not stored_twice, f"entries stored as several lines: {list(stored_twice.items())[:10]}"

        duplicates = sum(got.values()) - len(got)
        assert duplicates <= BATCH * kills, f"{duplicates} duplicates after {kills} kills"

        # A delivery id names one batch: every request under it carried the same lines.
        by_id: dict[str, set[tuple[int, ...]]] = defaultdict(set)
        for delivery in list(recv.deliveries):
            by_id[delivery.delivery_id].add(tuple(delivery.ids))
        changed = {k: v for k, v in by_id.items() if len(v) > 1}
        assert not changed, f"delivery ids resent with other lines: {list(changed)[:5]}"
        sends = Counter(x.delivery_id for x in recv.deliveries)
        retried = sum(1 for n in sends.values() if n > 1)
        # Only the one batch in flight at a kill is sent again: at most one resend per kill.
        resends = sum(n - 1 for n in sends.values())
        assert resends <= kills, f"{resends} requests resent after {kills} kills"
        print(  # shown with -s: what the run exercised
            f"\n{ROUNDS} rounds, {kills} kills ({mid_delivery} while entries were undelivered), "
            f"{total} entries, {len(recv.deliveries)} requests, {retried} delivery ids resent ({resends} resends), "
            f"{duplicates} duplicate lines, {time.monotonic() - started:.1f} s"
        )
    finally:
        w.close()
        d.close()
