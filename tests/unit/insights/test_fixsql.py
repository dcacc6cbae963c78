"""A fix's SQL: text of the definition as is, identifiers and literals quoted as PostgreSQL reads them."""

from __future__ import annotations

import pytest

from forwarder.insights.fixsql import quote_identifier, quote_literal, render
from forwarder.insights.model import SqlPart


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
