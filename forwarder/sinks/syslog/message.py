"""One line as an RFC 5424 SYSLOG-MSG, framed by octet counting (RFC 5425 section 4.3); pure."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from forwarder.sinks._encode import cut_text, cut_utf8, fit_json, level, line_text
from forwarder.sinks.base import OutLine

FACILITY_LOCAL0: Final = 16  # RFC 5424 section 6.2.1, table 1
# RFC 5424 table 2 codes for the shared level names (_encode.LEVELS), so a line has the same level
# in every destination. PostgreSQL's own syslog output (elog.c, send_message_to_server_log) maps
# one step lower: WARNING -> notice, ERROR -> warning, FATAL -> err, PANIC -> crit; it treats an
# ERROR as a routine query failure. Here ERROR is err(3) and FATAL and PANIC are crit(2), so
# "err and worse" filters on receivers catch failed statements and crashes.
SEVERITY_CODES: Final[Mapping[str, int]] = {
    "critical": 2,
    "error": 3,
    "warning": 4,
    "notice": 5,
    "info": 6,
    "debug": 7,
}
APP_NAME: Final = "postgresql"
SD_ID: Final = "service@32473"  # SPEC 9: private enterprise number 32473 (RFC 5424 section 6.3.2)
LINE_SD_ID: Final = "line@32473"
# SPEC 2.1 fields in neither the header (time, host, pid, kind), SPEC's element (database_name,
# kind, sqlstate) nor the text MSG (severity, message, detail, hint, context, statement).
LINE_SD_KEYS: Final = ("id", "database_id", "user", "database", "application", "client", "duration_ms", "redacted")
NILVALUE: Final = "-"
# RFC 5424 section 6: HOSTNAME 1*255, APP-NAME 1*48, PROCID 1*128, MSGID 1*32 PRINTUSASCII.
HOSTNAME_CHARS: Final = 255
PROCID_CHARS: Final = 128
MSGID_CHARS: Final = 32
# Not RFC limits: a PARAM-VALUE is at most SD_VALUE_BYTES once escaped, and at most the next
# smaller size of SD_VALUE_STEPS when the header would otherwise leave MSG less than MSG_ROOM_BYTES.
# PostgreSQL's own names are at most 63 bytes (NAMEDATALEN - 1), so only a hostile csvlog or
# jsonlog file reaches the smaller steps; at 16 bytes a value, the header is under 900 bytes and
# MSG keeps its room within the smallest `max_message_bytes` (2048, RFC 5425 section 4.3.1).
SD_VALUE_BYTES: Final = 255
SD_VALUE_STEPS: Final = (SD_VALUE_BYTES, 64, 16)
MSG_ROOM_BYTES: Final = 1024
_MARKER: Final = "..."

_NOT_PRINTUSASCII = re.compile(r"[^\x21-\x7e]")
# RFC 5424 section 6.3.3: '"', '\' and ']' MUST be escaped inside PARAM-VALUE.
_SD_ESCAPE = str.maketrans({'"': '\\"', "\\": "\\\\", "]": "\\]"})
# RFC 5424 section 6.2.3 (RFC 3339 with the restrictions listed there): upper-case T and Z, at most
# six digits of fraction.
_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z|[+-]\d{2}:\d{2})")


def priority(severity: str | None) -> int:
    """PRI: facility local0 * 8 + the RFC 5424 severity of a PostgreSQL severity (section 6.2.1)."""
    return FACILITY_LOCAL0 * 8 + SEVERITY_CODES[level(severity)]


def timestamp(time_text: Any) -> str:
    """The line's time as stored (RFC 3339 UTC, PostgreSQL's milliseconds), or NILVALUE if it is not one."""
    if isinstance(time_text, str) and _TIMESTAMP.fullmatch(time_text):
        return time_text
    return NILVALUE


def header_field(value: Any, max_chars: int) -> str:
    """A header field in PRINTUSASCII (33..126; anything else becomes '_'), cut, or NILVALUE when empty."""
    text = "" if value is None else str(value)
    return _NOT_PRINTUSASCII.sub("_", text)[:max_chars] or NILVALUE


def sd_value(value: Any, max_bytes: int = SD_VALUE_BYTES) -> str:
    """A PARAM-VALUE: UTF-8, escaped, then cut to `max_bytes` ending in "..." (never inside a
    character, nor between a backslash and the character it escapes)."""
    escaped = ("" if value is None else str(value)).translate(_SD_ESCAPE)
    data = escaped.encode()
    if len(data) <= max_bytes:
        return escaped
    kept = cut_utf8(data, max_bytes - len(_MARKER))
    if (len(kept) - len(kept.rstrip(b"\\"))) % 2:  # an escape's backslash without its character
        kept = kept[:-1]
    return kept.decode() + _MARKER


def structured_data(fields: Mapping[str, Any], value_bytes: int = SD_VALUE_BYTES) -> str:
    """`[service@32473 database=".." kind=".." sqlstate=".."][line@32473 id=".." ...]`.

    The first element is SPEC 6.2's, exactly; sqlstate is left out when the line has none. The
    second carries the SPEC 2.1 fields that neither the header nor the text MSG holds (SPEC 6.2:
    every destination receives every field), above all `id`, by which receivers drop duplicates;
    null values are left out. Booleans and numbers are written as in JSON. Each value is at most
    `value_bytes` once escaped.
    """

    def value(v: Any) -> str:
        return sd_value(v, value_bytes)

    params = [f'database="{value(fields.get("database_name"))}"', f'kind="{value(fields.get("kind"))}"']
    if fields.get("sqlstate"):
        params.append(f'sqlstate="{value(fields["sqlstate"])}"')
    more = [f'{key}="{value(_sd_text(fields[key]))}"' for key in LINE_SD_KEYS if fields.get(key) is not None]
    line_element = f"[{LINE_SD_ID} {' '.join(more)}]" if more else ""
    return f"[{SD_ID} {' '.join(params)}]{line_element}"


def _sd_text(value: Any) -> str:
    return "true" if value is True else "false" if value is False else str(value)


def header(fields: Mapping[str, Any], sd_value_bytes: int = SD_VALUE_BYTES) -> str:
    """HEADER SP STRUCTURED-DATA of RFC 5424 section 6 for a line's SPEC 2.1 fields."""
    return " ".join(
        (
            f"<{priority(fields.get('severity'))}>1",
            timestamp(fields.get("time")),
            header_field(fields.get("host"), HOSTNAME_CHARS),
            APP_NAME,
            header_field(fields.get("pid"), PROCID_CHARS),
            header_field(fields.get("kind"), MSGID_CHARS),
            structured_data(fields, sd_value_bytes),
        )
    )


