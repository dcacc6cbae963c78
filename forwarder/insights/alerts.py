"""Alerts: the `[[alerts]]` rules of the config, evaluated every 30 s over the stored lines.

Per rule and per database it watches, the value is the count of matching lines whose time is in
(now - window, now]. At or above the rule's threshold the rule fires for that database: one firing
instance per rule and database, `started_us` the evaluation that first found it; below, that
instance resolves. A rule that is removed from the config (or stops watching a database) resolves
its firing instances at the next evaluation. Instances live in the store's `alert_instances`
table (written only here), so they survive a restart and a firing one continues after it.
Alerts are not log lines: they reach Prometheus (`forwarder_alerts`) and the API, never a log
destination.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import astuple, dataclass, replace
from typing import Final, get_args

from forwarder import metrics
from forwarder.clock import Clock
from forwarder.config import AlertRuleConfig
from forwarder.insights.model import AlertState, Severity
from forwarder.logsetup import RepeatedFailureLog
from forwarder.model import Kind, expand_kinds
from forwarder.store import Store
from forwarder.store import lines as L

log = logging.getLogger(__name__)

EVALUATE_EVERY_SECONDS: Final = 30.0
ALERT_STATES: Final[tuple[AlertState, ...]] = get_args(AlertState)


@dataclass(frozen=True, slots=True)
class AlertInstance:
    """A rule firing (or having fired) for one database; `value` is its latest count in the window."""

    id: str
    rule: str
    database_id: str
    state: AlertState
    started_us: int
    resolved_us: int | None
    value: int
    threshold: int
    window_seconds: int
    severity: Severity


def instance_id(rule: str, database_id: str, started_us: int) -> str:
    """16 hex digits: the same rule firing again for the same database is a new instance."""
    return hashlib.blake2b(f"{rule}/{database_id}/{started_us}".encode(), digest_size=8).hexdigest()


# --- the alert_instances table ---------------------------------------------------------------

_COLUMNS: Final = "id, rule, database_id, state, started_us, resolved_us, value, threshold, window_seconds, severity"


def _instance(row: tuple[object, ...]) -> AlertInstance:
    return AlertInstance(*row)  # type: ignore[arg-type]  # the columns are the fields, in order


def list_instances(conn: sqlite3.Connection, state: AlertState | None, limit: int) -> list[AlertInstance]:
    """Instances (of `state`, or all), newest start first."""
    where, params = ("WHERE state = ?", [state]) if state is not None else ("", [])
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM alert_instances {where} ORDER BY started_us DESC, id LIMIT ?", [*params, limit]
    ).fetchall()
    return [_instance(r) for r in rows]


def get_instance(conn: sqlite3.Connection, alert_id: str) -> AlertInstance | None:
    row = conn.execute(f"SELECT {_COLUMNS} FROM alert_instances WHERE id = ?", (alert_id,)).fetchone()
    return _instance(row) if row else None


def _firing(conn: sqlite3.Connection) -> dict[tuple[str, str], AlertInstance]:
    rows = conn.execute(f"SELECT {_COLUMNS} FROM alert_instances WHERE state = 'firing'").fetchall()
    return {(i.rule, i.database_id): i for i in map(_instance, rows)}


def _state_counts(conn: sqlite3.Connection) -> dict[tuple[str, AlertState], int]:
    """Per rule: databases it fires for, and databases whose latest instance of it has resolved
    (a firing instance is always the latest of its rule and database)."""
    counts: dict[tuple[str, AlertState], int] = {}
    for rule, firing in conn.execute(
        "SELECT rule, max(state = 'firing') FROM alert_instances GROUP BY rule, database_id"
    ):
        key: tuple[str, AlertState] = (rule, "firing" if firing else "resolved")
        counts[key] = counts.get(key, 0) + 1
    return counts


# --- evaluation ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Target:
    """One rule over one database."""

    rule: AlertRuleConfig
    kinds: frozenset[Kind] | None  # None: every kind
    database_id: str
    db_code: int


def _targets(rules: Sequence[AlertRuleConfig], databases: Mapping[str, int]) -> list[_Target]:
    out = []
    for rule in rules:
        kinds = expand_kinds(rule.kinds) if rule.kinds else None
        for db_id in rule.database_ids or databases:
            if db_id in databases:
                out.append(_Target(rule, kinds, db_id, databases[db_id]))
    return out


def _count_lines(conn: sqlite3.Connection, target: _Target, now_us: int) -> int:
    after_us = now_us - target.rule.window_seconds * 1_000_000
    return L.count_window(conn, target.db_code, target.kinds, after_us, now_us, target.rule.text)


def _save(conn: sqlite3.Connection, instance: AlertInstance, now_us: int) -> None:
    conn.execute(
        f"""
        INSERT INTO alert_instances ({_COLUMNS}, updated_us) VALUES ({", ".join("?" * 11)})
        ON CONFLICT (id) DO UPDATE SET state = excluded.state, resolved_us = excluded.resolved_us,
            value = excluded.value, threshold = excluded.threshold, window_seconds = excluded.window_seconds,
            severity = excluded.severity, updated_us = excluded.updated_us
        """,
        (*astuple(instance), now_us),
    )


def _apply(conn: sqlite3.Connection, values: Sequence[tuple[_Target, int]], now_us: int) -> None:
    """Fire, update and resolve instances for this evaluation's values (inside the caller's transaction)."""
    firing = _firing(conn)
    for target, value in values:
        rule = target.rule
        current = firing.pop((rule.id, target.database_id), None)
        fires = value >= rule.threshold
        if current is None and not fires:
            continue
        if current is None:
            # A new instance, whose id no earlier one has: one resolved and fired again at the same
            # instant (a reload that lowered the threshold back) starts a microsecond later.
            started_us = now_us
            while get_instance(conn, started := instance_id(rule.id, target.database_id, started_us)) is not None:
                started_us += 1
            current = AlertInstance(
                started, rule.id, target.database_id, "firing", started_us, None, value, 0, 0, "info"
            )
        # The rule as it is now: a reload may have changed its threshold, window or severity.
        _save(
            conn,
            replace(
                current,
                state="firing" if fires else "resolved",
                resolved_us=None if fires else now_us,
                value=value,
                threshold=rule.threshold,
                window_seconds=rule.window_seconds,
                severity=rule.severity,
            ),
            now_us,
        )
    # Firing for a rule (or a database) no longer configured: nothing evaluates it any more.
    for orphan in firing.values():
        _save(conn, replace(orphan, state="resolved", resolved_us=now_us), now_us)


class AlertEvaluator:
    """Evaluates the rules every 30 s on the daemon's clock (`run`), and at once on `evaluate_once`."""

    def __init__(
        self, store: Store, clock: Clock, rules: Sequence[AlertRuleConfig], databases: Mapping[str, int]
    ) -> None:
        self._store = store
        self._clock = clock
        self._lock = asyncio.Lock()
        self._rules: tuple[AlertRuleConfig, ...] = ()
        self._targets: list[_Target] = []
        self._failures = RepeatedFailureLog(log, clock)
        self._configured = asyncio.Event()  # set by `configure`: evaluate at once
        self.evaluations = 0  # completed evaluations
        self.evaluated = asyncio.Event()  # set after each one
        self.configure(rules, databases)

    def configure(self, rules: Sequence[AlertRuleConfig], databases: Mapping[str, int]) -> None:
        """The rules and the databases (id -> store code) from the next evaluation on (a reload)."""
        for gone in {r.id for r in self._rules} - {r.id for r in rules}:
            metrics.forget_alert_rule(gone)
        self._rules = tuple(rules)
        self._targets = _targets(rules, databases)
        self._configured.set()

    async def evaluate_once(self) -> None:
        """Count every rule's lines over each database it watches, then fire and resolve."""
        async with self._lock:
            now_us = int(self._clock.now() * 1_000_000)
            targets = self._targets

            def _count(conn: sqlite3.Connection) -> list[tuple[_Target, int]]:
                return [(t, _count_lines(conn, t, now_us)) for t in targets]

            values = await self._store.read(_count)

            def _txn(conn: sqlite3.Connection) -> dict[tuple[str, AlertState], int]:
                _apply(conn, values, now_us)
                return _state_counts(conn)

            counts = await self._store.write(_txn)
            for rule in self._rules:
                for state in ALERT_STATES:
                    metrics.ALERTS.labels(rule.id, state).set(counts.get((rule.id, state), 0))
            self.evaluations += 1
            self.evaluated.set()

    async def run(self) -> None:
        """Evaluate now, every 30 s and at once after `configure`, until cancelled; a failed evaluation
        is logged and tried again at the next. Without rules it waits for some, off the clock."""
        while True:
            self._configured.clear()
            # The next one is due 30 s after this one began, however long this one takes.
            due = self._clock.monotonic() + EVALUATE_EVERY_SECONDS
            try:
                await self.evaluate_once()
            except Exception as exc:
                self._failures.failure("alert evaluation failed", exc)
            else:
                self._failures.ok("alert evaluation works again")
            if not self._rules:
                await self._configured.wait()
                continue
            waits = [asyncio.ensure_future(self._configured.wait()), asyncio.ensure_future(self._sleep_until(due))]
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiting in waits:
                    waiting.cancel()

    async def _sleep_until(self, due: float) -> None:
        # The time left is taken when the sleep begins, not when it is asked for: a clock that moved
        # in between (a test's fake one) shortens it.
        await self._clock.sleep(due - self._clock.monotonic())
