"""Every Prometheus metric of the daemon, defined once (served at /metrics).

Labels never carry secrets: destinations are labelled by their id and type only.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
from typing import Final, get_args

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)

from forwarder.insights.model import AlertState
from forwarder.model import KINDS


def version() -> str:
    """The installed package's version ("unknown" in a source tree that was not installed)."""
    try:
        return importlib.metadata.version("pg-log-forwarder")
    except importlib.metadata.PackageNotFoundError:  # running from a source tree that was not installed
        return "unknown"


REGISTRY: Final = CollectorRegistry(auto_describe=True)

# No `*_created` series: by default prometheus_client adds one per counter and histogram series
# (the time it was first labelled), doubling the series for nothing the dashboard or the alerts
# use; docs/operations.md lists the families served, without them. The switch is read at every
# scrape and is process-wide (the daemon's registry is the only one it serves).
disable_created_metrics()  # type: ignore[no-untyped-call]  # untyped in prometheus_client

# process_* (CPU, resident memory, open descriptors, start time) and python_info, as every
# Prometheus client exposes them; the defaults register with the global registry, not ours.
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)

BUILD_INFO: Final = Gauge("forwarder_build_info", "Always 1; the running version.", ("version",), registry=REGISTRY)
BUILD_INFO.labels(version()).set(1)
# As Prometheus' own prometheus_config_last_reload_successful: a SIGHUP with a broken file keeps the
# running config, and only the log (and systemd's STATUS) said so.
CONFIG_RELOAD_SUCCESSFUL: Final = Gauge(
    "forwarder_config_last_reload_successful",
    "1 if the last config reload (SIGHUP) was applied, 0 if the file was refused and the running config stayed.",
    registry=REGISTRY,
)
CONFIG_RELOAD_SUCCESSFUL.set(1)
CONFIG_RELOAD_TIME: Final = Gauge(
    "forwarder_config_last_reload_success_timestamp_seconds",
    "When the config was last loaded (start or reload), as a Unix time.",
    registry=REGISTRY,
)

# --- ingest: reading PostgreSQL's logs -------------------------------------------------------

INGEST_LINES: Final = Counter(
    "forwarder_ingest_lines",
    "Log lines (entries) read and stored, by kind.",
    ("database_id", "kind"),
    registry=REGISTRY,
)
INGEST_BYTES: Final = Counter("forwarder_ingest_bytes", "Bytes of log files read.", ("database_id",), registry=REGISTRY)
INGEST_PARSE_FAILURES: Final = Counter(
    "forwarder_ingest_parse_failures",
    "Lines not in the configured format (kept as kind other); a steady rate means a wrong log_line_prefix.",
    ("database_id",),
    registry=REGISTRY,
)
INGEST_TRUNCATED: Final = Counter(
    "forwarder_ingest_entries_truncated",
    "Entries cut at the 1 MiB cap.",
    ("database_id",),
    registry=REGISTRY,
)
PARSE_WORKER_EXITS: Final = Counter(
    "forwarder_parse_worker_exits",
    "Parse worker processes that ended unasked (killed, crashed, out of memory); another starts and "
    "reading resumes from the stored offsets.",
    registry=REGISTRY,
)
TIME_FALLBACK_REASONS: Final = ("zone_mismatch", "read_time")  # the reason label of INGEST_TIME_FALLBACKS
INGEST_TIME_FALLBACKS: Final = Counter(
    "forwarder_ingest_time_fallbacks",
    "Log times not read as configured: zone_mismatch (the time's zone abbreviation is not one"
    " log.timezone uses: read with PostgreSQL's default abbreviations), read_time (no readable time:"
    " stamped with the time of reading).",
    ("database_id", "reason"),
    registry=REGISTRY,
)
SOURCE_UP: Final = Gauge(
    "forwarder_ingest_source_up",
    "1 while the database's log is readable, 0 when it is missing, unreadable or reading failed.",
    ("database_id",),
    registry=REGISTRY,
)
LAST_READ: Final = Gauge(
    "forwarder_ingest_last_read_timestamp_seconds",
    "Unix time of the last bytes read from the database's log.",
    ("database_id",),
    registry=REGISTRY,
)

# --- store -----------------------------------------------------------------------------------

