"""POST /v1/databases/{ref}/fixes: what a caller sees when a fix may not run (the run itself: tests/integration)."""

from __future__ import annotations

from typing import Any

import pytest

from forwarder.config import DatabaseConnectionConfig
from tests.unit.api.conftest import Api
from tests.unit.api.findings import FINDING, OneFinding

PATH = "/v1/databases/main/fixes"


@pytest.fixture
def with_findings(api: Api) -> Api:
    assert api.daemon._ctx is not None
    api.daemon._ctx.findings = OneFinding()
    return api


def _connect_main(api: Api, **connection: Any) -> None:
    ctx = api.daemon._ctx
    assert ctx is not None
    dbs = [
        d.model_copy(update={"connection": DatabaseConnectionConfig(**connection)}) if d.id == "main" else d
        for d in ctx.config.databases
    ]
    ctx.config = ctx.config.model_copy(update={"databases": dbs})


async def _post(api: Api, body: object, key: str | None = None) -> tuple[int, Any]:
    headers = api.auth(key or api.read_write)
    async with api.session.post(api.url(PATH), json=body, headers=headers) as resp:
        return resp.status, await resp.json()


async def test_without_a_connection_the_answer_is_409_with_the_sql_to_run(with_findings: Api) -> None:
    status, body = await _post(with_findings, {"finding_id": FINDING.id, "fix_id": "raise_max_wal_size"})

    assert status == 409
    assert body["error"]["code"] == "fix_not_applied"
    assert "[databases.connection]" in body["error"]["message"]
    assert body["reason"] == "no_connection"
    assert body["sql"] == "ALTER SYSTEM SET max_wal_size = '4GB'"
    assert body["label"] == "Raise max_wal_size to 4GB"
    assert await with_findings.daemon.store.audit_records() == []


async def test_a_connection_without_allow_fixes_answers_409_saying_how_to_allow_them(with_findings: Api) -> None:
    _connect_main(with_findings, dsn="postgresql://admin@127.0.0.1:9/postgres")

    status, body = await _post(with_findings, {"finding_id": FINDING.id, "fix_id": "raise_max_wal_size"})

    assert (status, body["reason"]) == (409, "fixes_not_allowed")
    assert "allow_fixes = true" in body["error"]["message"]
    assert body["sql"] == "ALTER SYSTEM SET max_wal_size = '4GB'"


async def test_a_fix_needing_a_restart_or_done_by_hand_is_not_applied_even_when_allowed(with_findings: Api) -> None:
    _connect_main(with_findings, dsn="postgresql://admin@127.0.0.1:9/postgres", allow_fixes=True)

    restart = await _post(with_findings, {"finding_id": FINDING.id, "fix_id": "raise_max_connections"})
    manual = await _post(with_findings, {"finding_id": FINDING.id, "fix_id": "use_a_pooler"})

    assert restart[0] == 409 and restart[1]["reason"] == "needs_restart"
    assert "restart" in restart[1]["error"]["message"]
    assert restart[1]["sql"] == "ALTER SYSTEM SET max_connections = '200'"
    assert manual[0] == 409 and manual[1]["reason"] == "manual" and manual[1]["sql"] is None
    assert "PgBouncer" in manual[1]["error"]["message"]


async def test_an_unreachable_server_is_502_naming_neither_dsn_nor_password(
    with_findings: Api, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.setenv("FWD_TEST_PG_PASSWORD", "s3cret-pw")
    # Port 9 on loopback: nothing listens, the connection is refused at once.
    _connect_main(
        with_findings,
        dsn="postgresql://admin@127.0.0.1:9/postgres",
        password_env="FWD_TEST_PG_PASSWORD",
        allow_fixes=True,
        connect_timeout_seconds=5,
    )

    status, body = await _post(with_findings, {"finding_id": FINDING.id, "fix_id": "raise_max_wal_size"})

    assert status == 502
    assert body["error"]["code"] == "fix_failed"
    assert body["error"]["message"] == "cannot connect to the server: Connection refused"
    assert "s3cret-pw" not in str(body) and "postgresql://" not in str(body) and "admin" not in str(body)


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"finding_id": "ffffffffffffffff", "fix_id": "raise_max_wal_size"}, 404, "no finding"),
        ({"finding_id": FINDING.id, "fix_id": "drop_everything"}, 404, "no fix 'drop_everything'"),
        ({"finding_id": FINDING.id}, 400, "fix_id"),
        ({"finding_id": FINDING.id, "fix_id": "x", "sql": "DROP TABLE t"}, 400, "sql: unknown field"),
        ({"finding_id": "x'; DROP TABLE t; --", "fix_id": "x"}, 400, "finding_id"),
    ],
)
async def test_unknown_findings_and_fixes_are_404_and_bodies_are_checked(
    with_findings: Api, body: object, status: int, words: str
) -> None:
    got, answer = await _post(with_findings, body)

    assert got == status
    assert words in answer["error"]["message"]


async def test_with_insights_off_there_is_no_finding_to_fix(api: Api) -> None:
    assert api.daemon._ctx is not None
    api.daemon._ctx.findings = None

    status, body = await _post(api, {"finding_id": FINDING.id, "fix_id": "raise_max_wal_size"})

    assert (status, body["error"]["code"]) == (404, "not_found")
    assert "insights are off" in body["error"]["message"]


async def test_an_unknown_database_is_404(with_findings: Api) -> None:
    async with with_findings.session.post(
        with_findings.url("/v1/databases/nope/fixes"),
        json={"finding_id": FINDING.id, "fix_id": "raise_max_wal_size"},
        headers=with_findings.auth(with_findings.read_write),
    ) as resp:
        assert resp.status == 404
