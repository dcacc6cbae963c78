"""Values that flow through the daemon: the log line of SPEC 2.1 and its kinds.

`pglog` produces `LogLine`s (what a PostgreSQL log entry says); the store adds the identity
(`id`, `database_id`, `database_name`, `host`) when it appends them.
"""

from __future__ import annotations

import functools
import re
from datetime import UTC, datetime, timedelta
from typing import Final, Literal, NamedTuple, get_args

from forwarder.blake2 import blake2b

Kind = Literal[
    "error",
    "slow_query",
    "lock_wait",
    "deadlock",
    "auth_failure",
    "too_many_connections",
    "checkpoint",
    "autovacuum",
    "temp_file",
    "connection",
    "statement",
    "server",
    "other",
]
KINDS: Final[tuple[Kind, ...]] = get_args(Kind)

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)

KindAlias = Literal["errors", "locks", "maintenance"]

# What each alias of SPEC 4.1 stands for; documented in docs/api.md ("Kinds and aliases").
KIND_ALIASES: Final[dict[str, frozenset[Kind]]] = {
    "errors": frozenset({"error", "deadlock", "auth_failure", "too_many_connections"}),
    "locks": frozenset({"lock_wait", "deadlock"}),
    "maintenance": frozenset({"checkpoint", "autovacuum", "temp_file"}),
}


def expand_kinds(names: list[str] | tuple[str, ...]) -> frozenset[Kind]:
    """Kinds named by `names` (kinds or aliases); raises ValueError naming the first unknown one."""
    out: set[Kind] = set()
    for name in names:
        if name in KIND_ALIASES:
            out |= KIND_ALIASES[name]
        elif name in KINDS:
            out.add(name)
        else:
            raise ValueError(f"unknown kind {name!r}")
    return frozenset(out)


# Why a NamedTuple and not a frozen dataclass: the parser builds one LogLine per log entry, at
# ~100k lines/s about 10 µs a line all told. A frozen dataclass's __init__ (18 calls of
# object.__setattr__) costs ~2.2 µs; a tuple is built in ~0.15 µs (pglog's Entry.finish uses
# tuple.__new__ with all 18 values) and is smaller, which on the benchmark's mixed log is worth
# ~7% of the parse rate. Same field names, order and defaults; immutable; `line._asdict()` and
# `LogLine._fields` stand for dataclasses.asdict/fields.
class LogLine(NamedTuple):
    """One PostgreSQL log entry, classified and with values removed (SPEC 2.1 minus identity)."""

    time_us: int  # when PostgreSQL wrote it, microseconds since the Unix epoch, UTC
    severity: str
    kind: Kind
    message: str
    sqlstate: str | None = None
    detail: str | None = None
    hint: str | None = None
    context: str | None = None
    statement: str | None = None
    user: str | None = None
    database: str | None = None
    application: str | None = None
    client: str | None = None
    pid: int | None = None
    duration_ms: float | None = None
    redacted: bool = False
    # Not SPEC fields: kept in the store only.
    fingerprint: str | None = None  # query fingerprint of `statement` (the future query id)
    truncated: bool = False  # the entry was cut at the 1 MiB cap
    unparsed: bool = False  # not in the configured format: kept whole as kind other


@functools.lru_cache(maxsize=4096)
def _second_text(seconds: int) -> str:
    dt = _EPOCH + timedelta(seconds=seconds)
    # strftime's %Y does not pad years below 1000 on every platform; RFC 3339 needs four digits.
    return f"{dt.year:04d}-{dt.month:02d}-{dt.day:02d}T{dt.hour:02d}:{dt.minute:02d}:{dt.second:02d}"


def format_time(time_us: int) -> str:
    """RFC 3339 UTC with milliseconds, e.g. 2026-11-22T02:18:58.123Z (PostgreSQL logs milliseconds)."""
    # Called for every line stored: the date-and-time part is shared by the lines of one second.
    seconds, micros = divmod(time_us, 1_000_000)
    return f"{_second_text(seconds)}.{micros // 1000:03d}Z"


