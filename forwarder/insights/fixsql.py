"""A fix's SQL text, rendered from its definition (`Fix.statement`, a tuple of `SqlPart`s).

Only the fix definition's own `text` is written as is. Every value that came from a log line (a
role, a table, a size) is an identifier or a literal, quoted the way PostgreSQL reads them:

- an identifier is always double-quoted, a `"` inside doubled (PostgreSQL's `quote_identifier`,
  src/backend/utils/adt/ruleutils.c, and libpq's PQescapeIdentifier);
- a literal is single-quoted, a `'` inside doubled; one holding a backslash is written `E'...'`
  with every backslash doubled, so it reads the same whatever `standard_conforming_strings` is
  (libpq's PQescapeLiteral does the same).

A NUL character cannot be in any PostgreSQL text: such a part is refused, never cut.
"""

from __future__ import annotations

from collections.abc import Iterable

from forwarder.insights.model import SqlPart


def quote_identifier(name: str) -> str:
    """`name` as a double-quoted PostgreSQL identifier."""
    _no_nul(name)
    return '"' + name.replace('"', '""') + '"'


def quote_literal(value: str) -> str:
    """`value` as a PostgreSQL string constant."""
    _no_nul(value)
    quoted = value.replace("'", "''")
    if "\\" in value:
        return "E'" + quoted.replace("\\", "\\\\") + "'"
    return "'" + quoted + "'"


def render(parts: Iterable[SqlPart]) -> str:
    """The SQL text of a fix's statement; ValueError if a part is not exactly one of text,
    identifier or literal, or holds a NUL character."""
    out: list[str] = []
    for part in parts:
        given = (part.text != "") + (part.identifier is not None) + (part.literal is not None)
        if given != 1:
            raise ValueError("a SQL part is exactly one of text, identifier or literal")
        if part.identifier is not None:
            out.append(quote_identifier(part.identifier))
        elif part.literal is not None:
            out.append(quote_literal(part.literal))
        else:
            _no_nul(part.text)
            out.append(part.text)
    return "".join(out)


def _no_nul(text: str) -> None:
    if "\x00" in text:
        raise ValueError("PostgreSQL text cannot hold a NUL character")
