"""Value removal from the text fields of an entry (message, detail, hint, context).

The token: a removed value becomes `...` (`TOKEN`). The punctuation PostgreSQL put around the
value stays, so `Key (email)=(bob@example.com) already exists.` becomes
`Key (email)=(...) already exists.` and `invalid input syntax for type integer: "abc"` becomes
`invalid input syntax for type integer: "..."`. Identifiers (table, column, constraint, role
names) stay: they are what makes a line useful, and they are not values.

`redact_text` first applies a table of PostgreSQL's message templates that carry values
(unique/foreign-key/exclusion `Key (...)=(...)`, `Failing row contains (...)`, bind parameters,
input-syntax and out-of-range values, `Process N: <sql>` in deadlock details, `SQL statement
"..."` in context, COPY/JSON context, the pg_hba.conf line in authentication details), then a
conservative generic scrub for anything else: single-quoted literals and numbers go,
double-quoted identifiers, typmods such as `(10)` and tuple ids such as `(0,5)` stay, and so
do numbers that name a position or a process (`at character 15`, `line 3`, `statement 1`, `process 123`,
`transaction 456`, `PID 789`, the pids of a lock's holders and wait queue, WAL locations).
Whether unknown messages (RAISE, extensions) should instead be replaced whole (default deny) is
decided by the PostgreSQL log fidelity issue.

`scrub_passwords` runs on every field even when the database sends full text: `PASSWORD '...'`
(CREATE/ALTER ROLE, `OPTIONS (password '...')`), `password=...` in connection strings and the
password of a `scheme://user:password@host` URI never leave the server.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final

from forwarder.pglog.normalize import normalize

TOKEN: Final = "..."  # noqa: S105  # the replacement token, not a password

_Rule = tuple[str, re.Pattern[str], str | Callable[[re.Match[str]], str]]


def _sql_in_group2(m: re.Match[str]) -> str:
    """Group 1 is the text before a statement in group 2, group 3 the text after it."""
    sql, _ = normalize(m.group(2))
    return f"{m.group(1)}{sql}{m.group(3)}"


# (guard substring, pattern, replacement): the guard is a cheap `in` test that keeps the regex off
# texts that cannot match. Patterns follow the English message texts of PostgreSQL 13-18.
_RULES: Final[tuple[_Rule, ...]] = (
    # nbtinsert.c / ri_triggers.c / execIndexing.c: Key (cols)=(vals) already exists. | is not present
    # in table | is still referenced from table | conflicts with existing key (cols)=(vals).
    (
        ")=(",
        re.compile(
            r"(\)=\()(.*?)(\)(?: already exists| is not present in | is still referenced from "
            r"| conflicts with |\.?$))",
            re.DOTALL | re.MULTILINE,
        ),
        rf"\1{TOKEN}\3",
    ),
    # execMain.c: Failing row contains (...).  The row may contain parentheses: greedy to the end.
    ("Failing row contains (", re.compile(r"(Failing row contains \()(.*)(\)\.?)", re.DOTALL), rf"\1{TOKEN}\3"),
    # postgres.c: "parameters: $1 = 'x', $2 = NULL" in DETAIL; "... portal with parameters: ..." in CONTEXT
    ("parameters: $", re.compile(r"(\$\d+ = )'(?:[^']|'')*(?:'(?:\.\.\.)?|\Z)"), rf"\1'{TOKEN}'"),
    # datatype input functions: invalid input syntax for type integer: "abc"; invalid input value
    # for enum mood: "x"; malformed array literal: "x"; date/time field value out of range: "x"
    (
        '"',
        re.compile(
            r"((?:invalid input syntax for (?:type )?[^:\n]*"
            r"|invalid input value for enum [^:\n]*"
            r"|malformed (?:array|range|record|multirange) literal"
            r"|out of range(?: for type [^:\n]*)?"
            r"|invalid (?:hexadecimal|escape) (?:digit|string)"
            r"|invalid value for parameter [^:\n]*): )\"(.*)\"",
        ),
        rf'\1"{TOKEN}"',
    ),
    # int8.c, float.c, datetime.c, jsonapi.c: value "x" is out of range for type integer;
    # invalid value "x" for "field"; Token "x" is invalid.
    (
        '"',
        re.compile(r"(\b(?:[Vv]alue|Token) \")[^\"\n]*(\" (?:is out of range|for \"|is invalid))"),
        rf"\1{TOKEN}\2",
    ),
    # scan.l: syntax error at or near "'secret'" shows a literal token; identifiers stay
    (
        'at or near "',
        re.compile(r"(at or near \")(?:[eEbBxXnN]?'|\$|[\d.])[^\n]*?(\"(?: at character \d+)?$)", re.MULTILINE),
        rf"\1{TOKEN}\2",
    ),
    # deadlock.c: "Process 123: <query text>" lines in the DETAIL of "deadlock detected"
    ("Process ", re.compile(r"^(\t?Process \d+: )(.*)()$", re.MULTILINE), _sql_in_group2),
    # pl_exec.c / spi.c: SQL statement "..." (and SQL expression "...") lines in CONTEXT
    (
        "SQL ",
        re.compile(r'^(SQL (?:statement|expression) ")(.*?)("(?:$|\n))', re.MULTILINE | re.DOTALL),
        _sql_in_group2,
    ),
    # copyfromparse.c: COPY t, line 2, column c: "value" | COPY t, line 2: "raw line"
    ("COPY ", re.compile(r"^(COPY [^\n]*?, line \d+(?:, column [^\n:]*)?: ).*$", re.MULTILINE), rf"\1{TOKEN}"),
    # jsonfuncs.c: JSON data, line 1: {"a": ...
    ("JSON data, line ", re.compile(r"^(JSON data, line \d+: ).*$", re.MULTILINE), rf"\1{TOKEN}"),
    # hba.c / auth.c: Connection matched pg_hba.conf line 95: "host all all 0.0.0.0/0 md5"
    # (PG16+: Connection matched file "/path/pg_hba.conf" line 95: "...")
    (
        "Connection matched ",
        re.compile(r"(Connection matched (?:pg_hba\.conf|file \"[^\"\n]*\") line \d+: \").*(\")"),
        rf"\1{TOKEN}\2",
    ),
)

# Generic scrub: alternatives that are kept come first so their digits and quotes are skipped.
_GENERIC: Final = re.compile(
    r"""
      (?P<keep>"(?:[^"]|"")*"                          # quoted identifiers
              |\(\d+(?:,\d+)?\)                        # typmods (10), (5,2); tuple ids (0,5)
              |\$\d+                                    # parameter references
              |\b[0-9A-F]{1,8}/[0-9A-F]{1,8}\b          # WAL locations (LSN) 0/16B3748
              |(?:lock|queue):\ \d+(?:,\ \d+)*          # pids: "Process holding the lock: 1. Wait queue: 2, 3."
              |\b[A-Za-z_]\w*)                          # words, also those with digits (t1, int4)
    | '(?:[^']|'')*(?:'|\Z)                           # single-quoted literal
    | (?<![\w.])(?<!character\ )(?<!line\ )(?<!rocess\ )(?<!PID\ )(?<!transaction\ )(?<!statement\ )
      -?(?:0[xX][0-9A-Fa-f]+|\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)   # number
    """,
    re.VERBOSE | re.DOTALL,
)
_HAS_VALUE: Final = re.compile(r"['\d]").search


class _Generic:
    """re.sub callback for `_GENERIC`: keeps identifiers, replaces literals, remembers a change."""

    __slots__ = ("changed",)

    def __init__(self) -> None:
        self.changed = False

    def __call__(self, m: re.Match[str]) -> str:
        if m.lastgroup == "keep":
            return m.group()
        self.changed = True
        return f"'{TOKEN}'" if m.group()[0] == "'" else TOKEN


def redact_text(text: str) -> tuple[str, bool]:
    """`text` with values (and passwords) replaced by `TOKEN`, and whether anything was replaced."""
    out, _ = scrub_passwords(text)
    for guard, pattern, repl in _RULES:
        if guard in out:
            out = pattern.sub(repl, out)
    changed = out != text
    if _HAS_VALUE(out) is not None:
        scrub = _Generic()
        out = _GENERIC.sub(scrub, out)
        changed = changed or scrub.changed
    return out, changed


_PASSWORD: Final = re.compile(
    r"""
      (\bpassword\s+)(?:[eE]?'(?:[^']|'')*(?:'|\Z)|\$(\w*)\$.*?(?:\$\2\$|\Z))  # PASSWORD '..'
    | (\bpassword\s*=\s*)(?:''(?:[^']|'''')*(?:''|\Z)|'(?:[^'\\]|\\.)*(?:'|\Z)|[^\s'"),]+)  # conninfo password=
    | (\b[A-Za-z][\w+.-]*://[^\s:/@'"]*:)[^\s@'"]+(@)                              # scheme://user:pw@host
    """,
    re.VERBOSE | re.DOTALL | re.IGNORECASE,
)


def _password_repl(m: re.Match[str]) -> str:
    if m.group(1) is not None:
        return f"{m.group(1)}'{TOKEN}'"
    if m.group(3) is not None:
        return f"{m.group(3)}{TOKEN}"
    return f"{m.group(4)}{TOKEN}{m.group(5)}"


def scrub_passwords(text: str) -> tuple[str, bool]:
    """`text` with passwords removed (applied even with full text on), and whether any was found."""
    if "assword" not in text and "ASSWORD" not in text and "://" not in text:
        return text, False
    out = _PASSWORD.sub(_password_repl, text)
    return out, out != text
