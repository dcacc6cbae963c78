"""One log entry while it is assembled, and its turning into a `LogLine` (shared by every format).

The formats differ only in how they find an entry's fields (a prefix regex for stderr, columns for
csvlog, keys for jsonlog); they all fill an `Entry` and call `finish`, which classifies, removes
values and builds the `LogLine`.

Choices documented here because every format shares them:

- QUERY (the internal query of a PL/pgSQL or SPI error, with its `cursorpos`) has no field of
  its own in SPEC 2.1: it is normalized like a statement and kept as the first line of `context`,
  `internal query: <normalized sql>`, because it says where inside the function the error happened.
- Value removal (full_text off): the statement is normalized (`normalize_statement`, which also
  gives the fingerprint); message, detail, hint and context go through redact.py's default-deny
  template table, except a message that `classify` proved value-free (`Classification.safe`:
  it matched, whole, a strict pattern of a message PostgreSQL builds from server facts only,
  for the frequent kinds slow_query, statement, lock_wait, connection, checkpoint, autovacuum,
  temp_file). A kind alone is no proof: RAISE LOG can write "checkpoint starting: <anything>".
  With full_text on, only passwords are removed (`scrub_passwords`), everywhere.
- LOCATION (`log_error_verbosity = verbose`: `exec_simple_query, postgres.c:1234`) is PostgreSQL's
  source location, not something about the database: it is dropped.
- A line that belongs to no entry (text that matches no prefix with nothing pending to continue,
  or a DETAIL/HINT/... line whose primary line is not pending) becomes its own entry: kind
  `other`, severity `LOG` (it is not known to be an error; a label such as `DETAIL:  ` stays in
  the message), never dropped. Only an empty line with nothing pending is skipped: it carries
  no text (its bytes still count as consumed).
"""

from __future__ import annotations

import re
from typing import Final

from forwarder.model import Kind, LogLine
from forwarder.pglog.classify import classify
from forwarder.pglog.normalize import normalize, normalize_refused, normalize_statement
from forwarder.pglog.redact import TOKEN, redact_message, redact_text, scrub_passwords
from forwarder.pglog.translated import AT_CHARACTER_ENDS, english_position

_new_line = tuple.__new__
# The entry cap: log text past this many bytes of an entry is cut (the readers count it as they
# take lines), and a statement whose normalization came out longer (a placeholder is longer than
# the literal it replaces: `$524288` for `1`) is cut to it. A mirror of forwarder.pglog's.
MAX_ENTRY_BYTES: Final = 1 << 20
# Kinds whose messages `classify` may prove value-free by their shape alone (slow_query,
# statement and lock_wait carry their own proofs: durations, statement names, lock tags).
_REPORT_KINDS: Final = frozenset({"connection", "checkpoint", "autovacuum", "temp_file"})
_RAISED: Final = " at RAISE"  # pl_exec.c's error context of a RAISE statement
# ... and of an ASSERT, whose message (ASSERT cond, '<text>') is the function's words as RAISE's are
_ASSERTED: Final = " at ASSERT"
# SQLSTATEs only a function's own words carry: RAISE EXCEPTION's default and ASSERT's failure
_RAISED_STATES: Final = frozenset({"P0001", "P0004"})