STORE_SIZE: Final = Gauge("forwarder_store_size_bytes", "Bytes of the store's pages in use.", registry=REGISTRY)
STORE_MAX: Final = Gauge("forwarder_store_max_bytes", "The store's size cap (store.max_bytes).", registry=REGISTRY)
STORE_LINES: Final = Gauge("forwarder_store_lines", "Lines in the store.", registry=REGISTRY)
STORE_WRITABLE: Final = Gauge(
    "forwarder_store_writable",
    "1 while the store's last write succeeded, 0 while it cannot write (disk full, I/O error).",
    registry=REGISTRY,
)
INSIGHTS_QUERIES_FORGOTTEN: Final = Counter(
    "forwarder_insights_queries_forgotten_total",
    "Queries forgotten with their statistics because a database had more than [insights] max_queries.",
    ["database_id"],
    registry=REGISTRY,
)
INSIGHTS_LAG: Final = Gauge(
    "forwarder_insights_lag_lines",
    "Stored lines the insights (queries, findings) have not accounted for yet; grows while a backlog is stored.",
    registry=REGISTRY,
)
FINDINGS_OPEN: Final = Gauge(
    "forwarder_findings_open",
    "Open findings, by database and severity (set at each insights sweep, every 60 s).",
    ("database_id", "severity"),
    registry=REGISTRY,
)
STORE_WRITE_FAILURES: Final = Counter(
    "forwarder_store_write_failures",
    "Store writes that failed, by reason (disk_full: no space on the store's filesystem; other).",
    ("reason",),
    registry=REGISTRY,
)
RETENTION_DELETED: Final = Counter(
    "forwarder_store_retention_deleted_lines",
    "Lines deleted by retention, by reason (age: past retention_days; size: over max_bytes).",
    ("reason",),
    registry=REGISTRY,
)
# Their reasons are a closed set: each series exists at 0 from the start, so that increase() and
# rate() see the first failure or deletion (a series born at 1 shows no increase).
for _reason in ("disk_full", "other"):
    STORE_WRITE_FAILURES.labels(_reason)
for _reason in ("age", "size"):
    RETENTION_DELETED.labels(_reason)

# --- HTTP API --------------------------------------------------------------------------------

HTTP_REQUESTS: Final = Counter(
    "forwarder_http_requests",
    "API requests by route (its template, never the raw path) and status.",
    ("route", "method", "status"),
    registry=REGISTRY,
)
HTTP_DURATION: Final = Histogram(
    "forwarder_http_request_duration_seconds",
    "Time to answer an API request (long polls included).",
    ("route", "method"),
    registry=REGISTRY,
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
HTTP_CONNECTIONS_REFUSED: Final = Counter(
    "forwarder_http_connections_refused",
    "API connections closed on arrival because the connection cap was reached.",
    registry=REGISTRY,
)
HTTP_CONNECTIONS_TIMED_OUT: Final = Counter(
    "forwarder_http_connections_timed_out",
    "API connections closed because no complete request head arrived in time.",
    registry=REGISTRY,
)
HTTP_CONNECTIONS_OPEN: Final = Gauge("forwarder_http_connections_open", "API connections open now.", registry=REGISTRY)

# --- Ask ----------------------------------------------------------------------------------------

ASK_ANSWERS: Final = Counter(
    "forwarder_ask_answers",
    "Answers by organization, source (builtin, own_key) and how they ended (done, error, partial: the client left).",
    ("org", "source", "outcome"),
    registry=REGISTRY,
)
ASK_REFUSALS: Final = Counter(
    "forwarder_ask_refusals",
    "Questions refused before an answer started, by error code (not_enabled, no_model, limit_reached, rate_limited,"
    " key_invalid, not_found, ...).",
    ("code",),
    registry=REGISTRY,
)

# --- destinations ----------------------------------------------------------------------------

_DEST = ("destination_id", "type")

# The reason labels of LINES_DROPPED and FAILURES, in one place: a destination's loop sets each
# series to 0 when it starts (init_destination_series), and docs/operations.md lists the same
# values (tests/unit/test_metrics_series.py checks that it does).
DROP_REASONS: Final = ("rejected", "retention")
# Failure reasons any destination may see (forwarder/sinks/_http.py, syslog/sink.py; "error": a
# failure none of the others names, "bad_response": an answer the sink could not judge), and the
# ones only some types report.
FAILURE_REASONS: Final = (
    "http_4xx",
    "http_5xx",
    "timeout",
    "connect",
    "tls",
    "redirect",
    "refused_address",
    "bad_response",
    "error",
)
FAILURE_REASONS_OF_TYPE: Final = {"elasticsearch": ("item_retry", "item_rejected"), "syslog": ("config",)}

LINES_SENT: Final = Counter(
    "forwarder_destination_lines_sent", "Lines a destination accepted.", _DEST, registry=REGISTRY
)
BYTES_SENT: Final = Counter(
    "forwarder_destination_bytes_sent",
    "Request body bytes sent to a destination (before compression).",
    _DEST,
    registry=REGISTRY,
)
FAILURES: Final = Counter(
    "forwarder_destination_failures",
    "Failed delivery attempts, by reason (status code class, timeout, connection, redirect, refused address,"
    " ...: docs/operations.md).",
    (*_DEST, "reason"),
    registry=REGISTRY,
)
LINES_DROPPED: Final = Counter(
    "forwarder_destination_lines_dropped",
    "Lines a destination will never receive, by reason (retention passed it by, rejected by the receiver). "
    "Retries never count here.",
    (*_DEST, "reason"),
    registry=REGISTRY,
)
LAG_LINES: Final = Gauge(
    "forwarder_destination_lag_lines", "Lines stored after the destination's cursor.", _DEST, registry=REGISTRY
)
OLDEST_UNDELIVERED_AGE: Final = Gauge(
    "forwarder_destination_oldest_undelivered_age_seconds",
    "Age of the oldest line the destination has not accounted for (0 when caught up).",
    _DEST,
    registry=REGISTRY,
)
CONSECUTIVE_FAILURES: Final = Gauge(
    "forwarder_destination_consecutive_failures",
    "Failed attempts since the destination's last success (0 when healthy).",
    _DEST,
    registry=REGISTRY,
)
LAST_SUCCESS: Final = Gauge(
    "forwarder_destination_last_success_timestamp_seconds",
    "Unix time of the destination's last accepted batch (0 before the first).",
    _DEST,
    registry=REGISTRY,
)
REQUEST_DURATION: Final = Histogram(
    "forwarder_destination_request_duration_seconds",
    "Time of one request to a destination, until its answer.",
    _DEST,
    registry=REGISTRY,
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30),
)

