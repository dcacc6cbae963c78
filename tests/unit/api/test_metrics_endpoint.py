"""GET /metrics answers in the format the scraper asks for (docs/operations.md, "Metrics"), and
without prometheus_client's `*_created` series in either format."""

from __future__ import annotations

import pytest
from prometheus_client.openmetrics import parser as openmetrics_parser
from prometheus_client.parser import text_string_to_metric_families

from tests.unit.api.conftest import Api

# What Prometheus 2.x/3.x sends by default (scrape_protocols: OpenMetrics first).
PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,"
    "text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
)


async def scrape(api: Api, accept: str | None) -> tuple[str, str]:
    # A request first, so that a labelled counter and histogram (forwarder_http_requests_total,
    # forwarder_http_request_duration_seconds) have series, each of which had a _created series.
    async with api.session.get(api.url("/healthz")) as resp:
        assert resp.status == 200
    headers = {"Accept": accept} if accept is not None else {}
    async with api.session.get(api.url("/metrics"), headers=headers) as resp:
        assert resp.status == 200
        return resp.headers["Content-Type"], await resp.text()


async def test_openmetrics_when_the_scraper_asks_for_it(api: Api) -> None:
    content_type, body = await scrape(api, PROMETHEUS_ACCEPT)
    assert content_type.startswith("application/openmetrics-text; version=1.0.0")
    assert body.endswith("# EOF\n")
    families = {f.name: f for f in openmetrics_parser.text_string_to_metric_families(body)}
    assert families["forwarder_http_requests"].type == "counter"
    assert "_created" not in body
    assert not [s for f in families.values() for s in f.samples if s.name.endswith("_created")]


@pytest.mark.parametrize("accept", [None, "text/plain;version=0.0.4", "*/*"])
async def test_the_prometheus_text_format_otherwise(api: Api, accept: str | None) -> None:
    content_type, body = await scrape(api, accept)
    assert content_type == "text/plain; version=0.0.4; charset=utf-8"
    assert "# EOF" not in body
    families = {f.name: f for f in text_string_to_metric_families(body)}
    assert families["forwarder_http_request_duration_seconds"].type == "histogram"
    assert "forwarder_http_requests_total" in body
    assert "_created" not in body
