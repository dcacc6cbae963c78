"""Statement normalization: literals become positional placeholders `$1, $2, ...`.

`normalize(sql) -> (text, changed)` is the one entry point. Today it is a lexer scrubber; a later
issue puts libpg_query in front of it for statements that parse and keeps this scrubber as the
fallback for those that do not (truncated text, syntax errors), so its contract is the one that
matters: no literal value survives, whatever the input.

What the scrubber does, token by token (PostgreSQL's lexer rules, src/backend/parser/scan.l):

- single-quoted strings, with doubled quotes, `E'...'` (backslash escapes), `B'...'`, `X'...'`,
  `N'...'`, `U&'...'`, and dollar-quoted `$tag$...$tag$` bodies -> `$n`;
- numeric literals (`42`, `1.5`, `.5`, `1e5`, `0x1F`, `0o17`, `0b101`, `1_000`) -> `$n`;
- comments (`-- ...` and `/* ... */`) are removed: people paste values into them;
- identifiers, keywords, double-quoted identifiers and existing `$n` parameters are kept.
  New placeholders are numbered after the highest existing `$n`, as pg_stat_statements does,
  so they never collide with the statement's own parameters.
- An unterminated string, dollar quote or comment (a statement cut by `track_activity_query_size`
  or by the 1 MiB entry cap) is replaced up to the end of the text, never left raw.

Whitespace is kept as it is. `changed` is true when anything was replaced or removed.
"""

from __future__ import annotations

import hashlib
import re
from typing import Final

# The pattern starts with a character class so that re's search skips, in C, every position that
# cannot start a token; each branch then checks what that first character was with a lookbehind.
# (A leading alternation of groups would defeat that skip and cost ~3x.)
_LEX: Final = re.compile(
    r"""
    [-/"'$.0-9eEbBxXnNuU]
    (?:
      (?<=-)(?P<c1>-[^\n]*)                                            # -- comment: removed
    | (?<=/)(?P<c2>\*.*?(?:\*/|\Z))                                    # /* comment */: removed
    | (?<=")(?P<q>(?:[^"]|"")*"?)                                     # "quoted identifier": kept
    | (?<=')(?P<s1>(?:[^']|'')*(?:'|\Z))                              # 'string'
    | (?<=[eE])(?<![\w$][eE])(?P<s2>'(?:[^'\\]|\\.|'')*(?:'|\Z))      # E'string'
    | (?<=[bBxXnN])(?<![\w$].)(?P<s3>'[^']*(?:'|\Z))                  # B'', X'', N''
    | (?<=[uU])(?<![\w$].)(?P<s4>&'(?:[^']|'')*(?:'|\Z))              # U&'string'
    | (?<=\$)(?<![\w$]\$)(?P<s5>(?P<tag>(?:[A-Za-z_\x80-\U0010ffff][\w\x80-\U0010ffff]*)?)\$
          .*?(?:\$(?P=tag)\$|\Z))                                      # $tag$ dollar quote $tag$
    | (?<=[0-9])(?<![\w$.][0-9])(?P<n1>(?<=0)(?:[xX][0-9A-Fa-f_]+|[oO][0-7_]+|[bB][01_]+)
          |[\d_]*(?:\.\d*)?(?:[eE][-+]?\d+)?)                          # 42, 1.5, 1e5, 0x1F, 1_000
    | (?<=\.)(?<![\w$.]\.)(?P<n2>\d+(?:[eE][-+]?\d+)?)                 # .5
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
    | (?<=/)(?P<c2>\*.*?(?:\*/|\Z))
    | (?<=")(?P<q>(?:[^"]|"")*"?)
    | (?<=')(?P<s1>(?:[^']|'')*(?:'|\Z))
    | (?<=\$)(?<![\w$]\$)(?P<s5>(?P<tag>(?:[A-Za-z_\x80-\U0010ffff][\w\x80-\U0010ffff]*)?)\$
          .*?(?:\$(?P=tag)\$|\Z))
    | (?<=[0-9])(?<![\w$.][0-9])(?P<n1>(?<=0)(?:[xX][0-9A-Fa-f_]+|[oO][0-7_]+|[bB][01_]+)
          |[\d_]*(?:\.\d*)?(?:[eE][-+]?\d+)?)
    | (?<=\.)(?<![\w$.]\.)(?P<n2>\d+(?:[eE][-+]?\d+)?)
    )
    """,
    re.VERBOSE | re.DOTALL,
)
# A quote right after a letter that may prefix a string (or U&): the full lexer is needed.
_PREFIXED_STRING: Final = re.compile(r"[eEbBxXnN&]'").search
_KEEP: Final = "q"
_DROP: Final = frozenset({"c1", "c2"})
_PARAM: Final = re.compile(r"(?<![\w$])\$(\d+)")


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


def normalize(sql: str) -> tuple[str, bool]:
    """`sql` with every literal replaced by `$n` and comments removed; and whether anything changed."""
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


def fingerprint(normalized: str) -> str:
    """A stable 16-hex-digit id of a normalized statement.

    A stand-in for libpg_query's fingerprint until that lands; both identify a query shape (this
    one is also sensitive to whitespace, which an application does not vary for the same query).
    """
    return hashlib.blake2b(normalized.encode("utf-8", "replace"), digest_size=8).hexdigest()
