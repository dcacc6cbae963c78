"""Queries: statements by fingerprint with their numbers, from lines PostgreSQL's log text makes."""

from __future__ import annotations

import math
from typing import Any

import pytest

from forwarder.app import Daemon
from tests.unit.api.conftest import T0_S, Api
from tests.unit.insights.logtext import parse, stamp


@pytest.fixture
def api_overrides() -> dict[str, Any]:
    return {}  # insights on


async def store(api: Api, text: str, *, full_text: bool = False) -> None:
    lines = parse(text, full_text=full_text)
    assert not any(line.unparsed for line in lines)
    await api.daemon.store.append(api.daemon.registry.by_id["main"].identity, lines, [], 0)
    assert api.daemon.insights is not None
    await api.daemon.insights.catch_up()


async def get(api: Api, path: str, **params: str) -> tuple[int, Any]:
    async with api.session.get(api.url(path), params=params, headers=api.auth(api.read_only)) as resp:
        return resp.status, await resp.json()


def slow(t: float, ms: float, phase: str, sql: str, user: str = "app", app: str = "pgbench", pid: int = 7) -> str:
    return f"{stamp(t)} [{pid}] {user}@shop/{app} LOG:  duration: {ms:.3f} ms  {phase}: {sql}\n"


T = T0_S  # lines an hour before the fake clock's now


def workload() -> tuple[str, dict[str, list[float]]]:
    """Log text of three statements with known durations, in simple and extended protocol."""
    text = ""
    durations: dict[str, list[float]] = {"select": [], "update": [], "insert": []}
    for i in range(40):
        ms = 0.5 + (i % 10) * 0.1
        durations["select"].append(ms)
        text += slow(T + i, 0.05, "parse <unnamed>", f"SELECT abalance FROM pgbench_accounts WHERE aid = {i}")
        text += slow(T + i, 0.02, "bind <unnamed>", f"SELECT abalance FROM pgbench_accounts WHERE aid = {i}")
        text += slow(T + i, ms, "execute <unnamed>", f"SELECT abalance FROM pgbench_accounts WHERE aid = {i}")
        text += f"{stamp(T + i)} [7] app@shop/pgbench DETAIL:  parameters: $1 = '{i}'\n"
    for i in range(10):
        ms = 20.0 + i
        durations["update"].append(ms)
        text += slow(T + i, ms, "statement", f"UPDATE pgbench_branches SET bbalance = bbalance + {i} WHERE bid = 1")
    for i in range(5):
        durations["insert"].append(3.0)
        ids = ",".join(str(j) for j in range(i + 1))
        text += slow(T + i, 3.0, "statement", f"DELETE FROM t WHERE a IN ({ids})", user=f"u{i % 2}", app="psql")
    # Two errors of the UPDATE, one of them with no call at all of another statement.
    text += f"{stamp(T + 50)} [8] app@shop/psql ERROR:  deadlock detected\n"
    update = "UPDATE pgbench_branches SET bbalance = bbalance + 5 WHERE bid = 1"
    text += f"{stamp(T + 50)} [8] app@shop/psql STATEMENT:  {update}\n"
    text += f'{stamp(T + 51)} [8] app@shop/psql ERROR:  relation "nope" does not exist at character 15\n'
    text += f"{stamp(T + 51)} [8] app@shop/psql STATEMENT:  SELECT * FROM nope WHERE x = 1\n"
    # log_duration without a statement names no query.
    text += f"{stamp(T + 52)} [9] app@shop/psql LOG:  duration: 99.000 ms\n"
    return text, durations


async def test_queries_rank_statements_by_total_time_with_their_numbers(api: Api) -> None:
    text, durations = workload()
    await store(api, text)
    status, body = await get(api, "/v1/databases/main/queries")
    assert status == 200
    queries = body["queries"]
    by_text = {q["text"]: q for q in queries}
    select = by_text["SELECT abalance FROM pgbench_accounts WHERE aid = $1"]
    update = by_text["UPDATE pgbench_branches SET bbalance = bbalance + $1 WHERE bid = $2"]
    insert = next(q for t, q in by_text.items() if t.startswith("DELETE FROM t"))
    nope = by_text["SELECT * FROM nope WHERE x = $1"]
    # Sorted by total time: the UPDATE (245 ms) before the SELECT (~30 ms) before the INSERT (15 ms).
    assert [q["id"] for q in queries[:3]] == [update["id"], select["id"], insert["id"]]
    # parse and bind are not calls; execute is.
    assert select["calls"] == 40 and select["total_ms"] == pytest.approx(sum(durations["select"]))
    assert select["max_ms"] == pytest.approx(1.4) and select["mean_ms"] == pytest.approx(sum(durations["select"]) / 40)
    exact_p95 = sorted(durations["select"])[math.ceil(0.95 * 40) - 1]
    assert select["p95_ms"] == pytest.approx(exact_p95, rel=0.022)
    assert select["users"] == ["app"] and select["applications"] == ["pgbench"]
    assert update["calls"] == 10 and update["errors"] == 1 and update["max_ms"] == pytest.approx(29.0)
    # IN lists of any length are one query; users and applications are gathered.
    assert insert["calls"] == 5 and insert["users"] == ["u0", "u1"] and insert["applications"] == ["psql"]
    assert nope["calls"] == 0 and nope["errors"] == 1 and nope["mean_ms"] is None and nope["p95_ms"] is None
    assert update["href"] == f"/ui/databases/main/queries/{update['id']}"
    assert update["first_seen"] == "2027-01-15T08:00:00.000Z" and update["last_seen"] == "2027-01-15T08:00:50.000Z"
    # The example line is a stored line of that statement.
    status, page = await get(api, "/v1/databases/main/logs", before=str(int(select["example_line_id"]) + 1), limit="1")
    assert page["lines"][0]["id"] == select["example_line_id"]
    assert page["lines"][0]["statement"] == select["text"]
    # Other orders.
    _, by_calls = await get(api, "/v1/databases/main/queries", sort="calls", limit="1")
    assert [q["id"] for q in by_calls["queries"]] == [select["id"]]
    _, by_errors = await get(api, "/v1/databases/main/queries", sort="errors", limit="2")
    assert {q["id"] for q in by_errors["queries"]} == {update["id"], nope["id"]}
    _, by_mean = await get(api, "/v1/databases/main/queries", sort="mean", limit="1")
    assert by_mean["queries"][0]["id"] == update["id"]


