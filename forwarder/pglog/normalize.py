"""Statement normalization: literals become positional placeholders `$1, $2, ...`; fingerprints.

`normalize(sql) -> (text, changed)` and `normalize_statement(sql) -> (text, changed, fingerprint)`
are the entry points; nothing else in the daemon touches libpg_query.

1. **libpg_query first** (through `pgparse`, BSD-3-Clause; pglast is GPL-3 and does not fit an
   Apache-2.0 project, see docs/dependencies.md). `pgparse.normalize` is PostgreSQL's own parser
   plus pg_stat_statements' constant replacement: every literal the grammar sees as a constant
   becomes `$n` (numbered after the statement's own highest `$n`), and `-5` is one constant.
2. **The lexer scrubber below, after it or instead of it.** libpg_query keeps comments (people
   paste values into them) and leaves the literals of some utility statements raw
   (`CREATE TABLE ... DEFAULT 'x'`, `ALTER SYSTEM SET x = '1GB'`, `COPY t FROM '/path'`,
   `PREPARE p AS SELECT 1`): when its output still holds a quote, a comment, a dollar quote or a
   bare number, the scrubber runs over that output. A statement that does not parse (cut by
   `track_activity_query_size` or the 1 MiB entry cap, a syntax error, a grammar newer than pgparse
   1.x's PostgreSQL 17 parser) goes to a stricter scrubber (`_strict_scrub`): from where the
   parser stopped on, its bare words that are not SQL keywords go too, since a value the client
   forgot to quote (`WHERE name = John Smith`) is what makes such a statement fail. One
   libpg_query must not be given (longer than 8 KiB, a NUL byte, many comment openers: see
   `_MAX_PARSE`) is not known to be wrong and goes to the plain scrubber, unless the server's own
   syntax error says where it stopped (`normalize_refused`, from entry.py). Either way no literal
   survives: a statement is never emitted raw.

What the scrubber does, token by token (PostgreSQL's lexer rules, src/backend/parser/scan.l):

- single-quoted strings, with doubled quotes, `E'...'` (backslash escapes), `B'...'`, `X'...'`,
  `N'...'`, `U&'...'`, and dollar-quoted `$tag$...$tag$` bodies -> `$n`;
- numeric literals (`42`, `1.5`, `.5`, `1e5`, `0x1F`, `0o17`, `0b101`, `1_000`) -> `$n`;
- comments (`-- ...` and `/* ... */`) are removed;
- identifiers, keywords, double-quoted identifiers and existing `$n` parameters are kept.
  New placeholders are numbered after the highest existing `$n`, as pg_stat_statements does,
  so they never collide with the statement's own parameters.
- An unterminated string, dollar quote or comment is replaced up to the end of the text, never
  left raw.

Whitespace is kept as it is. `changed` is true when anything was replaced or removed.

**Fingerprint** (the future query id, `LogLine.fingerprint`, 16 hex digits): a 64-bit BLAKE2b
hash of the normalized text, with lists of parameters collapsed and layout folded (whitespace,
the case of keywords and unquoted names, a final semicolon), so that statements differing only in
literal values, the length of an IN list or their layout share it (what libpg_query's fingerprint
ignores too; see `fingerprint`). Not `pgparse.fingerprint`: it parses the statement a second
time (~6 µs), and a log of many distinct query shapes (the benchmark's mix has ~50,000 in 100,000
statements) then loses ~12% of its parse rate, cache or not; nor is libpg_query given statements
it may crash on (see `_MAX_PARSE`) a second time.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable
from typing import Final

import pgparse  # type: ignore[import-not-found]  # a C extension without type stubs

from forwarder.blake2 import blake2b

# Typed once here (and bound, which saves two attribute lookups per statement).
_PG_NORMALIZE: Final[Callable[[str], str]] = pgparse.normalize
_PG_FINGERPRINT: Final[Callable[[str], str]] = pgparse.fingerprint
# ValueError: a lone surrogate (JSON can carry one) cannot be encoded to UTF-8 for the C side.
_PG_ERRORS: Final[tuple[type[Exception], ...]] = (pgparse.PGQueryError, ValueError)

# A plain string is read as if a backslash escaped the next character, as it does on a server
# with standard_conforming_strings off: there 'a\', secret, ' is one string, which read the
# standard way would leave `secret` bare. On a standard server this only differs for a string
# ending in a backslash ('C:\'), which then runs on to the next quote: more removed, never less.
# Block comments nest in PostgreSQL (scan.l: xcdepth): a comment that opens another before it
# closes is taken to the end of the statement (`\*.*`), as re cannot count the depth; what follows
# it is lost to the normalized statement, never kept as a value (`/* a /* b */ secret */`).
# The pattern starts with a character class so that re's search skips, in C, every position that
# cannot start a token; each branch then checks what that first character was with a lookbehind.
# (A leading alternation of groups would defeat that skip and cost ~3x.)
_LEX: Final = re.compile(
    r"""
    [-/"'$.0-9eEbBxXnNuU]
    (?:
      (?<=-)(?P<c1>-[^\n]*)                                            # -- comment: removed
    | (?<=/)(?P<c2>\*(?:[^*/]|\*(?!/)|/(?!\*))*+(?:\*/|\Z)|\*.*)          # /* comment */: removed
    | (?<=")(?P<q>(?:[^"]|"")*+"?)                                     # "quoted identifier": kept
    | (?<=')(?P<s1>(?:[^'\\]|\\.|'')*+\\?(?:'|\Z))                     # 'string' (see below)
    | (?<=[eE])(?<![\w$][eE])(?P<s2>'(?:[^'\\]|\\.|'')*+\\?(?:'|\Z))      # E'string'
    | (?<=[bBxXnN])(?<![\w$].)(?P<s3>'[^']*(?:'|\Z))                  # B'', X'', N''
    | (?<=[uU])(?<![\w$].)(?P<s4>&'(?:[^']|'')*+(?:'|\Z))              # U&'string'
    | (?<=\$)(?<![\w$]\$)(?P<s5>(?P<tag>(?:[A-Za-z_\x80-\U0010ffff][\w\x80-\U0010ffff]*)?)\$
          .*?(?:\$(?P=tag)\$|\Z))                                      # $tag$ dollar quote $tag$
    | (?<=[0-9])(?<![\w$.][0-9])(?P<n1>(?<=0)(?:[xX][0-9A-Fa-f_]+|[oO][0-7_]+|[bB][01_]+)\w*
          |[\d_]*(?:\.\d*)?(?:[eE][-+]?\d+)?)                          # 42, 1.5, 1e5, 0x1F, 1_000
    | (?<=\.)(?<![^\W\d]\.)(?<!\$\.)(?P<n2>\d+(?:[eE][-+]?\d+)?)                 # .5
    )
    """,
    re.VERBOSE | re.DOTALL,
)
# The same lexer without the letter-prefixed strings (E'', B'', X'', N'', U&''): most statements
# have none, and leaving letters out of the first character class halves the candidates.
_LEX_FAST: Final = re.compile(
    r"""
    [-/"'$.0-9]
    (?:
      (?<=-)(?P<c1>-[^\n]*)
    | (?<=/)(?P<c2>\*(?:[^*/]|\*(?!/)|/(?!\*))*+(?:\*/|\Z)|\*.*)
    | (?<=")(?P<q>(?:[^"]|"")*+"?)
    | (?<=')(?P<s1>(?:[^'\\]|\\.|'')*+\\?(?:'|\Z))
    | (?<=\$)(?<![\w$]\$)(?P<s5>(?P<tag>(?:[A-Za-z_\x80-\U0010ffff][\w\x80-\U0010ffff]*)?)\$
          .*?(?:\$(?P=tag)\$|\Z))
    | (?<=[0-9])(?<![\w$.][0-9])(?P<n1>(?<=0)(?:[xX][0-9A-Fa-f_]+|[oO][0-7_]+|[bB][01_]+)\w*
          |[\d_]*(?:\.\d*)?(?:[eE][-+]?\d+)?)
    | (?<=\.)(?<![^\W\d]\.)(?<!\$\.)(?P<n2>\d+(?:[eE][-+]?\d+)?)
    )
    """,
    re.VERBOSE | re.DOTALL,
)
# A quote right after a letter that may prefix a string (or U&): the full lexer is needed.
_PREFIXED_STRING: Final = re.compile(r"[eEbBxXnN&]'").search
_KEEP: Final = "q"
_DROP: Final = frozenset({"c1", "c2"})
_PARAM: Final = re.compile(r"(?<![\w$])\$(\d+)")


# PostgreSQL's SQL keywords, reserved or not: `SELECT word FROM pg_get_keywords()` on PostgreSQL 15
# (src/include/parser/kwlist.h), then those 16-18 added (SQL/JSON, MERGE, temporal and virtual
# columns). Only the strict reduction of a statement that does not parse uses it (see
# `_strict_scrub`): a keyword is the grammar's, any other bare word may be the user's.
SQL_KEYWORDS: Final = frozenset(
    (  # noqa: SIM905  # ~480 words: a list literal would take one line each
        "abort absolute access action add admin after aggregate all also alter always analyse "
        "analyze and any array as asc asensitive assertion assignment asymmetric at atomic attach "
        "attribute authorization backward before begin between bigint binary bit boolean both "
        "breadth by cache call called cascade cascaded case cast catalog chain char character "
        "characteristics check checkpoint class close cluster coalesce collate collation column "
        "columns comment comments commit committed compression concurrently configuration conflict "
        "connection constraint constraints content continue conversion copy cost create cross csv "
        "cube current current_catalog current_date current_role current_schema current_time "
        "current_timestamp current_user cursor cycle data database day deallocate dec decimal "
        "declare default defaults deferrable deferred definer delete delimiter delimiters depends "
        "depth desc detach dictionary disable discard distinct do document domain double drop each "
        "else enable encoding encrypted end enum escape event except exclude excluding exclusive "
        "execute exists explain expression extension external extract false family fetch filter "
        "finalize first float following for force foreign forward freeze from full function "
        "functions generated global grant granted greatest group grouping groups handler having "
        "header hold hour identity if ilike immediate immutable implicit import in include "
        "including increment index indexes inherit inherits initially inline inner inout input "
        "insensitive insert instead int integer intersect interval into invoker is isnull "
        "isolation join key label language large last lateral leading leakproof least left level "
        "like limit listen load local localtime localtimestamp location lock locked logged mapping "
        "match matched materialized maxvalue merge method minute minvalue mode month move name "
        "names national natural nchar new next nfc nfd nfkc nfkd no none normalize normalized not "
        "nothing notify notnull nowait null nullif nulls numeric object of off offset oids old on "
        "only operator option options or order ordinality others out outer over overlaps overlay "
        "overriding owned owner parallel parameter parser partial partition passing password "
        "placing plans policy position preceding precision prepare prepared preserve primary prior "
        "privileges procedural procedure procedures program publication quote range read real "
        "reassign recheck recursive ref references referencing refresh reindex relative release "
        "rename repeatable replace replica reset restart restrict return returning returns revoke "
        "right role rollback rollup routine routines row rows rule savepoint schema schemas scroll "
        "search second security select sequence sequences serializable server session session_user "
        "set setof sets share show similar simple skip smallint snapshot some sql stable "
        "standalone start statement statistics stdin stdout storage stored strict strip "
        "subscription substring support symmetric sysid system table tables tablesample tablespace "
        "temp template temporary text then ties time timestamp to trailing transaction transform "
        "treat trigger trim true truncate trusted type types uescape unbounded uncommitted "
        "unencrypted union unique unknown unlisten unlogged until update user using vacuum valid "
        "validate validator value values varchar variadic varying verbose version view views "
        "volatile when where whitespace window with within without work wrapper write xml "
        "xmlattributes xmlconcat xmlelement xmlexists xmlforest xmlnamespaces xmlparse xmlpi "
        "xmlroot xmlserialize xmltable year yes zone "
        # PostgreSQL 16-18
        "absent conditional empty error format json json_array json_arrayagg json_exists "
        "json_object json_objectagg json_query json_scalar json_serialize json_table json_value "
        "keep keys merge_action nested omit path period quotes scalar string system_user "
        "unconditional virtual"
    ).split()
)


class _Numberer:
    """re.sub callback: numbers literals, drops comments, keeps quoted identifiers."""

    __slots__ = ("changed", "n")

    def __init__(self, start: int) -> None:
        self.n = start
        self.changed = False

    def __call__(self, m: re.Match[str]) -> str:
        group = m.lastgroup
        if group == _KEEP:
            return m.group()
        if group is None:
            return m.group()  # a lone candidate character (an operator such as - or /)
        self.changed = True
        if group in _DROP:
            return ""
        self.n += 1
        return f"${self.n}"


def scrub(sql: str) -> tuple[str, bool]:
    """The lexer scrubber alone: `sql` with every literal replaced by `$n` and comments removed."""
    start = 0
    if "$" in sql:
        for p in _PARAM.findall(sql):
            start = max(start, int(p))
    numberer = _Numberer(start)
    lexer = _LEX if _PREFIXED_STRING(sql) is not None else _LEX_FAST
    out = lexer.sub(numberer, sql)
    if numberer.changed:
        out = out.rstrip()
    return out, numberer.changed


# The lexer with bare words (`w`) too, for `_strict_scrub` only: a statement that does not parse
# is rare, so its cost (every letter starts a candidate) does not matter.
def _replaced(text: str, old: str, new: str) -> str:
    """`text` with its one `old` replaced; raises when `old` is not there (the lexer changed)."""
    if text.count(old) != 1:
        raise AssertionError(f"expected {old!r} once in the lexer's pattern")
    return text.replace(old, new)


_LEX_STRICT: Final = re.compile(
    _replaced(
        _replaced(_LEX.pattern, "[-/\"'$.0-9eEbBxXnNuU]", "[-/\"'$.0-9A-Za-z_\\x80-\\U0010ffff]"),
        "    )\n    ",
        "    | (?<=[A-Za-z_\\x80-\\U0010ffff])(?P<w>[\\w$\\x80-\\U0010ffff]*)     # a bare word\n    )\n    ",
    ),
    re.VERBOSE | re.DOTALL,
)
# A bare word that ends right before the error token, with only blanks between them or none
# (`O'Connor`: the word glued to an unterminated quote is the same value).
_WORD_BEFORE: Final = re.compile(r"(?<![\w$\x80-\U0010ffff])[A-Za-z_\x80-\U0010ffff][\w$\x80-\U0010ffff]*\s*\Z")


class _StrictNumberer(_Numberer):
    """`_Numberer` that also replaces, from `cut` on, every bare word that is not a keyword and
    every quoted identifier; with `reference`, only up to the first keyword after `cut`."""

    __slots__ = ("cut", "end", "reference")

    def __init__(self, start: int, cut: int, reference: bool = False) -> None:
        super().__init__(start)
        self.cut = cut
        self.end = -1  # where replacing stopped (reference: at a keyword); -1 while it goes on
        self.reference = reference

    def __call__(self, m: re.Match[str]) -> str:
        group = m.lastgroup
        if group == "w" or group == _KEEP:
            word = m.group()
            if m.start() < self.cut or self.end >= 0:
                return word
            if group == "w" and word.lower() in SQL_KEYWORDS:
                if self.reference:
                    self.end = m.start()
                return word
            self.changed = True
            self.n += 1
            return f"${self.n}"
        return super().__call__(m)


def _strict_scrub(sql: str, position: int, reference: bool = False) -> tuple[str, bool]:
    """`scrub`, stricter, for a statement that does not parse: its words are as likely the user's.

    `position` is where the parser stopped (1-based, in characters, as PostgreSQL's `at character
    N`; 0 when unknown). A client that forgot to quote a value (`WHERE name = John Smith`) makes
    the parser stop at or inside that value, so from the error token on, and for the bare words
    right before it with only blanks between (`John`), every word that is not an SQL keyword and
    every quoted identifier becomes `$n` too; before that the statement parsed, and its names
    stay. With no position, that holds for the whole statement. Keywords, operators and
    punctuation stay, so the statement keeps its shape for grouping. With `reference`, the
    statement parsed and `position` is a column reference it names that does not exist (a value
    without its quotes: `WHERE email = alice@example.com`): only the words from there to the next
    keyword go.
    """
    cut = min(max(position - 1, 0), len(sql)) if position > 0 else 0
    while cut > 0:
        m = _WORD_BEFORE.search(sql, 0, cut)
        if m is None or m.group().rstrip().lower() in SQL_KEYWORDS:
            break
        cut = m.start()
    start = 0
    if "$" in sql:
        for p in _PARAM.findall(sql):
            start = max(start, int(p))
    numberer = _StrictNumberer(start, cut, reference)
    out = _LEX_STRICT.sub(numberer, sql)
    if numberer.changed:
        out = out.rstrip()
    return out, numberer.changed


# What libpg_query's normalization can leave behind (see the module docstring): a quote, a comment,
# a dollar quote, or a number that is not part of a word or a `$n`. A position after BY
# (`ORDER BY 2`, `GROUP BY 1`) is left: libpg_query keeps it on purpose, it names a column.
# Written like `_LEX` (a leading character class, then lookbehinds) so that re skips the other
# characters in C.
_LEFTOVER: Final = re.compile(
    r"[-/'$0-9](?:(?<=')|(?<=-)-|(?<=/)\*|(?<=\$)(?:[A-Za-z_\x80-\U0010ffff][\w\x80-\U0010ffff]*)?\$"
    r"|(?<=[0-9])(?<![\w$][0-9])(?<!BY [0-9]))"
).search


# libpg_query is not given what it handles badly (found by feeding it crafted statements):
# - its normalization walks the parse tree recursively without a depth check, and a left-deep
#   chain such as `1+1+1+...` (which the parser builds without recursing) is as deep as it is long:
#   ~20,000 levels overflow an 8 MiB C stack and kill the process (SIGSEGV), at ~400 bytes a
#   level. 8 KiB of text is at most ~4,000 levels, ~1.6 MiB of stack: safe on the main thread,
#   where the daemon parses. Longer statements (bulk INSERTs, mostly) go to the scrubber, which
#   removes their literals just as well.
# - its lexer is quadratic in nested comment openers (`/*/*/*...`: 16,000 take 1.3 s).
_MAX_PARSE: Final = 8 * 1024
_MAX_COMMENTS: Final = 64

# DML whose constants libpg_query replaced (pg_stat_statements' rule: every A_Const of a
# SELECT/INSERT/UPDATE/DELETE/MERGE): what is left there is a typmod (numeric(10,2)) or a
# position (ORDER BY 2), so only quotes and comments are looked for, not numbers.
# (A statement that starts otherwise, with a parenthesis or a newline, just takes the full check.)
_DML_HEADS: Final = ("SELECT ", "INSERT ", "UPDATE ", "DELETE ", "MERGE ", "WITH ", "VALUES ")


def normalize(sql: str) -> tuple[str, bool]:
    """`sql` with every literal replaced by `$n` and comments removed; and whether anything changed."""
    text, changed, _ = normalize_statement(sql, False)
    return text, changed


# The same statement text often comes back: a prepared statement (its values are in the DETAIL
# line, not in the text), an ORM's query, a monitoring probe. Normalizing costs ~15 us (parsing it
# with libpg_query), a cache hit ~0.2 us, a miss adds ~0.3 us. Only short statements are kept, so
# the cache holds at most _CACHE_ENTRIES * ~2 * _CACHE_MAX_CHARS characters (~2 MB) per process.
_CACHE_ENTRIES: Final = 1024
_CACHE_MAX_CHARS: Final = 1024
# Without and with the fingerprint.
_CACHE: Final[dict[bool, dict[str, tuple[str, bool, str]]]] = {False: {}, True: {}}


def normalize_statement(sql: str, with_fingerprint: bool = True) -> tuple[str, bool, str]:
    """`normalize(sql)` plus the statement's fingerprint (16 hex digits; "" if not asked for)."""
    if len(sql) > _CACHE_MAX_CHARS:
        return _normalize_statement(sql, with_fingerprint)
    cache = _CACHE[with_fingerprint]
    found = cache.get(sql)
    if found is None:
        if len(cache) >= _CACHE_ENTRIES:
            cache.clear()  # cheaper per miss than an LRU's bookkeeping; what repeats comes back at once
        found = cache[sql] = _normalize_statement(sql, with_fingerprint)
    return found


def normalize_refused(sql: str, position: int, *, reference: bool = False) -> tuple[str, bool, str]:
    """`normalize_statement` of a statement the server refused with a syntax error at character
    `position` (its message's `at character N`): reduced strictly (`_strict_scrub`) without asking
    libpg_query, which is not given every statement (see `_MAX_PARSE`) and would refuse it too.
    With `reference`, the server refused a column it names at `position` (42703): the statement
    parsed, and only that reference is taken for a value."""
    text, changed = _strict_scrub(sql, position, reference)
    return text, changed, fingerprint(text)


def _normalize_statement(sql: str, with_fingerprint: bool) -> tuple[str, bool, str]:
    parsed: str | None
    if len(sql) > _MAX_PARSE or "\x00" in sql or ("/*" in sql and sql.count("/*") > _MAX_COMMENTS) or "\\'" in sql:
        # see _MAX_PARSE; a NUL: C would read only up to it; a backslash before a quote: libpg_query
        # reads strings the standard way, the scrubber as standard_conforming_strings off (above)
        parsed = None
    else:
        try:
            parsed = _PG_NORMALIZE(sql)
        except _PG_ERRORS as e:
            # PGQueryError.position: where the parser stopped (1-based characters, 0 if unknown).
            text, changed = _strict_scrub(sql, getattr(e, "position", 0) or 0)
            return text, changed, fingerprint(text) if with_fingerprint else ""
    if parsed is None:
        text, changed = scrub(sql)
        if "alter" in text.lower():
            text = setting_values_removed(text)
            changed = text != sql
        return text, changed, fingerprint(text) if with_fingerprint else ""
    if (
        ("'" in parsed or "--" in parsed or "/*" in parsed)
        if parsed[:7].upper().startswith(_DML_HEADS)
        else _LEFTOVER(parsed) is not None
    ):
        parsed, _ = scrub(parsed)
    # Anywhere in the text, not only at its start: `BEGIN; ALTER ROLE ...`, a comment first.
    # (A lowered copy and a substring search: ~0.1 µs, and every statement passes here.)
    if "alter" in parsed.lower():
        parsed = setting_values_removed(parsed)
    # (libpg_query writes a national string N'x' as N$1, keeping the N: harmless, and looking
    # for it would cost as much as the checks above.)
    return parsed, parsed != sql, fingerprint(parsed) if with_fingerprint else ""


# ALTER ROLE/USER/DATABASE/SYSTEM/FUNCTION/PROCEDURE/ROUTINE ... SET name = value: libpg_query
# leaves these utility statements raw and the scrubber keeps bare words, but the value of a
# custom setting is often a token (`ALTER ROLE app SET myapp.api_key = sk_live_x`), and a bare
# word is a value there (gram.y var_value: a name, a number or a string). Plain SET's value
# libpg_query replaces itself. DEFAULT and a value already a placeholder stay.
_SETTING_VALUE: Final = re.compile(
    r"""(\bSET\s+(?:"(?:[^"]|"")*"|[\w$]+)(?:\s*\.\s*(?:"(?:[^"]|"")*"|[\w$]+))*\s*(?:=|\bTO\b)\s*+)"""
    r"(?!DEFAULT\s*(?:;|\Z))(?!\$\d+(?:\s*,\s*\$\d+)*\s*(?:;|\Z))[^;]+?(\s*(?:;|\Z))",
    re.IGNORECASE,
)


def ends_inside_a_token(sql: str) -> bool:
    """Whether `sql` ends inside a string, a quoted identifier, a dollar quote or a comment
    (PostgreSQL's lexer rules, scan.l; backslash escapes in E'' strings). A quoted SQL text that
    a log line cut there was cut inside a literal: the quote that seemed to end it is the value's.

    A scanner rather than `_LEX`: block comments nest (`/* a /* b */ c */`), which the regular
    expression cannot count, and `_LEX` does not say whether a string it took to the end of the
    text was closed there (`'it''` is open, `'it'''` is closed)."""
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        if c == "'":
            escapes = i > 0 and sql[i - 1] in "eE" and (i < 2 or not (sql[i - 2].isalnum() or sql[i - 2] in "_$"))
            i += 1
            while True:
                if i >= n:
                    return True
                ch = sql[i]
                if escapes and ch == "\\":
                    i += 2
                    continue
                if ch == "'":
                    if i + 1 < n and sql[i + 1] == "'":
                        i += 2
                        continue
                    break
                i += 1
            i += 1
        elif c == '"':
            end = sql.find('"', i + 1)
            while end >= 0 and sql[end + 1 : end + 2] == '"':
                end = sql.find('"', end + 2)
            if end < 0:
                return True
            i = end + 1
        elif c == "-" and sql.startswith("--", i):
            end = sql.find("\n", i)
            if end < 0:
                return True
            i = end + 1
        elif c == "/" and sql.startswith("/*", i):
            depth, i = 1, i + 2
            while depth:
                nxt = sql.find("*/", i)
                if nxt < 0:
                    return True
                opened = sql.find("/*", i, nxt)
                if opened >= 0:
                    depth, i = depth + 1, opened + 2
                else:
                    depth, i = depth - 1, nxt + 2
        elif (
            c == "$"
            and (m := _DOLLAR_TAG.match(sql, i)) is not None
            and not (i > 0 and (sql[i - 1].isalnum() or sql[i - 1] in "_$"))
        ):
            end = sql.find(m.group(), m.end())
            if end < 0:
                return True
            i = end + len(m.group())
        else:
            i += 1
    return False


_DOLLAR_TAG: Final = re.compile(r"\$(?:[A-Za-z_\x80-\U0010ffff][\w\x80-\U0010ffff]*)?\$")


def setting_values_removed(sql: str) -> str:
    """`sql` (an ALTER statement) with the value of each `SET name = value` as one `$n`."""
    start = max((int(p) for p in _PARAM.findall(sql)), default=0)
    counter = iter(range(start + 1, start + 1_000_000))
    return _SETTING_VALUE.sub(lambda m: f"{m.group(1)}${next(counter)}{m.group(2)}", sql)


# A parameter, or a list of them: `IN ($1, $2, $3)` and `IN ($4, $5)` have one shape.
_PARAMS: Final = re.compile(r"\$\d+(?:\s*,\s*\$\d+)*")
# A double-quoted name (`""` inside it is a quote), or the rest of the text after an opening quote.
_QUOTED_NAME: Final = re.compile(r'("(?:[^"]|"")*+"?)')
# PostgreSQL folds only A-Z of an unquoted name (scansup.c, downcase_identifier): `Größe` and
# `größe` are two names to it in UTF-8.
_ASCII_LOWER: Final = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def fingerprint(normalized: str) -> str:
    """A stable 16-hex-digit id of a normalized statement's shape (see the module docstring).

    BLAKE2b-64 of the normalized text with every parameter and list of parameters written as
    `$`, so that the length of a list (and the numbering it shifts) does not matter: statements
    that differ only in literal values or in the length of their lists share it, `IN ($1)` and
    `IN ($1, $2, $3)` alike (as pg_stat_statements merges IN lists since PostgreSQL 18). Nor does
    layout: runs of whitespace, the case of keywords and unquoted names, a final semicolon
    (`layout_free`; pg_stat_statements hashes the parse tree, pgBadger the text so folded).
    """
    if "$" in normalized:
        normalized = _PARAMS.sub("$", normalized)
    if '"' in normalized:
        return _hash(layout_free(normalized))
    # layout_free's common case inline (a statement without quoted names; every statement comes here)
    return _hash(_folded(normalized).strip(" ").rstrip("; "))


def layout_free(normalized: str) -> str:
    """`normalized` without what does not change a statement: runs of SQL whitespace as one space,
    A-Z outside double-quoted names in lower case, spaces at either end and final semicolons gone.
    (Comments and literals are gone already; a quoted name is kept as it is, spaces and case
    included.)"""
    if '"' in normalized:
        parts = _QUOTED_NAME.split(normalized)
        text = "".join(part if i % 2 else _folded(part) for i, part in enumerate(parts))
    else:
        text = _folded(normalized)
    return text.strip(" ").rstrip("; ")


# scan.l: space [ \t\n\r\f\v] (str.split() would take Unicode spaces too, which are not SQL's)
_SQL_SPACE: Final = re.compile(r"[ \t\n\r\f\v]+")


def _folded(text: str) -> str:
    # Most statements are written with single spaces: six scans in C are a third of a rewrite.
    if "  " in text or "\n" in text or "\t" in text or "\r" in text or "\f" in text or "\v" in text:
        text = _SQL_SPACE.sub(" ", text)
    return text.lower() if text.isascii() else text.translate(_ASCII_LOWER)


def _hash(text: str) -> str:
    return blake2b(text.encode("utf-8", "replace"), digest_size=8).hexdigest()
