"""The wraparound rule: transaction ID (or multixact) wraparound warnings and the stop that follows.

PostgreSQL (varsup.c, multixact.c, vacuum.c) warns as a database's oldest unfrozen ID nears the
limit, then stops assigning IDs (PostgreSQL 16+ say "that assign new transaction IDs" / "...
MultiXactIds" and "cutoff for ... is far in the past"; a database that is gone is named by its
OID, and the subject is then ""):

    WARNING:  database "shop" must be vacuumed within 9999999 transactions
    WARNING:  database "shop" must be vacuumed before 999999 more MultiXactIds are used
    WARNING:  oldest xmin is far in the past
    ERROR:  database is not accepting commands to avoid wraparound data loss in database "shop"
    ERROR:  database is not accepting commands that generate new MultiXactIds to avoid wraparound
            data loss in database "shop"

The subject is the database the message names ("" when it names none, as "oldest xmin ...").
Every form is critical: the end of it is a database that accepts no writes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Final

from forwarder.insights.model import FindingDraft, Fix, Observation, SubjectHistory
from forwarder.insights.rules import common as C
from forwarder.insights.rules import register
from forwarder.model import Kind

# PostgreSQL repeats the warning with every new ID past the limit; it resolves after a day without
# one (a VACUUM that froze the database stops them at once).
LOOKBACK_SECONDS: Final = 86_400

_MESSAGES: Final = re.compile(
    r'(?:database "(?P<db>[^"\n]{1,300})"|database with OID \d+) must be vacuumed'
    r" (?:within (?P<xids>\d+) transactions|before (?P<mxids>\d+) more MultiXactIds? (?:is|are) used"
    r"|before \d+ more multixact members? (?:is|are) used)"
    r"|(?:oldest (?:xmin|multixact)|cutoff for (?:removing and freezing tuples|freezing multixacts)) is far in the past"
    r"|database is not accepting commands (?:that (?:generate|assign) new (?:MultiXactIds|transaction IDs) )?"
    r'to avoid wraparound data loss in database (?:"(?P<stopped>[^"\n]{1,300})"|with OID (?P<oid>\d+))'
)

FIX_OLD_TRANSACTIONS: Final = Fix(
    fix_id="old-transactions",
    label=(
        "End what holds the oldest xmin back: long open transactions (pg_stat_activity.backend_xmin),"
        " prepared transactions (pg_prepared_xacts) and stale replication slots (pg_replication_slots)"
    ),
    statement=(),
    risk="medium",
    applies_to="server",
    manual=True,
)


class Wraparound:
    """Wraparound warnings, by database."""

    name: ClassVar[str] = "wraparound"
    topic: ClassVar[str] = "Transaction ID wraparound"
    # The warnings are of kind autovacuum, the stop is an error (pglog/classify.py).
    kinds: ClassVar[frozenset[Kind]] = frozenset({"autovacuum", "error"})
    lookback_seconds: ClassVar[int] = LOOKBACK_SECONDS

    def observe(self, line_id: int, doc: Mapping[str, Any]) -> Iterable[Observation]:
        m = _MESSAGES.match(C.text(doc, "message"))
        if m is None:
            return ()
        database = m.group("db") or m.group("stopped") or ""
        sample: dict[str, str | int | float] = {"message": C.clip(C.text(doc, "message"))}
        if m.group("xids"):
            sample["xids_left"] = int(m.group("xids"))
        if m.group("mxids"):
            sample["multixacts_left"] = int(m.group("mxids"))
        if m.group("stopped") or m.group("oid"):
            sample["stopped"] = 1
        return (Observation(self.name, database, line_id, C.time_us(doc), 0.0, sample),)

    def evaluate(self, history: SubjectHistory) -> FindingDraft | None:
        from_us, count, _, _ = C.window(history, LOOKBACK_SECONDS)
        if count == 0:
            return None
        database = history.subject
        left = C.sample_numbers(history, "xids_left")
        mx_left = C.sample_numbers(history, "multixacts_left")
        stopped = bool(C.sample_numbers(history, "stopped"))
        messages = C.sample_texts(history, "message")
        lines = [
            f"**{C.plural(count, 'wraparound warning')}** in the last day"
            + (f" for database {C.code(database)}" if database else "")
            + ":",
            "",
            *(f"- {C.code(m)}" for m in messages[:3]),
            "",
        ]
        if stopped:
            lines.append("The database **no longer accepts commands** that need a new transaction ID.")
        if left:
            lines.append(f"Transaction IDs left before the stop: **{min(left):.0f}**.")
        if mx_left:
            lines.append(f"MultiXactIds left before the stop: **{min(mx_left):.0f}**.")
        lines.append(
            "VACUUM (FREEZE) of the database's oldest tables advances its frozen horizon, once nothing"
            " holds the oldest xmin back."
        )
        fixes: list[Fix] = []
        if database:
            fixes.append(
                Fix(
                    fix_id="vacuum-freeze",
                    label=(
                        f"Run VACUUM (FREEZE, VERBOSE) connected to database {database} (it can take hours on"
                        " big tables; in single-user mode if the database already stopped accepting commands)"
                    ),
                    # By hand: it cannot run inside a transaction block and may run for hours.
                    statement=(),
                    risk="medium",
                    applies_to=f"database {database}",
                    manual=True,
                )
            )
        fixes.append(FIX_OLD_TRANSACTIONS)
        facts: dict[str, float | int | str | list[str]] = {"warnings": count, "database": database}
        if left:
            facts["min_xids_left"] = int(min(left))
        if mx_left:
            facts["min_multixacts_left"] = int(min(mx_left))
        if stopped:
            facts["stopped"] = "yes"
        return FindingDraft(
            severity="critical",
            title="Transaction ID wraparound" + (f" in {database}" if database else " is near"),
            summary="\n".join(lines),
            evidence=C.evidence(
                history,
                from_us,
                count,
                facts=facts,
            ),
            fixes=tuple(fixes),
        )


RULE: Final = register(Wraparound())
