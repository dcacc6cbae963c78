"""The overview (API and page) says when the log's times are in a zone the configured `timezone`
does not use, and still shows the lines at their true instants."""

from __future__ import annotations

from pathlib import Path

from tests.unit.api.test_logs import get
from tests.unit.api.test_tail import eventually
from tests.unit.web.conftest import Ui

# A server with log_timezone = 'Europe/Berlin' in winter (CET = UTC+1); the fixture's database
# is configured with the default timezone, UTC.
BERLIN = b"2027-01-15 10:00:00.000 CET [7] LOG:  checkpoint starting: time\n"


async def test_the_overview_names_the_logs_zone_and_the_setting_to_change(ui: Ui, tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "pg.log").write_bytes(BERLIN)
    follower = ui.api.daemon.registry.by_id["main"].follower
    follower._wake.set()
    await eventually(lambda: follower.status.times.zone_mismatches == 1, "the file was read")
    _, body = await get(ui.api, "/v1/databases/main/logs/overview")
    source = body["source"]
    assert source["zone_mismatch_lines"] == 1 and source["log_zone"] == "CET" and source["read_time_lines"] == 0
    assert source["time_note"].startswith(
        "the log's times are in CET, but log.timezone is UTC: set log.timezone to the server's log_timezone"
    )
    await eventually(lambda: follower.status.state == "reading", "the entry was stored")
    _, lines = await get(ui.api, "/v1/databases/main/logs")
    assert [line["time"] for line in lines["lines"]] == ["2027-01-15T09:00:00.000Z"]
    browser = await ui.browser("read-only")
    for page in ("/ui/databases/main", "/ui/databases"):
        status, html = await browser.get(page)
        assert status == 200 and "the log&#39;s times are in CET, but log.timezone is UTC" in html, page
