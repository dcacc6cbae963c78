"""The autovacuum rule: autovacuum runs that take long, or come again and again, on one table.

With log_autovacuum_min_duration set, PostgreSQL (vacuumlazy.c, analyze.c) reports each run:

    LOG:  automatic vacuum of table "shop.public.vac": index scans: 0
            pages: 0 removed, 2 remain, 2 scanned (100.00% of total)
            ...
            system usage: CPU: user: 0.00 s, system: 0.00 s, elapsed: 0.00 s
    LOG:  automatic analyze of table "shop.public.vac"
            ...
            system usage: CPU: user: 0.00 s, system: 0.00 s, elapsed: 0.00 s

(also "automatic aggressive vacuum ..." and "... vacuum to prevent wraparound ..."). Redaction
keeps these messages whole: they are built from server facts only. The subject is the table as
the line names it, "database.schema.table" whole (the names are printed unquoted: a dot or a
double quote inside one leaves its parts ambiguous, never the whole); the value the run's elapsed
seconds.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Final

from forwarder.insights.model import FindingDraft, Fix, Observation, SqlPart, SubjectHistory
from forwarder.insights.rules import common as C
from forwarder.insights.rules import register
from forwarder.model import Kind
from forwarder.pglog.classify import autovacuum_run

# A run of a minute holds back cleanup of the other tables of that worker and competes with the
# workload for I/O (autovacuum_vacuum_cost_limit throttles it, so long runs mean a big table
# vacuumed in one go: vacuum it in smaller, more frequent steps).
LONG_RUN_SECONDS: Final = 60.0
# With the default naptime (1 min) a table can be processed at most about once a minute; ten runs
# an hour means its thresholds are reached almost all the time (a queue table, a hot counter).
REPEATED_RUNS: Final = 10
LOOKBACK_SECONDS: Final = 3600
CRITICAL_RUN_SECONDS: Final = 3600.0

_ELAPSED: Final = re.compile(r"elapsed: (\d+(?:\.\d+)?) s")
# The fix's per-table settings: vacuum after 2% of the rows changed instead of 20% (a big table is
# then vacuumed in smaller steps), with a cost limit that lets each run finish sooner.
SCALE_FACTOR: Final = "0.02"
COST_LIMIT: Final = "1000"
SETTINGS: Final = f"autovacuum_vacuum_scale_factor = {SCALE_FACTOR}, autovacuum_vacuum_cost_limit = {COST_LIMIT}"
# Schemas of the system catalogs (and their TOAST tables): ALTER TABLE on them fails ("permission
# denied: ... is a system catalog"), and a TOAST table takes its settings from its own table
# (`toast.autovacuum_...`), which the log does not name.
SYSTEM_SCHEMAS: Final = frozenset({"pg_catalog", "pg_toast", "information_schema"})


def split_table(name: str) -> tuple[str, str, str] | None:
    """("db", "schema", "table") of the `database.schema.table` an autovacuum line names.

    PostgreSQL prints the three names unquoted and unescaped, joined by dots: a name with a dot
    or a double quote in it leaves the parts ambiguous and gives None (no SQL is made from a guess).
    """
    if '"' in name:
        return None
    parts = name.split(".")
    return (parts[0], parts[1], parts[2]) if len(parts) == 3 and all(parts) else None


class Autovacuum:
    """Long or repeated autovacuum runs, by table."""

    name: ClassVar[str] = "autovacuum"
    topic: ClassVar[str] = "Autovacuum that runs long or again and again"
    kinds: ClassVar[frozenset[Kind]] = frozenset({"autovacuum"})
    lookback_seconds: ClassVar[int] = LOOKBACK_SECONDS

    def observe(self, line_id: int, doc: Mapping[str, Any]) -> Iterable[Observation]:
        message = C.text(doc, "message")
        run = autovacuum_run(message)
        if run is None:
            return ()
        kind, table, name_end = run
        # after the name: a table may be called "elapsed: 9999 s"
        elapsed = _ELAPSED.search(message, name_end)
        seconds = float(elapsed.group(1)) if elapsed is not None else 0.0
        sample: dict[str, str | int | float] = {"run": kind, "seconds": seconds}
        return (Observation(self.name, table, line_id, C.time_us(doc), seconds, sample),)

    def evaluate(self, history: SubjectHistory) -> FindingDraft | None:
        from_us, runs, total, longest = C.window(history, LOOKBACK_SECONDS)
        if runs == 0 or (longest < LONG_RUN_SECONDS and runs < REPEATED_RUNS):
            return None
        table = history.subject
        lines = [
            f"**{C.plural(runs, 'autovacuum run')}** (vacuum or analyze) on {C.code(table)} in the last"
            f" hour, **{total:.0f} s** in all, the longest **{longest:.0f} s**.",
            "",
        ]
        if runs >= REPEATED_RUNS:
            lines.append("The table reaches its autovacuum thresholds again and again.")
        if longest >= LONG_RUN_SECONDS:
            lines.append("Runs take long: each has much to clean at once.")
        parts = split_table(table)
        fixes: tuple[Fix, ...] = ()
        if parts is not None and parts[1] in SYSTEM_SCHEMAS:
            lines.append(
                "It is a system table: per-table settings cannot be set on it (a TOAST table takes them"
                " from the table it belongs to). Catalogs vacuumed again and again usually mean much DDL"
                " or many temporary tables."
            )
        else:
            lines.append(
                f"Per-table settings ({SETTINGS}) make vacuum start earlier, in smaller steps, and finish sooner."
            )
            fixes = (table_fix(*parts),) if parts is not None else (_by_hand(table),)
        return FindingDraft(
            severity="critical" if longest >= CRITICAL_RUN_SECONDS else "warning",
            title=f"Autovacuum {'runs long' if longest >= LONG_RUN_SECONDS else 'runs again and again'} on {table}",
            summary="\n".join(lines),
            evidence=C.evidence(
                history,
                from_us,
                runs,
                facts={
                    "runs": runs,
                    "total_seconds": round(total, 2),
                    "longest_seconds": round(longest, 2),
                    "table": table,
                },
            ),
            fixes=fixes,
        )


def table_fix(db: str, schema: str, rel: str) -> Fix:
    """The per-table settings as SQL, to run in the database the line names."""
    return Fix(
        fix_id="table-autovacuum",
        label=f"Vacuum {schema}.{rel} earlier and faster (per-table autovacuum settings)",
        statement=(
            SqlPart(text="ALTER TABLE "),
            SqlPart(identifier=schema),
            SqlPart(text="."),
            SqlPart(identifier=rel),
            SqlPart(text=f" SET ({SETTINGS})"),
        ),
        risk="low",
        applies_to=f"table {schema}.{rel} in database {db}",
        database=db,
    )


def _by_hand(table: str) -> Fix:
    """The per-table settings for a table whose name the log leaves ambiguous: by hand."""
    return Fix(
        fix_id="table-autovacuum",
        label=(
            f"Set per-table autovacuum settings ({SETTINGS}) on this table with ALTER TABLE, connected to"
            " its database: its name as the log prints it cannot be split into database, schema and table"
            " for certain (a name holds a dot or a double quote)"
        ),
        statement=(),
        risk="low",
        applies_to=f"table {table}",
        manual=True,
    )


RULE: Final = register(Autovacuum())
