"""temp_files, connection_limit and auth_failures: what sessions of a PostgreSQL 15 server log."""

from __future__ import annotations

import pytest

from forwarder.insights.rules.auth_failures import BURST_COUNT, AuthFailures
from forwarder.insights.rules.auth_failures import CRITICAL_COUNT as AUTH_CRITICAL
from forwarder.insights.rules.connection_limit import CRITICAL_COUNT as REFUSED_CRITICAL
from forwarder.insights.rules.connection_limit import ConnectionLimit
from forwarder.insights.rules.temp_files import MAX_WORK_MEM_MB, WARNING_FILES, TempFiles, suggested_work_mem_mb
from tests.unit.insights.rules import pg15_lines as PG
from tests.unit.insights.rules.rulekit import at, docs, evaluate, observe, sql_shape, time_of

SECOND_US = 1_000_000
MB = 1 << 20


# --- temp_files


def test_a_temporary_file_is_observed_by_role_and_database_with_its_size() -> None:
    (obs,) = observe(TempFiles(), docs(PG.TEMP_FILE + PG.LOCK_WAIT))
    assert obs.subject == "postgres|shop"
    assert obs.value == 2449408
    assert obs.sample == {
        "user": "postgres",
        "database": "shop",
        "statement": "SELECT x, $1 AS tag FROM big ORDER BY x DESC OFFSET $2;",
        "bytes": 2449408,
    }


def test_temporary_files_open_with_work_mem_fixes_for_the_role_and_the_database() -> None:
    draft = evaluate(TempFiles(), observe(TempFiles(), docs(PG.TEMP_FILE)), "postgres|shop")
    assert draft is not None
    assert draft.severity == "info"
    assert "**1 temporary file**" in draft.summary
    assert "**2.3 MB**" in draft.summary
    assert draft.evidence.facts["largest_bytes"] == 2449408
    assert draft.evidence.facts["suggested_work_mem_mb"] == 4
    assert sql_shape(draft, "work-mem-role") == [
        ("text", "ALTER ROLE "),
        ("identifier", "postgres"),
        ("text", " IN DATABASE "),
        ("identifier", "shop"),
        ("text", " SET work_mem = "),
        ("literal", "4MB"),
    ]
    assert sql_shape(draft, "work-mem-database") == [
        ("text", "ALTER DATABASE "),
        ("identifier", "shop"),
        ("text", " SET work_mem = "),
        ("literal", "4MB"),
    ]
    assert {(f.needs, f.setting, f.manual) for f in draft.fixes} == {("none", "work_mem", False)}


def test_names_from_the_log_enter_fixes_only_as_identifiers() -> None:
    text = PG.TEMP_FILE.replace("postgres@shop/", "o'neil\"; DROP@shop/")
    (obs,) = observe(TempFiles(), docs(text))
    draft = evaluate(TempFiles(), [obs], obs.subject)
    assert draft is not None
    shape = sql_shape(draft, "work-mem-role")
    assert ("identifier", "o'neil\"; DROP") in shape
    assert all("neil" not in part for role, part in shape if role == "text")


def test_many_temporary_files_are_a_warning() -> None:
    (doc,) = [d for d in docs(PG.TEMP_FILE)]
    t0 = time_of(doc)
    observed = observe(TempFiles(), [at(doc, t0 + i * SECOND_US) for i in range(WARNING_FILES)])
    draft = evaluate(TempFiles(), observed, "postgres|shop")
    assert draft is not None and draft.severity == "warning" and draft.evidence.count == WARNING_FILES


@pytest.mark.parametrize(
    ("largest", "mb"),
    [(500_000, 1), (2449408, 4), (4 * MB, 8), (100 * MB, 128), (5 << 30, MAX_WORK_MEM_MB)],
)
def test_work_mem_is_the_next_power_of_two_above_the_largest_file(largest: int, mb: int) -> None:
    assert suggested_work_mem_mb(largest) == mb


# --- connection_limit


def test_refused_connections_open_with_a_pooler_and_a_restart_only_fix() -> None:
    observed = observe(ConnectionLimit(), docs(PG.TOO_MANY + PG.AUTH_FAILURES))
    assert [o.subject for o in observed] == ["", ""]
    draft = evaluate(ConnectionLimit(), observed, "")
    assert draft is not None
    assert draft.severity == "warning"
    assert "**2 connections** refused" in draft.summary
    assert "`sorry, too many clients already`" in draft.summary
    assert draft.evidence.facts["refused"] == 2
    pooler, max_connections = draft.fixes
    assert pooler.manual and pooler.statement == ()
    assert (max_connections.needs, max_connections.setting) == ("restart", "max_connections")
    assert sql_shape(draft, "max-connections")[0] == ("text", "ALTER SYSTEM SET max_connections = ")


def test_refused_connections_turn_critical_when_many() -> None:
    doc = docs(PG.TOO_MANY)[-1]
    t0 = time_of(doc)
    observed = observe(ConnectionLimit(), [at(doc, t0 + i * SECOND_US) for i in range(REFUSED_CRITICAL)])
    draft = evaluate(ConnectionLimit(), observed, "")
    assert draft is not None and draft.severity == "critical"


# --- auth_failures


def test_failed_logins_are_observed_by_client_and_user() -> None:
    observed = observe(AuthFailures(), docs(PG.AUTH_FAILURES + PG.TOO_MANY))
    assert [o.subject for o in observed] == ["127.0.0.1|app", "127.0.0.1|app", "127.0.0.1|ghost"]


def test_a_failed_login_without_client_or_user_is_unknown() -> None:
    doc = {**docs(PG.AUTH_FAILURES)[0], "client": None, "user": None}
    assert [o.subject for o in observe(AuthFailures(), [doc])] == ["unknown|unknown"]


def _failures(n: int, every_s: int) -> list[dict[str, object]]:
    doc = docs(PG.AUTH_FAILURES)[0]
    return [at(doc, time_of(doc) + i * every_s * SECOND_US) for i in range(n)]


@pytest.mark.parametrize(
    ("n", "every_s", "opens"),
    [
        (BURST_COUNT - 1, 10, False),
        (BURST_COUNT, 10, True),  # a burst: within five minutes
        (BURST_COUNT, 60, True),  # 4 minutes from first to last
        (BURST_COUNT, 120, False),  # spread over 8 minutes: someone mistyping now and then
    ],
)
def test_failed_logins_open_on_a_burst(n: int, every_s: int, opens: bool) -> None:
    observed = observe(AuthFailures(), _failures(n, every_s))
    assert (evaluate(AuthFailures(), observed, "127.0.0.1|app") is not None) is opens


def test_a_burst_of_failed_logins_names_client_user_and_numbers() -> None:
    draft = evaluate(AuthFailures(), observe(AuthFailures(), _failures(7, 5)), "127.0.0.1|app")
    assert draft is not None
    assert draft.severity == "warning"
    assert draft.title == "Failed logins from 127.0.0.1 as app"
    assert "**7 failed logins**" in draft.summary and "up to **7** within 5 minutes" in draft.summary
    assert draft.evidence.facts["failures"] == 7
    assert all(f.manual for f in draft.fixes)
    heavy = evaluate(AuthFailures(), observe(AuthFailures(), _failures(AUTH_CRITICAL, 1)), "127.0.0.1|app")
    assert heavy is not None and heavy.severity == "critical"
