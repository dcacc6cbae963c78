"""The insights engine: follows the stored lines like a destination does and keeps aggregates.

```
  store (lines) --notify--> [ read the next lines of the wanted kinds after the cursor ]
                                  |  rule.observe / queries.fold   (pure, per line)
                                  v
                            [ ONE write: observation minutes + query buckets + cursor ]
                                  |  touched subjects
                                  v
                            [ rule.evaluate(history) -> save finding (open/update/resolve) ]
  every SWEEP_SECONDS on the clock: re-evaluate open findings (a quiet subject resolves),
  query regressions of the queries seen since, and forget aggregates past retention.
```

Each batch follows the head at once. Only while a backlog is being stored (lines stored faster
than BACKLOG_LINES_PER_SECOND) do they take at most BUSY_SHARE of the time, and catch up once the
rate drops: reading, storing and delivering come first (the full-text index yields to appends the
same way).

The cursor (kv `insights_cursor`) is written in the same transaction as the sums it accounts
for, so a crash neither loses nor double-counts a line. Nothing ever rescans old lines: each line
is read once, just behind the head; what rules need later is in the minute tables.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import sqlite3
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from forwarder import metrics
from forwarder.clock import Clock, with_timeout
from forwarder.insights import findings as F
from forwarder.insights import queries as Q
from forwarder.insights.model import Finding, FindingDraft
from forwarder.insights.regression import QueryRegression
from forwarder.insights.rules import RULES, Rule
from forwarder.logsetup import RepeatedFailureLog
from forwarder.model import KINDS
from forwarder.store.lines import KIND_CODE, column_fingerprint, read_doc
from forwarder.store.store import Store, write_failure_reason

log = logging.getLogger(__name__)

CURSOR_KEY: Final = "insights_cursor"
SCAN_IDS: Final = 5_000  # line ids looked at per batch (the lines of other kinds are skipped in SQL)
SWEEP_SECONDS: Final = 60.0
BUSY_SHARE: Final = 0.03  # of the time insights may take while a backlog is being stored
PENDING_MAX: Final = 20_000  # queries remembered between sweeps (memory stays bounded)
REGRESSION_CHUNK: Final = 200  # queries evaluated per write transaction of a sweep
# Lines stored per second (over the last 2 s) past which a backlog is being stored: a server's
# own log rarely comes near it for long, a large file read from the start does.
BACKLOG_LINES_PER_SECOND: Final = 10_000
RETRY_SECONDS: Final = 5.0
# Lines of these kinds are read besides the rules' own: calls (slow_query) and errors of queries.
QUERY_KINDS: Final = frozenset({"slow_query", "error", "deadlock"})


@dataclass(slots=True)
class _Batch:
    """One batch's sums, ready to be written with the cursor."""

    upto: int  # the cursor once the batch is accounted for
    queries: Q.QueryFold = field(default_factory=Q.QueryFold)
    observations: F.ObservationFold = field(default_factory=F.ObservationFold)
    touched: dict[F.SubjectKey, int] = field(default_factory=dict)  # subject -> its newest observation


