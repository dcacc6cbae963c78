"""Classification of an assembled entry into one of the 13 kinds of SPEC 2.1.

`classify(severity, message, sqlstate)` is pure: it looks at the English message texts of
PostgreSQL 13-18 (`lc_messages = 'C'`; a translated server's messages classify by severity and
SQLSTATE only) and returns the kind plus what goes with it:

- `slow_query`: `duration: N ms` with or without `  statement|execute <name>|parse <name>|bind
  <name>: <sql>` (log_min_duration_statement, log_duration). `duration_ms` is N; the SQL moves out
  of the message into `statement`, the message keeps `duration: N ms  execute S_1`. Also
  auto_explain's `duration: N ms  plan:` and its plan, which stays in the message; the plan's
  query text is the statement.
- `statement`: `statement: <sql>` / `execute <name>: <sql>` (log_statement); the SQL moves to
  `statement` the same way, the message keeps `statement` / `execute <name>`. Also pgaudit's
  `AUDIT: SESSION,...` records: the statement column moves, the message keeps the others; and
  pg_cron's `cron job N starting: <command>`.
- `lock_wait`: `process N still waiting for|acquired|avoided deadlock for|detected deadlock while
  waiting for ... after N ms` (log_lock_waits), `recovery still waiting|finished waiting after N ms`
  (log_recovery_conflict_waits); `duration_ms` is N.
- `deadlock`: `deadlock detected` (40P01).
- `auth_failure`: `password authentication failed for user` (28P01), other methods'
  `... authentication failed for user`, `no pg_hba.conf entry`, `pg_hba.conf rejects`, at FATAL
  `role "x" does not exist` / `role "x" is not permitted to log in` (28000).
- `too_many_connections`: `sorry, too many clients already`, `remaining connection slots are
  reserved ...` (PG13-15 and PG16+ texts), `too many connections for role|database` (53300).
- `checkpoint`, `autovacuum`, `temp_file`, `connection`: by their message texts; `autovacuum` also
  takes the transaction ID / MultiXact wraparound warnings (the stop that follows is an `error`).
- `server`: the server's lifecycle (start, shutdown, crash and recovery, standby, archiving,
  reload). At ERROR/FATAL/PANIC only the texts that say the server is starting, stopping, crashing
  or cannot serve (57P01, 57P03, a server that cannot start): the same words in answer to a
  session's own command (`SET shared_buffers ...`) are an `error`.
- `error`: any other ERROR/FATAL/PANIC, unless the SQLSTATE the log carries names a kind (40P01,
  28P01/28000, 53300, 57P01-57P03: a translated server's texts are unknown here); `other`:
  everything else.

docs/kinds.md lists the messages of PostgreSQL 13-17 behind each kind; a test classifies every
one of them, so the page and these tables agree.

`safe` says the message is proven value-free: it matched, whole, a strict pattern of a message
PostgreSQL builds from server facts only (durations, statement names, pids, lock tags, counters,
addresses, the session's own user/database/application). entry.py then keeps such a message as
it is; every other message goes through the default-deny value removal of redact.py. The
strict patterns exist for the frequent kinds (slow_query, statement, lock_wait, connection,
checkpoint, autovacuum, temp_file), where the template table would cost time for nothing; a
message of those kinds that does not match them (a RAISE that starts like one, an unusual
statement name, an advisory lock key) is simply not safe. The wraparound warnings and stop have
one too: their counters and database name are what a DBA (and the wraparound insight) reads.

`sqlstate` is the one the log gave (`%e`, verbose mode, csvlog/jsonlog) or, when it gave none,
the code a message fixes (deadlock 40P01, too many connections 53300, auth failures 28P01/28000):
never guessed from anything else. `00000` (successful completion) is reported as None so that a
stderr log without `%e` and a csvlog of the same events agree.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final, NamedTuple

import orjson

from forwarder.model import Kind


class Classification(NamedTuple):
    """What `classify` found. A NamedTuple, not a dataclass: one is built per entry on the hot path."""

    kind: Kind
    sqlstate: str | None
    duration_ms: float | None
    message: str  # the message, with the SQL of slow_query/statement moved out
    statement: str | None  # the SQL taken out of the message, if any
    safe: bool = False  # the message is proven value-free (see the module docstring)


_ERROR_SEVERITIES: Final = frozenset({"ERROR", "FATAL", "PANIC"})

# postgres.c: "duration: %s ms" + optional "  statement: %s" | "  execute %s%s%s: %s" |
# "  parse %s: %s" | "  bind %s%s%s: %s"
_DURATION_LABELS: Final = ("  statement", "  execute ", "  parse ", "  bind ")
# A fast-path call's function, by name and OID (postgres.c): a function of the server's catalog.
_SAFE_FASTPATH: Final = re.compile(r'"[\w$]{1,63}" \(OID \d{1,10}\)').fullmatch
# postgres.c: "statement: %s" | "execute %s%s%s: %s" (log_statement)
_STATEMENT: Final = re.compile(r"(statement|execute(?: fetch from)? [^:\n]*): (.*)", re.DOTALL)
# proc.c: "process %d still waiting for %s on %s after %ld.%03d ms" and friends;
# standby.c: "recovery still waiting after %ld.%03d ms: %s", "recovery finished waiting after ..."
_LOCK_WAIT: Final = re.compile(
    r"(?:process \d+ (?:still waiting for|acquired|avoided deadlock for|detected deadlock while waiting for"
    r"|failed to acquire) .*? after|recovery (?:still|finished) waiting after) (\d+(?:\.\d+)?) ms"
)
# The strict forms behind `safe`. Statement and portal names are the client's identifiers; the
# label after "duration: N ms" is one of postgres.c's ("  statement" | "  execute[ fetch from] S[/P]"
# | "  parse S" | "  bind S[/P]").
_SAFE_LABEL: Final = re.compile(r"  (?:statement|(?:execute(?: fetch from)?|parse|bind) [^\s':]{1,200})").fullmatch
# pgaudit (pgaudit.c log_audit_event): "AUDIT: <SESSION|OBJECT>,<statement id>,<substatement id>,
# <class>,<command tag>,<object type>,<object name>,<statement>,<parameters>[,<rows>]", each text
# column quoted as CSV when it holds a comma, a double quote or a line break (append_valid_csv);
# statement and parameters may be "<not logged>" or "<previously logged>" instead, parameters
# "<none>"; rows only with pgaudit.log_rows. The statement moves to `statement` as log_statement's
# does; the message keeps the other columns. The message is proven value-free when its parameters
# are one of the markers (pgaudit.log_parameter is off by default); otherwise redact.py removes them.
_CSV_FIELD: Final = r'(?:"(?:[^"]|"")*"|[^,"\r\n]*)'
_AUDIT: Final = re.compile(
    rf"(AUDIT: (?:SESSION|OBJECT),\d{{1,20}},\d{{1,20}},[A-Z_?]{{1,20}},{_CSV_FIELD},{_CSV_FIELD},{_CSV_FIELD})"
    rf",({_CSV_FIELD}),({_CSV_FIELD}(?:,\d{{1,20}})?)",
    re.DOTALL,
).fullmatch
_SAFE_AUDIT: Final = re.compile(
    r"AUDIT: (?:SESSION|OBJECT),\d+,\d+,[A-Z_]+,[A-Z ?]{1,64},[A-Z ]{0,64},"
    r'(?:[^,"\r\n]*|"(?:[^"\r\n]|"")*"),<(?:none|not logged|previously logged)>(?:,\d+)?'
).fullmatch
_AUDIT_MARKERS: Final = frozenset({"<not logged>", "<previously logged>"})


# auto_explain's text format (explain.c): "Query Text: <the query as sent>", then PG16+'s "Query
# Parameters: ...", then the plan, whose top node line always has its costs (auto_explain keeps
# es->costs on): the first such line ends a query text of several lines.
_PLAN_AFTER_QUERY: Final = re.compile(r"\n(?:Query Parameters: |\S[^\n]*?  \(cost=\d)")


def plan_query(plan: str) -> str | None:
    """The query text of an auto_explain plan (`plan` is what follows "plan:"), in any of its four
    formats; None when it cannot be told (a cut plan, another shape)."""
    body = plan.lstrip("\n")
    try:
        if body.startswith("Query Text: "):
            text = body[12:]
            if text[:1] == '"':
                # YAML: explain.c escape_yaml writes the text as a JSON string on one line
                end = text.find("\n")
                query = orjson.loads(text if end < 0 else text[:end])
                return query if isinstance(query, str) else None
            m = _PLAN_AFTER_QUERY.search(text)
            return text[: m.start()] if m is not None else None
        if body.startswith("{"):  # JSON: {"Query Text": ..., "Plan": ...}
            document = orjson.loads(body)
            query = document.get("Query Text") if isinstance(document, dict) else None
            return query if isinstance(query, str) else None
        if body.startswith("<explain"):  # XML: escape_xml writes &, < and > as entities
            start = body.find("<Query-Text>")
            end = body.find("</Query-Text>", start)
            if start < 0 or end < 0:
                return None
            return body[start + 12 : end].replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    except orjson.JSONDecodeError:
        return None
    return None


def _audit(severity: str, sqlstate: str | None, message: str) -> Classification | None:
    """A pgaudit record as a `statement` line, or None when `message` is not one."""
    m = _AUDIT(message)
    if m is None:
        return None
    head, sql, parameters = m.groups()
    if sql in _AUDIT_MARKERS:
        statement = None
    elif sql[:1] == '"':  # CSV-quoted
        statement = sql[1:-1].replace('""', '"')
    else:
        statement = sql
    message = f"{head},{parameters}"
    safe = severity == "LOG" and sqlstate is None and _SAFE_AUDIT(message) is not None
    return _new(Classification, ("statement", sqlstate, None, message, statement, safe))


# pg_cron (src/pg_cron.c, cron.log_statement): "cron job %ld starting: %s" with the job's command,
# which moves to `statement` like log_statement's.
_CRON_STARTING: Final = re.compile(r"(cron job \d{1,20} starting): (.*)", re.DOTALL).fullmatch


_COMMON_LABELS: Final = frozenset({"  statement", "  execute <unnamed>", "  parse <unnamed>", "  bind <unnamed>"})
_SAFE_EXECUTE: Final = re.compile(r"execute(?: fetch from)? [^\s':]{1,200}").fullmatch
# proc.c ProcSleep: "process %d <verb> %s on %s after %ld.%03d ms". The lock tag (lmgr.c
# DescribeLockTag) is words and numbers: "transaction 700737", "tuple (0,5) of relation 16384 of
# database 5", "virtual transaction 3/45", ...; an advisory lock's key ("advisory lock [db,k1,k2,n]")
# is the application's value and is left to the template table.
# PG18 proc.c (log_lock_failures): "process %d could not obtain %s on %s" for a NOWAIT or
# SKIP LOCKED that failed: a lock wait of no duration.
_LOCK_FAILURE: Final = re.compile(r"process \d+ could not obtain ").match
_SAFE_LOCK_FAILURE: Final = re.compile(r"process \d+ could not obtain \w+ on [\w ,.()/-]{1,200}").fullmatch
_SAFE_LOCK_WAIT: Final = re.compile(
    r"(?:process \d+ (?:still waiting for|acquired|avoided deadlock for|detected deadlock while waiting for"
    r"|failed to acquire) \w+ on [\w ,.()/-]{1,200} after|recovery (?:still|finished) waiting after)"
    r" \d+(?:\.\d+)? ms(?:: [\w ]{1,100})?"
).fullmatch
# Facts: words, numbers, units, punctuation of PostgreSQL's reports, and double-quoted names;
# no single quote (the carrier of literals), no dollar sign. Possessive quantifiers (Python 3.11+):
# a report is long, and a failing match must not backtrack through the ways to split it.
_FACTS: Final = r"""(?:[\w \t.,;:%()=/+\[\]-]++|"[^"\n]{0,300}+")*+"""
# Server reports carry no double-quoted names or free words where these patterns have none:
# _REPORT is _FACTS without the quoted names.
_REPORT: Final = r"[\w \t.,;:%()=/+-]*+"
# xlog.c LogCheckpointStart: the flags, each a fixed word (" wal" was " xlog" before PG10;
# PG18 writes " fast" where earlier versions wrote " immediate").
_CHECKPOINT_FLAGS: Final = r"(?: (?:shutdown|end-of-recovery|immediate|fast|force|wait|wal|xlog|time|flush-all))*"
_SAFE_CHECKPOINT: Final = re.compile(
    rf"(?:checkpoint|restartpoint) starting:{_CHECKPOINT_FLAGS}"
    rf"|(?:checkpoint|restartpoint) complete: wrote \d+ buffers \({_REPORT}"
    r"|checkpoints are occurring too frequently \(\d+ seconds? apart\)"
    r"|recovery restart point at [0-9A-F]{1,8}/[0-9A-F]{1,8}"
).fullmatch
# vacuumlazy.c / analyze.c: a first line naming the table, then report lines of counters, each
# starting with one of the labels PostgreSQL 13-18 write (only an index's line names something).
# A line with another start is not the server's: text a child process wrote to stderr (COPY TO
# PROGRAM, archive_command) lands in the report's entry unprefixed.
#
# The first line names the table as "%s.%s.%s" (database, schema, table), the names printed as they
# are, neither quoted nor escaped: `automatic vacuum of table "Shop.public.vac"tbl": index scans: 0`.
# What follows the name is fixed and ends the line, so the name is everything between `of table "`
# and that tail (a name with a line break in it is left to value removal): `": index scans: N` for
# a vacuum; for an analyze the closing quote alone (PG14+), or PG12-13's `" system usage: ` and
# pg_rusage_show's counters. An index's line reads the same way: `index "%s": pages: ...`.
_RUSAGE: Final = r"CPU: user: \d+\.\d\d s, system: \d+\.\d\d s, elapsed: \d+\.\d\d s"
_AUTOVACUUM_FIRST_LINE: Final = (
    r'automatic (?:(?:aggressive )?vacuum (?:to prevent wraparound )?of table "([^\n]{1,300})": index scans: \d+'
    rf'|(analyze) of table "([^\n]{{1,300}})"(?: system usage: {_RUSAGE})?)'
)
_AUTOVACUUM_RUN: Final = re.compile(_AUTOVACUUM_FIRST_LINE + r"(?=\n|\Z)").match
_AUTOVACUUM_LABELS: Final = (
    r"(?:(?:pages|tuples|tuples missed|removable cutoff|new relfrozenxid|new relminmxid|frozen|visibility map"
    r"|index scan (?:not needed|needed|bypassed(?: by failsafe)?)|delay time|I/O [Tt]imings|avg read rate"
    r'|buffer usage|WAL usage|system usage|index "[^"\n]{1,300}"):'
    r'|index "[^\n]{1,300}": pages: \d+ in total, \d+ newly deleted, \d+ currently deleted, \d+ reusable$)'
)
_SAFE_AUTOVACUUM_REPORT: Final = re.compile(
    # possessive: an index's line matches either index label, and a report that fails at its end
    # must not try every way to read its lines
    rf"{_AUTOVACUUM_FIRST_LINE}(?:\n[ \t]*+{_AUTOVACUUM_LABELS}{_REPORT})*+",
    re.MULTILINE,
).fullmatch


