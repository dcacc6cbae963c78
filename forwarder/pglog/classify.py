"""Classification of an assembled entry into one of the 13 kinds of SPEC 2.1.

`classify(severity, message, sqlstate)` is pure: it looks at the English message texts of
PostgreSQL 13-18 (`lc_messages = 'C'`; translated servers classify by severity only: error or
other) and returns the kind plus what goes with it:

- `slow_query`: `duration: N ms` with or without `  statement|execute <name>|parse <name>|bind
  <name>: <sql>` (log_min_duration_statement, log_duration). `duration_ms` is N; the SQL moves out
  of the message into `statement`, the message keeps `duration: N ms  execute S_1`.
- `statement`: `statement: <sql>` / `execute <name>: <sql>` (log_statement); the SQL moves to
  `statement` the same way, the message keeps `statement` / `execute <name>`.
- `lock_wait`: `process N still waiting for|acquired|avoided deadlock for|detected deadlock while
  waiting for ... after N ms` (log_lock_waits), `recovery still waiting|finished waiting after N ms`
  (log_recovery_conflict_waits); `duration_ms` is N.
- `deadlock`: `deadlock detected` (40P01).
- `auth_failure`: `password authentication failed for user` (28P01), other methods'
  `... authentication failed for user`, `no pg_hba.conf entry`, `pg_hba.conf rejects`, at FATAL
  `role "x" does not exist` / `role "x" is not permitted to log in` (28000).
- `too_many_connections`: `sorry, too many clients already`, `remaining connection slots are
  reserved ...` (PG13-15 and PG16+ texts), `too many connections for role|database` (53300).
- `checkpoint`, `autovacuum`, `temp_file`, `connection`, `server`: by their message texts.
- `error`: any other ERROR/FATAL/PANIC; `other`: everything else.

`sqlstate` is the one the log gave (`%e`, verbose mode, csvlog/jsonlog) or, when it gave none,
the code a message fixes (deadlock 40P01, too many connections 53300, auth failures 28P01/28000):
never guessed from anything else. `00000` (successful completion) is reported as None so that a
stderr log without `%e` and a csvlog of the same events agree.
"""

from __future__ import annotations

import re
from typing import Final, NamedTuple

from forwarder.model import Kind


class Classification(NamedTuple):
    """What `classify` found. A NamedTuple, not a dataclass: one is built per entry on the hot path."""

    kind: Kind
    sqlstate: str | None
    duration_ms: float | None
    message: str  # the message, with the SQL of slow_query/statement moved out
    statement: str | None  # the SQL taken out of the message, if any


_ERROR_SEVERITIES: Final = frozenset({"ERROR", "FATAL", "PANIC"})

# postgres.c: "duration: %s ms" + optional "  statement: %s" | "  execute %s%s%s: %s" |
# "  parse %s: %s" | "  bind %s%s%s: %s"
_DURATION_LABELS: Final = ("  statement", "  execute ", "  parse ", "  bind ")
_NUMBER: Final = re.compile(r"\d+(?:\.\d+)?").fullmatch
# postgres.c: "statement: %s" | "execute %s%s%s: %s" (log_statement)
_STATEMENT: Final = re.compile(r"(statement|execute(?: fetch from)? [^:\n]*): (.*)", re.DOTALL)
# proc.c: "process %d still waiting for %s on %s after %ld.%03d ms" and friends;
# standby.c: "recovery still waiting after %ld.%03d ms: %s", "recovery finished waiting after ..."
_LOCK_WAIT: Final = re.compile(
    r"(?:process \d+ (?:still waiting for|acquired|avoided deadlock for|detected deadlock while waiting for"
    r"|failed to acquire) .*? after|recovery (?:still|finished) waiting after) (\d+(?:\.\d+)?) ms"
)
_AUTH_OTHER: Final = re.compile(r"[\w-]+ authentication failed for user ")
# postmaster.c: "server process (PID %d) was terminated by signal %d: %s", "... exited with exit code %d"
_PROC_EXIT: Final = re.compile(r"\(PID \d+\) (?:was terminated by|exited with exit code)")

