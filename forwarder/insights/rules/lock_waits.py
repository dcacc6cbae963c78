"""The lock_waits rule: sessions that waited long for a lock, by the relation they waited on.

With log_lock_waits on, PostgreSQL (proc.c ProcSleep) reports a wait once it passed
deadlock_timeout, and again when it ends:

    LOG:  process 26312 still waiting for ShareLock on transaction 748 after 1000.149 ms
    DETAIL:  Process holding the lock: 26309. Wait queue: 26312.
    CONTEXT:  while updating tuple (0,1) in relation "accounts"
    STATEMENT:  UPDATE accounts SET balance = balance + $1 WHERE id = $2;
    LOG:  process 26312 acquired ShareLock on transaction 748 after 2243.799 ms

Each "still waiting" line is one wait, observed with its milliseconds; "acquired" lines are not
observed (they would count the same wait twice), so the numbers say how long a session had waited
when PostgreSQL reported it: at least that long.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Final

from forwarder.insights.model import FindingDraft, Fix, Observation, SubjectHistory
from forwarder.insights.rules import common as C
from forwarder.insights.rules import register
from forwarder.model import Kind

# A wait of a second is what users notice (and PostgreSQL's default deadlock_timeout, so with
# default settings every reported wait is one); shorter waits matter when they are many.
LONG_WAIT_MS: Final = 1000.0
MANY_WAITS: Final = 10  # reported waits in the window, however short
CRITICAL_WAIT_MS: Final = 30_000.0  # a session stuck for half a minute
WINDOW_SECONDS: Final = 3600
LOOKBACK_SECONDS: Final = WINDOW_SECONDS

FIX: Final = Fix(
    fix_id="shorter-transactions",
    label=(
        "Find the blocking session (pg_stat_activity, pg_blocking_pids) and keep transactions that"
        " lock these rows short: commit sooner, no user interaction or slow calls inside them"
    ),
    statement=(),
    risk="low",
    applies_to="application",
    manual=True,
)


class LockWaits:
    """Lock waits past the threshold, by relation."""

    name: ClassVar[str] = "lock_waits"
    topic: ClassVar[str] = "Lock waits"
    kinds: ClassVar[frozenset[Kind]] = frozenset({"lock_wait"})
    lookback_seconds: ClassVar[int] = LOOKBACK_SECONDS

    def observe(self, line_id: int, doc: Mapping[str, Any]) -> Iterable[Observation]:
        message = C.text(doc, "message")
        if " still waiting for " not in message:
            return ()
        ms = doc.get("duration_ms")
        value = float(ms) if isinstance(ms, int | float) else 0.0
        rels = C.relations(C.text(doc, "context"))
        sample: dict[str, str | int | float] = {
            "relation": rels[0] if rels else "",
            "statement": C.clip(C.text(doc, "statement")),
            "blocking": C.holders(C.text(doc, "detail")),
            "wait_ms": value,
        }
        return (Observation(self.name, rels[0] if rels else "", line_id, C.time_us(doc), value, sample),)

    def evaluate(self, history: SubjectHistory) -> FindingDraft | None:
        from_us, count, total, longest = C.window(history, WINDOW_SECONDS)
        if count == 0 or (longest < LONG_WAIT_MS and count < MANY_WAITS):
            return None
        statements = C.sample_texts(history, "statement")
        blocking = C.sample_texts(history, "blocking")
        relation = history.subject
        on = f" on {C.code(relation)}" if relation else ""
        lines = [
            f"**{C.plural(count, 'lock wait')}**{on} in the last hour reported by PostgreSQL"
            f" (log_lock_waits): the longest had waited **{longest:.0f} ms**, on average"
            f" {total / count:.0f} ms when reported.",
        ]
        if blocking:
            lines += ["", "Blocked by process " + ", ".join(C.code(b) for b in blocking[:5]) + "."]
        if statements:
            lines += ["", "Waiting statements:"]
            lines.extend(f"- {C.code(s)}" for s in statements[:3])
        return FindingDraft(
            severity="critical" if longest >= CRITICAL_WAIT_MS else "warning",
            title=f"Lock waits{' on ' + relation if relation else ''} (up to {longest / 1000:.1f} s)",
            summary="\n".join(lines),
            evidence=C.evidence(
                history,
                from_us,
                count,
                facts={
                    "count": count,
                    "max_wait_ms": round(longest, 3),
                    "relation": relation,
                    "blocking_pids": blocking,
                    "statements": statements,
                },
            ),
            fixes=(FIX,),
        )


RULE: Final = register(LockWaits())
