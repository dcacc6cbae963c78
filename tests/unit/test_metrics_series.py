"""Counter series known in advance exist at 0 before their first increment (docs/operations.md,
"Metrics"): a series that appears at its first increment gives increase() nothing to compare it
with, and the shipped alerts (deploy/prometheus/alerts.yml) would miss a one-off drop."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from forwarder import metrics
from forwarder.model import KINDS

OPERATIONS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def value(name: str, **labels: str) -> float | None:
    return metrics.REGISTRY.get_sample_value(name, labels)


def documented(metric: str) -> set[str]:
    """The backticked words of the Meaning column of `metric`'s row in docs/operations.md."""
    row = next(line for line in OPERATIONS.read_text().splitlines() if line.startswith(f"| `{metric}`"))
    return set(re.findall(r"`([a-z0-9_]+)`", row.split("|")[4]))


@pytest.mark.parametrize("dest_type", ["webhook", "elasticsearch", "syslog"])
def test_a_destinations_counters_start_at_0_and_go_with_it(dest_type: str) -> None:
    labels = {"destination_id": "series_test", "type": dest_type}
    metrics.init_destination_series("series_test", dest_type)
    assert value("forwarder_destination_lines_sent_total", **labels) == 0
    assert value("forwarder_destination_bytes_sent_total", **labels) == 0
    for reason in metrics.DROP_REASONS:
        assert value("forwarder_destination_lines_dropped_total", **labels, reason=reason) == 0
    for reason in metrics.failure_reasons(dest_type):
        assert value("forwarder_destination_failures_total", **labels, reason=reason) == 0
    metrics.forget_destination("series_test", dest_type)
    for family in metrics.REGISTRY.collect():
        assert not [s for s in family.samples if s.labels.get("destination_id") == "series_test"], family.name


def test_failure_reasons_of_a_type_add_to_the_common_ones() -> None:
    assert set(metrics.failure_reasons("webhook")) == set(metrics.FAILURE_REASONS)
    assert {"item_retry", "item_rejected"} <= set(metrics.failure_reasons("elasticsearch"))
    assert "config" in metrics.failure_reasons("syslog") and "config" not in metrics.failure_reasons("loki")


def test_a_databases_ingest_counters_start_at_0_and_go_with_it() -> None:
    metrics.init_database_series("series_db")
    for name in (
        "forwarder_ingest_parse_failures_total",
        "forwarder_ingest_entries_truncated_total",
        "forwarder_ingest_bytes_total",
    ):
        assert value(name, database_id="series_db") == 0, name
    for reason in metrics.TIME_FALLBACK_REASONS:
        assert value("forwarder_ingest_time_fallbacks_total", database_id="series_db", reason=reason) == 0
    for kind in KINDS:
        assert value("forwarder_ingest_lines_total", database_id="series_db", kind=kind) == 0
    metrics.forget_database("series_db")
    for family in metrics.REGISTRY.collect():
        assert not [s for s in family.samples if s.labels.get("database_id") == "series_db"], family.name


def test_the_reasons_are_the_documented_ones() -> None:
    """One list in forwarder/metrics.py; docs/operations.md names the same values."""
    every_failure = set(metrics.FAILURE_REASONS).union(*metrics.FAILURE_REASONS_OF_TYPE.values())
    assert documented("forwarder_destination_failures_total") == every_failure
    assert documented("forwarder_destination_lines_dropped_total") == set(metrics.DROP_REASONS)
    assert documented("forwarder_ingest_time_fallbacks_total") >= set(metrics.TIME_FALLBACK_REASONS)


@pytest.mark.parametrize(
    "metric", ["forwarder_store_write_failures_total", "forwarder_store_retention_deleted_lines_total"]
)
def test_the_stores_counters_start_at_0_with_every_documented_reason(metric: str) -> None:
    # A fresh interpreter: this process's other tests may have counted some already.
    code = (
        "import json; from forwarder import metrics; "
        f"print(json.dumps(sorted(s.labels['reason'] for f in metrics.REGISTRY.collect() "
        f"for s in f.samples if s.name == {metric!r} and s.value == 0)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    row = next(line for line in OPERATIONS.read_text().splitlines() if line.startswith(f"| `{metric}`"))
    reasons = re.findall(r"`([a-z0-9_]+)`", row.split("|")[3])  # the Labels column: reason (`a`, `b`)
    assert reasons and json.loads(out) == sorted(reasons)
