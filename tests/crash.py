"""SIGKILL a real daemon at random moments while numbered entries are ingested and delivered.

One harness for the CI test (tests/integration/test_delivery_crash.py, 20 rounds) and the long run
(bench/crash.py, 100 rounds). A writer appends PostgreSQL stderr entries numbered 0, 1, 2, ...
(the number lives in the message, kept by `full_text`, and each entry is dated an hour ago plus its
number in milliseconds: never a fixed day). One webhook destination, created through the API,
delivers them to the strict receiver (every request's signature verified with stripe) on its own
event-loop thread, which holds each answer 0-150 ms as a real receiver would.

Each round, from a seeded RNG, writes 50-1500 entries and kills the daemon with SIGKILL either
- during ingest: 0-250 ms after the write, while the file is read, parsed and stored, or
- during delivery: once a request carrying the round's entries has reached the receiver, 0-150 ms
  later, so that the kill often falls between sending a batch and committing its outcome,
then waits until the killed daemon's processes are gone and starts it again. After the last round
the daemon delivers the rest; then the store (read through the Logs API) and the receiver are
compared with what was written. `CrashReport.problems` names every property that did not hold:

- each written entry is stored as exactly one line (0 lost, 0 stored twice);
- every entry was delivered, as the line id the store gave it;
- the arrivals beyond an entry's first (duplicates) after each kill are at most one batch (500),
  and there are none before the first kill;
- a delivery id always carried the same lines, and at most one request is resent per kill.
"""

from __future__ import annotations

import functools
import random
import signal
import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tests.daemonproc import DaemonProcess, LoopThread
from tests.harness import poll_until
from tests.integration.test_rotation import PREFIX, Writer
from tests.processes import is_live, live_descendants
from tests.receivers import WebhookReceiver
from tests.receivers_base import hold

BATCH = 500  # lines per webhook batch: the most one kill may make the receiver see twice
ENTRIES_PER_ROUND = (50, 1500)
INGEST_KILL_WITHIN = 0.25  # seconds after the write
HOLD_MAX = 0.15  # the receiver's answer delay, and the delivery kill's delay after a request arrives
Phase = Literal["ingest", "delivery"]
PHASES: tuple[Phase, ...] = ("ingest", "delivery")


@dataclass(frozen=True, slots=True)
class Kill:
    """One SIGKILL: when it was aimed, and what it interrupted."""

    round: int
    phase: Phase
    in_flight: bool  # a request was at the receiver, not yet answered
    undelivered: int  # written entries the receiver had not accepted yet
    duplicates: int  # arrivals of already-delivered entries sent after this kill (before the next)


