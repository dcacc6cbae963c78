"""A findings port that holds one checkpoint finding, for the API's fix route (the engine is not needed)."""

from __future__ import annotations

from dataclasses import dataclass

from forwarder.insights.model import Evidence, Finding, Fix, SqlPart

WAL_FIX = Fix(
    fix_id="raise_max_wal_size",
    label="Raise max_wal_size to 4GB",
    statement=(SqlPart(text="ALTER SYSTEM SET max_wal_size = "), SqlPart(literal="4GB")),
    risk="low",
    applies_to="server",
    needs="reload",
    setting="max_wal_size",
)
POOLER_FIX = Fix(
    "use_a_pooler", "Put a pooler such as PgBouncer in front of the server", (), "medium", "server", manual=True
)
RESTART_FIX = Fix(
    fix_id="raise_max_connections",
    label="Raise max_connections to 200",
    statement=(SqlPart(text="ALTER SYSTEM SET max_connections = "), SqlPart(literal="200")),
    risk="medium",
    applies_to="server",
    needs="restart",
    setting="max_connections",
)
FINDING = Finding(
    id="0123456789abcdef",
    database_id="main",
    rule="checkpoints",
    subject="",
    severity="warning",
    title="Checkpoints are occurring too frequently",
    summary="12 checkpoints were requested in 10 minutes",
    evidence=Evidence(0, 1, 12),
    fixes=(WAL_FIX, POOLER_FIX, RESTART_FIX),
    first_seen_us=0,
    last_seen_us=1,
    status="open",
)


@dataclass
class OneFinding:
    """The Findings port with FINDING on database `main`."""

    finding_: Finding = FINDING

    async def finding(self, database_id: str, finding_id: str) -> Finding | None:
        ok = database_id == self.finding_.database_id and finding_id == self.finding_.id
        return self.finding_ if ok else None
