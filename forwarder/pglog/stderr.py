"""The stderr log format: `log_line_prefix` compiled to one regex, and the reader built on it.

A line of the stderr format is `<prefix><SEVERITY>:  <text>` (elog.c, send_message_to_server_log;
one space after the colon is read too), with `<SQLSTATE>: ` after the spaces when
`log_error_verbosity = verbose`. Newlines inside a message are written as a newline plus TAB
(elog.c append_with_tabs), so TAB-led lines continue the field above them. Severities DEBUG1 to
DEBUG5 are written as `DEBUG` (elog.c error_severity); a spelled-out `DEBUG3` is read too.

The prefix is compiled by `prefix.py` (every escape PostgreSQL has, with padding, and `%q`).

- `[unknown]` (a session whose user/database/application is not known yet) and empty values
  become None; so does SQLSTATE `00000`.
- `client`: the host part of `%r` (or `%h`), without the port. A Unix-socket client is
  `[local]`, PostgreSQL's own spelling: it cannot be mistaken for a host named `local`.
- Time: the best of `%n` (exact), `%m`, `%t` that the prefix has gives `time_us`, converted to
  UTC with `log.timezone` (see `times.py`); `%s` (session start) never does. An entry without a
  readable time of its own (a prefix without a time escape, a time after `%q` on a background
  process's line, a line not in the format) gets the wall-clock time at which it was read
  (`time.time()`, the only place the reader looks at a clock; `now` passed to `feed` is monotonic
  and only measures idleness), and is counted in `read_time_entries`.
"""

from __future__ import annotations

import re
import time
from typing import Final

from forwarder.model import LogLine
from forwarder.pglog.entry import Entry
from forwarder.pglog.prefix import compile_prefix
from forwarder.pglog.reader import IDLE_FLUSH_SECONDS, MAX_ENTRY_BYTES, TEXT_ERRORS, LineReader
from forwarder.pglog.times import TimeParser, parse_epoch
from forwarder.pglog.translated import ENGLISH_LABEL_END, LABELS, SEVERITY_OF, UNKNOWN

_FIELDS: Final[dict[str, str]] = {
    "DETAIL": "detail",
    "HINT": "hint",
    "QUERY": "query",
    "CONTEXT": "context",
    "LOCATION": "_drop",
    "STATEMENT": "statement",
    "BACKTRACE": "_drop",  # PG13+ backtrace_functions: addresses in the server's binary
}
# A name is at most 63 bytes (NAMEDATALEN - 1): the pieces of one prefixed line a name's newlines
# cut are few and short. Held lines beyond these were not cut by a name.
MAX_NAME_LINES: Final = 8
MAX_NAME_BYTES: Final = 4096

# secondary line's label word (English or translated) -> (the Entry field it fills, "_drop": read
# and kept out of the line; what PostgreSQL writes after the word)
_SECONDARY: Final[dict[str, tuple[str, str]]] = {
    **{label: (field, ENGLISH_LABEL_END) for label, field in _FIELDS.items()},
    **{word: (_FIELDS[label], end) for word, (label, end) in LABELS.items()},
}

# The words that start a secondary line (DETAIL, STATEMENT... in any language), not a message.
SECONDARY_WORDS: Final = frozenset(_SECONDARY)


def _client(value: str, kind: str) -> str | None:
    """The host part of `%r` (`host(port)` or `[local]`) or `%h`; None when empty."""
    if not value or value in UNKNOWN:
        return None
    if kind == "r" and value[-1] == ")":
        paren = value.rfind("(")
        if paren > 0:
            return value[:paren]
    return value


