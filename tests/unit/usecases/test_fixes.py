"""apply_fix: only the fix definition's SQL runs, through the operator's connection, audited."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from forwarder.config import DatabaseConfig, DatabaseConnectionConfig
from forwarder.insights.model import Evidence, Finding, Fix, Needs, SqlPart
from forwarder.usecases import fixes as cases
from forwarder.usecases.destinations import Actor
from tests.unit.api.findings import WAL_FIX

ACTOR = Actor("default", "key:k1")


def _finding(*fixes: Fix) -> Finding:
    return Finding(
        id="f1",
        database_id="main",
        rule="checkpoints",
        subject="",
        severity="warning",
        title="Checkpoints are occurring too frequently",
        summary="12 checkpoints requested",
        evidence=Evidence(0, 1, 12),
        fixes=fixes,
        first_seen_us=0,
        last_seen_us=1,
        status="open",
    )


def _database(connection: dict[str, Any] | None = None) -> DatabaseConfig:
    conn = None if connection is None else DatabaseConnectionConfig(**connection)
    return DatabaseConfig(id="main", name="main", host="h", log={"path": "/x/*.log"}, connection=conn)  # type: ignore[arg-type]


ALLOWED = {"dsn": "postgresql://admin@db/postgres", "allow_fixes": True}


@dataclass
class FakeFindings:
    found: dict[tuple[str, str], Finding] = field(default_factory=dict)

    async def finding(self, database_id: str, finding_id: str) -> Finding | None:
        return self.found.get((database_id, finding_id))


@dataclass
class FakeAudit:
    records: list[dict[str, Any]] = field(default_factory=list)

    async def audit(
        self, *, org: str, actor: str, action: str, target: str | None, details: dict[str, object] | None
    ) -> None:
        self.records.append({"org": org, "actor": actor, "action": action, "target": target, "details": details})


@dataclass
class FakeServer:
    """A server whose settings ALTER SYSTEM changes for sessions started after a reload."""

    settings: dict[str, str] = field(default_factory=lambda: {"max_wal_size": "1GB"})
    staged: dict[str, str] = field(default_factory=dict)
    statements: list[str] = field(default_factory=list)
    passwords: list[str | None] = field(default_factory=list)
    fail_on: str | None = None
    sessions: int = 0
    databases: list[str | None] = field(default_factory=list)

    def connect(
        self, connection: DatabaseConnectionConfig, password: str | None, *, database: str | None = None
    ) -> Any:
        server = self

        class Session:
            async def execute(self, sql: str) -> None:
                if server.fail_on and server.fail_on in sql:
                    raise cases.ServerError(
                        f'PostgreSQL: permission denied to set parameter "max_wal_size" ({password})'
                    )
                server.statements.append(sql)
                if sql.startswith("ALTER SYSTEM SET max_wal_size"):
                    server.staged["max_wal_size"] = sql.split("'")[1]
                if sql == cases.RELOAD_SQL:
                    server.settings.update(server.staged)

            async def setting(self, name: str) -> tuple[str, bool]:
                return server.settings[name], False

        @asynccontextmanager
        async def session() -> AsyncIterator[Session]:
            server.passwords.append(password)
            server.databases.append(database)
            server.sessions += 1
            yield Session()

        return session()


def _ports(findings: FakeFindings, audit: FakeAudit, server: FakeServer) -> cases.Ports:
    return cases.Ports(findings, audit, server.connect)


async def test_an_allowed_fix_runs_its_sql_reloads_and_reports_the_setting_before_and_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FWD_TEST_PG_PASSWORD", "s3cret-pw")
    findings, audit, server = FakeFindings({("main", "f1"): _finding(WAL_FIX)}), FakeAudit(), FakeServer()
    db = _database({**ALLOWED, "password_env": "FWD_TEST_PG_PASSWORD"})

    done = await cases.apply_fix(_ports(findings, audit, server), db, "f1", "raise_max_wal_size", ACTOR)

    assert server.statements == ["ALTER SYSTEM SET max_wal_size = '4GB'", "SELECT pg_reload_conf()"]
    assert (done.before, done.after, done.reloaded, done.setting) == ("1GB", "4GB", True, "max_wal_size")
    assert done.sql == tuple(server.statements)
    assert server.passwords == ["s3cret-pw", "s3cret-pw"]  # the value after is read on a new session
    assert audit.records == [
        {
            "org": "default",
            "actor": "key:k1",
            "action": "fixes.applied",
            "target": "main",
            "details": {
                "finding_id": "f1",
                "fix_id": "raise_max_wal_size",
                "sql": list(done.sql),
                "before": "1GB",
                "after": "4GB",
            },
        }
    ]
    assert "s3cret-pw" not in repr(audit.records) and "s3cret-pw" not in repr(done)


@pytest.mark.parametrize(
    ("finding_id", "fix_id", "words"),
    [("nope", "raise_max_wal_size", "no finding 'nope'"), ("f1", "nope", "has no fix 'nope'")],
)
async def test_an_unknown_finding_or_fix_is_not_found_and_nothing_runs(
    finding_id: str, fix_id: str, words: str
) -> None:
    findings, audit, server = FakeFindings({("main", "f1"): _finding(WAL_FIX)}), FakeAudit(), FakeServer()

    with pytest.raises(cases.NotFound, match=words):
        await cases.apply_fix(_ports(findings, audit, server), _database(ALLOWED), finding_id, fix_id, ACTOR)

    assert server.sessions == 0 and audit.records == []


@pytest.mark.parametrize(
    ("connection", "needs", "reason", "words"),
    [
        (None, "reload", "no_connection", "[databases.connection]"),
        ({"dsn": "postgresql://a@db/p"}, "reload", "fixes_not_allowed", "allow_fixes = true"),
        (ALLOWED, "restart", "needs_restart", "restart"),
    ],
)
async def test_a_fix_that_may_not_run_answers_the_sql_to_run_by_hand(
    connection: dict[str, Any] | None, needs: Needs, reason: str, words: str
) -> None:
    fix = replace(WAL_FIX, needs=needs)
    findings, audit, server = FakeFindings({("main", "f1"): _finding(fix)}), FakeAudit(), FakeServer()

    with pytest.raises(cases.NotApplied) as caught:
        await cases.apply_fix(_ports(findings, audit, server), _database(connection), "f1", fix.fix_id, ACTOR)

    assert caught.value.reason == reason
    assert words in caught.value.message
    assert caught.value.sql == "ALTER SYSTEM SET max_wal_size = '4GB'"
    assert server.sessions == 0 and audit.records == []


async def test_a_fix_done_by_hand_answers_its_label() -> None:
    pooler = Fix("use_a_pooler", "Put PgBouncer in front of the server", (), "medium", "server", manual=True)
    findings, audit, server = FakeFindings({("main", "f1"): _finding(pooler)}), FakeAudit(), FakeServer()

    with pytest.raises(cases.NotApplied) as caught:
        await cases.apply_fix(_ports(findings, audit, server), _database(ALLOWED), "f1", "use_a_pooler", ACTOR)

    assert (caught.value.reason, caught.value.sql) == ("manual", None)
    assert "Put PgBouncer in front of the server" in caught.value.message
    assert server.sessions == 0


async def test_a_refused_statement_fails_without_the_password_and_is_not_audited_as_applied(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FWD_TEST_PG_PASSWORD", "s3cret-pw")
    findings, audit, server = FakeFindings({("main", "f1"): _finding(WAL_FIX)}), FakeAudit(), FakeServer()
    server.fail_on = "ALTER SYSTEM"
    db = _database({**ALLOWED, "password_env": "FWD_TEST_PG_PASSWORD"})

    with pytest.raises(cases.Failed) as caught:
        await cases.apply_fix(_ports(findings, audit, server), db, "f1", "raise_max_wal_size", ACTOR)

    assert "permission denied" in caught.value.message
    assert "s3cret-pw" not in caught.value.message
    assert caught.value.sql == () and audit.records == []


async def test_a_failure_after_the_fix_ran_is_audited_with_what_ran() -> None:
    findings, audit, server = FakeFindings({("main", "f1"): _finding(WAL_FIX)}), FakeAudit(), FakeServer()
    server.fail_on = "pg_reload_conf"

    with pytest.raises(cases.Failed) as caught:
        await cases.apply_fix(_ports(findings, audit, server), _database(ALLOWED), "f1", "raise_max_wal_size", ACTOR)

    assert caught.value.sql == ("ALTER SYSTEM SET max_wal_size = '4GB'",)
    assert [r["action"] for r in audit.records] == ["fixes.failed"]
    assert audit.records[0]["details"]["sql"] == ["ALTER SYSTEM SET max_wal_size = '4GB'"]


TABLE_FIX = Fix(
    fix_id="table-autovacuum",
    label="Vacuum public.select earlier and faster (per-table autovacuum settings)",
    statement=(
        SqlPart(text="ALTER TABLE "),
        SqlPart(identifier="public"),
        SqlPart(text="."),
        SqlPart(identifier="select"),
        SqlPart(text=" SET (autovacuum_vacuum_scale_factor = 0.02)"),
    ),
    risk="low",
    applies_to="table public.select in database Shop",
    database="Shop",
)


async def test_a_fix_that_names_its_database_runs_connected_to_that_database() -> None:
    # The connection's DSN names `postgres`; the autovacuum line named Shop.public.select.
    findings, audit, server = FakeFindings({("main", "f1"): _finding(TABLE_FIX)}), FakeAudit(), FakeServer()

    done = await cases.apply_fix(_ports(findings, audit, server), _database(ALLOWED), "f1", "table-autovacuum", ACTOR)

    assert server.databases == ["Shop"]
    assert server.statements == ['ALTER TABLE "public"."select" SET (autovacuum_vacuum_scale_factor = 0.02)']
    assert done.sql == tuple(server.statements)
    assert audit.records[0]["details"]["database"] == "Shop"


async def test_a_server_wide_fix_runs_in_the_connections_own_database() -> None:
    findings, audit, server = FakeFindings({("main", "f1"): _finding(WAL_FIX)}), FakeAudit(), FakeServer()

    await cases.apply_fix(_ports(findings, audit, server), _database(ALLOWED), "f1", "raise_max_wal_size", ACTOR)

    assert server.databases == [None, None] and "database" not in audit.records[0]["details"]


async def test_a_fix_whose_database_the_server_refuses_fails_naming_it() -> None:
    findings, audit, server = FakeFindings({("main", "f1"): _finding(TABLE_FIX)}), FakeAudit(), FakeServer()
    server.fail_on = "ALTER TABLE"

    with pytest.raises(cases.Failed) as caught:
        await cases.apply_fix(_ports(findings, audit, server), _database(ALLOWED), "f1", "table-autovacuum", ACTOR)

    assert "database 'Shop'" in caught.value.message and server.statements == []