def autovacuum_run(message: str) -> tuple[str, str, int] | None:
    """("vacuum" or "analyze", the table as the report names it, where the name's closing quote
    is) of an autovacuum report's message; None when the message does not start with one's first
    line.

    The table is "database.schema.table" as PostgreSQL printed it: a dot or a double quote in a
    name makes its parts ambiguous, the whole is not (its end is found from the fixed tail)."""
    m = _AUTOVACUUM_RUN(message)
    if m is None:
        return None
    if m.group(2) is not None:
        return "analyze", m.group(3), m.end(3)
    return "vacuum", m.group(1), m.end(1)


_SAFE_AUTOVACUUM: Final = re.compile(
    r'canceling autovacuum task|skipping (?:vacuum|analyze) of "[^"\n]{1,300}" --- [\w ]{1,60}'
).fullmatch
# fd.c: a path under a pgsql_tmp directory (base/pgsql_tmp/pgsql_tmp<pid>.<n>, a tablespace's
# pg_tblspc/<oid>/PG_<version>/pgsql_tmp/..., a shared fileset's pgsql_tmp<pid>.<n>.fileset/<name>).
_SAFE_TEMP_FILE: Final = re.compile(r'temporary file: path "[\w./-]{0,500}pgsql_tmp[\w./-]{0,500}", size \d+').fullmatch
# postmaster.c / postinit.c / postgres.c / backend_startup.c (PG18 "connection ready"). user,
# database and application_name are in the line's own fields anyway.
# The user and database names come first and have no space here: a name with one (rare) is left
# to value removal, so that free text after "user=" is not taken for a name. The application name
# is the last name of "connection authorized" (any printable text: "pgAdmin 4 - DB:postgres"),
# then the SSL and GSS parts (be-secure.c, postmaster.c), each of fixed words and values.
_SECURITY: Final = r"(?: SSL enabled \([\w ,=.-]{1,300}\))?(?: GSS \([\w ,=@./-]{1,300}\))?"
_SAFE_CONNECTION: Final = re.compile(
    r"connection received: host=[\w.:%\[\]-]{1,300}(?: port=\d+)?"
    r"|(?:replication )?connection authorized: user=[^\s']{1,300}(?: database=[^\s']{1,300})?"
    rf"(?: application_name=[^\n']{{0,300}}?)?{_SECURITY}"
    r'|connection authenticated: (?:identity|user)="[^"\n]{0,300}" method=[\w-]+ \([\w./-]{1,1000}:\d+\)'
    r"|disconnection: session time: \d+:\d\d:\d\d\.\d{3} user=[^\s']{1,300} database=[^\s']{1,300}"
    r" host=[\w.:%\[\]-]{1,300}(?: port=\d+)?"
    r"|connection ready: [\w .,=]{0,300}"
).fullmatch

