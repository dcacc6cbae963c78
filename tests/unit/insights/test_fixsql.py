"""A fix's SQL: text of the definition as is, identifiers and literals quoted as PostgreSQL reads them;
a fix as the findings table keeps it."""

from __future__ import annotations

import orjson
import pytest

from forwarder.insights.findings import fix_from_json, fix_json
from forwarder.insights.fixsql import quote_identifier, quote_literal, render
from forwarder.insights.model import SqlPart
from forwarder.insights.rules.autovacuum import table_fix


@pytest.mark.parametrize(
    ("name", "quoted"),
    [
        ("app", '"app"'),
        ("App User", '"App User"'),
        ('we"ird', '"we""ird"'),
        ('"', '""""'),
        ("a'b", '"a\'b"'),
        ("back\\slash", '"back\\slash"'),  # no escapes inside a quoted identifier
        ("rôle_ünïcode_表", '"rôle_ünïcode_表"'),
        ('x"; DROP TABLE t; --', '"x""; DROP TABLE t; --"'),
    ],
)
def test_identifiers_are_always_double_quoted_with_quotes_doubled(name: str, quoted: str) -> None:
    assert quote_identifier(name) == quoted


@pytest.mark.parametrize(
    ("value", "quoted"),
    [
        ("4GB", "'4GB'"),
        ("it's", "'it''s'"),
        ("''", "''''''"),
        ("a\\b", "E'a\\\\b'"),
        ("\\'", "E'\\\\'''"),
        ("ünïcode 表", "'ünïcode 表'"),
        ("'; SELECT pg_terminate_backend(1); --", "'''; SELECT pg_terminate_backend(1); --'"),
        ("", "''"),
    ],
)
def test_literals_are_single_quoted_and_backslashes_make_an_escape_string(value: str, quoted: str) -> None:
    assert quote_literal(value) == quoted


def test_render_joins_the_text_of_the_definition_with_quoted_values() -> None:
    parts = (
        SqlPart(text="ALTER ROLE "),
        SqlPart(identifier='app"user'),
        SqlPart(text=" SET work_mem = "),
        SqlPart(literal="64MB"),
    )

    assert render(parts) == 'ALTER ROLE "app""user" SET work_mem = \'64MB\''


@pytest.mark.parametrize(
    "part",
    [
        SqlPart(identifier="a\x00b"),
        SqlPart(literal="a\x00b"),
        SqlPart(),
        SqlPart(text="SET ", identifier="x"),
        SqlPart(identifier="x", literal="y"),
    ],
)
def test_a_part_that_is_not_exactly_one_thing_or_holds_nul_is_refused(part: SqlPart) -> None:
    with pytest.raises(ValueError):
        render((SqlPart(text="ALTER SYSTEM SET x = "), part))


# --- a fix as the findings table keeps it


def test_a_fix_reads_back_as_it_was_stored_with_its_database() -> None:
    fix = table_fix('we"ird', "public", "select")
    assert fix_from_json(orjson.loads(orjson.dumps(fix_json(fix)))) == fix


def test_a_table_fix_stored_without_its_database_is_no_longer_applied_but_kept_by_hand() -> None:
    # Stored before fixes named their database: it would run in the connection's database, and its
    # table may have been read wrong from a name with a double quote (`Shop.public.vac"tbl` as vac).
    old = fix_json(table_fix("Shop", "public", "vac"))
    del old["database"]
    fix = fix_from_json(old)
    assert (fix.manual, fix.statement, fix.label) == (True, (), old["label"])