@dataclass(frozen=True, slots=True)
class CrashReport:
    """What a crash run wrote, stored and delivered, and the properties that did not hold."""

    seed: int
    written: int
    stored: int  # distinct entries in the store
    lost: tuple[int, ...]  # entry numbers written but not stored
    stored_twice: tuple[int, ...]  # entry numbers stored as more than one line
    delivered: int  # distinct entries the receiver accepted
    undelivered: tuple[int, ...]
    wrong_line_ids: tuple[int, ...]  # entries delivered under an id that is not their stored line's
    kills: tuple[Kill, ...]
    duplicates_before_first_kill: int
    requests: int
    resends: int  # requests beyond the first under a delivery id
    reused_delivery_ids: tuple[str, ...]  # delivery ids sent again with other lines
    receiver_errors: tuple[str, ...]
    seconds: float
    daemon_log_tail: str = field(repr=False)  # to show when a property did not hold

    @property
    def duplicates(self) -> int:
        return self.duplicates_before_first_kill + sum(k.duplicates for k in self.kills)

    def problems(self) -> list[str]:
        """Every property that did not hold, in words; empty when the run passed."""
        out = []
        if self.lost:
            out.append(f"{len(self.lost)} entries never stored, first {list(self.lost[:20])}")
        if self.stored_twice:
            out.append(f"{len(self.stored_twice)} entries stored twice, first {list(self.stored_twice[:20])}")
        if self.undelivered:
            out.append(f"{len(self.undelivered)} entries never delivered, first {list(self.undelivered[:20])}")
        if self.wrong_line_ids:
            out.append(
                f"{len(self.wrong_line_ids)} entries delivered under another line id: {self.wrong_line_ids[:20]}"
            )
        over = [k for k in self.kills if k.duplicates > BATCH]
        if over:
            out.append(f"more than one batch ({BATCH}) of duplicates after a kill: {over[:5]}")
        if self.duplicates_before_first_kill:
            out.append(f"{self.duplicates_before_first_kill} duplicates before any kill")
        if self.resends > len(self.kills):
            out.append(f"{self.resends} requests resent after {len(self.kills)} kills")
        if self.reused_delivery_ids:
            out.append(f"delivery ids resent with other lines: {list(self.reused_delivery_ids[:5])}")
        if self.receiver_errors:
            out.append(f"the receiver refused requests: {list(self.receiver_errors[:5])}")
        return out

    def summary(self) -> str:
        """The figures, a few lines for a person."""
        per_kill = [k.duplicates for k in self.kills] or [0]
        by_phase = Counter(k.phase for k in self.kills)
        return "\n".join(
            [
                f"rounds (SIGKILLs)      {len(self.kills)}: {by_phase['ingest']} during ingest, "
                f"{by_phase['delivery']} during delivery; {sum(k.in_flight for k in self.kills)} with a "
                f"request in flight, {sum(k.undelivered > 0 for k in self.kills)} with entries undelivered",
                f"entries                {self.written:,} written, {self.stored:,} stored, "
                f"{self.delivered:,} delivered",
                f"lost / stored twice    {len(self.lost)} / {len(self.stored_twice)} "
                f"(undelivered {len(self.undelivered)})",
                f"duplicates             {self.duplicates:,} lines; per kill max {max(per_kill)}, "
                f"mean {statistics.fmean(per_kill):.1f} (bound {BATCH})",
                f"requests               {self.requests:,}, {self.resends} resent",
                f"seed, time             {self.seed}, {self.seconds:.1f} s",
            ]
        )


def entry_number(entry: dict[str, Any]) -> int:
    """The writer's entry number from `relation "table_N" does not exist`."""
    return int(entry["message"].split('"')[1].removeprefix("table_"))


def _carries(recv: WebhookReceiver, since: int, first: int) -> bool:
    """A request from the `since`th on carries an entry numbered `first` or later."""
    return any(entry_number(e) >= first for x in recv.requests[since:] for e in x.body["entries"])


def _kill(d: DaemonProcess) -> None:
    """SIGKILL the daemon and wait until its processes (the parse worker too) are gone."""
    assert d.proc is not None
    pids = [p.pid for p in live_descendants(d.proc.pid)]
    d.stop(signal.SIGKILL)
    poll_until(lambda: not any(is_live(pid) for pid in pids), timeout=15, what="the killed daemon's processes to end")