async def test_a_query_has_a_series_and_a_window(api: Api) -> None:
    text = "".join(slow(T + i * 60, 10.0, "statement", f"SELECT {i}") for i in range(12))  # 12 minutes
    await store(api, text)
    _, body = await get(api, "/v1/databases/main/queries")
    (query,) = body["queries"]
    status, one = await get(api, f"/v1/databases/main/queries/{query['id']}")
    assert status == 200 and one["bucket_seconds"] == 300 and one["calls"] == 12
    assert [(p["start"], p["calls"]) for p in one["series"]] == [
        ("2027-01-15T08:00:00.000Z", 5),
        ("2027-01-15T08:05:00.000Z", 5),
        ("2027-01-15T08:10:00.000Z", 2),
    ]
    # A window in whole buckets: from 08:05 to 08:10 holds the middle one.
    _, part = await get(
        api,
        f"/v1/databases/main/queries/{query['id']}",
        **{"from": "2027-01-15T08:05:00Z", "to": "2027-01-15T08:10:00Z"},
    )
    assert part["calls"] == 5 and len(part["series"]) == 1
    _, listed = await get(api, "/v1/databases/main/queries", **{"from": "2027-01-15T08:10:00Z"})
    assert listed["queries"][0]["calls"] == 2


async def test_unknown_and_malformed_ids_and_parameters(api: Api) -> None:
    status, body = await get(api, "/v1/databases/main/queries/00000000000000ff")
    assert status == 404 and body["error"]["code"] == "not_found"
    status, body = await get(api, "/v1/databases/main/queries/<script>")
    assert status == 404 and "<script>" not in str(body).replace("'<script>'", "")
    status, body = await get(api, "/v1/databases/main/queries", sort="slowest")
    assert status == 400 and body["error"]["field"] == "sort"
    status, body = await get(api, "/v1/databases/main/findings", status="closed")
    assert status == 400 and body["error"]["field"] == "status"
    status, body = await get(api, "/v1/databases/nope/queries")
    assert status == 404


async def test_slow_statements_are_grouped_by_statement(api: Api) -> None:
    text = "".join(
        slow(T + i, 5.0, "statement", f"SELECT * FROM t WHERE id IN ({','.join(['1'] * (i + 1))})") for i in range(4)
    )
    text += "".join(slow(T + 10 + i, 6.0, "statement", f"SELECT * FROM u WHERE id = {i}") for i in range(3))
    await store(api, text)
    _, body = await get(api, "/v1/databases/main/logs/groups", **{"from": "2027-01-15T00:00:00Z"})
    slow_groups = sorted((g["count"], g["line"]["statement"]) for g in body["groups"] if g["kind"] == "slow_query")
    # One group per statement, IN lists of any length alike; a group shows its newest line.
    assert slow_groups == [(3, "SELECT * FROM u WHERE id = $1"), (4, "SELECT * FROM t WHERE id IN ($1,$2,$3,$4)")]


async def test_counts_survive_a_restart_without_counting_twice(api: Api) -> None:
    text, _ = workload()
    await store(api, text)
    await api.daemon.aclose()
    daemon = Daemon(api.daemon.config, clock=api.clock)
    await daemon.start()
    try:
        assert daemon.insights is not None
        await daemon.insights.catch_up()
        text2 = slow(T + 100, 1.0, "statement", "UPDATE pgbench_branches SET bbalance = bbalance + 1 WHERE bid = 1")
        await daemon.store.append(daemon.registry.by_id["main"].identity, parse(text2), [], 0)
        await daemon.insights.catch_up()
        async with api.session.get(
            f"http://127.0.0.1:{daemon.port}/v1/databases/main/queries", headers=api.auth(api.read_only)
        ) as resp:
            body = await resp.json()
    finally:
        await daemon.aclose()
    update = next(q for q in body["queries"] if q["text"].startswith("UPDATE"))
    assert update["calls"] == 11


@pytest.mark.parametrize("path", ["/v1/databases/main/queries", "/v1/databases/main/findings"])
async def test_insights_off_answers_503(api: Api, path: str) -> None:
    daemon = api.daemon
    daemon._ctx.insights = None  # type: ignore[union-attr]  # as with [insights] enabled = false
    status, body = await get(api, path)
    assert status == 503 and body["error"]["code"] == "insights_off"
