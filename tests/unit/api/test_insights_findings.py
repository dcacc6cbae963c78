"""Findings through the API: what the rules found in PostgreSQL's log text, with evidence and fixes."""

from __future__ import annotations

from typing import Any

import pytest

from forwarder import metrics
from tests.unit.api.conftest import T0_S, Api
from tests.unit.api.test_insights_queries import get, store
from tests.unit.insights.logtext import stamp

T = T0_S


@pytest.fixture
def api_overrides() -> dict[str, Any]:
    return {}  # insights on


def auth_failures(n: int, user: str = "app", client: str = "10.0.0.7", at: float = T) -> str:
    return "".join(
        f'{stamp(at + i)} [{100 + i}] {user}@shop/[unknown] FATAL:  password authentication failed for user "{user}"\n'
        f"{stamp(at + i)} [{100 + i}] {user}@shop/[unknown] DETAIL:  Connection matched pg_hba.conf line 5: "
        f'"host all all {client}/32 scram-sha-256"\n'
        for i in range(n)
    )


def checkpoints(n: int, at: float = T) -> str:
    out = ""
    for i in range(n):
        t = at + i * 20
        out += f"{stamp(t)} [26364] LOG:  checkpoints are occurring too frequently (20 seconds apart)\n"
        out += f'{stamp(t)} [26364] HINT:  Consider increasing the configuration parameter "max_wal_size".\n'
        out += f"{stamp(t)} [26364] LOG:  checkpoint starting: wal\n"
        out += (
            f"{stamp(t + 1)} [26364] LOG:  checkpoint complete: wrote 1023 buffers (50.0%); 0 WAL file(s) added,"
            " 1 removed, 0 recycled; write=0.061 s, sync=0.001 s, total=0.067 s; sync files=0, longest=0.000 s,"
            " average=0.000 s; distance=16730 kB, estimate=16730 kB\n"
        )
    return out


async def test_a_burst_of_failed_logins_is_an_open_finding_whose_evidence_is_stored_lines(api: Api) -> None:
    await store(api, auth_failures(8))
    status, body = await get(api, "/v1/databases/main/findings", status="open")
    assert status == 200
    (finding,) = [f for f in body["findings"] if f["rule"] == "auth_failures"]
    assert finding["status"] == "open" and finding["evidence"]["count"] == 8
    assert finding["href"] == f"/ui/databases/main/findings/{finding['id']}"
    assert "8" in finding["summary"] and "app" in finding["subject"]
    ev = finding["evidence"]
    assert ev["line_ids"] and ev["lines_available"] == ev["line_ids"] and ev["lines_deleted"] == 0
    for line_id in ev["line_ids"]:
        _, page = await get(api, "/v1/databases/main/logs", before=str(int(line_id) + 1), limit="1")
        assert page["lines"][0]["id"] == line_id and page["lines"][0]["kind"] == "auth_failure"
    status, one = await get(api, f"/v1/databases/main/findings/{finding['id']}")
    assert status == 200 and one == finding
    _, resolved = await get(api, "/v1/databases/main/findings", status="resolved")
    assert resolved["findings"] == []
    # The sweep counts open findings for Prometheus.
    assert api.daemon.insights is not None
    await api.daemon.insights.sweep()
    labels = {"database_id": "main", "severity": finding["severity"]}
    assert metrics.REGISTRY.get_sample_value("forwarder_findings_open", labels) == len(body["findings"])
    assert metrics.REGISTRY.get_sample_value("forwarder_insights_lag_lines") == 0


async def test_a_few_failed_logins_are_no_finding(api: Api) -> None:
    await store(api, auth_failures(2))
    _, body = await get(api, "/v1/databases/main/findings")
    assert [f for f in body["findings"] if f["rule"] == "auth_failures"] == []


async def test_frequent_checkpoints_carry_a_max_wal_size_fix_with_its_sql(api: Api) -> None:
    await store(api, checkpoints(6))
    _, body = await get(api, "/v1/databases/main/findings")
    (finding,) = [f for f in body["findings"] if f["rule"] == "checkpoints"]
    (fix,) = [x for x in finding["fixes"] if "max_wal_size" in (x["sql"] or "")]
    assert fix["sql"].startswith("ALTER SYSTEM SET max_wal_size = '") and fix["needs"] == "reload"
    assert fix["manual"] is False and fix["applies_to"] == "server"


async def test_evidence_outlives_retention(api: Api) -> None:
    await store(api, auth_failures(6))
    _, body = await get(api, "/v1/databases/main/findings")
    (finding,) = [f for f in body["findings"] if f["rule"] == "auth_failures"]
    api.clock.advance(8 * 86_400)  # past the default 7-day retention
    await api.daemon.store.retention_once()
    _, after = await get(api, f"/v1/databases/main/findings/{finding['id']}")
    assert after["evidence"]["count"] == 6 and after["evidence"]["lines_available"] == []
    assert after["evidence"]["lines_deleted"] == len(finding["evidence"]["line_ids"]) > 0
    assert after["summary"] == finding["summary"]


@pytest.mark.parametrize("role", ["none", "read-only", "read-write"])
async def test_one_finding_and_one_query_need_a_key(api: Api, role: str) -> None:
    await store(
        api,
        auth_failures(5) + f"{stamp(T + 9)} [7] app@shop/psql LOG:  duration: 1.000 ms  statement: SELECT 1\n",
    )
    _, findings = await get(api, "/v1/databases/main/findings")
    _, queries = await get(api, "/v1/databases/main/queries")
    headers = {"none": {}, "read-only": api.auth(api.read_only), "read-write": api.auth(api.read_write)}[role]
    for path in (
        f"/v1/databases/main/findings/{findings['findings'][0]['id']}",
        f"/v1/databases/main/queries/{queries['queries'][0]['id']}",
    ):
        async with api.session.get(api.url(path), headers=headers) as resp:
            assert resp.status == (401 if role == "none" else 200)


async def test_unknown_finding_is_404(api: Api) -> None:
    status, body = await get(api, "/v1/databases/main/findings/0123456789abcdef")
    assert status == 404 and body["error"]["code"] == "not_found"
    await store(api, auth_failures(6))
    _, body = await get(api, "/v1/databases/main/findings")
    fid = body["findings"][0]["id"]
    status, _ = await get(api, f"/v1/databases/other/findings/{fid}")  # another database's id
    assert status == 404
