"""The Ask tools against the in-process daemon: what each returns from stored PostgreSQL 15 log text,
that every page a result rests on opens, and that bad arguments are refused by name."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from forwarder.api.context import ApiContext
from forwarder.ask.events import FixAction
from forwarder.ask.tools import MAX_RESULT_BYTES, TOOLS, ToolContext, ToolFailed, ToolOutcome
from forwarder.pglog import make_reader, parse_stream
from tests.unit.api.conftest import T0_S, Api
from tests.unit.insights.logtext import stamp
from tests.unit.insights.rules import pg15_lines as PG
from tests.unit.web.conftest import Ui

T = T0_S  # the lines are written an hour before the fake clock's now (2027-01-15 09:00 UTC)


@pytest.fixture
def api_overrides() -> dict[str, Any]:
    return {}  # insights on


def restamped(text: str, at: float = T) -> str:
    """PG15 capture lines moved to `at` (their seconds kept)."""
    return text.replace("2026-11-23 21:15:", stamp(at)[:17])


async def store(api: Api, text: str) -> None:
    reader = make_reader("stderr", line_prefix=PG.PREFIX, timezone="UTC", full_text=False)
    lines = list(parse_stream(reader, [text.encode()]))
    assert lines and not any(line.unparsed for line in lines)
    await api.daemon.store.append(api.daemon.registry.by_id["main"].identity, lines, [], 0)
    assert api.daemon.insights is not None
    await api.daemon.insights.catch_up()


def context(api: Api, database: str | None = "main") -> ToolContext:
    d = api.daemon
    ctx = ApiContext(config=d.config, store=d.store, databases=d.registry, clock=d.clock, insights=d.insights)
    return ToolContext(ctx, "default", database)


async def run(api: Api, name: str, scope: str | None = "main", **args: Any) -> ToolOutcome:
    """The tool `name` in a conversation about the database `scope`."""
    outcome = await TOOLS[name].run(context(api, scope), args)
    assert len(orjson.dumps(outcome.data)) <= MAX_RESULT_BYTES
    return outcome


async def opens(ui: Ui, outcome: ToolOutcome) -> None:
    """Every source and action of the outcome is a page of the daemon that answers 200."""
    browser = await ui.browser("read-only")
    hrefs = [s.href for s in outcome.sources] + [a.href for a in outcome.actions]
    assert hrefs
    for href in hrefs:
        assert href.startswith("/ui/"), href
        status, _ = await browser.get(href)
        assert status == 200, href


ALL = restamped(PG.LOCK_WAIT + PG.DEADLOCK + PG.AUTH_FAILURES + PG.TEMP_FILE + PG.TOO_MANY + PG.AUTOVACUUM)


async def test_search_logs_finds_the_deadlock_of_today_with_both_statements(api: Api, ui: Ui) -> None:
    await store(api, ALL)
    out = await run(api, "search_logs", kind="deadlock", day="today")
    data = out.data
    assert data["window"] == {"from": "2027-01-15T00:00:00.000Z", "to": "2027-01-16T00:00:00.000Z"}
    (line,) = [ln for ln in data["lines"] if ln["message"].startswith("deadlock detected")]
    assert "Process 26317: UPDATE accounts SET note = $1 WHERE id = $2;" in line["detail"]
    assert line["href"] == f"/ui/databases/main/logs/{line['id']}" and "s3cr3t" not in orjson.dumps(data).decode()
    assert set(line) <= {*TOOL_LINE_FIELDS, "href"}
    assert (await run(api, "search_logs", kind="deadlock", day="yesterday")).data["lines"] == []
    await opens(ui, out)


TOOL_LINE_FIELDS = (
    "id", "time", "severity", "kind", "sqlstate", "message", "detail", "hint", "context", "statement",
    "user", "application", "client", "duration_ms",
)  # fmt: skip


async def test_search_logs_around_a_time_of_day_is_that_window_of_today(api: Api, ui: Ui) -> None:
    await store(api, ALL)
    out = await run(api, "search_logs", around="08:00", minutes=1, kind=["errors"], limit=3)
    assert out.data["window"] == {"from": "2027-01-15T07:59:00.000Z", "to": "2027-01-15T08:01:00.000Z"}
    assert out.data["count"] == 3 and out.data["has_more"] is True
    assert all(ln["kind"] in ("error", "deadlock", "auth_failure", "too_many_connections") for ln in out.data["lines"])
    # A time of day still ahead is yesterday's.
    later = await run(api, "search_logs", around="23:00")
    assert later.data["window"]["from"] == "2027-01-14T22:55:00.000Z" and later.data["lines"] == []
    await opens(ui, out)


async def test_results_stay_small_with_long_lines(api: Api) -> None:
    pages = "\tpages: 0 removed, 443 remain, 443 scanned (100.00% of total)\n" * 40
    text = "".join(
        f'{stamp(T + i)} [9] LOG:  automatic vacuum of table "shop.public.t{i}": index scans: 0\n{pages}'
        "\tsystem usage: CPU: user: 0.00 s, system: 0.00 s, elapsed: 0.25 s\n"
        for i in range(50)
    )
    await store(api, text)
    out = await run(api, "search_logs", limit=50)
    # Cut in the middle: the start and the end (where PostgreSQL puts totals) stay.
    assert out.data["lines"] and all(
        len(ln["message"]) <= 400 and ln["message"].endswith("elapsed: 0.25 s") for ln in out.data["lines"]
    )
    assert len(orjson.dumps(out.data)) <= MAX_RESULT_BYTES and out.data["truncated"] is True


async def test_log_groups_of_some_kinds(api: Api, ui: Ui) -> None:
    await store(api, ALL)
    out = await run(api, "log_groups", kind=["auth_failure", "too_many_connections"])
    kinds = {g["kind"] for g in out.data["groups"]}
    assert kinds == {"auth_failure", "too_many_connections"}
    assert sum(g["count"] for g in out.data["groups"] if g["kind"] == "too_many_connections") == 2
    browser = await ui.browser("read-only")
    for g in out.data["groups"]:
        status, _ = await browser.get(g["logs_page"])
        assert status == 200
    await opens(ui, out)


async def test_overview_and_day_counts(api: Api, ui: Ui) -> None:
    await store(api, ALL + restamped(PG.DEADLOCK, T - 86_400))
    ov = await run(api, "overview")
    assert ov.data["usage_today"]["day"] == "2027-01-15" and ov.data["counts_24h"]["deadlock"] == 1
    assert ov.data["now"] == "2027-01-15T09:00:00.000Z"
    counts = await run(api, "count_lines", days=2)
    yesterday, today = counts.data["days"]
    assert (yesterday["day"], today["day"]) == ("2027-01-14", "2027-01-15")
    assert yesterday["counts"]["deadlock"] == 1 and today["counts"]["deadlock"] == 1
    assert today["counts"]["auth_failure"] > 0 == yesterday["counts"]["auth_failure"]
    await opens(ui, ov)
    await opens(ui, counts)


async def test_findings_a_finding_its_fix_action_and_pages(api: Api, ui: Ui) -> None:
    await store(api, ALL)
    listed = await run(api, "list_findings", rule=["deadlocks"], **{"from": "today"})
    (brief,) = listed.data["findings"]
    assert brief["rule"] == "deadlocks" and brief["status"] == "open" and brief["count"] == 1
    one = await run(api, "get_finding", id=brief["id"])
    assert one.data["evidence"]["facts"]["statements"] == [
        "UPDATE accounts SET note = $1 WHERE id = $2;",
        "UPDATE accounts SET note = $1",
    ]
    (action,) = one.actions
    assert isinstance(action, FixAction)
    assert (action.database, action.finding_id, action.fix_id) == ("main", brief["id"], "lock-order")
    assert action.href == brief["href"]
    await opens(ui, listed)
    await opens(ui, one)


async def test_queries_and_a_query(api: Api, ui: Ui) -> None:
    text = "".join(
        f"{stamp(T + i)} [7] app@shop/psql [local] 00000 LOG:  duration: {ms:.3f} ms  statement: {sql}\n"
        for i, (ms, sql) in enumerate([(5.0, "SELECT 1"), (900.0, "SELECT pg_sleep(0.9)"), (7.0, "SELECT 1")])
    )
    await store(api, text)
    out = await run(api, "list_queries", sort="max")
    first = out.data["queries"][0]
    assert first["text"] == "SELECT pg_sleep($1)" and first["max_ms"] == 900.0
    one = await run(api, "get_query", id=first["id"])
    assert one.data["calls"] == 1 and one.data["series"]
    await opens(ui, out)
    await opens(ui, one)


RULE = {"id": "deadlocks", "kinds": ["deadlock"], "text": "deadlock", "threshold": 1, "window_seconds": 300}


@pytest.mark.parametrize("api_overrides", [{"alerts": [RULE]}])
async def test_alerts_of_the_database(api: Api, ui: Ui) -> None:
    await store(api, restamped(PG.DEADLOCK, api.clock.now() - 20))
    assert api.daemon.alerts is not None
    await api.daemon.alerts.evaluate_once()
    listed = await run(api, "list_alerts", state="firing")
    (alert,) = listed.data["alerts"]
    assert alert["rule"] == "deadlocks" and alert["database_name"] == "Main DB" and alert["value"] == 1
    assert (await run(api, "list_alerts", database="other")).data["alerts"] == []
    one = await run(api, "get_alert", id=alert["id"])
    assert one.data == alert
    await opens(ui, listed)
    await opens(ui, one)


@pytest.mark.parametrize(
    ("name", "args", "named"),
    [
        ("search_logs", {"kind": "nope"}, "kind"),
        ("search_logs", {"limit": 51}, "limit"),
        ("search_logs", {"limit": True}, "limit"),
        ("search_logs", {"from": "soon"}, "from"),
        ("search_logs", {"around": "25:00"}, "around"),
        ("search_logs", {"day": "monday"}, "day"),
        # digits str.isdigit() takes and int() refuses, or more than int() reads
        ("search_logs", {"limit": "\u00b2"}, "limit"),
        ("search_logs", {"limit": "9" * 5000}, "limit"),
        # a window or a day past what a time can be written as (years 0001-9999)
        ("search_logs", {"around": "9999-12-31T23:59:59Z", "minutes": 120}, "around"),
        ("search_logs", {"around": "0001-01-01T00:00:00Z"}, "around"),
        ("search_logs", {"day": "9999-12-31"}, "day"),
        ("log_groups", {"from": "0001-01-01T00:30:00+01:00"}, "from"),
        ("search_logs", {"q": ""}, None),
        ("search_logs", {"colour": "red"}, "colour"),
        ("log_groups", {"limit": 0}, "limit"),
        ("list_findings", {"status": "maybe"}, "status"),
        ("list_queries", {"sort": "fastest"}, "sort"),
        ("get_finding", {"id": "zz"}, "id"),
        ("get_finding", {}, "id"),
        ("get_finding", {"id": "0123456789abcdef"}, "0123456789abcdef"),
        ("get_alert", {"id": "0123456789abcdef"}, "id"),
        ("count_lines", {"days": 8}, "days"),
        ("list_alerts", {"state": "on"}, "state"),
        ("overview", {"database": "nope"}, "nope"),
    ],
)
async def test_bad_arguments_are_refused_by_name(api: Api, name: str, args: dict[str, Any], named: str | None) -> None:
    if named is None:  # an empty filter is no filter
        await run(api, name, **args)
        return
    with pytest.raises(ToolFailed) as refused:
        await run(api, name, **args)
    assert named in str(refused.value)


async def test_without_a_database_a_tool_asks_for_one(api: Api) -> None:
    with pytest.raises(ToolFailed, match="list_databases"):
        await run(api, "search_logs", scope=None)
    out = await run(api, "search_logs", scope=None, database="Main DB")
    assert out.data["database"] == "main"


@pytest.mark.parametrize("api_overrides", [{"insights": {"enabled": False}}])
@pytest.mark.parametrize("name", ["list_findings", "get_finding", "list_queries", "get_query"])
async def test_insights_off_is_said(api: Api, name: str) -> None:
    with pytest.raises(ToolFailed, match="insights are off"):
        await run(api, name, id="0123456789abcdef") if name.startswith("get") else await run(api, name)