# Wraparound warnings and the stop (varsup.c, multixact.c, vacuum.c, vacuumlazy.c): a database
# name, counters and fixed words. Proven whole, they keep their counters, which a DBA (and the
# wraparound insight) reads; a database name with a quote in it is left to value removal.
_SAFE_WRAPAROUND: Final = re.compile(
    r'(?:database "[^"\n]{1,300}"|database with OID \d+) must be vacuumed'
    r" (?:within \d+ transactions|before \d+ more (?:MultiXactIds?|multixact members?) (?:is|are) used)"
    r"|(?:oldest (?:xmin|multixact)|cutoff for (?:removing and freezing tuples|freezing multixacts)) is far in the past"
    r'|bypassing nonessential maintenance of table "[^"\n]{1,300}" as a failsafe after \d+ index scans?'
    r"|database is not accepting commands (?:that (?:generate|assign) new (?:MultiXactIds|transaction IDs) )?"
    r'to avoid wraparound data loss in database (?:"[^"\n]{1,300}"|with OID \d+)'
).fullmatch

# auth.c auth_failed: "<method> authentication failed for user", with PG18's two-word
# "OAuth bearer", "\"trust\" authentication failed ...", and the method-less "authentication failed
# for user \"%s\": host rejected" / ": invalid authentication method"
_AUTH_OTHER: Final = re.compile(r'(?:(?:[\w-]+|OAuth bearer|"trust") )?authentication failed for user "')
# postmaster.c: "server process (PID %d) was terminated by signal %d: %s", "... exited with exit code %d"
_PROC_EXIT: Final = re.compile(r"\(PID \d+\) (?:was terminated by|exited with)")