class Entry:
    """The mutable fields of an entry being assembled; `finish` freezes it into a `LogLine`."""

    # No __slots__ on purpose: class-level defaults mean __init__ sets 4 attributes, not 19,
    # and one Entry is built per log entry on the hot path.
    sqlstate: str | None = None
    detail: str | None = None
    hint: str | None = None
    context: str | None = None
    statement: str | None = None
    query: str | None = None
    user: str | None = None
    database: str | None = None
    application: str | None = None
    client: str | None = None
    pid: int | None = None
    orphan: bool = False
    truncated: bool = False
    cur: str = "message"  # the field continuation lines go to
    parts: list[str] | None = None  # lines of `cur` while it grows (joined once, not n^2)

    def __init__(self, time_us: int, severity: str, message: str, nbytes: int) -> None:
        self.time_us = time_us
        self.severity = severity
        self.message = message
        self.nbytes = nbytes  # bytes of log text taken so far, for the entry cap

    def _close(self) -> None:
        if self.parts is not None:
            setattr(self, self.cur, "\n".join(self.parts))
            self.parts = None

    def open_field(self, name: str, text: str, nbytes: int, cap: int) -> None:
        """Start field `name` (detail, hint, ...) with `text`; later continuations go there.

        `name` None-valued fields are set; a repeated one is appended on a new line. Text past
        `cap` bytes of the entry is cut and the entry marked truncated: once the cap is reached,
        a repeated label adds nothing (not even its line break).
        """
        self._close()
        full = self.nbytes >= cap
        if self.nbytes + nbytes > cap:
            text = self._cut(text, nbytes, cap)
        self.nbytes += nbytes
        self.cur = name
        if name == "_drop":
            return
        old: str | None = getattr(self, name)
        if old is None:
            setattr(self, name, text)
        elif not full:
            # Joined with the lines that follow at _close: a field repeated line after line (a
            # DETAIL label on each line) is not copied whole at each one.
            self.parts = [old, text]

    def add_line(self, text: str, nbytes: int, cap: int) -> None:
        """Append a continuation line to the current field (a new line of it)."""
        if self.nbytes + nbytes > cap:
            text = self._cut(text, nbytes, cap)
            if not text and self.nbytes >= cap:
                self.nbytes += nbytes
                return
        self.nbytes += nbytes
        if self.cur == "_drop":
            return
        if self.parts is None:
            self.parts = [getattr(self, self.cur) or ""]
        self.parts.append(text)

    def _cut(self, text: str, nbytes: int, cap: int) -> str:
        self.truncated = True
        room = cap - self.nbytes
        if room <= 0:
            return ""
        # `room` counts bytes; cutting characters at it keeps at most `room` characters, so the
        # entry stays within a few bytes of the cap for multi-byte text (a bound, not an exact size).
        return text[:room]

    def _from_the_server(self, kind: Kind, message: str) -> bool:
        """Whether the entry around a report (a connection, checkpoint, autovacuum or temp file
        message, whose proven shape still has room for words) says the server wrote it.

        A function's RAISE (or an extension's message) carries a CONTEXT ("PL/pgSQL function ...
        at RAISE") unless `log_error_verbosity` is terse; the server writes connection,
        checkpoint and autovacuum reports with none. Checkpoints and autovacuum reports come
        from background processes, which have no session: no user, no database (elog.c writes
        them from MyProcPort, which those processes lack); a session's line with their words is
        a RAISE. Temp file reports are a session's, and may carry the function's CONTEXT.
        """
        if kind == "autovacuum" and not message.startswith("automatic "):
            return True  # cancelled or skipped tasks, wraparound warnings: exact texts
        if self.context is not None and (kind != "temp_file" or _RAISED in self.context):
            return False
        return kind not in ("checkpoint", "autovacuum") or not (self.user or self.database)

    def finish(self, full_text: bool) -> LogLine:
        """Classify, remove values (unless `full_text`) and build the `LogLine`."""
        if self.parts is not None:
            self._close()
        kind: Kind
        if self.orphan:
            kind, sqlstate, duration, message, statement, safe = (
                "other",
                self.sqlstate,
                None,
                self.message,
                self.statement,
                False,
            )
        else:
            message = self.message
            if self.severity != "LOG" and message[-1:] in AT_CHARACTER_ENDS:
                # A translated server's stderr writes the cursor position in its language
                # (translated.py); csvlog and jsonlog carry it as a number, written in English.
                message = english_position(message)
            kind, sqlstate, duration, message, statement, safe = classify(self.severity, message, self.sqlstate)
            if safe and kind in _REPORT_KINDS and not self._from_the_server(kind, message):
                safe = False
            if (statement is not None or duration is not None) and (
                sqlstate in _RAISED_STATES or (self.context is not None and _raised(self.context))
            ):
                # RAISE LOG 'duration: 1 ms  statement: SELECT "%"', secret: the function's words,
                # not a statement, a duration or a kind of the server's (the SQL would be kept as
                # a statement, normalized: a double-quoted value is a name to the normalizer).
                # Classified as an unknown message; the entry's own STATEMENT stays.
                kind, sqlstate, duration, _, statement, safe = classify(self.severity, "", sqlstate)
                message = self.message
            if statement is None:
                statement = self.statement
        detail, hint, context, query = self.detail, self.hint, self.context, self.query
        fp: str | None = None
        changed: bool
        if full_text:
            redacted = False
            if statement is not None:
                fp = normalize_statement(statement)[2]
                statement, redacted = scrub_passwords(statement)
            message, changed = scrub_passwords(message)
            redacted = redacted or changed
            if detail is not None:
                detail, changed = scrub_passwords(detail)
                redacted = redacted or changed
            if hint is not None:
                hint, changed = scrub_passwords(hint)
                redacted = redacted or changed
            if context is not None:
                context, changed = scrub_passwords(context)
                redacted = redacted or changed
            if query is not None:
                query, changed = scrub_passwords(query)
                redacted = redacted or changed
        else:
            if statement is None:
                redacted = False
            elif self.query is None and (position := _syntax_error_at(message, sqlstate)) > 0:
                # (with a QUERY, the position is in that internal query: elog.c internalpos, and
                # the statement itself parsed; the query is reduced below)
                statement, redacted, fp = normalize_refused(statement, position)
            elif (
                self.query is None
                and (sqlstate == "42703" or (sqlstate is None and message.startswith("column ")))
                and (position := _unknown_column_at(message, sqlstate)) > 0
            ):
                statement, redacted, fp = normalize_refused(statement, position, reference=True)
            else:
                statement, redacted, fp = normalize_statement(statement)
            # (the common case, no CONTEXT and no P0001, without a call: this runs for every entry)
            raised = sqlstate in _RAISED_STATES or (context is not None and _raised(context))
            if raised:
                # A function's own words (RAISE ... USING DETAIL/HINT too): never PostgreSQL's
                # message, whatever wording it copies, so none of it is kept.
                message = TOKEN
                detail = None if detail is None else TOKEN
                hint = None if hint is None else TOKEN
                redacted = True
            elif not safe:
                message, changed = redact_message(message)
                redacted = redacted or changed
            if detail is not None and not raised:
                detail, changed = redact_text(detail)
                redacted = redacted or changed
            if hint is not None and not raised:
                hint, changed = redact_text(hint)
                redacted = redacted or changed
            if context is not None:
                context, changed = redact_text(context)
                redacted = redacted or changed
            if query is not None:
                if (position := _syntax_error_at(message, sqlstate)) > 0:
                    query, changed, _ = normalize_refused(query, position)
                elif (position := _unknown_column_at(message, sqlstate)) > 0:
                    query, changed, _ = normalize_refused(query, position, reference=True)
                else:
                    query, changed = normalize(query)
                redacted = redacted or changed
        truncated = self.truncated
        if statement is not None and len(statement) > MAX_ENTRY_BYTES:  # (only normalized, it grows)
            statement, truncated = statement[:MAX_ENTRY_BYTES], True
        if query is not None:
            if len(query) > MAX_ENTRY_BYTES:
                query, truncated = query[:MAX_ENTRY_BYTES], True
            context = f"internal query: {query}" if context is None else f"internal query: {query}\n{context}"
        # tuple.__new__ with all 19 values in LogLine's field order: a third of LogLine(...)'s
        # cost (see forwarder/model.py); a test checks the result equals LogLine(**fields).
        return _new_line(
            LogLine,
            (
                self.time_us,
                self.severity,
                kind,
                message,
                sqlstate,
                detail,
                hint,
                context,
                statement,
                self.user,
                self.database,
                self.application,
                self.client,
                self.pid,
                duration,
                redacted,
                fp,
                truncated,
                self.orphan,
            ),
        )


