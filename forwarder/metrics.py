"""Every Prometheus metric of the daemon, defined once (served at /metrics).

Labels never carry secrets: destinations are labelled by their id and type only.
"""

from __future__ import annotations

import contextlib
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY: Final = CollectorRegistry(auto_describe=True)

_DEST = ("destination_id", "type")

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
    "Failed delivery attempts, by reason (status code class, timeout, connection, redirect, refused address).",
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
REQUEST_DURATION: Final = Histogram(
    "forwarder_destination_request_duration_seconds",
    "Time of one request to a destination, until its answer.",
    _DEST,
    registry=REGISTRY,
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30),
)


def forget_destination(dest_id: str, dest_type: str) -> None:
    """Remove a deleted destination's series so they do not linger at their last value."""
    for metric in (LINES_SENT, BYTES_SENT, LAG_LINES, OLDEST_UNDELIVERED_AGE, REQUEST_DURATION):
        with contextlib.suppress(KeyError):
            metric.remove(dest_id, dest_type)
    for metric in (FAILURES, LINES_DROPPED):
        for labels in list(metric._metrics):  # series with a reason label
            if labels[:2] == (dest_id, dest_type):
                metric.remove(*labels)
