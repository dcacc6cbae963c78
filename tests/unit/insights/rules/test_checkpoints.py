"""checkpoints: WAL-requested checkpoints and "too frequently" warnings of PostgreSQL 15."""

from __future__ import annotations

import pytest

from forwarder.insights.rules.checkpoints import (
    MAX_MAX_WAL_MB,
    MIN_MAX_WAL_MB,
    Checkpoints,
    suggested_max_wal_mb,
)
from tests.unit.insights.rules import pg15_lines as PG
from tests.unit.insights.rules.rulekit import at, docs, evaluate, observe, sql_shape, time_of

SECOND_US = 1_000_000
HOUR_US = 3600 * SECOND_US


def test_wal_checkpoints_count_and_their_distances_and_warnings_are_kept() -> None:
    observed = observe(Checkpoints(), docs(PG.CHECKPOINTS_WAL))
    events = [(o.sample or {}).get("event") for o in observed]
    assert events == [
        "too_frequent",
        "wal",
        "complete",
        "too_frequent",
        "wal",
        "complete",
        "too_frequent",
        "wal",
        "complete",
    ]
    assert sum(o.value for o in observed) == 3  # the WAL checkpoints
    assert observed[2].sample == {"event": "complete", "distance_kb": 1124, "estimate_kb": 1124}
    assert (observed[0].sample or {})["seconds_apart"] == 0


def test_timed_and_manual_checkpoints_do_not_count() -> None:
    observed = observe(Checkpoints(), docs(PG.CHECKPOINT_IMMEDIATE))  # CHECKPOINT: "immediate force wait"
    assert [o.value for o in observed] == [0.0]  # only its "complete" line, for the distance
    time_line = PG.CHECKPOINT_IMMEDIATE.replace("starting: immediate force wait", "starting: time")
    assert sum(o.value for o in observe(Checkpoints(), docs(time_line))) == 0


def test_too_frequent_checkpoints_open_a_finding_with_the_max_wal_size_fix() -> None:
    observed = observe(Checkpoints(), docs(PG.CHECKPOINTS_WAL), first_id=10)
    draft = evaluate(Checkpoints(), observed, "")
    assert draft is not None
    assert draft.title == "Checkpoints occur too frequently"
    assert "**3 checkpoints**" in draft.summary
    assert "0 s apart" in draft.summary
    assert draft.evidence.count == 3
    assert draft.evidence.facts["estimate_kb"] == 16730
    assert draft.evidence.line_ids == (10, 18)
    (fix,) = draft.fixes
    assert (fix.needs, fix.setting, fix.risk, fix.applies_to) == ("reload", "max_wal_size", "low", "server")
    assert sql_shape(draft, "max-wal-size") == [
        ("text", "ALTER SYSTEM SET max_wal_size = "),
        ("literal", f"{MIN_MAX_WAL_MB}MB"),
    ]


def _wal_starts(offsets_s: list[int]) -> list[dict[str, object]]:
    (start,) = [d for d in docs(PG.CHECKPOINTS_WAL) if d["message"] == "checkpoint starting: wal"][:1]
    return [at(start, time_of(start) + s * SECOND_US) for s in offsets_s]


@pytest.mark.parametrize(
    ("offsets_s", "opens"),
    [
        ([0], False),
        ([0, 400], False),  # WAL checkpoints, but further apart than checkpoint_timeout
        ([0, 240], True),  # two within one checkpoint_timeout
        ([i * 330 for i in range(10)], False),
        ([i * 290 for i in range(12)], True),
    ],
)
def test_wal_checkpoints_open_when_more_often_than_checkpoint_timeout(offsets_s: list[int], opens: bool) -> None:
    observed = observe(Checkpoints(), _wal_starts(offsets_s))
    assert (evaluate(Checkpoints(), observed, "") is not None) is opens


def test_the_finding_resolves_an_hour_after_the_last_warning() -> None:
    observed = observe(Checkpoints(), docs(PG.CHECKPOINTS_WAL))
    last = max(o.time_us for o in observed)
    assert evaluate(Checkpoints(), observed, "", now_us=last + HOUR_US - 120 * SECOND_US) is not None
    assert evaluate(Checkpoints(), observed, "", now_us=last + HOUR_US + 120 * SECOND_US) is None


@pytest.mark.parametrize(
    ("estimate_kb", "checkpoints", "span_s", "mb"),
    [
        (16717, 3, 1, MIN_MAX_WAL_MB),  # tiny WAL: never below the default
        (1 << 20, 4, 300, 8192),  # 1 GB per checkpoint, 4 per timeout: 7782 MB -> 8192
        (1 << 20, 8, 600, 8192),  # the same rate over twice the time
        (600 * 1024, 1, 3600, 2048),  # at least one checkpoint's worth: 600 MB * 1.9 = 1140 MB
        (1 << 30, 10, 300, MAX_MAX_WAL_MB),  # a burst never suggests more than the cap
    ],
)
def test_max_wal_size_is_sized_from_the_wal_per_checkpoint_timeout(
    estimate_kb: int, checkpoints: int, span_s: float, mb: int
) -> None:
    assert suggested_max_wal_mb(estimate_kb, checkpoints, span_s) == mb


def test_with_log_checkpoints_off_the_warnings_alone_open_and_count() -> None:
    warnings = [d for d in docs(PG.CHECKPOINTS_WAL) if d["message"].startswith("checkpoints are occurring")]
    observed = observe(Checkpoints(), warnings)
    draft = evaluate(Checkpoints(), observed, "")
    assert draft is not None
    assert "warned **3 times**" in draft.summary and "0 s apart" in draft.summary
    assert draft.evidence.count == 3
    assert draft.evidence.facts["wal_checkpoints"] == 3
    assert sql_shape(draft, "max-wal-size")[1] == ("literal", f"{MIN_MAX_WAL_MB}MB")
