"""The Alerts pages: every alert of the `[[alerts]]` rules, firing first, and one alert with its lines."""

from __future__ import annotations

import re
from typing import Any

import pytest

from forwarder.model import format_time
from tests.unit.insights.logtext import parse, stamp
from tests.unit.web.conftest import Ui

RULE = {"id": "deadlocks", "kinds": ["deadlock"], "text": "deadlock", "threshold": 2, "window_seconds": 300}


@pytest.fixture
def api_overrides() -> dict[str, Any]:
    return {"insights": {"enabled": False}, "alerts": [RULE]}


async def deadlocks(ui: Ui, n: int) -> None:
    """`n` deadlock lines written just before the clock's now, then one evaluation of the rules."""
    now = ui.api.clock.now()
    text = "".join(f"{stamp(now - 10 + i)} [8] app@shop/psql ERROR:  deadlock detected\n" for i in range(n))
    await ui.api.daemon.store.append(ui.api.daemon.registry.by_id["main"].identity, parse(text), [], 0)
    assert ui.api.daemon.alerts is not None
    await ui.api.daemon.alerts.evaluate_once()


async def alert_ids(ui: Ui) -> list[str]:
    async with ui.api.session.get(ui.api.url("/v1/alerts"), headers=ui.api.auth(ui.api.read_only)) as resp:
        return [a["id"] for a in (await resp.json())["alerts"]]


async def test_alerts_list_firing_ones_first_with_value_and_threshold(ui: Ui) -> None:
    b = await ui.browser("read-only")
    _, html = await b.get("/ui/alerts")
    assert "No alert is firing." in html and 'aria-current="page">Alerts' in html

    await deadlocks(ui, 3)
    (first,) = await alert_ids(ui)
    ui.api.clock.advance(600)  # the window holds no deadlock any more: resolved
    await deadlocks(ui, 0)
    await deadlocks(ui, 2)  # fires again: a new alert
    second = next(i for i in await alert_ids(ui) if i != first)

    status, html = await b.get("/ui/alerts")

    assert status == 200
    firing, resolved = html.index("<h2>Firing</h2>"), html.index("<h2>Resolved</h2>")
    assert firing < html.index(f'href="/ui/alerts/{second}"') < resolved < html.index(f'href="/ui/alerts/{first}"')
    rows = re.findall(r"<tr>\s*<td><a href=\"/ui/alerts/.*?</tr>", html, re.S)
    assert "state-firing" in rows[0] and "2 / 2" in rows[0]
    assert "state-resolved" in rows[1] and "0 / 2" in rows[1]


async def test_an_alert_links_its_database_and_the_lines_its_rule_counts(ui: Ui) -> None:
    started = ui.api.clock.now()
    await deadlocks(ui, 2)
    (alert_id,) = await alert_ids(ui)
    b = await ui.browser("read-only")

    status, html = await b.get(f"/ui/alerts/{alert_id}")

    assert status == 200 and "<h1>Alert deadlocks</h1>" in html and "still firing" in html
    assert '<a href="/ui/databases/main">Main DB</a>' in html
    (logs,) = re.findall(r'href="(/ui/databases/main/logs\?[^"]*)"', html)
    query = dict(part.split("=", 1) for part in logs.split("?", 1)[1].split("&amp;"))
    assert query["kind"] == "deadlock" and query["q"] == "deadlock"
    assert query["from"] == format_time(int((started - 300) * 1_000_000))


async def test_unknown_alerts_are_404_pages(ui: Ui) -> None:
    b = await ui.browser("read-only")
    for path in ("/ui/alerts/ffffffffffffffff", "/ui/alerts/<script>", "/ui/alerts/123"):
        status, html = await b.get(path)
        assert status == 404 and "<h1>Not found</h1>" in html and "<script>" not in html.split("<main", 1)[1], path


async def test_every_alert_href_the_api_gives_opens_its_page(ui: Ui) -> None:
    await deadlocks(ui, 2)
    async with ui.api.session.get(ui.api.url("/v1/alerts"), headers=ui.api.auth(ui.api.read_only)) as resp:
        hrefs = [a["href"] for a in (await resp.json())["alerts"]]
    assert hrefs
    b = await ui.browser("read-only")
    for href in hrefs:
        assert (await b.get(href))[0] == 200, href


async def test_an_alert_of_a_rule_or_database_no_longer_configured_says_so(ui: Ui) -> None:
    rows = [("0123456789abcdef", "gone", "main"), ("fedcba9876543210", "deadlocks", "old")]

    def _insert(c: Any) -> None:
        for alert_id, rule, db in rows:
            c.execute(
                "INSERT INTO alert_instances VALUES (?, ?, ?, 'resolved', 1, 2, 0, 1, 60, 'warning', 2)",
                (alert_id, rule, db),
            )

    await ui.api.daemon.store.write(_insert)
    b = await ui.browser("read-only")

    _, gone_rule = await b.get("/ui/alerts/0123456789abcdef")
    (logs,) = re.findall(r'href="(/ui/databases/main/logs\?[^"]*)"', gone_rule)
    assert "kind=" not in logs and "The rule is no longer in the config" in gone_rule
    _, gone_db = await b.get("/ui/alerts/fedcba9876543210")
    assert "old (no longer in the config)" in gone_db and "/ui/databases/old" not in gone_db