def json_message(fields: Mapping[str, Any], max_bytes: int) -> bytes:
    """The line's JSON in at most `max_bytes`; it stays JSON: its long texts are cut, ending in "...".

    The longest texts give way first, down to a common length, so a huge statement does not take
    all of the message's room (nor the other way round). Every text but `id` and `time` may be cut:
    a stored line's names are short and stay whole, but a hostile csvlog or jsonlog file can make
    any of them long.
    """
    texts = tuple(k for k, v in fields.items() if isinstance(v, str) and k not in ("id", "time"))
    data = fit_json(fields, max_bytes, keys=texts).data
    # Not reached with MSG_ROOM_BYTES of room: better cut JSON than none.
    return data if len(data) <= max_bytes else cut_utf8(data, max_bytes)


def syslog_message(line: OutLine, max_bytes: int, message_format: str = "text") -> bytes:
    """One SYSLOG-MSG of at most `max_bytes`: the header whole, MSG cut to fit (never inside a character).

    MSG is UTF-8 without a BOM, which makes it MSG-ANY (RFC 5424 section 6.4 asks a UTF-8 MSG to
    start with one): rsyslog keeps a BOM as the first character of the message text, where it would
    break searches; receivers read MSG as UTF-8 anyway.
    """
    fields = line.fields()
    for sd_value_bytes in SD_VALUE_STEPS:  # the header leaves MSG its room, values cut if need be
        head = header(fields, sd_value_bytes).encode()
        if len(head) + 1 + MSG_ROOM_BYTES <= max_bytes:
            break
    budget = max_bytes - len(head) - 1  # SP before MSG
    if message_format == "json":
        msg = line.doc if len(line.doc) <= budget else json_message(fields, budget)
    else:
        msg = cut_text(line_text(fields), budget, _MARKER).encode()
    # RFC 5424 section 6: SYSLOG-MSG = HEADER SP STRUCTURED-DATA [SP MSG]
    return head + b" " + msg if msg else head


def frame(message: bytes) -> bytes:
    """Octet-counting framing, RFC 5425 section 4.3: MSG-LEN SP SYSLOG-MSG (no trailer)."""
    return b"%d %s" % (len(message), message)