_CONNECTION_PREFIXES: Final = (
    "connection received:",
    "connection authorized:",
    "connection authenticated:",
    "disconnection:",
    "replication connection authorized:",
    "connection ready:",
)
# The server's lifecycle: start, shutdown, crash and recovery, standby and archiving, reload. The
# catalogue with every version's wording is docs/kinds.md, and a test holds these tables to it.
# At ERROR, FATAL and PANIC only what says the server (not the session's request) is starting,
# stopping, crashing or cannot serve counts: a session's `SET` that fails with `parameter "x"
# cannot be changed ...` is an error, the same words logged at a reload are the server's.
_SERVER_AT_ERROR: Final = (
    # postinit.c / postmaster.c, 57P03 (PG14+: "not yet accepting", "not accepting connections")
    "the database system is ",
    # postgres.c ProcessInterrupts / quickdie, 57P01 and 57P02: what a shutdown or a crash does
    # to every session (pg_terminate_backend() says the same; see docs/kinds.md)
    "terminating connection due to administrator command",
    "terminating connection due to unexpected postmaster exit",
    "terminating connection because of unexpected SIGQUIT signal",
    "terminating connection due to immediate shutdown command",
    "terminating connection because of crash of another server process",
    "terminating autovacuum process due to administrator command",
    "terminating background worker ",
    "terminating logical replication worker due to administrator command",
    "terminating logical replication launcher due to administrator command",
    "terminating walreceiver process due to administrator command",
    # postmaster.c / miscinit.c / pqcomm.c / guc-file.l: a server that cannot start
    "could not bind IPv4 address ",
    "could not bind IPv6 address ",
    "could not bind Unix address ",
    "could not bind to all requested addresses",
    "could not create listen socket",
    "could not create any TCP/IP sockets",
    "could not create any Unix-domain sockets",
    "no socket created for listening",
    "could not open configuration file ",
    "configuration file ",
    "lock file ",
    "pre-existing shared memory block",
    "data directory ",
    "database files are incompatible with server",
)
_SERVER_BELOW_ERROR: Final = (
    *_SERVER_AT_ERROR,
    # postmaster.c
    "starting PostgreSQL ",
    "listening on ",
    "database system is ",
    "received fast shutdown request",
    "received smart shutdown request",
    "received immediate shutdown request",
    "received SIGHUP",
    "received promote request",
    "aborting any active transactions",
    "terminating any other active server processes",
    "all server processes terminated",
    "shutting down",
    "abnormal database system shutdown",
    "issuing SIGKILL to recalcitrant children",
    "postmaster became multithreaded",
    "background worker ",
    "registering background worker ",
    "unregistering background worker ",
    "too many background workers",
    "logical replication launcher ",
    # syslogger.c
    "redirecting log output to logging collector process",
    "ending log output to stderr",
    "logger shutting down",
    # autovacuum.c (the launcher; DEBUG1 in PG13+)
    "autovacuum launcher ",
    "autovacuum not started because of misconfiguration",
    # xlog.c, xlogrecovery.c (PG15+), xlogreader.c (the end of WAL found by recovery), startup.c
    "database system was ",
    "database system shutdown was interrupted",
    "redo starts at ",
    "redo done at ",
    "redo is not required",
    "redo in progress",
    "invalid record length at ",
    "invalid record offset at ",
    "invalid magic number ",
    "invalid resource manager ID ",
    "invalid contrecord length ",
    "record with incorrect prev-link ",
    "incorrect resource manager data checksum ",
    "unexpected pageaddr ",
    "contrecord is requested by ",
    "missing contrecord at ",
    "entering standby mode",
    "starting archive recovery",
    "starting point-in-time recovery",
    "starting backup recovery",
    "completed backup recovery",
    "restored log file ",
    "consistent recovery state reached",
    "recovery stopping ",
    "recovery has paused",
    "pausing at the end of recovery",
    "archive recovery complete",
    "selected new timeline ID",
    "last completed transaction was",
    "promote trigger file found",
    "syncing data directory",
    "resetting unlogged relations",
    # multixact.c
    "MultiXact member wraparound protections are ",
    # walreceiver.c
    "started streaming WAL",
    "restarted WAL streaming",
    "replication terminated by primary server",
    "fetching timeline history file",
    # slot.c: a checkpoint gives up a replication slot that holds too much WAL (PG13-15:
    # "invalidating slot ..."; PG16+ also for a conflict on a standby or, PG18, an idle timeout)
    "invalidating slot ",
    "invalidating obsolete replication slot ",
    "terminating process ",
    # pgarch.c
    "archive command ",
    "archive_mode enabled, yet ",
    "archiving write-ahead log file ",
    "restarting archiver process",
    "removed orphan archive status file",
    # guc-file.l / guc.c / hba.c at a reload (a session's SET fails at ERROR: not here)
    'parameter "',
    "unrecognized configuration parameter ",
    "invalid value for parameter ",
    "syntax error in file ",
    "pg_hba.conf was not reloaded",
    "pg_ident.conf was not reloaded",
)
# Transaction ID and MultiXact wraparound: varsup.c, multixact.c, vacuum.c (PG16+ "cutoff for ..."),
# vacuumlazy.c's failsafe (PG14+). The stop (`database is not accepting commands ...`) is an ERROR
# every writing client gets and stays an error.
_WRAPAROUND_PREFIXES: Final = (
    "oldest xmin is far in the past",
    "oldest multixact is far in the past",
    "cutoff for removing and freezing tuples is far in the past",
    "cutoff for freezing multixacts is far in the past",
    "bypassing nonessential maintenance of table ",
)