class StderrReader(LineReader):
    """`EntryReader` for the stderr format with one `log_line_prefix`."""

    def __init__(self, *, line_prefix: str, timezone: str, full_text: bool) -> None:
        super().__init__(full_text=full_text)
        p = self.pattern = compile_prefix(line_prefix)
        self._match = p.regex.match
        self._fast_match = p.fast_regex.match if p.fast_regex is not None else p.regex.match
        self._times = self.time_parser = TimeParser(timezone)
        # The pattern's group indexes, copied to plain attributes and a tuple of (group, Entry
        # field) once: `_prefixed` runs for every line, and each lookup through the frozen
        # PrefixPattern costs as much as the work itself.
        self._sev_i = p.severity_group
        assert p.verbose_sqlstate_group == p.severity_group + 1  # _prefixed relies on it
        self._sql_i = p.sqlstate_group
        self._pid_i = p.pid_group
        self._time_i = p.time_group
        self._epoch_time = p.time_kind == "n"
        self._user_i = p.user_group
        self._database_i = p.database_group
        self._application_i = p.application_group
        self._client_i = p.client_group
        self._client_kind = p.client_kind
        # Lines held because they may be the first pieces of a prefixed line cut by a newline in
        # a name (prefix.py, head_regex); (raw, start) each. While held, committed_offset stays
        # at the first one (LineReader._record_start).
        self._head_match = p.head_regex.match if p.head_regex is not None else None
        self._multiline_match = p.multiline_regex.match if p.multiline_regex is not None else None
        self._held: list[tuple[bytes, int]] = []
        self._releasing = False
        self._pending_match: re.Match[str] | None = None  # the prefix match of the pending entry's first line

    def _line(self, raw: bytes, start: int, cut: bool) -> None:
        # One method for the whole of a prefixed line (no helper calls on the path most lines
        # take): it runs for every physical line.
        if self._held and self._joined(raw, start, cut):
            return
        text = raw.decode("utf-8", TEXT_ERRORS)
        nbytes = len(raw) + 1
        if text[-1:] == "\r":
            text = text[:-1]
        tab = text[:1] == "\t"
        if tab:
            text = text[1:]
        elif (
            m := self._fast_match(text)
            or self._match(text)
            or (self._multiline_match(text) if "\n" in text and self._multiline_match is not None else None)
        ) is not None:
            self.lines_matched += 1
            g = m.groups()
            sev_i = self._sev_i
            word = g[sev_i]
            severity = SEVERITY_OF.get(word)
            secondary = None if severity is not None else _SECONDARY.get(word)
            if secondary is None:
                if severity is None:  # DEBUG1-5 spelled out, or question marks (prefix.py)
                    severity = "LOG" if word[0] == "?" else word
                entry = self._entry(g, severity, text[m.end() :], nbytes)
                self._pending_match = m
                sqlstate = g[sev_i + 1]  # the verbose SQLSTATE follows the severity
                if sqlstate is None and self._sql_i >= 0:
                    sqlstate = g[self._sql_i]
                if sqlstate is not None:
                    entry.sqlstate = sqlstate
            else:
                pending = self._pending
                if (
                    pending is not None
                    and not pending.orphan
                    and (self._pid_i < 0 or _int_or_none(g[self._pid_i]) == pending.pid)
                ):
                    # text after "LABEL:  " (as written, or squeezed to "LABEL: "): a secondary
                    # line has no verbose SQLSTATE
                    field, end = secondary
                    after = m.end(sev_i + 1)
                    if text.startswith(end, after):
                        after += len(end)
                    else:  # " ?:" and up to two spaces (prefix.py)
                        after += 2 if text[after : after + 1] == " " else 1
                        after += text.startswith("  ", after) + (text[after : after + 1] == " ")
                    pending.open_field(field, text[after:], nbytes, MAX_ENTRY_BYTES)
                    if cut:
                        pending.truncated = True
                    return
                entry = self._entry(g, "LOG", text[m.start(sev_i + 1) :], nbytes)
                entry.orphan = True
            if cut:
                entry.truncated = True
            self._begin(entry, start)
            return
        if not tab and not cut and self._head_match is not None and not self._releasing and self._head_match(text):
            # It starts like a prefixed line but is not one: a name holding a newline may have cut
            # it (the next line tells, _joined), or it is a line in another format.
            self._held.append((raw, start))
            self._record_start = start
            return
        pending = self._pending
        # A TAB-led line continues the entry: PostgreSQL writes every newline of a message with a
        # TAB after it (elog.c append_with_tabs). So does a line with the entry's own prefix text
        # whose label is not read (a translated label a process without a locale wrote as "???").
        # Other text is not PostgreSQL's (a child process's stderr: archive_command, COPY ...
        # PROGRAM; an assertion's TRAP line; lines after log_line_prefix changed): an entry of its
        # own, kind other, not a part of the entry before it (nor, after an orphan, one giant
        # entry cut at 1 MiB).
        if pending is not None and (tab or (not pending.orphan and self._same_prefix(text))):
            pending.add_line(text, nbytes, MAX_ENTRY_BYTES)
            if cut:
                pending.truncated = True
            return
        if not text:
            return  # an empty line with nothing to continue carries nothing (see entry.py)
        # Text with no entry to continue: its own entry (see entry.py), never dropped.
        self.read_time_entries += 1
        orphan = Entry(_wall_time_us(), "LOG", text, nbytes)
        orphan.orphan = True
        orphan.truncated = cut
        self._begin(orphan, start)

    def _same_prefix(self, text: str) -> bool:
        """`text` starts with the prefix text of the pending entry's first line (not empty)."""
        m = self._pending_match
        if m is None:
            return False
        end = m.start(self._sev_i + 1)
        return end > 0 and text.startswith(m.string[:end])

    def _joined(self, raw: bytes, start: int, cut: bool) -> bool:
        """The line after held ones: True when it was taken with them, as one prefixed line or as
        one more piece held; False when the held lines went their own way (`_release_held`) and
        this one is still to be read."""
        held = self._held
        if raw[:1] != b"\t" and not cut:
            joined = b"\n".join([piece for piece, _ in held] + [raw])
            text = joined.decode("utf-8", TEXT_ERRORS).replace("\r\n", "\n")
            if self._multiline_match is not None and self._multiline_match(text) is not None:
                first = held[0][1]
                held.clear()
                self._record_start = -1
                self._line(joined, first, False)  # read whole: "\n" in it takes multiline_match
                return True
            if len(held) < MAX_NAME_LINES and len(joined) < MAX_NAME_BYTES:
                held.append((raw, start))
                return True
        self._release_held()
        return False

    def _release_held(self) -> None:
        """Read the held lines as the lines they are (no name was cut): continuations or orphans."""
        held = self._held
        self._held = []
        self._record_start = -1
        self._releasing = True
        try:
            for piece, start in held:
                self._line(piece, start, False)
        finally:
            self._releasing = False

    def flush_idle(self, now: float) -> list[LogLine]:
        out: list[LogLine] = []
        if self._held and self._last_data is not None and now - self._last_data >= IDLE_FLUSH_SECONDS:
            self._out = out
            self._release_held()
        return out + super().flush_idle(now)

    def flush_written(self) -> list[LogLine]:
        # PostgreSQL writes a message whole: the rest of a line a name cut would be here already.
        out: list[LogLine] = []
        if self._held:
            self._out = out
            self._release_held()
        return out + super().flush_written()

    def _end_of_lines(self) -> None:
        if self._held:
            self._release_held()

    def _entry(self, g: tuple[str | None, ...], severity: str, message: str, nbytes: int) -> Entry:
        time_us: int | None = None
        if self._time_i >= 0:
            value = g[self._time_i]
            if value is not None:
                time_us = parse_epoch(value) if self._epoch_time else self._times.parse(value)
        if time_us is None:
            self.read_time_entries += 1
            time_us = _wall_time_us()
        entry = Entry(time_us, severity, message, nbytes)
        # Entry's fields default to None: only known values are set ("[unknown]" and "" stay None).
        if self._user_i >= 0:
            v = g[self._user_i]
            if v and (v[0] != "[" or v not in UNKNOWN):
                entry.user = v
        if self._database_i >= 0:
            v = g[self._database_i]
            if v and (v[0] != "[" or v not in UNKNOWN):
                entry.database = v
        if self._application_i >= 0:
            v = g[self._application_i]
            if v and (v[0] != "[" or v not in UNKNOWN):
                entry.application = v
        if self._client_i >= 0:
            v = g[self._client_i]
            if v:
                entry.client = _client(v, self._client_kind)
        if self._pid_i >= 0:
            v = g[self._pid_i]
            if v:
                entry.pid = int(v)
        return entry


def _int_or_none(value: str | None) -> int | None:
    return int(value) if value else None


def _wall_time_us() -> int:
    """Time of reading, for entries whose text carries no time (see the module docstring)."""
    return int(time.time() * 1_000_000)
