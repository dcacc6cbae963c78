"""autovacuum, wraparound, statement_timeouts and crashes on PostgreSQL 15 lines, and the registry."""

from __future__ import annotations

from typing import Any

import pytest

from forwarder.insights.fixsql import render
from forwarder.insights.model import FindingDraft
from forwarder.insights.rules import RULES
from forwarder.insights.rules.autovacuum import LONG_RUN_SECONDS, REPEATED_RUNS, Autovacuum
from forwarder.insights.rules.crashes import Crashes
from forwarder.insights.rules.statement_timeouts import OPEN_COUNT, StatementTimeouts
from forwarder.insights.rules.wraparound import Wraparound
from forwarder.model import LogLine
from forwarder.pglog import make_reader, parse_stream
from tests.unit.insights.rules import pg15_lines as PG
from tests.unit.insights.rules.rulekit import at, docs, evaluate, observe, sql_shape, time_of

SECOND_US = 1_000_000
DAY_US = 86_400 * SECOND_US


# --- autovacuum


def test_autovacuum_runs_are_observed_by_table_with_their_elapsed_seconds() -> None:
    observed = observe(Autovacuum(), docs(PG.AUTOVACUUM + PG.CHECKPOINTS_WAL))
    assert [(o.subject, o.value, (o.sample or {})["run"]) for o in observed] == [
        ("shop.public.big", 0.01, "vacuum"),
        ("shop.public.big", 0.03, "analyze"),
        ("shop.public.vac", 0.0, "vacuum"),
        ("shop.public.vac", 0.0, "analyze"),
    ]


def _runs(elapsed: str, n: int, every_s: int = 60) -> list[dict[str, Any]]:
    text = PG.AUTOVACUUM.replace("elapsed: 0.00 s", f"elapsed: {elapsed} s")
    (vacuum,) = [d for d in docs(text) if d["message"].startswith('automatic vacuum of table "shop.public.vac"')]
    return [at(vacuum, time_of(vacuum) + i * every_s * SECOND_US) for i in range(n)]


@pytest.mark.parametrize(
    ("elapsed", "n", "opens"),
    [
        ("0.00", 1, False),
        ("59.99", 1, False),
        (f"{LONG_RUN_SECONDS:.2f}", 1, True),  # one long run
        ("0.00", REPEATED_RUNS - 1, False),
        ("0.00", REPEATED_RUNS, True),  # again and again within the hour
    ],
)
def test_autovacuum_opens_on_a_long_run_or_repeated_runs(elapsed: str, n: int, opens: bool) -> None:
    observed = observe(Autovacuum(), _runs(elapsed, n))
    assert (evaluate(Autovacuum(), observed, "shop.public.vac") is not None) is opens


def test_autovacuum_fix_sets_per_table_parameters_on_the_logged_table() -> None:
    draft = evaluate(Autovacuum(), observe(Autovacuum(), _runs("75.20", 1)), "shop.public.vac")
    assert draft is not None
    assert draft.title == "Autovacuum runs long on shop.public.vac"
    assert "**75 s**" in draft.summary
    assert draft.evidence.facts["longest_seconds"] == 75.2
    (fix,) = draft.fixes
    assert (fix.setting, fix.needs, fix.applies_to) == (None, "none", "table public.vac in database shop")
    assert fix.database == "shop"  # where it must run: the line's database, not the connection's
    shape = sql_shape(draft, "table-autovacuum")
    assert shape[:4] == [("text", "ALTER TABLE "), ("identifier", "public"), ("text", "."), ("identifier", "vac")]
    assert shape[4][0] == "text" and "autovacuum_vacuum_scale_factor = 0.02" in shape[4][1]


def test_a_table_name_with_a_dot_gets_no_sql_from_a_guess() -> None:
    text = PG.AUTOVACUUM.replace('"shop.public.vac"', '"shop.public.my.table"').replace(
        "elapsed: 0.00 s", "elapsed: 90.00 s"
    )
    observed = observe(Autovacuum(), docs(text))
    draft = evaluate(Autovacuum(), observed, "shop.public.my.table")
    assert draft is not None
    (fix,) = draft.fixes
    assert (fix.manual, fix.statement, fix.database) == (True, (), None)


# Real PostgreSQL 15 reports of tables in databases `Shop` and `we'ird "db"; $$ x`: the names are
# printed as they are, so a double quote in one does not end the name.
HOSTILE_TABLES = [
    'Shop.public.vac"tbl',
    'Shop.public.vac"tbl',
    'we\'ird "db"; $$ x.public.vac"tbl',
    'we\'ird "db"; $$ x.public.select',
    "Shop.public.select",
    "Shop.public.select",
    "Shop.public.my.table",
    "Shop.pg_catalog.pg_statistic",
    "Shop.pg_toast.pg_toast_2619",
    "template1.information_schema.sql_sizing",
    'Shop.public.Tab"le; --',
]