def _raised(context: str) -> bool:
    """The innermost frame of an entry's CONTEXT is a PL/pgSQL RAISE statement (pl_exec.c): the
    message is the function's own words. (The other sign of a RAISE, RAISE EXCEPTION's default
    SQLSTATE P0001, is checked by the caller.) An error raised while a RAISE evaluates its
    arguments has that frame too, and loses its message with it: value removal errs on the side of
    removing."""
    nl = context.find("\n")
    frame = context if nl < 0 else context[:nl]
    if frame.endswith((_RAISED, _ASSERTED)):
        return True
    # A translated server (lc_messages) words the frame in its language, each its own way
    # ("PL/pgSQL-Funktion f() Zeile 2 bei RAISE", "在RAISE的第2行的PL/pgSQL函数f()"), but keeps
    # "PL/pgSQL" and the statement's name (pl_exec.c plpgsql_exec_error_callback formats
    # _("PL/pgSQL function %s line %d at %s") with plpgsql_stmt_typename, which is not translated).
    # An English frame is only the one above: a function named like "RAISE" does not count there.
    return (
        ("RAISE" in frame or "ASSERT" in frame) and "PL/pgSQL" in frame and not frame.startswith("PL/pgSQL function ")
    )


_AT_CHARACTER: Final = " at character "
# The first words of the lexer's and the grammar's errors (scan.l scanner_yyerror, gram.y
# parser_yyerror), each with the cursor position: the statement did not parse from there on.
_PARSER_ERRORS: Final = (
    "syntax error at ",
    "unterminated ",
    "trailing junk after ",
    "invalid hexadecimal integer",
    "invalid octal integer",
    "invalid binary integer",
    "zero-length delimited identifier",
    "invalid Unicode escape",
    "invalid Unicode surrogate pair",
)