_CONNECTION_PREFIXES: Final = (
    "connection received:",
    "connection authorized:",
    "connection authenticated:",
    "disconnection:",
    "replication connection authorized:",
)
_SERVER_PREFIXES: Final = (
    "database system is ",
    "database system was ",
    "the database system is ",
    "starting PostgreSQL ",
    "listening on ",
    "received fast shutdown request",
    "received smart shutdown request",
    "received immediate shutdown request",
    "received SIGHUP",
    'parameter "',
    "configuration file ",
    "aborting any active transactions",
    "shutting down",
    "terminating any other active server processes",
    "all server processes terminated",
    "redo starts at ",
    "redo done at ",
    "redo is not required",
    "invalid record length at ",
    "entering standby mode",
    "consistent recovery state reached",
    "started streaming WAL",
    "archive recovery complete",
    "selected new timeline ID",
    "last completed transaction was",
    "syncing data directory",
    "could not bind ",
    "could not create listen socket",
    "could not open configuration file",
    "pre-existing shared memory block",
    "lock file ",
)
_CHECKPOINT_PREFIXES: Final = (
    "checkpoint starting:",
    "checkpoint complete:",
    "checkpoints are occurring too frequently",
    "restartpoint starting:",
    "restartpoint complete:",
    "recovery restart point at ",
)
_AUTOVACUUM_PREFIXES: Final = (
    "automatic vacuum of table ",
    "automatic aggressive vacuum ",
    "automatic vacuum to prevent wraparound ",
    "automatic analyze of table ",
    "canceling autovacuum task",
    "skipping vacuum of ",
    "skipping analyze of ",
)
_TOO_MANY_PREFIXES: Final = (
    "sorry, too many clients already",
    "remaining connection slots are reserved",
    "too many connections for role ",
    "too many connections for database ",
)


def _state(sqlstate: str | None, fixed: str) -> str:
    return sqlstate if sqlstate is not None else fixed


def classify(severity: str, message: str, sqlstate: str | None) -> Classification:
    """Kind, sqlstate, duration and the statement carried in the message of one entry."""
    if sqlstate == "00000":
        sqlstate = None
    c = message[:1]
    if c == "d":
        if message.startswith("duration: "):
            # Hand-parsed (the most frequent line of a busy log): "duration: N ms[  label: sql]"
            ms_end = message.find(" ms", 10)
            if ms_end > 10:
                number = message[10:ms_end]
                rest = ms_end + 3
                if rest == len(message) and _NUMBER(number) is not None:
                    return Classification("slow_query", sqlstate, float(number), message, None)
                colon = message.find(": ", rest)
                if (
                    colon > 0
                    and message.startswith(_DURATION_LABELS, rest)
                    and "\n" not in message[rest:colon]
                    and _NUMBER(number) is not None
                ):
                    return Classification("slow_query", sqlstate, float(number), message[:colon], message[colon + 2 :])
        elif message.startswith("deadlock detected"):
            return Classification("deadlock", _state(sqlstate, "40P01"), None, message, None)
        elif message.startswith("disconnection:"):
            return Classification("connection", sqlstate, None, message, None)
    elif c == "c":
        if message.startswith(_CONNECTION_PREFIXES):
            return Classification("connection", sqlstate, None, message, None)
        if message.startswith(_CHECKPOINT_PREFIXES):
            return Classification("checkpoint", sqlstate, None, message, None)
        if message.startswith("canceling autovacuum task"):
            return Classification("autovacuum", sqlstate, None, message, None)
    elif c == "s" and message.startswith("statement: "):
        return Classification("statement", sqlstate, None, "statement", message[11:])
    elif c == "e" and message.startswith("execute "):
        m = _STATEMENT.match(message)
        if m is not None:
            return Classification("statement", sqlstate, None, m.group(1), m.group(2))
    elif c == "p" and message.startswith("process "):
        m = _LOCK_WAIT.match(message)
        if m is not None:
            return Classification("lock_wait", sqlstate, float(m.group(1)), message, None)
    elif c == "t" and message.startswith("temporary file: "):
        return Classification("temp_file", sqlstate, None, message, None)
    elif c == "a" and message.startswith(_AUTOVACUUM_PREFIXES):
        return Classification("autovacuum", sqlstate, None, message, None)

    # Less frequent texts: checked in full.
    if message.startswith("recovery "):
        m = _LOCK_WAIT.match(message)
        if m is not None:
            return Classification("lock_wait", sqlstate, float(m.group(1)), message, None)
    if message.startswith("replication connection authorized:"):
        return Classification("connection", sqlstate, None, message, None)
    if message.startswith("password authentication failed for user "):
        return Classification("auth_failure", _state(sqlstate, "28P01"), None, message, None)
    if (
        message.startswith(("no pg_hba.conf entry ", "pg_hba.conf rejects "))
        or _AUTH_OTHER.match(message) is not None
        or (
            severity == "FATAL"
            and message.startswith('role "')
            and message.endswith(('" does not exist', '" is not permitted to log in'))
        )
    ):
        return Classification("auth_failure", _state(sqlstate, "28000"), None, message, None)
    if message.startswith(_TOO_MANY_PREFIXES):
        return Classification("too_many_connections", _state(sqlstate, "53300"), None, message, None)
    if message.startswith(_CHECKPOINT_PREFIXES):
        return Classification("checkpoint", sqlstate, None, message, None)
    if message.startswith(_AUTOVACUUM_PREFIXES):
        return Classification("autovacuum", sqlstate, None, message, None)
    if message.startswith(_SERVER_PREFIXES) or ("(PID " in message and _PROC_EXIT.search(message)):
        return Classification("server", sqlstate, None, message, None)
    if severity in _ERROR_SEVERITIES:
        return Classification("error", sqlstate, None, message, None)
    return Classification("other", sqlstate, None, message, None)