# RFC 3339 section 5.6 date-time: seconds always, a fraction of one digit or more, `Z` or an offset
# with its colon (hours 00-23, minutes 00-59). Python's fromisoformat alone takes ISO 8601's other
# forms too (no seconds, "+0000", a comma) and offset minutes past 59, which are not RFC 3339.
_RFC3339: Final = re.compile(
    r"(\d{4}-\d\d-\d\d[Tt]\d\d:\d\d:)(\d\d)(\.\d+)?([Zz]|[+-](?:[01]\d|2[0-3]):[0-5]\d)?", re.ASCII
)
# The instants `format_time` can write: years 0001 to 9999 in UTC. An offset can move a time that
# reads as within them out of them ("0001-01-01T00:00:00+01:00" is in year 0).
FIRST_TIME_US: Final = (datetime(1, 1, 1, tzinfo=UTC) - _EPOCH) // timedelta(microseconds=1)
LAST_TIME_US: Final = (datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC) - _EPOCH) // timedelta(microseconds=1)


def parse_time(text: str) -> int:
    """RFC 3339 text to microseconds since the epoch; raises ValueError when it is not RFC 3339.

    A leap second (`23:59:60Z`, RFC 3339 section 5.7) is the first instant of the next second, as
    POSIX time has no room for it; digits of a fraction past microseconds are dropped. An instant
    outside years 0001-9999 in UTC is a ValueError too (FIRST_TIME_US, LAST_TIME_US)."""
    m = _RFC3339.fullmatch(text)
    if m is None:
        raise ValueError("not an RFC 3339 time")
    head, second, fraction, offset = m.groups()
    if offset is None:
        raise ValueError("an RFC 3339 time needs an offset or Z")
    leap = second == "60"
    zone = "+00:00" if offset in ("Z", "z") else offset
    dt = datetime.fromisoformat(f"{head}{'59' if leap else second}{(fraction or '')[:7]}{zone}")
    if leap:
        try:
            dt += timedelta(seconds=1)
        except OverflowError:
            raise ValueError("past the last representable time") from None
    time_us = (dt - _EPOCH) // timedelta(microseconds=1)
    if not FIRST_TIME_US <= time_us <= LAST_TIME_US:
        raise ValueError("outside the years 0001 to 9999 in UTC")
    return time_us


_DIGITS: Final = re.compile(r"\d+")


# Messages repeat (value-free templates; a slow statement's message is always the same few words),
# so keys are kept for short ones: a hit costs a dict lookup instead of a regex and a hash. Cleared
# when full, like normalize.py's cache (what repeats comes back at once).
_GROUP_KEYS: Final[dict[tuple[str, str, str | None], int]] = {}
_GROUP_KEYS_ENTRIES: Final = 4096
_GROUP_KEYS_MAX_CHARS: Final = 512


def group_key(kind: str, message: str, fingerprint: str | None = None) -> int:
    """Stable signed 64-bit key of a repeated message: its kind plus the value-free message text.

    Numbers do not split a group: a checkpoint's timings, a temp file's size or a statement's
    `at character N` vary while the message stays the same. Slow statements are grouped by their
    statement's fingerprint instead (the message is only "duration: N ms  statement"), so the
    groups of slow lines are the top statements; its parse, bind and execute are one group.
    """
    if len(message) > _GROUP_KEYS_MAX_CHARS:
        return _group_key(kind, message, fingerprint)
    found = _GROUP_KEYS.get(key := (kind, message, fingerprint))
    if found is None:
        if len(_GROUP_KEYS) >= _GROUP_KEYS_ENTRIES:
            _GROUP_KEYS.clear()
        found = _GROUP_KEYS[key] = _group_key(kind, message, fingerprint)
    return found