@pytest.mark.parametrize("full_text", [False, True])
def test_a_double_quote_in_a_name_does_not_end_it_and_tables_never_merge(full_text: bool) -> None:
    # with value removal on (the default) the reports are kept whole too: they hold server facts only
    observed = observe(Autovacuum(), docs(PG.AUTOVACUUM_HOSTILE, full_text=full_text))
    assert [o.subject for o in observed] == HOSTILE_TABLES
    assert [(o.sample or {})["run"] for o in observed[:2]] == ["vacuum", "analyze"]


def _long_runs(table: str) -> FindingDraft | None:
    (vacuum,) = [
        d
        for d in docs(PG.AUTOVACUUM_HOSTILE.replace("elapsed: 0.00 s", "elapsed: 75.00 s"))
        if f' of table "{table}": index scans: ' in d["message"].split("\n")[0]
    ]
    return evaluate(Autovacuum(), observe(Autovacuum(), [vacuum]), table)


@pytest.mark.parametrize(
    "table", ['Shop.public.vac"tbl', 'we\'ird "db"; $$ x.public.vac"tbl', 'we\'ird "db"; $$ x.public.select']
)
def test_a_name_with_a_double_quote_gets_no_sql_fix_and_the_finding_names_the_whole_table(table: str) -> None:
    draft = _long_runs(table)
    assert draft is not None
    assert draft.title == f"Autovacuum runs long on {table}"
    assert draft.evidence.facts["table"] == table
    (fix,) = draft.fixes
    assert (fix.manual, fix.statement, fix.database) == (True, (), None)


def test_the_sql_fix_names_the_database_it_must_run_in() -> None:
    draft = _long_runs("Shop.public.select")
    assert draft is not None
    (fix,) = draft.fixes
    assert (fix.database, fix.applies_to) == ("Shop", "table public.select in database Shop")
    assert render(fix.statement) == (
        'ALTER TABLE "public"."select" SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_cost_limit = 1000)'
    )


@pytest.mark.parametrize(
    "table", ["Shop.pg_catalog.pg_statistic", "Shop.pg_toast.pg_toast_2619", "template1.information_schema.sql_sizing"]
)
def test_a_system_table_gets_no_fix(table: str) -> None:
    # ALTER TABLE pg_catalog.pg_statistic SET (...) fails: "permission denied: ... is a system catalog"
    draft = _long_runs(table)
    assert draft is not None and draft.fixes == ()
    assert "system table" in draft.summary


def test_a_pg13_analyze_has_its_elapsed_time_on_its_first_line() -> None:
    # analyze.c of PostgreSQL 12-13: "automatic analyze of table \"%s.%s.%s\" system usage: %s"
    (doc,) = docs(
        '2026-11-23 21:15:13.534 UTC [26329] LOG:  automatic analyze of table "shop.public.big" system usage:'
        " CPU: user: 0.02 s, system: 0.00 s, elapsed: 61.50 s\n"
    )
    assert [(o.subject, o.value) for o in observe(Autovacuum(), [doc])] == [("shop.public.big", 61.5)]


def test_the_elapsed_time_is_read_after_the_name() -> None:
    text = PG.AUTOVACUUM_HOSTILE.replace('"Shop.public.select"', '"Shop.public.elapsed: 9999.00 s"')
    observed = observe(Autovacuum(), docs(text))
    assert [(o.subject, o.value) for o in observed if "9999" in o.subject] == [
        ("Shop.public.elapsed: 9999.00 s", 0.0),
        ("Shop.public.elapsed: 9999.00 s", 0.0),
    ]


# --- wraparound


def test_wraparound_warnings_are_observed_in_redacted_lines() -> None:
    observed = observe(Wraparound(), docs(PG.WRAPAROUND))  # redacted: the templates keep the texts
    assert [o.subject for o in observed] == ["shop", "", "shop"]
    assert (observed[0].sample or {})["xids_left"] == 9999999
    assert (observed[2].sample or {})["stopped"] == 1


def test_wraparound_is_critical_with_the_ids_left_and_a_vacuum_freeze_by_hand() -> None:
    observed = observe(Wraparound(), docs(PG.WRAPAROUND))
    draft = evaluate(Wraparound(), observed, "shop")
    assert draft is not None
    assert draft.severity == "critical"
    assert "**9999999**" in draft.summary
    assert "no longer accepts commands" in draft.summary
    assert draft.evidence.facts["min_xids_left"] == 9999999
    assert [(f.fix_id, f.manual) for f in draft.fixes] == [("vacuum-freeze", True), ("old-transactions", True)]
    assert "VACUUM (FREEZE" in draft.fixes[0].label
    assert evaluate(Wraparound(), observed, "shop", now_us=max(o.time_us for o in observed) + 2 * DAY_US) is None