def run_crash(
    root: Path,
    rounds: int,
    seed: int,
    *,
    settle_seconds: float = 60,
    progress: Callable[[str], None] | None = None,
) -> CrashReport:
    """Run `rounds` kill-and-restart rounds under `root` (created), seeded by `seed`; the report.

    Every process and thread it starts is ended before it returns (or raises).
    """
    started = time.monotonic()
    logs = root / "pglog"
    logs.mkdir(parents=True)
    writer = Writer(logs / "postgresql.log")
    thread = LoopThread()
    recv = WebhookReceiver(tolerance=300)
    d: DaemonProcess | None = None
    try:
        thread.run(recv.start())
        d = DaemonProcess(
            root / "fwd",
            [
                {
                    "id": "db",
                    "name": "db",
                    "full_text": True,  # the entry numbers live in the message text
                    "log": {"path": str(logs / "*.log"), "line_prefix": PREFIX, "poll_interval_seconds": 0.05},
                }
            ],
            allowed_networks=("127.0.0.0/8",),  # the receiver is on loopback
        )
        d.start()
        created = d.send(
            "POST", "/v1/log-destinations", {"type": "webhook", "name": "crash", "config": {"url": recv.url}}
        )
        recv.secret = created["secret"]  # set before any entry is written: nothing can be sent earlier
        holds = random.Random(seed + 1)
        recv.script.extend(hold(holds.uniform(0, HOLD_MAX)) for _ in range(100 * rounds + 1000))

        rng = random.Random(seed)
        aimed: list[tuple[int, Phase, bool, int]] = []
        marks: list[int] = []  # len(recv.requests) after each kill: what arrived later is charged to it
        for round_no in range(rounds):
            phase = rng.choice(PHASES)
            first = writer.n
            writer.entries(rng.randint(*ENTRIES_PER_ROUND))
            if phase == "ingest":
                time.sleep(rng.uniform(0, INGEST_KILL_WITHIN))  # the kill moment
            else:
                poll_until(
                    functools.partial(_carries, recv, len(recv.requests), first),
                    timeout=settle_seconds,
                    what=f"round {round_no}'s entries to reach the receiver",
                    interval=0.005,
                )
                time.sleep(rng.uniform(0, HOLD_MAX))  # the kill moment, often inside the answer's hold
            accepted = list(recv.accepted)  # a copy: the receiver's thread appends
            in_flight = len(recv.requests) > len(accepted)
            delivered = {entry_number(e) for x in accepted for e in x.body["entries"]}
            _kill(d)
            # With no daemon running, this splits the requests into those the killed one sent and
            # those of its successor (a held answer may still be accepted later: what counts is when
            # a request arrived).
            marks.append(len(recv.requests))
            aimed.append((round_no, phase, in_flight, writer.n - len(delivered)))
            d.start()
            if progress is not None:
                progress(f"round {round_no + 1}/{rounds}: {phase}, {writer.n} entries written")

        total = writer.n
        deadline = time.monotonic() + settle_seconds
        while len({entry_number(e) for x in list(recv.accepted) for e in x.body["entries"]}) < total:
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)  # another process delivers: only polling can see it
        stored_lines = d.all_lines("db")
        return _report(seed, total, recv, stored_lines, aimed, marks, time.monotonic() - started, d)
    finally:
        writer.close()
        if d is not None:
            d.close()
        thread.run(recv.aclose())
        thread.close()


def _report(
    seed: int,
    total: int,
    recv: WebhookReceiver,
    stored_lines: list[dict[str, Any]],
    aimed: list[tuple[int, Phase, bool, int]],
    marks: list[int],
    seconds: float,
    d: DaemonProcess,
) -> CrashReport:
    store_ids: dict[int, list[str]] = defaultdict(list)
    for line in stored_lines:
        if "table_" in line["message"]:
            store_ids[entry_number(line)].append(str(line["id"]))
    written = set(range(total))

    accepted = {id(x) for x in recv.accepted}
    seen: set[int] = set()
    wrong: set[int] = set()
    dup_by_epoch = [0] * (len(marks) + 1)  # epoch k + 1: sent after kill k, before kill k + 1
    for i, delivery in enumerate(recv.requests):  # in the order they arrived
        if id(delivery) not in accepted:
            continue
        epoch = sum(1 for m in marks if m <= i)
        for e in delivery.body["entries"]:
            n = entry_number(e)
            if n in seen:
                dup_by_epoch[epoch] += 1
            seen.add(n)
            if store_ids.get(n) != [e["id"]]:
                wrong.add(n)

    sends = Counter(x.delivery_id for x in recv.deliveries)
    lines_of: dict[str, set[tuple[int, ...]]] = defaultdict(set)
    for x in recv.deliveries:
        lines_of[x.delivery_id].add(tuple(x.ids))
    kills = tuple(
        Kill(round_no, phase, in_flight, undelivered, dup_by_epoch[k + 1])
        for k, (round_no, phase, in_flight, undelivered) in enumerate(aimed)
    )
    return CrashReport(
        seed=seed,
        written=total,
        stored=len(store_ids),
        lost=tuple(sorted(written - set(store_ids))),
        stored_twice=tuple(sorted(n for n, ids in store_ids.items() if len(ids) > 1)),
        delivered=len(seen),
        undelivered=tuple(sorted(written - seen)),
        wrong_line_ids=tuple(sorted(wrong)),
        kills=kills,
        duplicates_before_first_kill=dup_by_epoch[0],
        requests=len(recv.deliveries),
        resends=sum(n - 1 for n in sends.values()),
        reused_delivery_ids=tuple(k for k, v in lines_of.items() if len(v) > 1),
        receiver_errors=tuple(recv.errors),
        seconds=seconds,
        daemon_log_tail=d.log_path.read_text(errors="replace")[-3000:],
    )
