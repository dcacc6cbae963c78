"""The temp_files rule: queries that spilled to temporary files, by role and database.

With log_temp_files set (0 logs every file), PostgreSQL (fd.c ReportTemporaryFileUsage) writes
one line per file when it is deleted, in the session that used it:

    LOG:  temporary file: path "base/pgsql_tmp/pgsql_tmp26306.0", size 2449408
    STATEMENT:  SELECT x FROM big ORDER BY x DESC OFFSET $1;

A sort, hash or materialization that does not fit in work_mem spills. The subject is
"<role>|<database>" of the session ("unknown" for a part the line does not carry): work_mem can
be raised for exactly that role in that database. The value is the file's size in bytes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Final

from forwarder.insights.model import FindingDraft, Fix, Observation, SqlPart, SubjectHistory
from forwarder.insights.rules import common as C
from forwarder.insights.rules import register
from forwarder.model import Kind

UNKNOWN: Final = "unknown"
LOOKBACK_SECONDS: Final = 3600
# Every logged temporary file opens a finding: log_temp_files is the DBA's own threshold of what is
# worth a line. Many of them, or a huge one, make it a warning.
WARNING_FILES: Final = 100
WARNING_BYTES: Final = 1 << 30
MB: Final = 1 << 20
# work_mem applies per sort or hash node of every session: past 1GB a raise is a memory risk that
# needs a person, not a suggestion.
MAX_WORK_MEM_MB: Final = 1024

_SIZE: Final = re.compile(r'temporary file: path "[^"\n]*", size (\d+)')


def suggested_work_mem_mb(largest_bytes: float) -> int:
    """The next power of two MB above the largest temporary file, at most MAX_WORK_MEM_MB."""
    mb = largest_bytes / MB
    return min(1 << max(0, math.floor(math.log2(mb)) + 1 if mb >= 1 else 0), MAX_WORK_MEM_MB)


class TempFiles:
    """Temporary files, by role and database."""

    name: ClassVar[str] = "temp_files"
    topic: ClassVar[str] = "Temporary files"
    kinds: ClassVar[frozenset[Kind]] = frozenset({"temp_file"})
    lookback_seconds: ClassVar[int] = LOOKBACK_SECONDS

    def observe(self, line_id: int, doc: Mapping[str, Any]) -> Iterable[Observation]:
        m = _SIZE.match(C.text(doc, "message"))
        if m is None:
            return ()
        user, database = C.text(doc, "user") or UNKNOWN, C.text(doc, "database") or UNKNOWN
        sample: dict[str, str | int | float] = {
            "user": user,
            "database": database,
            "statement": C.clip(C.text(doc, "statement")),
            "bytes": int(m.group(1)),
        }
        return (Observation(self.name, f"{user}|{database}", line_id, C.time_us(doc), float(m.group(1)), sample),)

    def evaluate(self, history: SubjectHistory) -> FindingDraft | None:
        from_us, count, total, largest = C.window(history, LOOKBACK_SECONDS)
        if count == 0:
            return None
        users, databases = C.sample_texts(history, "user"), C.sample_texts(history, "database")
        user = users[0] if users else UNKNOWN
        database = databases[0] if databases else UNKNOWN
        statements = C.sample_texts(history, "statement")
        mb = suggested_work_mem_mb(largest)
        fixes: list[Fix] = []
        setting = (SqlPart(text=" SET work_mem = "), SqlPart(literal=f"{mb}MB"))
        if database != UNKNOWN and user != UNKNOWN:
            fixes.append(
                Fix(
                    fix_id="work-mem-role",
                    label=f"Raise work_mem to {mb}MB for role {user} in database {database}",
                    statement=(
                        SqlPart(text="ALTER ROLE "),
                        SqlPart(identifier=user),
                        SqlPart(text=" IN DATABASE "),
                        SqlPart(identifier=database),
                        *setting,
                    ),
                    risk="medium",
                    applies_to=f"role {user} in database {database}",
                    setting="work_mem",
                )
            )
        if database != UNKNOWN:
            fixes.append(
                Fix(
                    fix_id="work-mem-database",
                    label=f"Raise work_mem to {mb}MB for every role in database {database}",
                    statement=(SqlPart(text="ALTER DATABASE "), SqlPart(identifier=database), *setting),
                    risk="medium",
                    applies_to=f"database {database}",
                    setting="work_mem",
                )
            )
        who = f"{C.code(user)} in database {C.code(database)}"
        lines = [
            f"**{C.plural(count, 'temporary file')}** ({total / MB:.1f} MB in all, the largest"
            f" **{largest / MB:.1f} MB**) in the last hour, written by queries of {who}: their sorts"
            " or hashes did not fit in work_mem.",
        ]
        if statements:
            lines += ["", "Statements:"]
            lines.extend(f"- {C.code(s)}" for s in statements[:3])
        lines += [
            "",
            f"work_mem = {mb}MB (the next power of two above the largest file, at most"
            f" {MAX_WORK_MEM_MB}MB) keeps them in memory; it applies per sort or hash node of each"
            " session, so raise it for this role or database rather than the whole server.",
        ]
        return FindingDraft(
            severity="warning" if count >= WARNING_FILES or largest >= WARNING_BYTES else "info",
            title=f"Temporary files for {user} in {database}",
            summary="\n".join(lines),
            evidence=C.evidence(
                history,
                from_us,
                count,
                facts={
                    "files": count,
                    "total_bytes": int(total),
                    "largest_bytes": int(largest),
                    "user": user,
                    "database": database,
                    "suggested_work_mem_mb": mb,
                    "statements": statements,
                },
            ),
            fixes=tuple(fixes),
        )


RULE: Final = register(TempFiles())
