"""`log_line_prefix` compiled to one regex for a whole stderr line: where each field is.

Apart from the reader (stderr.py) so that checking a configured prefix (the config, `forwarder
parse`, the overview) loads no parsing: this module imports nothing of pglog but the
table of translated words (translated.py, data only).

Prefix escapes (elog.c log_line_prefix / log_status_format), all supported, each with the
optional padding width PostgreSQL allows (`%-10u` pads on the right, `%10p` on the left, values
may be longer than the width):

    %a application_name  %u user  %d database  %r host(port) or [local]  %h host or [local]
    %L local address (PG16+)  %b backend type  %p pid  %P parallel leader pid  %t time (s)
    %m time (ms)  %n epoch (ms)  %Q query id  %i command tag  %e SQLSTATE  %c session id
    %l line number  %s session start  %v virtual xid  %x xid  %q stop here outside a session  %%

- `%q`: PostgreSQL stops the prefix there for processes without a client session (checkpointer,
  autovacuum worker, postmaster): everything after it is one optional group of the regex.
- Unknown escapes produce nothing, as in PostgreSQL. The config refuses them all the same
  (`unknown_escapes`): PostgreSQL has no such escape, so one in the configured prefix is a typo,
  and the prefix would then not be the server's.

Values of user, database and application are at most 63 bytes (NAMEDATALEN - 1), so their
patterns are bounded: a line that does not match fails fast even when it is 1 MiB long.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from forwarder.pglog.translated import LABEL_NAMES, LABELS, SEVERITIES, SEVERITY_NAMES, UNKNOWN

_TS: Final = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d (?:[A-Za-z]{1,6}|[-+]\d\d(?::?\d\d)?)"
_TS_MS: Final = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} (?:[A-Za-z]{1,6}|[-+]\d\d(?::?\d\d)?)"

# escape -> (pattern of its value, the field it fills or None)
# Names (%a %u %d) and the backend type (%b) may hold spaces and anything else: their patterns are
# "any text". The others cannot, and saying so is what splits `PostgreSQL JDBC Driver [local]`
# into %a and %h at the right space: a host, an address or `host(port)` has no space (a log_hostname
# name neither); a command tag is upper-case words (`CREATE TABLE`), a session state lower-case
# ones (`idle in transaction (aborted)`), ps_status.c / the tags of cmdtaglist.h.
_ESCAPES: Final[dict[str, tuple[str, str | None]]] = {
    "a": (r".{0,64}?", "application"),
    "u": (r".{0,64}?", "user"),
    "d": (r".{0,64}?", "database"),
    "r": (r"\S{0,300}", "client_r"),
    "h": (r"\S{0,256}", "client_h"),
    "L": (r"\S{0,256}", None),
    "b": (r".{0,100}?", None),
    "p": (r"\d+", "pid"),
    "P": (r"\d*", None),
    "t": (_TS, "time_t"),
    "m": (_TS_MS, "time_m"),
    "n": (r"\d+\.\d+", "time_n"),
    "Q": (r"-?\d*", None),
    "i": (r"(?:[A-Z]+(?: [A-Z]+)*|[a-z]+(?: [a-z]+)*(?: \(aborted\))?)?", None),
    "e": (r"[0-9A-Z]{5}", "sqlstate"),
    "c": (r"[0-9a-f]+\.[0-9a-f]+", None),
    "l": (r"\d+", None),
    "s": (_TS, None),
    "v": (r"(?:-?\d+/\d+)?", None),
    "x": (r"\d*", None),
}

# The severity or a secondary line's label, in English or as a translated server writes it
# (translated.py), then ":" and PostgreSQL's two spaces. Tools that pass lines on (and some
# providers) squeeze them to one; some translations put a space before the colon or none after
# it: all are read, and no space is part of the message. The reader maps the word to English.
_SEVERITY_WORDS: Final = "|".join(
    [r"DEBUG[1-5]?", *SEVERITY_NAMES[1:], *LABEL_NAMES]
    + [re.escape(word) for word in sorted({*SEVERITIES, *LABELS}, key=lambda w: (-len(w), w))]
)
# A word of question marks only is a translated severity that a process without a database wrote
# with LC_CTYPE C (translated.ascii_degraded): which one cannot be told, the reader takes LOG.
# The verbose SQLSTATE (`log_error_verbosity = verbose`) must hold a digit: every code PostgreSQL
# defines does (src/backend/utils/errcodes.txt: a class of two characters, a subclass of three,
# "000" for the class itself), while a message of a server that is not verbose may start with a
# word of five capitals and a colon: pgaudit's "AUDIT: ...", a RAISE NOTICE 'ERROR: ...'. A code of
# letters only (RAISE ... USING ERRCODE = 'ABCDE') stays in the message: nothing is lost.
_VERBOSE_SQLSTATE: Final = r"(?:((?=[A-Z]{0,4}[0-9])[0-9A-Z]{5}): )?"
_SEVERITY: Final = rf"({_SEVERITY_WORDS}|\?{{1,30}}(?=:  [^ ])) ?: {{0,2}}{_VERBOSE_SQLSTATE}"


@dataclass(frozen=True, slots=True)
class PrefixPattern:
    """A `log_line_prefix` compiled into one regex for a whole line, with where each field is.

    The `*_group` attributes are indexes into `match.groups()`, -1 when the prefix lacks the escape.
    `regex.match(line)` matches prefix, severity and verbose SQLSTATE; the text follows `match.end()`.
    """

    prefix: str
    regex: re.Pattern[str]
    severity_group: int
    verbose_sqlstate_group: int
    time_group: int
    time_kind: str  # "m", "n", "t" or "" (no time in the prefix)
    user_group: int
    database_group: int
    application_group: int
    client_group: int
    client_kind: str  # "r" (host(port)), "h" (host) or ""
    pid_group: int
    sqlstate_group: int
    # The same regex with each free-text value (`.{0,64}?` of %u, %d, %a, ...) that a literal
    # character follows written as "anything but that character": no lazy stepping, ~20% faster.
    # It finds the split at the first such character, which is also the lazy regex's first try;
    # when that split does not lead to a match (a user name holding an "@"), it fails, and the
    # reader tries `regex`: both give the same groups for every line. None when nothing changes.
    fast_regex: re.Pattern[str] | None = None
    # A name (%u %d %a) may hold a newline (CREATE DATABASE "a<newline>b"), which PostgreSQL
    # writes raw: its line is then cut in two. `head_regex` matches what comes before the first
    # name, so the reader can hold such a line; `multiline_regex` is `regex` whose names may hold
    # newlines, for the pieces joined back. None when the prefix has no name.
    head_regex: re.Pattern[str] | None = None
    multiline_regex: re.Pattern[str] | None = None


_ESCAPE: Final = re.compile(r"%(-?\d*)(.?)", re.DOTALL)  # elog.c: '%', optional padding, one character
_NON_VALUE_ESCAPES: Final = frozenset("q%")
_NAMES: Final = frozenset("uda")  # user, database, application: any text, a newline too


def unknown_escapes(prefix: str) -> list[str]:
    """The escapes of `prefix` that PostgreSQL's log_line_prefix does not have (e.g. `%Z`), in order.

    A `%` at the very end is not an escape (elog.c prints nothing for it) and is not reported.
    """
    return [
        m.group(0)
        for m in _ESCAPE.finditer(prefix)
        if m.group(2) and m.group(2) not in _ESCAPES and m.group(2) not in _NON_VALUE_ESCAPES
    ]


_LAZY: Final = re.compile(r"\.\{0,(\d+)\}\?")


def compile_prefix(prefix: str) -> PrefixPattern:
    """Compile `log_line_prefix` (as set in postgresql.conf, unquoted) into a `PrefixPattern`."""
    parts: list[str] = []
    raw_literals: dict[int, str] = {}  # index in parts -> the literal text it matches
    lazy: dict[int, tuple[int, bool]] = {}  # index in parts -> (bound, capturing) of a free-text value
    head_end = -1  # index in parts of the first name
    users: set[int] = set()  # indexes in parts of %u
    fields: dict[str, int] = {}
    ngroups = 0
    optional_from = -1
    i, n = 0, len(prefix)
    literal: list[str] = []

    def flush_literal() -> None:
        if literal:
            raw_literals[len(parts)] = "".join(literal)
            parts.append(re.escape("".join(literal)))
            literal.clear()

    while i < n:
        ch = prefix[i]
        i += 1
        if ch != "%":
            literal.append(ch)
            continue
        if i >= n:
            break  # a lone % at the end prints nothing (elog.c)
        padding = 0
        if prefix[i] == "-" or prefix[i].isdigit():
            j = i + 1
            while j < n and prefix[j].isdigit():
                j += 1
            padding = int(prefix[i:j]) if prefix[i:j] != "-" else 0
            i = j
            if i >= n:
                break
        esc = prefix[i]
        i += 1
        if esc == "%":
            literal.append("%")
            continue
        if esc == "q":
            flush_literal()
            if optional_from < 0:
                optional_from = len(parts)
            continue
        spec = _ESCAPES.get(esc)
        if spec is None:
            continue  # unknown escapes print nothing (elog.c: "format error - ignore it")
        flush_literal()
        value, field = spec
        key = field
        if field is not None and field.startswith("time_"):
            key = "time"
        elif field is not None and field.startswith("client_"):
            key = "client"
        if field is not None and key is not None and (key not in fields or _better(field, fields, key)):
            ngroups += 1
            fields[key] = ngroups - 1
            fields[f"{key}:kind"] = ord(field[-1]) if key in ("time", "client") else 0
            group = f"({value})"
        else:
            group = f"(?:{value})"
        if esc in _NAMES and head_end < 0:
            head_end = len(parts)
        if esc == "u":
            users.add(len(parts))
        free = _LAZY.fullmatch(value)
        if free is not None and padding == 0:
            lazy[len(parts)] = (int(free.group(1)), group.startswith("(") and not group.startswith("(?:"))
        if padding > 0:
            group = f" *{group}"
        elif padding < 0:
            group = f"{group} *"
        parts.append(group)
    flush_literal()
    # (before %q's group is made optional: a line with a name has everything up to it)
    head = "".join(parts[:head_end]) if head_end > 0 else None
    fast_parts = list(parts)
    # The fast regex's names exclude what follows each of them, and those after a user name also
    # what follows the user: "alice@example.com@shop" then fails it (the fast regex would take the
    # first split) and the regex, whose user name takes the last, reads it (below).
    first_user = min(users, default=len(parts))
    after_user = {raw_literals[k + 1][0] for k in users if raw_literals.get(k + 1, "\n")[0] != "\n"}
    for k, (bound, capturing) in lazy.items():
        follow = raw_literals.get(k + 1, "")
        if follow and follow[0] != "\n":
            excluded = follow[0] + "".join(sorted(after_user - {follow[0]})) if k > first_user else follow[0]
            free_text = f"[^{re.escape(excluded)}\n]{{0,{bound}}}"
            # Russian writes "[н/д]" for [unknown]: before a "/" that follows it, this split is
            # wrong. The fast regex fails on it (a lookahead, cheap where a name does not start
            # with "["), and the regex takes the word whole before any other split.
            whole = "|".join(re.escape(word) for word in sorted(UNKNOWN) if follow[0] in word)
            if whole:
                free_text = f"(?!{whole}){free_text}"
                parts[k] = parts[k].replace(f".{{0,{bound}}}?", f"(?:{whole}|.{{0,{bound}}}?)", 1)
            fast_parts[k] = f"({free_text})" if capturing else f"(?:{free_text})"
            if k in users:
                # A user name may hold the character that follows it (`%u@%d` with a role named
                # like an e-mail address, as IAM and Entra ID logins are): where the fast regex
                # fails, the user takes the last split that still reads the line, the names after
                # it the first (a database or application name holding "@" is rarer).
                parts[k] = parts[k].replace(f".{{0,{bound}}}?", f".{{0,{bound}}}", 1)
    if optional_from >= 0:
        parts[optional_from:] = [f"(?:{''.join(parts[optional_from:])})?"]
        fast_parts[optional_from:] = [f"(?:{''.join(fast_parts[optional_from:])})?"]
    body = "".join(parts) + _SEVERITY
    regex = re.compile(body)
    fast_body = "".join(fast_parts) + _SEVERITY
    fast_regex = re.compile(fast_body) if fast_body != body else None
    head_regex = re.compile(head) if head else None
    time_kind = chr(fields["time:kind"]) if "time" in fields else ""
    client_kind = chr(fields["client:kind"]) if "client" in fields else ""
    return PrefixPattern(
        prefix=prefix,
        regex=regex,
        severity_group=regex.groups - 2,
        verbose_sqlstate_group=regex.groups - 1,
        time_group=fields.get("time", -1),
        time_kind=time_kind,
        user_group=fields.get("user", -1),
        database_group=fields.get("database", -1),
        application_group=fields.get("application", -1),
        client_group=fields.get("client", -1),
        client_kind=client_kind,
        pid_group=fields.get("pid", -1),
        sqlstate_group=fields.get("sqlstate", -1),
        fast_regex=fast_regex,
        head_regex=head_regex,
        multiline_regex=re.compile(body, re.DOTALL) if head_regex is not None else None,
    )


# %n (epoch seconds with milliseconds) is exact; %m has the same precision but a zone abbreviation
# that may be ambiguous (IST is India's, Israel's or Ireland's: times.py); %t has whole seconds.
_TIME_RANK: Final = {"n": 0, "m": 1, "t": 2}


def _better(field: str, fields: dict[str, int], key: str) -> bool:
    """A later time escape replaces an earlier one when it is better (%n over %m over %t)."""
    if key != "time":
        return False
    return _TIME_RANK[field[-1]] < _TIME_RANK[chr(fields["time:kind"])]
