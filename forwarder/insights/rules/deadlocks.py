"""The deadlocks rule: every `deadlock detected` error, by the relations it involved.

PostgreSQL (deadlock.c DeadLockReport) writes one ERROR per deadlock, in the session it cancels:

    ERROR:  deadlock detected
    DETAIL:  Process A waits for ShareLock on transaction 750; blocked by process B.
             Process B waits for ShareLock on transaction 751; blocked by process A.
             Process A: <statement of A>
             Process B: <statement of B>
    CONTEXT:  while updating tuple (0,3) in relation "accounts"

The subject is the relations of the CONTEXT (comma-joined; "" when it names none, e.g. an
advisory lock): deadlocks on the same tables are one problem, whichever rows they hit.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Final

from forwarder.insights.model import FindingDraft, Fix, Observation, SubjectHistory
from forwarder.insights.rules import common as C
from forwarder.insights.rules import register
from forwarder.model import Kind

# One deadlock is already a bug in the application's lock order: open on the first. Many in an
# hour means it keeps happening under load: critical.
CRITICAL_COUNT: Final = 10
LOOKBACK_SECONDS: Final = 3600  # resolves after an hour without one

# "Process 123: <statement>" lines of the DETAIL, up to the next one (a statement spans lines).
_PROCESS_STATEMENT: Final = re.compile(r"^Process (\d+): (.*?)(?=\nProcess \d+: |\Z)", re.MULTILINE | re.DOTALL)

ORDER_FIX: Final = Fix(
    fix_id="lock-order",
    label=(
        "Make the transactions involved take their row locks in one order (for example by primary key,"
        " or with SELECT ... FOR UPDATE in that order first), or retry the transaction on SQLSTATE 40P01"
    ),
    statement=(),
    risk="low",
    applies_to="application",
    manual=True,
)


class Deadlocks:
    """`deadlock detected` errors, by relation."""

    name: ClassVar[str] = "deadlocks"
    topic: ClassVar[str] = "Deadlocks between transactions"
    kinds: ClassVar[frozenset[Kind]] = frozenset({"deadlock"})
    lookback_seconds: ClassVar[int] = LOOKBACK_SECONDS

    def observe(self, line_id: int, doc: Mapping[str, Any]) -> Iterable[Observation]:
        if not C.text(doc, "message").startswith("deadlock detected"):
            return ()
        rels = C.relations(C.text(doc, "context"))
        statements = [s.strip() for _, s in _PROCESS_STATEMENT.findall(C.text(doc, "detail"))]
        sample: dict[str, str | int | float] = {f"statement_{i + 1}": C.clip(s) for i, s in enumerate(statements[:2])}
        if not statements and (stmt := C.text(doc, "statement")):
            sample["statement_1"] = C.clip(stmt)
        sample["relations"] = ", ".join(rels)
        return (Observation(self.name, ",".join(rels), line_id, C.time_us(doc), 0.0, sample),)

    def evaluate(self, history: SubjectHistory) -> FindingDraft | None:
        from_us, count, _, _ = C.window(history, LOOKBACK_SECONDS)
        if count == 0:
            return None
        statements = C.sample_texts(history, "statement_1") + C.sample_texts(history, "statement_2")
        statements = list(dict.fromkeys(statements))
        rels = [r for r in history.subject.split(",") if r]
        where = " on " + ", ".join(C.code(r) for r in rels) if rels else ""
        lines = [
            f"**{C.plural(count, 'deadlock')}** in the last hour{where}: PostgreSQL cancelled one of the"
            " transactions each time (SQLSTATE 40P01).",
        ]
        if statements:
            lines.append("")
            lines.append("Statements involved:")
            lines.extend(f"- {C.code(s)}" for s in statements[:4])
        lines.append("")
        lines.append("Two transactions locked the same rows in opposite orders.")
        return FindingDraft(
            severity="critical" if count >= CRITICAL_COUNT else "warning",
            title=f"{C.plural(count, 'deadlock')}{' on ' + ', '.join(rels) if rels else ''}",
            summary="\n".join(lines),
            evidence=C.evidence(
                history,
                from_us,
                count,
                facts={"count": count, "statements": statements, "relations": rels},
            ),
            fixes=(ORDER_FIX,),
        )


RULE: Final = register(Deadlocks())
