"""Ask against a real PostgreSQL 15 with a deadlock: the built-in analyst answers "why were there
deadlocks today?" from the daemon's own tools, with both statements, sources that open in Chromium,
the finding's fix as an action, and the month's allowance counting down by one per answer."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import pytest
from playwright.sync_api import Browser

from tests.daemonproc import DaemonProcess
from tests.harness import poll_until
from tests.integration.web.conftest import browser, sign_in  # noqa: F401 - the module's chromium
from tests.pgcluster import PgCluster

pytestmark = pytest.mark.e2e  # the sources are opened in chromium

DB: Final = "main"
ALLOWANCE: Final = 5
SETTINGS: Final = {"log_lock_waits": "on", "deadlock_timeout": "100ms"}
# A takes row 1 and B row 2; then A waits for row 2 and B for row 1: B's deadlock check finds the
# cycle and B gets "deadlock detected", its DETAIL naming both sessions' statements.
FIRST: Final = ("UPDATE dl SET v = v + 1 WHERE id = 1;", "UPDATE dl SET v = v + 2 WHERE id = 2;")
SECOND: Final = ("UPDATE dl SET note = 'from a' WHERE id = 2;", "UPDATE dl SET v = v * 20 WHERE id = 1;")
NORMALIZED: Final = ("UPDATE dl SET note = $1 WHERE id = $2;", "UPDATE dl SET v = v * $1 WHERE id = $2;")


@dataclass
class Site:
    cluster: PgCluster
    daemon: DaemonProcess


def deadlock(c: PgCluster) -> None:
    mark = len(c.log_text("csv"))
    a = c.psql_bg(f"BEGIN;\n{FIRST[0]}\n", app_name="ask-deadlock-a")
    b = c.psql_bg(f"BEGIN;\n{FIRST[1]}\n", app_name="ask-deadlock-b")
    for app in ("ask-deadlock-a", "ask-deadlock-b"):
        c.wait_for_sql(
            f"SELECT count(*) FROM pg_stat_activity WHERE application_name = '{app}' AND state = 'idle in transaction'",
            "1",
        )
    assert a.stdin is not None and b.stdin is not None
    a.stdin.write(SECOND[0] + "\n")
    a.stdin.flush()
    c.wait_for_log(r"still waiting for ShareLock on transaction", "csv", after=mark)
    b.stdin.write(SECOND[1] + "\n")
    b.stdin.flush()
    c.wait_for_log(r"deadlock detected", "csv", after=mark)
    a.communicate("COMMIT;\n", timeout=30)
    b.communicate("ROLLBACK;\n", timeout=30)


@pytest.fixture(scope="module")
def site(pg_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    root = tmp_path_factory.mktemp("ask")
    with PgCluster(root / "pg", SETTINGS, pg_bin=pg_bin) as cluster:
        cluster.psql(
            "CREATE TABLE dl (id int PRIMARY KEY, v int, note text); INSERT INTO dl VALUES (1, 1, ''), (2, 2, '');"
        )
        daemon = DaemonProcess(
            root / "fwd",
            [
                {
                    "id": DB,
                    "name": "main",
                    "host": "db1.test",
                    "log": {"path": str(cluster.log_dir / "*.csv"), "format": "csvlog", "poll_interval_seconds": 0.1},
                }
            ],
            extra_toml=f"[insights]\nenabled = true\n[ask]\nbuiltin_monthly_questions = {ALLOWANCE}\n",
        )
        try:
            daemon.start()
            yield Site(cluster, daemon)
        finally:
            daemon.close()


def ask(site: Site, question: str) -> list[tuple[str, dict[str, Any]]]:
    """POST /v1/ask; the stream's events as (type, data), in order."""
    req = urllib.request.Request(  # noqa: S310 - loopback test URL
        site.daemon.url + "/v1/ask",
        data=json.dumps({"question": question, "database": DB}).encode(),
        method="POST",
        headers={"Authorization": f"Bearer {site.daemon.key}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=60) as resp:  # noqa: S310
        assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/event-stream")
        body = resp.read().decode()
    events = []
    for block in body.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if line and not line.startswith(":"))
        if fields:
            data = json.loads(fields["data"])
            assert data["type"] == fields["event"]
            events.append((fields["event"], data))
    return events


def test_why_were_there_deadlocks_today(site: Site, browser: Browser) -> None:  # noqa: F811 - the fixture
    site.daemon.send("PUT", "/v1/ask/settings", {"enabled": True})
    day = datetime.now(UTC).date()
    deadlock(site.cluster)
    poll_until(
        lambda: any(f["rule"] == "deadlocks" for f in site.daemon.get(f"/v1/databases/{DB}/findings")["findings"]),
        timeout=20,
        what="the deadlock's finding",
    )

    events = ask(site, "why were there deadlocks today?")
    if datetime.now(UTC).date() != day:  # midnight (UTC) passed: the deadlock is yesterday's now
        deadlock(site.cluster)
        events = ask(site, "why were there deadlocks today?")

    types = [t for t, _ in events]
    assert types[0] == "start" and types[-1] == "done" and "error" not in types
    steps = [d["tool"] for t, d in events if t == "tool"]
    assert {s["name"] for s in steps} >= {"list_findings", "search_logs", "get_finding"}
    assert all(s["status"] in ("running", "done") for s in steps)
    text = "".join(d["text"] for t, d in events if t == "text")
    assert text.startswith("**1 deadlock** today (UTC) on dl.")
    assert NORMALIZED[0] in text and NORMALIZED[1] in text and "from a" not in text
    actions = [d["action"] for t, d in events if t == "action"]
    fix = next(a for a in actions if a["kind"] == "fix")
    finding = site.daemon.get(f"/v1/databases/{DB}/findings/{fix['finding_id']}")
    assert finding["rule"] == "deadlocks" and fix["database"] == DB
    assert fix["fix_id"] in [x["fix_id"] for x in finding["fixes"]]
    first = next(d["done"] for t, d in events if t == "done")
    assert first["model"] == "forwarder-analyst" and first["remaining"] == ALLOWANCE - 1

    sources = [d["source"] for t, d in events if t == "source"]
    assert sources and len({s["href"] for s in sources}) == len(sources)
    context = browser.new_context(base_url=site.daemon.url)
    try:
        page = context.new_page()
        sign_in(page, site.daemon.read_only_key)
        for s in sources:
            response = page.goto(s["href"])
            assert response is not None and response.status == 200, s
            assert page.locator("main").count() == 1
    finally:
        context.close()

    again = ask(site, "why were there deadlocks today?")
    assert next(d["done"] for t, d in again if t == "done")["remaining"] == ALLOWANCE - 2
