"""The statement_timeouts rule: statements cancelled by a timeout or a cancel request, by query.

PostgreSQL (postgres.c ProcessInterrupts) cancels a statement with

    ERROR:  canceling statement due to statement timeout        (57014)
    ERROR:  canceling statement due to user request             (57014)
    ERROR:  canceling statement due to lock timeout             (55P03)
    STATEMENT:  SELECT pg_sleep($1);

The subject is the fingerprint of the cancelled statement (the query id of the queries view),
"" when the line carries none; the query id is in the evidence.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Final

from forwarder.insights.model import Evidence, FindingDraft, Fix, Observation, SubjectHistory
from forwarder.insights.rules import common as C
from forwarder.insights.rules import register
from forwarder.model import Kind

# One cancel is what a timeout is for; a query cancelled again and again needs a look (a plan gone
# bad, a lock held too long, a timeout set too tight).
OPEN_COUNT: Final = 3
CRITICAL_COUNT: Final = 100
LOOKBACK_SECONDS: Final = 3600

_REASONS: Final = {
    "canceling statement due to statement timeout": "statement timeout",
    "canceling statement due to lock timeout": "lock timeout",
    "canceling statement due to user request": "user request",
}
# A lock timeout's message may end with " at character N" (the statement's position).

FIX: Final = Fix(
    fix_id="look-at-query",
    label=(
        "Look at the query's plan (EXPLAIN) and at what it waits for: a slow plan, or a lock held by"
        " another session (lock timeouts); raise the timeout only if the work is legitimately long"
    ),
    statement=(),
    risk="low",
    applies_to="application",
    manual=True,
)


def query_id(statement: str) -> str:
    """The fingerprint the queries view gives `statement` (normalized, or the full text kept)."""
    # Imported here: the daemon parses in its worker, and only this rare path needs libpg_query.
    from forwarder.pglog.normalize import normalize_statement

    return normalize_statement(statement)[2] if statement else ""


class StatementTimeouts:
    """Cancelled statements, by query."""

    name: ClassVar[str] = "statement_timeouts"
    topic: ClassVar[str] = "Statements cancelled by a timeout"
    kinds: ClassVar[frozenset[Kind]] = frozenset({"error"})
    lookback_seconds: ClassVar[int] = LOOKBACK_SECONDS

    def observe(self, line_id: int, doc: Mapping[str, Any]) -> Iterable[Observation]:
        message = C.text(doc, "message")
        if not message.startswith("canceling statement due to "):
            return ()
        reason = next((r for prefix, r in _REASONS.items() if message.startswith(prefix)), None)
        if reason is None:
            return ()  # conflict with recovery: a standby's business, not the query's
        statement = C.text(doc, "statement")
        fp = query_id(statement)
        sample: dict[str, str | int | float] = {"reason": reason, "statement": C.clip(statement)}
        return (Observation(self.name, fp, line_id, C.time_us(doc), 0.0, sample),)

    def evaluate(self, history: SubjectHistory) -> FindingDraft | None:
        from_us, count, _, _ = C.window(history, LOOKBACK_SECONDS)
        if count < OPEN_COUNT:
            return None
        reasons = C.sample_texts(history, "reason")
        statements = C.sample_texts(history, "statement")
        what = C.code(statements[0]) if statements else "statements without a logged text"
        lines = [
            f"**{C.plural(count, 'statement')}** cancelled in the last hour: {what}.",
            "",
            "Reasons seen: " + ", ".join(reasons) + ".",
        ]
        return FindingDraft(
            severity="critical" if count >= CRITICAL_COUNT else "warning",
            title=f"Statements cancelled ({', '.join(reasons)})",
            summary="\n".join(lines),
            evidence=Evidence(
                window_from_us=C.first_seen_us(history, from_us),
                window_to_us=history.now_us,
                count=count,
                line_ids=history.line_ids,
                query_ids=(history.subject,) if history.subject else (),
                facts={"cancelled": count, "reasons": reasons, "statements": statements[:1]},
            ),
            fixes=(FIX,),
        )


RULE: Final = register(StatementTimeouts())
