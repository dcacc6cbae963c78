"""Values of the insights: queries, findings, their fixes, alerts (frozen dataclasses).

Everything here is derived from stored lines by `insights/` and kept in its own tables, so a
finding keeps its numbers after retention deleted the lines it rests on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Severity = Literal["info", "warning", "critical"]
FindingStatus = Literal["open", "resolved"]
AlertState = Literal["firing", "resolved"]
Risk = Literal["low", "medium", "high"]
# What a fix needs after its SQL ran: nothing, `SELECT pg_reload_conf()` (done by the fix), or a
# server restart (such a fix is never applied by the daemon; it says so).
Needs = Literal["none", "reload", "restart"]


@dataclass(frozen=True, slots=True)
class SqlPart:
    """One piece of a fix's SQL: fixed text of the fix definition, an identifier (quoted with
    PostgreSQL's rules when rendered) or a literal value (quoted likewise). Text from a log line
    only ever enters as an identifier or a literal, never as `text`."""

    text: str = ""
    identifier: str | None = None
    literal: str | None = None


@dataclass(frozen=True, slots=True)
class Fix:
    """A change that resolves (or eases) a finding.

    `statement` is rendered to `sql` (what the API shows and what runs); `setting` names the
    server setting to `SHOW` before and after (None when the fix changes no setting, e.g. a
    per-table storage parameter); `applies_to` says what it changes ("server", "role app",
    "database shop", "table public.vac in database shop"); `database` is the database the statement
    must run in (a table's), None when any database of the server will do (ALTER SYSTEM, ALTER
    ROLE ... IN DATABASE, ALTER DATABASE change the whole server's catalogs).
    """

    fix_id: str
    label: str
    statement: tuple[SqlPart, ...]
    risk: Risk
    applies_to: str
    needs: Needs = "none"
    setting: str | None = None
    # For a fix that can only be done by hand (a pooler): no statement; the label says what to do.
    manual: bool = False
    database: str | None = None


@dataclass(frozen=True, slots=True)
class Evidence:
    """What a finding rests on: counts over a window, the lines (some of them) and queries."""

    window_from_us: int
    window_to_us: int
    count: int
    line_ids: tuple[int, ...] = ()
    query_ids: tuple[str, ...] = ()
    # Named numbers and facts for the summary and the API ("checkpoints": 12, "statements": [...]).
    facts: dict[str, float | int | str | list[str]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Observation:
    """What one stored line tells a rule: counted under (rule, subject) in the line's minute.

    `subject` is what a finding is about ("" for the server as a whole, a relation, a role, a
    client and user, a query fingerprint); `value` is the number the rule sums and maximizes (a
    lock wait's milliseconds, a temp file's bytes; 0 when only the count matters); `sample` keeps a
    few facts of the line for the finding's summary (a statement, a relation, the blocking pid).
    Text in a sample is log text: untrusted, shown escaped, never SQL but as identifier/literal.
    """

    rule: str
    subject: str
    line_id: int
    time_us: int
    value: float = 0.0
    sample: dict[str, str | int | float] | None = None


@dataclass(frozen=True, slots=True)
class Bucket:
    """Observations of one subject in one minute."""

    start_us: int
    count: int
    total: float
    max: float


@dataclass(frozen=True, slots=True)
class SubjectHistory:
    """What a rule's `evaluate` sees of one subject: its minutes over the rule's lookback (oldest
    first), and of its lines in that window the ids of some (the first and the newest) and the
    newest samples (oldest first; the newest few of each sample `event`)."""

    database_id: str
    rule: str
    subject: str
    buckets: tuple[Bucket, ...]
    line_ids: tuple[int, ...]
    samples: tuple[dict[str, str | int | float], ...]
    now_us: int

    def since(self, from_us: int) -> tuple[int, float, float]:
        """(count, total, max) of the minutes starting at or after `from_us`."""
        picked = [b for b in self.buckets if b.start_us >= from_us]
        return (sum(b.count for b in picked), sum(b.total for b in picked), max((b.max for b in picked), default=0.0))


@dataclass(frozen=True, slots=True)
class FindingDraft:
    """What a rule says of a subject now; the engine gives it its id, status and times."""

    severity: Severity
    title: str
    summary: str  # Markdown with the numbers
    evidence: Evidence
    fixes: tuple[Fix, ...] = ()


@dataclass(frozen=True, slots=True)
class Finding:
    """A stored finding: a rule's draft with its stable id, status and times."""

    id: str  # from (database, rule, subject): the same problem keeps its id when it comes back
    database_id: str
    rule: str
    subject: str
    severity: Severity
    title: str
    summary: str
    evidence: Evidence
    fixes: tuple[Fix, ...]
    first_seen_us: int
    last_seen_us: int
    status: FindingStatus
    resolved_us: int | None = None

    def fix(self, fix_id: str) -> Fix | None:
        return next((f for f in self.fixes if f.fix_id == fix_id), None)
