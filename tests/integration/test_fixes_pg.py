"""Applying a fix against a real PostgreSQL 15: ALTER SYSTEM runs through the operator's connection
(scram over TCP, the password from a file), `SHOW` changes, the audit record is written; without
allow_fixes the answer is 409 with the SQL, and a read-only key gets 403. A table's fix runs in the
database its log line names, never in the connection's."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest

from forwarder.app import Daemon
from forwarder.clock import FakeClock
from forwarder.config import config_from_dict
from forwarder.insights.fixsql import quote_identifier, quote_literal
from forwarder.insights.model import Finding
from forwarder.insights.rules.autovacuum import Autovacuum, table_fix
from forwarder.usecases.fixes import APPLICATION_NAME
from tests.pgcluster import PgCluster, PgClusterFactory
from tests.unit.api.findings import FINDING, OneFinding
from tests.unit.insights.rules import pg15_lines as PG
from tests.unit.insights.rules.rulekit import docs, evaluate, observe

PASSWORD = "sc'ram\\pw-for-fixes"
RELOPTIONS = (
    "SELECT coalesce(array_to_string(reloptions, ','), '') FROM pg_class WHERE oid = 'public.\"select\"'::regclass"
)
BODY = {"finding_id": FINDING.id, "fix_id": "raise_max_wal_size"}


@dataclass
class Env:
    cluster: PgCluster
    daemon: Daemon
    session: aiohttp.ClientSession
    base: str
    read_only: str
    read_write: str

    async def post(self, ref: str, key: str) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {key}"}
        async with self.session.post(f"{self.base}/v1/databases/{ref}/fixes", json=BODY, headers=headers) as resp:
            return resp.status, await resp.json()


@pytest.fixture
async def env(pg_cluster_factory: PgClusterFactory, tmp_path: Path) -> AsyncIterator[Env]:
    cluster = pg_cluster_factory()
    cluster.query(f"ALTER ROLE postgres PASSWORD {quote_literal(PASSWORD)}")
    password_file = tmp_path / "pg.password"
    password_file.write_text(PASSWORD + "\n")
    dsn = f"postgresql://postgres@{cluster.host}:{cluster.port}/postgres?sslmode=disable"
    log = {"path": str(tmp_path / "logs/*.log")}
    config = config_from_dict(
        {
            "server": {"host": "127.0.0.1", "port": 0},
            "store": {"path": str(tmp_path / "store.db")},
            "security": {"secrets_key_file": str(tmp_path / "secrets.key")},
            "databases": [
                {
                    "id": "main",
                    "name": "main",
                    "log": log,
                    "connection": {"dsn": dsn, "password_file": str(password_file), "allow_fixes": True},
                },
                {"id": "locked", "name": "locked", "log": log, "connection": {"dsn": dsn}},
            ],
        }
    )
    daemon = Daemon(config, clock=FakeClock(start=1_800_000_000))
    await daemon.start()
    assert daemon._ctx is not None
    daemon._ctx.findings = _Both(OneFinding(), OneFinding(replace(FINDING, database_id="locked")))
    _, ro = await daemon.store.create_key("ro", "read-only")
    _, rw = await daemon.store.create_key("rw", "read-write")
    try:
        async with aiohttp.ClientSession() as session:
            yield Env(cluster, daemon, session, f"http://127.0.0.1:{daemon.port}", ro, rw)
    finally:
        await daemon.aclose()


@dataclass
class _Both:
    main: OneFinding
    locked: OneFinding

    async def finding(self, database_id: str, finding_id: str) -> Any:
        return await (self.main if database_id == "main" else self.locked).finding(database_id, finding_id)


async def test_the_checkpoint_fix_changes_max_wal_size_and_is_audited(env: Env) -> None:
    assert env.cluster.query("SHOW max_wal_size") == "1GB"

    status, body = await env.post("main", env.read_write)

    assert status == 200, body
    assert body == {
        "applied": True,
        "sql": ["ALTER SYSTEM SET max_wal_size = '4GB'", "SELECT pg_reload_conf()"],
        "setting": "max_wal_size",
        "before": "1GB",
        "after": "4GB",
        "reloaded": True,
        "pending_restart": False,
    }
    assert env.cluster.query("SHOW max_wal_size") == "4GB"
    (record,) = await env.daemon.store.audit_records()
    key_id = env.read_write.split("_")[1]
    assert record["action"] == "fixes.applied" and record["actor"] == f"key:{key_id}" and record["target"] == "main"
    assert record["details"] == {
        "finding_id": FINDING.id,
        "fix_id": "raise_max_wal_size",
        "sql": body["sql"],
        "before": "1GB",
        "after": "4GB",
    }
    assert PASSWORD not in str(record)
    # The server's log names who did it: the daemon's sessions carry their application_name.
    env.cluster.wait_for_log(rf"connection authorized: user=postgres .*application_name={APPLICATION_NAME}", "log")


async def test_without_allow_fixes_the_answer_is_409_with_the_sql_and_nothing_changes(env: Env) -> None:
    status, body = await env.post("locked", env.read_write)

    assert status == 409
    assert body["reason"] == "fixes_not_allowed"
    assert body["sql"] == "ALTER SYSTEM SET max_wal_size = '4GB'"
    assert env.cluster.query("SHOW max_wal_size") == "1GB"
    assert await env.daemon.store.audit_records() == []


async def test_a_read_only_key_is_refused_and_nothing_changes(env: Env) -> None:
    status, body = await env.post("main", env.read_only)

    assert (status, body["error"]["code"]) == (403, "forbidden")
    assert env.cluster.query("SHOW max_wal_size") == "1GB"


async def test_a_wrong_password_is_502_with_the_servers_words_and_never_the_password(env: Env) -> None:
    env.cluster.query("ALTER ROLE postgres PASSWORD 'another one'")

    status, body = await env.post("main", env.read_write)

    assert (status, body["error"]["code"]) == (502, "fix_failed")
    assert 'password authentication failed for user "postgres"' in body["error"]["message"]
    assert PASSWORD not in str(body) and "postgresql://" not in str(body)
    assert await env.daemon.store.audit_records() == []


@pytest.mark.parametrize("conforming", ["on", "off"])
async def test_quoted_values_read_back_as_themselves_in_postgresql(env: Env, conforming: str) -> None:
    values = ["plain", "it's", "back\\slash", "\\'", "''", 'dou"ble', "ünïcode 表", "x'; SELECT 1; --"]
    conn = await asyncpg.connect(
        host=env.cluster.host,
        port=env.cluster.port,
        user="postgres",
        password=PASSWORD,
        database="postgres",
        ssl=False,
        server_settings={"standard_conforming_strings": conforming},
    )
    try:
        for value in values:
            row = await conn.fetchrow(f"SELECT {quote_literal(value)} AS v, 1 AS {quote_identifier(value)}")
            assert row is not None
            assert row["v"] == value
            assert list(row.keys())[1] == value
    finally:
        await conn.close()


async def test_a_table_fix_runs_in_the_database_its_log_line_names_not_the_connections(env: Env) -> None:
    # The connection's DSN names `postgres`; both databases have a table public."select". The
    # finding comes from PostgreSQL 15's own report of Shop.public.select (tests/unit/insights).
    env.cluster.psql('CREATE DATABASE "Shop";')
    for db in ("postgres", "Shop"):
        env.cluster.psql('CREATE TABLE public."select" (id int);', db=db)
    (report,) = [
        d
        for d in docs(PG.AUTOVACUUM_HOSTILE.replace("elapsed: 0.00 s", "elapsed: 75.00 s"))
        if d["message"].startswith('automatic vacuum of table "Shop.public.select": ')
    ]
    draft = evaluate(Autovacuum(), observe(Autovacuum(), [report]), "Shop.public.select")
    assert draft is not None
    finding = replace(FINDING, rule="autovacuum", subject="Shop.public.select", fixes=draft.fixes)
    status, answer = await apply_table_fix(env, finding)

    assert status == 200, answer
    assert env.cluster.query(RELOPTIONS, db="Shop") == (
        "autovacuum_vacuum_scale_factor=0.02,autovacuum_vacuum_cost_limit=1000"
    )
    assert env.cluster.query(RELOPTIONS, db="postgres") == ""
    (record,) = await env.daemon.store.audit_records()
    assert isinstance(record["details"], dict) and record["details"]["database"] == "Shop"


async def apply_table_fix(env: Env, finding: Finding) -> tuple[int, Any]:
    """POST the table-autovacuum fix of `finding` (the daemon's only finding) with a read-write key."""
    assert env.daemon._ctx is not None
    env.daemon._ctx.findings = _Both(OneFinding(finding), OneFinding(replace(finding, database_id="locked")))
    headers = {"Authorization": f"Bearer {env.read_write}"}
    body = {"finding_id": FINDING.id, "fix_id": "table-autovacuum"}
    async with env.session.post(f"{env.base}/v1/databases/main/fixes", json=body, headers=headers) as resp:
        return resp.status, await resp.json()


async def test_a_table_fix_for_a_database_the_server_lacks_fails_and_changes_nothing(env: Env) -> None:
    env.cluster.psql('CREATE TABLE public."select" (id int);')
    fix = table_fix("Gone", "public", "select")
    finding = replace(FINDING, rule="autovacuum", subject="Gone.public.select", fixes=(fix,))
    status, answer = await apply_table_fix(env, finding)

    assert (status, answer["error"]["code"]) == (502, "fix_failed")
    assert 'database "Gone" does not exist' in answer["error"]["message"]
    assert env.cluster.query(RELOPTIONS) == ""