def _syntax_error_at(message: str, sqlstate: str | None) -> int:
    """Where the statement stops being SQL as its author meant it, when `message` says so with `at
    character N`; else 0. 1 (all of it) for a statement that ended too soon.

    - The parser's syntax error (SQLSTATE 42601, or scan.l/gram.y's wording when the log has no
      SQLSTATE): the statement does not parse from there on, and its bare words after that point
      are as likely a value the client forgot to quote as names (normalize.py, `_strict_scrub`).
      At the end of the input (`WHERE email = alice AND`), nothing marks where it went wrong: a
      trailing keyword stops the walk back over bare words before the position, so the whole
      statement is read strictly.
    """
    if sqlstate == "42601":
        # (a datatype's own input syntax error, "syntax error in tsvector: ...", is 42601 too,
        # but about a literal the statement holds: the statement itself parsed)
        if message.startswith("syntax error in "):
            return 0
    elif not message.startswith(_PARSER_ERRORS):
        return 0
    at = message.rfind(_AT_CHARACTER)
    digits = message[at + len(_AT_CHARACTER) :] if at >= 0 else ""
    if not digits.isdigit():
        return 0
    return 1 if message.startswith("syntax error at end of input") else int(digits)


def _unknown_column_at(message: str, sqlstate: str | None) -> int:
    """Where the statement names a column that does not exist (42703, `column "x" does not exist
    at character N`); else 0. A value without its quotes parses as a column reference (`WHERE
    email = alice`, or dynamic SQL a function built from a parameter, `EXECUTE '... = ' || $1`):
    the statement parsed, so only that reference is taken for a value (normalize_refused's
    `reference`), up to the next keyword."""
    if sqlstate == "42703":
        # any wording (a translated server's too: its position is English by now, see above); a
        # column list's unknown name (`column "x" of relation "t"`) is a name, though a translated
        # one is reduced needlessly
        if message.startswith('column "') and '" of relation "' in message:
            return 0
        at = message.rfind(_AT_CHARACTER)
        digits = message[at + len(_AT_CHARACTER) :] if at >= 0 else ""
        return int(digits) if digits.isdigit() else 0
    if sqlstate is not None or not message.startswith("column ") or not _UNKNOWN_COLUMN(message):
        return 0
    return int(message[message.rfind(_AT_CHARACTER) + len(_AT_CHARACTER) :])


# parse_relation.c errorMissingColumn, parse_expr.c: `column "x" does not exist`, `column t.x does
# not exist` (not `column "x" of relation "t" does not exist`: a column list's name, never a value)
_UNKNOWN_COLUMN: Final = re.compile(r'column (?:"[^"\n]*"|[^\s"]+) does not exist at character \d+').fullmatch