# A message's first characters pick the few prefixes to try: one slice and one dict lookup
# instead of a scan of them all (classify runs per entry; every prefix is at least this long).
_HEAD: Final = 6


def _by_head(prefixes: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """The prefixes grouped by their first `_HEAD` characters."""
    out: dict[str, tuple[str, ...]] = {}
    for prefix in prefixes:
        assert len(prefix) >= _HEAD, prefix
        out[prefix[:_HEAD]] = (*out.get(prefix[:_HEAD], ()), prefix)
    return out


_SERVER_AT_ERROR_BY_HEAD: Final = _by_head(_SERVER_AT_ERROR)
_SERVER_BELOW_ERROR_BY_HEAD: Final = _by_head(_SERVER_BELOW_ERROR)
_WRAPAROUND_BY_HEAD: Final = _by_head(_WRAPAROUND_PREFIXES)

# An error whose text is not known here (a translated server, a newer version) is classified by the
# SQLSTATE the log carries, when it names one of the kinds; else it is an error.
_KIND_BY_SQLSTATE: Final[dict[str, Kind]] = {
    "40P01": "deadlock",
    "28P01": "auth_failure",
    "28000": "auth_failure",
    "53300": "too_many_connections",
    "57P01": "server",  # admin_shutdown
    "57P02": "server",  # crash_shutdown
    "57P03": "server",  # cannot_connect_now
}

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


# Classification(...) goes through a generated Python __new__; tuple.__new__ builds the same
# object in C (classify runs once per entry).
_new: Final = tuple.__new__


def _server_report(severity: str, sqlstate: str | None, message: str, pattern: Callable[[str], object]) -> bool:
    """The message is one of the server's reports (connections, checkpoints, autovacuum, temp
    files): logged at LOG with no SQLSTATE (00000), and matching `pattern` whole. RAISE EXCEPTION
    starting with the same words is an ERROR with P0001; RAISE LOG is caught by its CONTEXT
    (entry.py) or by the pattern's strictness."""
    return severity == "LOG" and sqlstate is None and pattern(message) is not None


def _report(
    kind: Kind, severity: str, sqlstate: str | None, message: str, pattern: Callable[[str], object]
) -> Classification:
    """A connection or checkpoint message: `safe` when it is a server report (`_server_report`,
    inlined: one of these is classified for every connection line)."""
    safe = severity == "LOG" and sqlstate is None and pattern(message) is not None
    return _new(Classification, (kind, sqlstate, None, message, None, safe))


def _autovacuum_safe(severity: str, sqlstate: str | None, message: str) -> bool:
    if message.startswith("automatic "):
        return _server_report(severity, sqlstate, message, _SAFE_AUTOVACUUM_REPORT)
    return _SAFE_AUTOVACUUM(message) is not None


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
                # "%ld.%03d": digits, a dot, digits (isdecimal takes other Unicode decimal
                # digits too, which float() reads as well)
                if not number.replace(".", "", 1).isdecimal():
                    pass
                elif rest == len(message):
                    return _new(Classification, ("slow_query", sqlstate, float(number), message, None, True))
                elif (
                    (colon := message.find(": ", rest)) > 0
                    and message.startswith(_DURATION_LABELS, rest)
                    and "\n" not in (label := message[rest:colon])
                ):
                    safe = label in _COMMON_LABELS or _SAFE_LABEL(label) is not None
                    return _new(
                        Classification,
                        ("slow_query", sqlstate, float(number), message[:colon], message[colon + 2 :], safe),
                    )
                elif message.startswith("  fastpath function call: ", rest):
                    # postgres.c HandleFunctionRequest: libpq's fast-path calls (its large-object
                    # API: lo_open, lo_write...), "fastpath function call: \"%s\" (OID %u)"
                    safe = _SAFE_FASTPATH(message, rest + 26) is not None
                    return _new(Classification, ("slow_query", sqlstate, float(number), message, None, safe))
                elif message.startswith("  plan:", rest):
                    # auto_explain (contrib/auto_explain/auto_explain.c): "duration: %.3f ms  plan:\n%s".
                    # The plan (text, JSON, YAML or XML) holds the query text and the values of its
                    # filters: it stays in the message, where value removal keeps the first line;
                    # its query text is the statement (normalized like any other).
                    statement = plan_query(message[rest + 7 :])
                    return _new(Classification, ("slow_query", sqlstate, float(number), message, statement, False))
        elif message.startswith("deadlock detected"):
            return _new(Classification, ("deadlock", _state(sqlstate, "40P01"), None, message, None, False))
        elif message.startswith("disconnection:"):
            return _report("connection", severity, sqlstate, message, _SAFE_CONNECTION)
    elif c == "c":
        if message.startswith(_CONNECTION_PREFIXES):
            return _report("connection", severity, sqlstate, message, _SAFE_CONNECTION)
        if message.startswith(_CHECKPOINT_PREFIXES):
            return _report("checkpoint", severity, sqlstate, message, _SAFE_CHECKPOINT)
        if message.startswith("cron job ") and (m := _CRON_STARTING(message)) is not None:
            safe = severity == "LOG" and sqlstate is None
            return _new(Classification, ("statement", sqlstate, None, m.group(1), m.group(2), safe))
        if message.startswith("canceling autovacuum task"):
            return _new(
                Classification,
                ("autovacuum", sqlstate, None, message, None, _autovacuum_safe(severity, sqlstate, message)),
            )
    elif c == "A" and message.startswith("AUDIT: "):
        found = _audit(severity, sqlstate, message)
        if found is not None:
            return found
    elif c == "f" and message.startswith("fastpath function call: "):
        safe = _SAFE_FASTPATH(message, 24) is not None
        return _new(Classification, ("statement", sqlstate, None, message, None, safe))
    elif c == "s" and message.startswith("statement: "):
        return _new(Classification, ("statement", sqlstate, None, "statement", message[11:], True))
    elif c == "e" and message.startswith("execute "):
        m = _STATEMENT.match(message)
        if m is not None:
            label = m.group(1)
            return _new(
                Classification, ("statement", sqlstate, None, label, m.group(2), _SAFE_EXECUTE(label) is not None)
            )
    elif c == "p" and message.startswith("process "):
        m = _LOCK_WAIT.match(message)
        if m is not None:
            safe = _SAFE_LOCK_WAIT(message) is not None
            return _new(Classification, ("lock_wait", sqlstate, float(m.group(1)), message, None, safe))
        if _LOCK_FAILURE(message) is not None:
            safe = _SAFE_LOCK_FAILURE(message) is not None
            return _new(Classification, ("lock_wait", sqlstate, None, message, None, safe))
    elif c == "t" and message.startswith("temporary file: "):
        safe = _server_report(severity, sqlstate, message, _SAFE_TEMP_FILE)
        return _new(Classification, ("temp_file", sqlstate, None, message, None, safe))
    elif c == "a" and message.startswith(_AUTOVACUUM_PREFIXES):
        return _new(
            Classification, ("autovacuum", sqlstate, None, message, None, _autovacuum_safe(severity, sqlstate, message))
        )

    # Less frequent texts: checked in full.
    if message.startswith("recovery "):
        m = _LOCK_WAIT.match(message)
        if m is not None:
            safe = _SAFE_LOCK_WAIT(message) is not None
            return _new(Classification, ("lock_wait", sqlstate, float(m.group(1)), message, None, safe))
    if message.startswith("replication connection authorized:"):
        return _report("connection", severity, sqlstate, message, _SAFE_CONNECTION)
    if message.startswith("password authentication failed for user "):
        return _new(Classification, ("auth_failure", _state(sqlstate, "28P01"), None, message, None, False))
    if (
        message.startswith(("no pg_hba.conf entry ", "pg_hba.conf rejects "))
        or _AUTH_OTHER.match(message) is not None
        or (
            severity == "FATAL"
            and message.startswith('role "')
            and message.endswith(('" does not exist', '" is not permitted to log in'))
        )
    ):
        return _new(Classification, ("auth_failure", _state(sqlstate, "28000"), None, message, None, False))
    if message.startswith(_TOO_MANY_PREFIXES):
        return _new(Classification, ("too_many_connections", _state(sqlstate, "53300"), None, message, None, False))
    if message.startswith(_CHECKPOINT_PREFIXES):
        return _report("checkpoint", severity, sqlstate, message, _SAFE_CHECKPOINT)
    if message.startswith(_AUTOVACUUM_PREFIXES):
        return _new(
            Classification, ("autovacuum", sqlstate, None, message, None, _autovacuum_safe(severity, sqlstate, message))
        )
    head = message[:_HEAD]
    if severity in _ERROR_SEVERITIES:
        prefixes = _SERVER_AT_ERROR_BY_HEAD.get(head)
        if prefixes is not None and message.startswith(prefixes):
            return _new(Classification, ("server", sqlstate, None, message, None, False))
        if head == "databa" and message.startswith("database is not accepting commands "):
            # the wraparound stop: an error, kept whole when it is the known text
            safe = _SAFE_WRAPAROUND(message) is not None
            return _new(Classification, ("error", sqlstate, None, message, None, safe))
        kind = _KIND_BY_SQLSTATE.get(sqlstate, "error") if sqlstate is not None else "error"
        return _new(Classification, (kind, sqlstate, None, message, None, False))
    prefixes = _SERVER_BELOW_ERROR_BY_HEAD.get(head)
    if (prefixes is not None and message.startswith(prefixes)) or (
        "(PID " in message and _PROC_EXIT.search(message) is not None
    ):
        return _new(Classification, ("server", sqlstate, None, message, None, False))
    prefixes = _WRAPAROUND_BY_HEAD.get(head)
    if (prefixes is not None and message.startswith(prefixes)) or (
        head == "databa" and " must be vacuumed " in message
    ):
        safe = _SAFE_WRAPAROUND(message) is not None
        return _new(Classification, ("autovacuum", sqlstate, None, message, None, safe))
    return _new(Classification, ("other", sqlstate, None, message, None, False))