def _group_key(kind: str, message: str, fingerprint: str | None) -> int:
    # "\x01" keeps a fingerprint apart from message text (PostgreSQL's messages never start with it).
    template = "\x01" + fingerprint if kind == "slow_query" and fingerprint else _DIGITS.sub("0", message)
    digest = blake2b(f"{kind}\x00{template}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def group_id(key: int) -> str:
    """Public form of a group key (16 hex digits), used by the `group` query parameter."""
    return f"{key & 0xFFFFFFFFFFFFFFFF:016x}"


def parse_group_id(text: str) -> int:
    """Inverse of `group_id`; raises ValueError for anything but 16 hex digits."""
    if len(text) != 16:
        raise ValueError("a group id is 16 hex digits")
    value = int(text, 16)
    return value - (1 << 64) if value >= 1 << 63 else value


# The SPEC 2.1 log line, in SPEC order: what every destination and the Logs API show.
SPEC_FIELDS: Final = (
    "id", "time", "host", "database_id", "database_name", "severity", "kind", "sqlstate", "message",
    "detail", "hint", "context", "statement", "user", "database", "application", "client", "pid",
    "duration_ms", "redacted",
)  # fmt: skip
IDENTITY_FIELDS: Final = ("id", "host", "database_id", "database_name")
# What each field means, for the API document (docs/api.md's table says more, with examples).
FIELD_DESCRIPTIONS: Final[dict[str, str]] = {
    "id": "Identifier of the line, a decimal string; later lines have larger ids.",
    "time": "When PostgreSQL wrote the line: RFC 3339, UTC, milliseconds.",
    "host": "Host name of the server, as configured for the database.",
    "database_id": "Identifier of the monitored database (its id in the config).",
    "database_name": "Display name of the monitored database.",
    "severity": "PostgreSQL's severity: LOG, WARNING, ERROR, FATAL, PANIC, and others.",
    "kind": "What the line is about, classified from its message and SQLSTATE.",
    "sqlstate": "PostgreSQL's error code (five characters); null when the log does not say or it is 00000.",
    "message": "The primary message, values removed unless the database keeps full text.",
    "detail": "The DETAIL line, values removed likewise.",
    "hint": "The HINT line, values removed likewise.",
    "context": "The CONTEXT line, values removed likewise.",
    "statement": "The statement behind the line, normalized with positional placeholders ($1, $2, ...).",
    "user": "The PostgreSQL user of the session.",
    "database": "The PostgreSQL database (datname) the session was connected to.",
    "application": "The application_name of the connection.",
    "client": "The client's address (host without port), or [local] for a Unix socket.",
    "pid": "Process id of the backend that wrote the line.",
    "duration_ms": "Milliseconds, for slow statements and lock waits; null otherwise.",
    "redacted": "true when values were removed from the line.",
}


def line_document(
    line: LogLine, host: str, database_id: str, database_name: str, *, time: bool = True
) -> dict[str, object]:
    """The SPEC 2.1 fields of a stored line but `id` (the store adds it), in SPEC order; without
    `time` too when `time` is False (the store keeps it in a column of its own)."""
    fields: dict[str, object] = {
        "host": host,
        "database_id": database_id,
        "database_name": database_name,
        "severity": line.severity,
        "kind": line.kind,
        "sqlstate": line.sqlstate,
        "message": line.message,
        "detail": line.detail,
        "hint": line.hint,
        "context": line.context,
        "statement": line.statement,
        "user": line.user,
        "database": line.database,
        "application": line.application,
        "client": line.client,
        "pid": line.pid,
        "duration_ms": line.duration_ms,
        "redacted": line.redacted,
    }
    return {"time": format_time(line.time_us), **fields} if time else fields


def spec_fields(line: LogLine) -> dict[str, object]:
    """The SPEC 2.1 fields a parsed line carries, in SPEC order (no id, host or database identity)."""
    return {k: v for k, v in line_document(line, "", "", "").items() if k not in IDENTITY_FIELDS}