def test_other_warnings_are_not_wraparound() -> None:
    assert observe(Wraparound(), docs(PG.CANCELS + PG.TOO_MANY + PG.DEADLOCK)) == []


# --- statement_timeouts


def _lines(text: str) -> list[LogLine]:
    reader = make_reader("stderr", line_prefix=PG.PREFIX, timezone="UTC", full_text=False)
    return list(parse_stream(reader, [text.encode()]))


def test_cancelled_statements_are_observed_by_the_query_id_the_store_gives_them() -> None:
    observed = observe(StatementTimeouts(), docs(PG.CANCELS))
    fingerprints = [line.fingerprint for line in _lines(PG.CANCELS)]
    assert [o.subject for o in observed] == fingerprints
    assert [(o.sample or {})["reason"] for o in observed] == ["statement timeout", "lock timeout", "user request"]
    # full text keeps the literal, the query id is the same
    assert [o.subject for o in observe(StatementTimeouts(), docs(PG.CANCELS, full_text=True))] == fingerprints


def test_cancelled_statements_open_at_the_threshold_with_the_query_id() -> None:
    timeout, _, cancel = docs(PG.CANCELS)
    t0 = time_of(cancel)
    few = observe(StatementTimeouts(), [timeout, cancel])
    subject = few[0].subject
    assert few[1].subject == subject  # both SELECT pg_sleep($1);
    assert evaluate(StatementTimeouts(), few, subject) is None
    more = few + observe(StatementTimeouts(), [at(timeout, t0 + SECOND_US)], first_id=9)
    assert len(more) == OPEN_COUNT
    draft = evaluate(StatementTimeouts(), more, subject)
    assert draft is not None
    assert draft.evidence.query_ids == (subject,)
    assert "**3 statements** cancelled" in draft.summary and "`SELECT pg_sleep($1);`" in draft.summary
    assert draft.evidence.facts["reasons"] == ["statement timeout", "user request"]


# --- crashes


def test_a_killed_backend_and_the_recovery_are_crash_reports() -> None:
    observed = observe(Crashes(), docs(PG.CRASH + PG.PANIC + PG.TOO_MANY))
    assert [(o.sample or {})["event"] for o in observed] == ["died", "reset", "recovery", "recovery", "panic"]
    assert (observed[0].sample or {})["running"] == "SELECT pg_sleep($1);"


def test_a_crash_is_critical_and_resolves_a_day_later() -> None:
    observed = observe(Crashes(), docs(PG.CRASH))
    draft = evaluate(Crashes(), observed, "")
    assert draft is not None
    assert draft.severity == "critical"
    assert "signal 9" in draft.summary and "`SELECT pg_sleep($1);`" in draft.summary
    assert draft.evidence.count == 4
    panic = evaluate(Crashes(), observe(Crashes(), docs(PG.PANIC)), "")
    assert panic is not None and panic.title == "The server PANICked"
    assert evaluate(Crashes(), observed, "", now_us=max(o.time_us for o in observed) + 2 * DAY_US) is None


# --- every rule


def test_the_ten_rules_are_registered_under_their_names() -> None:
    assert sorted(RULES) == [
        "auth_failures",
        "autovacuum",
        "checkpoints",
        "connection_limit",
        "crashes",
        "deadlocks",
        "lock_waits",
        "statement_timeouts",
        "temp_files",
        "wraparound",
    ]
    assert all(rule.kinds and rule.lookback_seconds > 0 for rule in RULES.values())


ALL_TEXT = "".join(
    getattr(PG, name)
    for name in (
        "LOCK_WAIT", "DEADLOCK", "AUTH_FAILURES", "TEMP_FILE", "TOO_MANY", "AUTOVACUUM", "CHECKPOINTS_WAL",
        "CHECKPOINT_IMMEDIATE", "CANCELS", "CRASH", "WRAPAROUND", "PANIC",
    )
)  # fmt: skip


def test_summaries_never_link_log_text_and_never_show_removed_values() -> None:
    documents = docs(ALL_TEXT)
    seen = 0
    for rule in RULES.values():
        observed = observe(rule, documents)
        for subject in {o.subject for o in observed}:
            # at the newest observation of the whole capture, with many copies so every rule opens
            copies = [o for o in observed if o.subject == subject] * 60
            draft = evaluate(rule, copies, subject)
            if draft is None:
                continue
            seen += 1
            assert "](" not in draft.summary and "s3cr3t" not in draft.summary, rule.name
    assert seen >= 10