# --- alerts ([[alerts]] rules) ---------------------------------------------------------------

ALERTS: Final = Gauge(
    "forwarder_alerts",
    "Alerts of an [[alerts]] rule by state: firing, the databases it fires for now; resolved, the databases "
    'whose latest alert of the rule has resolved. Alert on forwarder_alerts{state="firing"} > 0.',
    ("rule", "state"),
    registry=REGISTRY,
)


def forget_alert_rule(rule: str) -> None:
    """Remove the series of a rule no longer in the config."""
    for state in get_args(AlertState):
        with contextlib.suppress(KeyError):
            ALERTS.remove(rule, state)


def failure_reasons(dest_type: str) -> tuple[str, ...]:
    """The reason labels of forwarder_destination_failures_total a destination of `dest_type` may report."""
    return FAILURE_REASONS + FAILURE_REASONS_OF_TYPE.get(dest_type, ())


def init_destination_series(dest_id: str, dest_type: str) -> None:
    """Expose a destination's counters at 0 from the start of its loop.

    A series that first appears at its first increment (120 lines dropped, say) has no earlier
    sample, so increase() and rate() see no change: the shipped ForwarderDestinationDroppingLines
    alert (deploy/prometheus/alerts.yml) would miss a one-off drop. Prometheus' advice is to
    initialize the label sets known in advance (https://prometheus.io/docs/practices/instrumentation/#avoid-missing-metrics).
    forget_destination removes them all again.
    """
    LINES_SENT.labels(dest_id, dest_type)
    BYTES_SENT.labels(dest_id, dest_type)
    for reason in DROP_REASONS:
        LINES_DROPPED.labels(dest_id, dest_type, reason)
    for reason in failure_reasons(dest_type):
        FAILURES.labels(dest_id, dest_type, reason)


def init_database_series(database_id: str) -> None:
    """Expose a database's ingest counters at 0 from the start of its reader, for the same reason as
    init_destination_series (the alerts' rate() and increase() need a sample before the first
    failure). Called where a database's reader starts; forget_database removes them again."""
    INGEST_BYTES.labels(database_id)
    INGEST_PARSE_FAILURES.labels(database_id)
    INGEST_TRUNCATED.labels(database_id)
    for kind in KINDS:
        INGEST_LINES.labels(database_id, kind)
    for reason in TIME_FALLBACK_REASONS:
        INGEST_TIME_FALLBACKS.labels(database_id, reason)


def forget_destination(dest_id: str, dest_type: str) -> None:
    """Remove a deleted destination's series so they do not linger at their last value."""
    for metric in (
        LINES_SENT,
        BYTES_SENT,
        LAG_LINES,
        OLDEST_UNDELIVERED_AGE,
        REQUEST_DURATION,
        CONSECUTIVE_FAILURES,
        LAST_SUCCESS,
    ):
        with contextlib.suppress(KeyError):
            metric.remove(dest_id, dest_type)
    for metric in (FAILURES, LINES_DROPPED):
        for labels in list(metric._metrics):  # series with a reason label
            if labels[:2] == (dest_id, dest_type):
                metric.remove(*labels)


def forget_database(database_id: str) -> None:
    """Remove a database's series once it is no longer configured."""
    for metric in (INGEST_BYTES, INGEST_PARSE_FAILURES, INGEST_TRUNCATED, SOURCE_UP, LAST_READ):
        with contextlib.suppress(KeyError):
            metric.remove(database_id)
    for labelled in (INGEST_LINES, INGEST_TIME_FALLBACKS, FINDINGS_OPEN):
        for labels in list(labelled._metrics):
            if labels[0] == database_id:
                labelled.remove(*labels)
