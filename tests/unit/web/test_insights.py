"""The Queries and Findings pages: what a DBA sees of the statements and findings, and applying a fix."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

from forwarder.config import DatabaseConnectionConfig
from forwarder.model import format_time
from forwarder.usecases import fixes as cases
from forwarder.web.insights import summary_markup
from tests.unit.api.test_insights_findings import checkpoints
from tests.unit.api.test_insights_queries import get, slow, store, workload
from tests.unit.web.conftest import Ui

T = 1_800_000_000
UPDATE = "UPDATE pgbench_branches SET bbalance = bbalance + $1 WHERE bid = $2"
SELECT = "SELECT abalance FROM pgbench_accounts WHERE aid = $1"
HOSTILE = "<script>alert(1)</script>"


@pytest.fixture
def api_overrides() -> dict[str, Any]:
    return {}  # insights on


def statements(html: str) -> list[str]:
    """The statements of the queries table, in order (unescaped back for comparing)."""
    found = re.findall(r'<a href="/ui/databases/main/queries/[0-9a-f]{16}"><code>(.*?)</code>', html)
    return [t.replace("&lt;", "<").replace("&gt;", ">").replace("&#34;", '"').replace("&amp;", "&") for t in found]


def chart_data(html: str, element_id: str) -> Any:
    found = re.search(f'<script type="application/json" id="{element_id}">(.*?)</script>', html)
    assert found is not None, element_id
    return json.loads(found.group(1))


async def query_id(ui: Ui, text: str) -> str:
    _, body = await get(ui.api, "/v1/databases/main/queries")
    return str(next(q["id"] for q in body["queries"] if q["text"] == text))


async def test_queries_are_listed_by_total_time_and_sort_by_calls_or_mean(ui: Ui) -> None:
    await store(ui.api, workload()[0])
    b = await ui.browser("read-only")

    status, html = await b.get("/ui/databases/main/queries")
    assert status == 200
    assert statements(html)[:2] == [UPDATE, SELECT]  # 245 ms in all against about 38 ms
    assert 'aria-sort="descending"><a href="/ui/databases/main/queries?sort=total" aria-current="true">' in html

    _, by_calls = await b.get("/ui/databases/main/queries", sort="calls")
    assert statements(by_calls)[0] == SELECT  # 40 calls
    assert 'href="/ui/databases/main/queries?sort=calls" aria-current="true"' in by_calls
    _, by_mean = await b.get("/ui/databases/main/queries", sort="mean")
    assert statements(by_mean)[0] == UPDATE

    # A window keeps its bounds in the sort links; one that holds no line lists none.
    window = {"from": format_time((T - 60) * 10**6), "to": format_time((T + 600) * 10**6)}
    _, within = await b.get("/ui/databases/main/queries", **window)
    assert statements(within)[:2] == [UPDATE, SELECT]
    assert f"from={window['from']}&amp;to={window['to']}&amp;sort=mean" in within
    _, empty = await b.get("/ui/databases/main/queries", **{"from": format_time((T + 3000) * 10**6)})
    assert statements(empty) == [] and "No query in this window" in empty


async def test_an_empty_window_field_is_dropped_and_a_wrong_one_is_a_400_page(ui: Ui) -> None:
    b = await ui.browser("read-only")
    async with b.session.get(b.base + "/ui/databases/main/queries?sort=calls&from=&to=", allow_redirects=False) as r:
        assert (r.status, r.headers["Location"]) == (303, "/ui/databases/main/queries?sort=calls")
    status, html = await b.get("/ui/databases/main/queries", sort="nope")
    assert status == 400 and "sort" in html and "Traceback" not in html


async def test_a_query_page_has_its_statement_numbers_chart_and_example_lines(ui: Ui) -> None:
    await store(ui.api, workload()[0])
    qid = await query_id(ui, UPDATE)
    b = await ui.browser("read-only")

    status, html = await b.get(f"/ui/databases/main/queries/{qid}")

    assert status == 200
    assert f'<pre class="sql" id="statement">{UPDATE}</pre>' in html
    calls, mean = chart_data(html, "calls-data"), chart_data(html, "mean-data")
    assert sum(calls["series"][0]["values"]) == 10 and all(x % 300 == 0 for x in calls["x"])
    assert mean["series"][0]["values"][0] == pytest.approx(24.5)
    assert 'data-chart="calls-data"' in html and '<th scope="col">Bucket start</th>' in html  # table fallback
    _, logs = await get(ui.api, "/v1/databases/main/logs", kind="slow_query", limit="500")
    update_lines = [line["id"] for line in logs["lines"] if (line["statement"] or "").startswith("UPDATE")]
    shown = re.findall(r'href="/ui/databases/main/logs/(\d+)"', html)
    assert shown[:10] == update_lines[:10]  # newest first, the query's own lines only
    assert "/ui/databases/main/logs?group=" in html


async def test_statement_text_is_escaped(ui: Ui) -> None:
    await store(ui.api, slow(T, 5.0, "statement", f'SELECT 1 AS "{HOSTILE}"'))
    qid = await query_id(ui, f'SELECT $1 AS "{HOSTILE}"')
    b = await ui.browser("read-only")
    for path in ("/ui/databases/main/queries", f"/ui/databases/main/queries/{qid}"):
        status, html = await b.get(path)
        assert status == 200 and HOSTILE not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html


async def checkpoint_finding(ui: Ui) -> dict[str, Any]:
    await store(ui.api, checkpoints(6))
    _, body = await get(ui.api, "/v1/databases/main/findings")
    return dict(next(f for f in body["findings"] if f["rule"] == "checkpoints"))


async def test_findings_list_open_ones_first_and_link_their_pages(ui: Ui) -> None:
    finding = await checkpoint_finding(ui)
    b = await ui.browser("read-only")

    status, html = await b.get("/ui/databases/main/findings")

    assert status == 200
    assert html.index("<h2>Open</h2>") < html.index(finding["title"]) < html.index("<h2>Resolved</h2>")
    assert f'href="/ui/databases/main/findings/{finding["id"]}"' in html
    assert "No resolved finding." in html


async def test_a_finding_page_shows_its_evidence_and_fix_sql_with_apply_only_for_read_write(ui: Ui) -> None:
    finding = await checkpoint_finding(ui)
    path = f"/ui/databases/main/findings/{finding['id']}"
    reader, writer = await ui.browser("read-only"), await ui.browser("read-write")

    _, ro = await reader.get(path)
    status, rw = await writer.get(path)

    assert status == 200
    sql = "ALTER SYSTEM SET max_wal_size = &#39;1024MB&#39;"  # the rule's fix (docs/insights.md)
    assert f'<pre class="sql" id="sql-max-wal-size">{sql}</pre>' in ro
    assert "Copy SQL" in ro and "insights.js" in ro
    assert '<div class="summary"><p><strong>6 checkpoints</strong>' in ro
    for line_id in finding["evidence"]["lines_available"]:
        assert f'href="/ui/databases/main/logs/{line_id}"' in ro
    action = f'action="{path}/fixes/max-wal-size"'
    assert action in rw and ">Apply</button>" in rw
    assert action not in ro and ">Apply</button>" not in ro
    status, html, _ = await reader.post(f"{path}/fixes/max-wal-size", {})
    assert status == 403 and "read-only" in html


def _connect_main(ui: Ui, **connection: Any) -> None:
    ctx = ui.api.daemon._ctx
    assert ctx is not None
    dbs = [
        d.model_copy(update={"connection": DatabaseConnectionConfig(**connection)}) if d.id == "main" else d
        for d in ctx.config.databases
    ]
    ctx.config = ctx.config.model_copy(update={"databases": dbs})


@dataclass
class FakeServer:
    """A Connect that records what ran: max_wal_size is 1GB until the fix and a reload."""

    ran: list[str] = field(default_factory=list)
    value: str = "1GB"

    @asynccontextmanager
    async def __call__(
        self, connection: DatabaseConnectionConfig, password: str | None, *, database: str | None = None
    ) -> AsyncIterator[Any]:
        yield self

    async def execute(self, sql: str) -> None:
        self.ran.append(sql)
        if sql == "SELECT pg_reload_conf()":
            self.value = "1024MB"

    async def setting(self, name: str) -> tuple[str, bool]:
        return self.value, False


async def test_apply_runs_the_fix_through_the_use_case_and_shows_what_changed(
    ui: Ui, monkeypatch: pytest.MonkeyPatch
) -> None:
    finding = await checkpoint_finding(ui)
    path = f"/ui/databases/main/findings/{finding['id']}"
    server = FakeServer()
    monkeypatch.setattr(cases, "asyncpg_connect", server)
    _connect_main(ui, dsn="postgresql://admin@127.0.0.1:9/postgres", allow_fixes=True)
    b = await ui.browser("read-write")
    await b.get(path)

    status, html, _ = await b.post(f"{path}/fixes/max-wal-size", {})

    assert status == 200
    assert server.ran == ["ALTER SYSTEM SET max_wal_size = '1024MB'", "SELECT pg_reload_conf()"]
    assert "<strong>Applied.</strong>" in html and "<bdi>1GB</bdi> → <bdi>1024MB</bdi>" in html
    (record,) = await ui.api.daemon.store.audit_records()
    assert record["action"] == "fixes.applied"


async def test_apply_refused_by_the_config_shows_why_and_the_sql_to_run(ui: Ui) -> None:
    finding = await checkpoint_finding(ui)
    path = f"/ui/databases/main/findings/{finding['id']}"
    _connect_main(ui, dsn="postgresql://admin@127.0.0.1:9/postgres")  # allow_fixes stays off
    b = await ui.browser("read-write")
    await b.get(path)

    status, html, _ = await b.post(f"{path}/fixes/max-wal-size", {})

    assert status == 409
    assert "Not applied:" in html and "allow_fixes = true" in html
    assert "ALTER SYSTEM SET max_wal_size = &#39;1024MB&#39;" in html
    assert await ui.api.daemon.store.audit_records() == []


async def test_apply_that_cannot_reach_the_server_shows_the_error(ui: Ui) -> None:
    finding = await checkpoint_finding(ui)
    path = f"/ui/databases/main/findings/{finding['id']}"
    _connect_main(ui, dsn="postgresql://admin@127.0.0.1:9/postgres", allow_fixes=True, connect_timeout_seconds=5)
    b = await ui.browser("read-write")
    await b.get(path)

    status, html, _ = await b.post(f"{path}/fixes/max-wal-size", {})

    assert status == 502
    assert "Failed:" in html and "cannot connect to the server" in html and "postgresql://" not in html


async def test_unknown_ids_are_404_pages(ui: Ui) -> None:
    finding = await checkpoint_finding(ui)
    b = await ui.browser("read-write")
    for path in (
        "/ui/databases/main/findings/ffffffffffffffff",
        "/ui/databases/main/findings/nope",
        "/ui/databases/main/queries/ffffffffffffffff",
        f"/ui/databases/main/queries/{HOSTILE}",
        "/ui/databases/nope/queries",
        "/ui/databases/nope/findings",
    ):
        status, html = await b.get(path)
        assert status == 404 and "<h1>Not found</h1>" in html and HOSTILE not in html, path
    await b.get(f"/ui/databases/main/findings/{finding['id']}")
    status, html, _ = await b.post(f"/ui/databases/main/findings/{finding['id']}/fixes/drop_everything", {})
    assert status == 404 and "no fix" in html


async def test_every_href_the_api_gives_opens_its_page(ui: Ui) -> None:
    await store(ui.api, workload()[0] + checkpoints(6))
    _, queries = await get(ui.api, "/v1/databases/main/queries")
    _, findings = await get(ui.api, "/v1/databases/main/findings")
    hrefs = [q["href"] for q in queries["queries"]] + [f["href"] for f in findings["findings"]]
    assert len(hrefs) >= 4
    b = await ui.browser("read-only")
    for href in hrefs:
        assert (await b.get(href))[0] == 200, href


@pytest.mark.parametrize("api_overrides", [{"insights": {"enabled": False}}])
async def test_with_insights_off_the_pages_say_so(ui: Ui) -> None:
    b = await ui.browser("read-only")
    for path in (
        "/ui/databases/main/queries",
        "/ui/databases/main/queries/ffffffffffffffff",
        "/ui/databases/main/findings",
        "/ui/databases/main/findings/ffffffffffffffff",
    ):
        status, html = await b.get(path)
        assert status == 503 and "insights are turned off" in html, path


def test_a_summary_keeps_code_and_bold_and_escapes_everything_else() -> None:
    text = f"**3 deadlocks** on `SELECT '{HOSTILE}'`\nby <b>{HOSTILE}</b> **<i>x</i>**\n\nNext `**not bold**`"

    html = str(summary_markup(text))

    assert html == (
        "<p><strong>3 deadlocks</strong> on <code>SELECT &#39;&lt;script&gt;alert(1)&lt;/script&gt;&#39;</code><br>\n"
        "by &lt;b&gt;&lt;script&gt;alert(1)&lt;/script&gt;&lt;/b&gt; <strong>&lt;i&gt;x&lt;/i&gt;</strong></p>\n"
        "<p>Next <code>**not bold**</code></p>"
    )