class Insights:
    """Findings and queries from the stored lines; `run()` until cancelled.

    Also the read side the API, the fix use case and (later) Ask use: `finding`, `findings`,
    `queries`, `query`.
    """

    def __init__(
        self,
        store: Store,
        clock: Clock,
        rules: Mapping[str, Rule] | None = None,
        retention_days: float = 7,
        max_queries: int = Q.DEFAULT_MAX_QUERIES,
        database_ids: Iterable[str] | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._max_queries = max_queries  # per database ([insights] max_queries)
        self._rules: dict[str, Rule] = dict(RULES if rules is None else rules)
        self._regression = QueryRegression()
        self._retention_us = int(max(retention_days, 1.0) * 86_400 * 1_000_000)
        # How far behind a subject's newest line its ids and samples can still be in its window
        # (F.apply): the rule's lookback and the minute rules.common.window rounds down to.
        self._keep_us = {name: r.lookback_seconds * 1_000_000 + F.MINUTE_US for name, r in self._rules.items()}
        # The configured databases, whose open findings `forwarder_findings_open` shows (None: every
        # database the store knows). A database a reload removed keeps its rows, not its series.
        self._configured: frozenset[str] | None = None if database_ids is None else frozenset(database_ids)
        wanted = set(QUERY_KINDS).union(*(r.kinds for r in self._rules.values()))
        self._kind_codes = sorted(KIND_CODE[k] for k in wanted)
        self._by_kind: dict[str, list[Rule]] = {k: [r for r in self._rules.values() if k in r.kinds] for k in KINDS}
        self._db_ids: dict[int, str] = {}
        self.cursor = 0
        self._cursor_loaded = False  # the saved cursor is read once, under `_stepping`
        self._pending_queries: set[Q.QueryKey] = set()  # queries seen since the last sweep...
        self._pending_overflow = False  # ...or too many to keep: all of them
        self._failures = RepeatedFailureLog(log, clock)
        self._stepping = asyncio.Lock()  # one batch at a time: `catch_up` may run beside `run`

    # --- the loop -------------------------------------------------------------------------------

    async def run(self) -> None:
        """Follow the store until cancelled; sweep every SWEEP_SECONDS of the clock."""
        next_sweep = self._clock.monotonic()
        loop = asyncio.get_running_loop()
        while True:
            try:
                # Checked first: under a steady stream of lines there is always a next batch.
                if self._clock.monotonic() >= next_sweep:
                    await self.sweep()
                    next_sweep = self._clock.monotonic() + SWEEP_SECONDS
                started = loop.time()
                if await self.step():
                    if self._store.append_rate() > BACKLOG_LINES_PER_SECOND:
                        # A backlog is being stored: reading, storing and delivering it come first.
                        # Insights take at most BUSY_SHARE of the time meanwhile and catch up once
                        # the rate drops. A CPU share, not time logic: the real clock.
                        spent = loop.time() - started
                        await asyncio.sleep(spent * (1 - BUSY_SHARE) / BUSY_SHARE)
                    continue
                remaining = max(0.0, next_sweep - self._clock.monotonic())
                with contextlib.suppress(TimeoutError):
                    await with_timeout(self._clock, self._store.stored_after(self.cursor), remaining)
            except Exception as exc:
                # The store cannot write (logged by the store), or a bug: insights wait and go on, the
                # daemon's reading and delivery never stop for them.
                if write_failure_reason(exc) is None:
                    self._failures.failure("insights could not account for stored lines", exc)
                await self._clock.sleep(RETRY_SECONDS)

    async def catch_up(self) -> None:
        """Account for every line stored so far (tests and the end of a backlog)."""
        while await self.step():
            pass

    async def step(self) -> bool:
        """Account for the next lines after the cursor; False when there were none to look at."""
        async with self._stepping:
            return await self._step()

    async def _step(self) -> bool:
        if not self._cursor_loaded:
            # Read under the lock and only once: a read begun by `run` and finished after a
            # `catch_up` had stepped would move the cursor back and count those lines twice.
            self.cursor = await self._store.read(_cursor)
            self._cursor_loaded = True
        head = self._store.head_id
        if head <= self.cursor:
            return False
        # Read and fold on a reader thread: the event loop (the API, delivery) never waits for a
        # batch's rules to run.
        batch = await self._store.read(lambda c: self._fold(c, self.cursor, min(head, self.cursor + SCAN_IDS)))
        upto = batch.upto
        databases = {db for db, _ in batch.queries.seen}

        def _txn(c: sqlite3.Connection) -> dict[int, int]:
            Q.apply(c, batch.queries)
            forgotten = {db: Q.forget_least_used(c, db, self._max_queries) for db in databases}
            F.apply(c, batch.observations, self._keep_us)
            c.execute("INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)", (CURSOR_KEY, upto))
            return forgotten

        forgotten = await self._store.write(_txn)
        if any(forgotten.values()):
            await self._known_databases(set(forgotten))
            for db, n in forgotten.items():
                metrics.INSIGHTS_QUERIES_FORGOTTEN.labels(self._db_ids.get(db, str(db))).inc(n)
        self.cursor = upto
        metrics.INSIGHTS_LAG.set(max(0, self._store.head_id - upto))
        if len(self._pending_queries) < PENDING_MAX:
            self._pending_queries |= batch.queries.seen.keys()
        else:  # a log of many one-off statements: the sweep looks at every query with enough calls
            self._pending_overflow = True
        if batch.touched:
            await self._evaluate(batch.touched)
        return True

    def _fold(self, c: sqlite3.Connection, after: int, upto: int) -> _Batch:
        """The sums of the lines with ids in (after, upto] of the kinds wanted."""
        marks = ",".join("?" * len(self._kind_codes))
        batch = _Batch(upto)
        touched = batch.touched
        for line_id, db, time_us, code, fingerprint, raw in c.execute(
            f"SELECT id, db, time_us, kind, fingerprint, doc FROM lines"
            f" WHERE id > ? AND id <= ? AND kind IN ({marks}) ORDER BY id",
            (after, upto, *self._kind_codes),
        ):
            kind = KINDS[code]
            doc = read_doc(time_us, raw)
            if kind in QUERY_KINDS:
                batch.queries.add(db, line_id, time_us, column_fingerprint(fingerprint), doc)
            for rule in self._by_kind[kind]:
                try:
                    observed = list(rule.observe(line_id, doc))
                except Exception as exc:  # one rule's bug costs its observation of this line, nothing more
                    self._failures.failure(f"rule {rule.name} failed on line {line_id}", exc)
                    continue
                for obs in observed:
                    batch.observations.add(db, obs)
                    key = (db, obs.rule, obs.subject)
                    touched[key] = max(touched.get(key, 0), obs.time_us)
        return batch

    async def _evaluate(self, subjects: Mapping[F.SubjectKey, int]) -> None:
        """Evaluate each subject at the time given (its newest line in a batch, the clock's now in a
        sweep) or at its newest line ever if that is later, and save."""
        await self._known_databases({db for db, _, _ in subjects})
        now_us = int(self._clock.now() * 1_000_000)
        since_us = now_us - self._retention_us

        def _txn(c: sqlite3.Connection) -> None:
            for (db, rule_name, subject), given_us in subjects.items():
                rule = self._rules.get(rule_name)
                database_id = self._db_ids.get(db)
                if rule is None or database_id is None:
                    continue
                # Never before the newest line seen: an older line stored after newer ones must not
                # move the window back (and resolve a current finding), and a line stamped ahead of
                # our clock (a server clock ahead) must not be judged before it was written.
                at = max(given_us, F.newest_us(c, db, database_id, rule_name, subject) or 0)
                lookback_us = rule.lookback_seconds * 1_000_000
                evaluate = functools.partial(
                    _evaluate_at, c, rule, db, database_id, rule_name, subject, lookback_us, since_us
                )
                draft = evaluate(at)
                when = at
                if draft is None and F.is_open(c, database_id, rule_name, subject):
                    # It resolves when the rule would have resolved it after its newest line: a
                    # sweep after the daemon was stopped for hours, or a backlog's late lines, is
                    # not the moment it ended.
                    newest = F.last_seen(c, db, rule_name, subject)
                    if newest is not None and newest < at:
                        when = _resolved_at(evaluate, newest, lookback_us, at)
                F.save(c, db, database_id, rule_name, subject, draft, when)
                if draft is not None and now_us - at > lookback_us and evaluate(now_us) is None:
                    # A backlog of old lines: the finding is recorded as it was, but its window had
                    # passed before they were read. It resolves when the rule would have resolved it.
                    resolved_us = _resolved_at(evaluate, at, lookback_us, now_us)
                    F.save(c, db, database_id, rule_name, subject, None, resolved_us)

        await self._store.write(_txn)

    async def sweep(self) -> None:
        """Re-evaluate open findings at the clock's now, the queries seen since the last sweep for
        regressions, and forget aggregates past retention."""
        async with self._stepping:
            await self._sweep()

    async def _sweep(self) -> None:
        now_us = int(self._clock.now() * 1_000_000)
        open_subjects = await self._store.read(F.open_subjects)
        # At now, or at a subject's newest line if that is later (a server clock ahead of ours):
        # `_evaluate` never evaluates before what was seen.
        await self._evaluate({key: now_us for key in open_subjects if key[1] in self._rules})
        pending, self._pending_queries = self._pending_queries, set()
        overflow, self._pending_overflow = self._pending_overflow, False
        await self._known_databases({db for db, _ in pending})
        regression = self._regression
        # Only a query with enough calls can have regressed: one read picks those (a log of many
        # one-off statements leaves few), then they are evaluated in small write transactions so the
        # writer (storing lines) never waits long.
        candidates = await self._store.read(lambda c: regression.candidates(c, None if overflow else pending))
        await self._known_databases({db for db, _ in candidates})
        db_ids = dict(self._db_ids)
        open_ones = [(db, subject) for db, rule, subject in open_subjects if rule == regression.name]
        todo = sorted(candidates | set(open_ones))
        for i in range(0, len(todo), REGRESSION_CHUNK):
            chunk = todo[i : i + REGRESSION_CHUNK]

            def _evaluate(c: sqlite3.Connection, chunk: list[Q.QueryKey] = chunk) -> None:
                for db, fp in chunk:
                    if (database_id := db_ids.get(db)) is not None:
                        draft = regression.evaluate(c, db, database_id, fp, now_us)
                        F.save(c, db, database_id, regression.name, fp, draft, now_us)

            await self._store.write(_evaluate)
        cutoff = now_us - self._retention_us
        keep_us = max(self._keep_us.values(), default=0)

        def _forget(c: sqlite3.Connection) -> None:
            Q.forget_before(c, cutoff)
            c.execute("DELETE FROM insight_observations WHERE start_us < ?", (cutoff,))
            # The ids and samples of the deleted lines too: never shown in a finding again.
            F.forget_before(c, cutoff, keep_us)

        await self._store.write(_forget)
        await self._count_open()

    def configure(self, database_ids: Iterable[str]) -> None:
        """The configured databases from now on (a reload): only theirs are in forwarder_findings_open.

        The caller removes a removed database's series (metrics.forget_database); the next sweeps
        leave them out instead of setting them again.
        """
        self._configured = frozenset(database_ids)

    async def _count_open(self) -> None:
        counts = await self._store.read(F.open_counts)
        known = set(self._db_ids.values()) | {d for d, _ in counts}
        for database_id in known if self._configured is None else known & self._configured:
            for severity in ("info", "warning", "critical"):
                metrics.FINDINGS_OPEN.labels(database_id, severity).set(counts.get((database_id, severity), 0))

    async def _known_databases(self, codes: set[int]) -> None:
        if codes - self._db_ids.keys():
            self._db_ids = {code: db_id for db_id, code in (await self._store.database_codes()).items()}

    # --- reading --------------------------------------------------------------------------------

    async def finding(self, database_id: str, finding_id: str) -> Finding | None:
        """The finding `finding_id` of the database `database_id` (the fix use case's port)."""

        def _q(c: sqlite3.Connection) -> Finding | None:
            row = c.execute("SELECT code FROM databases WHERE id = ?", (database_id,)).fetchone()
            return None if row is None else F.get(c, row[0], finding_id)

        return await self._store.read(_q)

    async def findings(
        self, db_code: int, status: str | None, from_us: int | None, limit: int
    ) -> list[tuple[Finding, set[int]]]:
        """Findings newest first, each with the ids of its evidence lines retention deleted."""

        def _q(c: sqlite3.Connection) -> list[tuple[Finding, set[int]]]:
            return [
                (f, F.deleted_line_ids(c, f.evidence.line_ids)) for f in F.listing(c, db_code, status, from_us, limit)
            ]

        return await self._store.read(_q)

    async def finding_with_gone(self, db_code: int, finding_id: str) -> tuple[Finding, set[int]] | None:
        def _q(c: sqlite3.Connection) -> tuple[Finding, set[int]] | None:
            f = F.get(c, db_code, finding_id)
            return None if f is None else (f, F.deleted_line_ids(c, f.evidence.line_ids))

        return await self._store.read(_q)

    async def queries(
        self, db_code: int, from_us: int | None, to_us: int | None, sort: str, limit: int
    ) -> list[Q.QueryStats]:
        return await self._store.read(lambda c: Q.top(c, db_code, from_us, to_us, sort, limit))

    async def query(
        self, db_code: int, fingerprint: str, from_us: int | None, to_us: int | None
    ) -> tuple[Q.QueryStats, list[Q.SeriesPoint]] | None:
        def _q(c: sqlite3.Connection) -> tuple[Q.QueryStats, list[Q.SeriesPoint]] | None:
            stats = Q.one(c, db_code, fingerprint, from_us, to_us)
            return None if stats is None else (stats, Q.series(c, db_code, fingerprint, from_us, to_us))

        return await self._store.read(_q)


def _evaluate_at(
    c: sqlite3.Connection,
    rule: Rule,
    db: int,
    database_id: str,
    rule_name: str,
    subject: str,
    lookback_us: int,
    since_us: int,
    at_us: int,
) -> FindingDraft | None:
    """`rule`'s draft for a subject evaluated at `at_us`."""
    return rule.evaluate(F.history(c, db, database_id, rule_name, subject, lookback_us, at_us, since_us))


def _resolved_at(evaluate: Callable[[int], FindingDraft | None], at: int, lookback_us: int, now_us: int) -> int:
    """When a finding evaluated at `at` (its newest line) resolved, up to `now_us`: the first whole
    minute at which `evaluate` gives None.

    Its windows start at whole minutes (rules.common.window), so the answer changes only at minute
    boundaries, and with no newer line it only ever goes from a finding to None: a binary search.
    A lookback past the minute holding `at` holds none of its lines.
    """
    first = at - at % F.MINUTE_US + F.MINUTE_US
    lo, hi = 0, lookback_us // F.MINUTE_US
    while lo < hi:
        mid = (lo + hi) // 2
        if evaluate(first + mid * F.MINUTE_US) is None:
            hi = mid
        else:
            lo = mid + 1
    return min(first + lo * F.MINUTE_US, now_us)


def _cursor(c: sqlite3.Connection) -> int:
    row = c.execute("SELECT value FROM kv WHERE key = ?", (CURSOR_KEY,)).fetchone()
    return 0 if row is None else int(row[0])
