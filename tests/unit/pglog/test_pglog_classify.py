"""Classification into the 13 kinds of SPEC 2.1, with sqlstate, duration and statement."""

from __future__ import annotations

import pytest
from pglog_helpers import T0, one, parse_text

from forwarder.model import KINDS, LogLine
from forwarder.pglog.classify import classify, plan_query

# (severity, message, given sqlstate, kind, sqlstate, duration_ms)
CASES = [
    ("LOG", "duration: 639.686 ms  statement: SELECT 1", None, "slow_query", None, 639.686),
    ("LOG", "duration: 3065.420 ms  execute <unnamed>: SELECT $1", None, "slow_query", None, 3065.42),
    ("LOG", "duration: 1.5 ms  execute S_1/C_2: SELECT 2", None, "slow_query", None, 1.5),
    ("LOG", "duration: 0.050 ms  parse <unnamed>: SELECT 3", None, "slow_query", None, 0.05),
    ("LOG", "duration: 0.050 ms  bind S_3: SELECT 4", None, "slow_query", None, 0.05),
    ("LOG", "duration: 12 ms", None, "slow_query", None, 12.0),  # log_duration
    (
        "LOG",
        "process 4085 still waiting for ShareLock on transaction 700737 after 1000.123 ms",
        None,
        "lock_wait",
        None,
        1000.123,
    ),
    ("LOG", "process 4085 acquired ShareLock on transaction 700737 after 2345.5 ms", None, "lock_wait", None, 2345.5),
    (
        "LOG",
        "process 9 still waiting for AccessExclusiveLock on relation 16384 of database 5 after 1000.004 ms",
        None,
        "lock_wait",
        None,
        1000.004,
    ),
    (
        "LOG",
        "process 9 detected deadlock while waiting for ShareLock on transaction 7 after 1000.1 ms",
        None,
        "lock_wait",
        None,
        1000.1,
    ),
    ("LOG", "recovery still waiting after 10.4 ms: recovery conflict on lock", None, "lock_wait", None, 10.4),
    ("ERROR", "deadlock detected", None, "deadlock", "40P01", None),
    ("ERROR", "deadlock detected", "40P01", "deadlock", "40P01", None),
    ("FATAL", 'password authentication failed for user "bob"', None, "auth_failure", "28P01", None),
    (
        "FATAL",
        'no pg_hba.conf entry for host "10.0.0.9", user "bob", database "shop", no encryption',
        None,
        "auth_failure",
        "28000",
        None,
    ),
    (
        "FATAL",
        'no pg_hba.conf entry for host "10.0.0.9", user "bob", database "shop", SSL off',
        None,
        "auth_failure",
        "28000",
        None,
    ),
    (
        "FATAL",
        'pg_hba.conf rejects connection for host "10.0.0.9", user "bob", database "shop"',
        None,
        "auth_failure",
        "28000",
        None,
    ),
    ("FATAL", 'role "mallory" does not exist', None, "auth_failure", "28000", None),
    ("FATAL", 'role "mallory" is not permitted to log in', None, "auth_failure", "28000", None),
    ("FATAL", 'Peer authentication failed for user "bob"', None, "auth_failure", "28000", None),
    ("ERROR", 'role "mallory" does not exist', None, "error", None, None),  # DROP ROLE, not a login
    ("FATAL", "sorry, too many clients already", None, "too_many_connections", "53300", None),
    (
        "FATAL",
        "remaining connection slots are reserved for non-replication superuser connections",
        None,
        "too_many_connections",
        "53300",
        None,
    ),
    (
        "FATAL",
        "remaining connection slots are reserved for roles with the SUPERUSER attribute",
        None,
        "too_many_connections",
        "53300",
        None,
    ),
    ("FATAL", 'too many connections for role "bob"', None, "too_many_connections", "53300", None),
    ("LOG", "checkpoint starting: time", None, "checkpoint", None, None),
    (
        "LOG",
        "checkpoint complete: wrote 3 buffers (0.0%); 0 WAL file(s) added, 0 removed, 0 recycled; "
        "write=0.001 s, sync=0.001 s, total=0.003 s; sync files=2, longest=0.001 s, average=0.001 s; "
        "distance=0 kB, estimate=0 kB",
        None,
        "checkpoint",
        None,
        None,
    ),
    ("LOG", "checkpoints are occurring too frequently (9 seconds apart)", None, "checkpoint", None, None),
    ("LOG", "restartpoint starting: time", None, "checkpoint", None, None),
    ("LOG", 'automatic vacuum of table "shop.public.orders": index scans: 0', None, "autovacuum", None, None),
    (
        "LOG",
        'automatic aggressive vacuum to prevent wraparound of table "shop.public.t": index scans: 1',
        None,
        "autovacuum",
        None,
        None,
    ),
    ("LOG", 'automatic analyze of table "shop.public.orders"', None, "autovacuum", None, None),
    ("ERROR", "canceling autovacuum task", None, "autovacuum", None, None),
    ("LOG", 'temporary file: path "base/pgsql_tmp/pgsql_tmp4012.7", size 1508885074', None, "temp_file", None, None),
    ("LOG", "connection received: host=10.0.1.2 port=5432", None, "connection", None, None),
    (
        "LOG",
        'connection authenticated: identity="bob" method=scram-sha-256 (/etc/pg_hba.conf:95)',
        None,
        "connection",
        None,
        None,
    ),
    ("LOG", "connection authorized: user=bob database=shop application_name=psql", None, "connection", None, None),
    ("LOG", "replication connection authorized: user=rep", None, "connection", None, None),
    (
        "LOG",
        "connection ready: setup total=3.021 ms, fork=0.513 ms, authentication=1.212 ms",
        None,
        "connection",
        None,
        None,
    ),
    (
        "FATAL",
        'remaining connection slots are reserved for roles with privileges of the "pg_use_reserved_connections" role',
        None,
        "too_many_connections",
        "53300",
        None,
    ),
    ("LOG", "duration: 1.5 ms  execute fetch from S_1/C_2: SELECT 2", None, "slow_query", None, 1.5),
    ("LOG", "duration: 1e3 ms", None, "other", None, None),  # not PostgreSQL's number form
    ("LOG", "duration: \u00b2 ms", None, "other", None, None),  # isdigit() but not a float
    ("LOG", "process 9 failed to acquire ShareLock on transaction 7 after 1000.1 ms", None, "lock_wait", None, 1000.1),
    (
        "LOG",
        "disconnection: session time: 0:00:01.234 user=bob database=shop host=10.0.1.2 port=5432",
        None,
        "connection",
        None,
        None,
    ),
    ("LOG", "process 4711 could not obtain ShareLock on transaction 700737", None, "lock_wait", None, None),
    ("FATAL", 'OAuth bearer authentication failed for user "bob"', None, "auth_failure", "28000", None),
    ("FATAL", '"trust" authentication failed for user "bob"', None, "auth_failure", "28000", None),
    ("FATAL", 'authentication failed for user "bob": host rejected', None, "auth_failure", "28000", None),
    ("LOG", 'invalidating obsolete replication slot "standby1"', None, "server", None, None),
    ("LOG", "client backend (PID 4838) was terminated by signal 9: Killed", None, "server", None, None),
    ("LOG", "statement: SELECT 1", None, "statement", None, None),
    ("LOG", "execute <unnamed>: SELECT $1", None, "statement", None, None),
    ("LOG", "starting PostgreSQL 15.8 (Debian 15.8-1) on x86_64-pc-linux-gnu", None, "server", None, None),
    ("LOG", 'listening on IPv4 address "0.0.0.0", port 5432', None, "server", None, None),
    ("LOG", "database system is ready to accept connections", None, "server", None, None),
    ("LOG", "database system was shut down at 2026-11-22 02:00:00 UTC", None, "server", None, None),
    ("LOG", "database system was interrupted; last known up at 2026-11-22 02:00:00 UTC", None, "server", None, None),
    ("LOG", "received fast shutdown request", None, "server", None, None),
    ("LOG", "database system is shut down", None, "server", None, None),
    ("LOG", "received SIGHUP, reloading configuration files", None, "server", None, None),
    ("LOG", 'parameter "log_min_duration_statement" changed to "0"', None, "server", None, None),
    ("LOG", "server process (PID 4711) was terminated by signal 9: Killed", None, "server", None, None),
    (
        "LOG",
        'background worker "logical replication launcher" (PID 60) exited with exit code 1',
        None,
        "server",
        None,
        None,
    ),
    ("LOG", "all server processes terminated; reinitializing", None, "server", None, None),
    ("LOG", "redo starts at 0/16B3748", None, "server", None, None),
    ("FATAL", "the database system is starting up", "57P03", "server", "57P03", None),
    ("ERROR", 'relation "nope" does not exist at character 15', None, "error", None, None),
    ("ERROR", 'relation "nope" does not exist at character 15', "42P01", "error", "42P01", None),
    ("FATAL", "terminating connection due to administrator command", None, "server", None, None),  # 57P01
    ("PANIC", 'could not write to file "pg_wal/xlogtemp.123": No space left on device', None, "error", None, None),
    ("WARNING", "there is no transaction in progress", None, "other", None, None),
    ("NOTICE", 'table "t" does not exist, skipping', None, "other", None, None),
    ("LOG", "logical decoding found consistent point at 0/16B3748", None, "other", None, None),
    ("LOG", "anything else", "00000", "other", None, None),  # 00000 is no error code
]


@pytest.mark.parametrize(("severity", "message", "given", "kind", "sqlstate", "duration"), CASES)
def test_classify(
    severity: str, message: str, given: str | None, kind: str, sqlstate: str | None, duration: float | None
) -> None:
    c = classify(severity, message, given)
    assert (c.kind, c.sqlstate, c.duration_ms) == (kind, sqlstate, duration)


def test_every_kind_is_covered() -> None:
    assert {case[3] for case in CASES} == set(KINDS)


def test_slow_query_moves_the_statement_out_of_the_message() -> None:
    line = one(f"{T0} [1] a@b/c LOG:  duration: 12.5 ms  execute S_1: SELECT * FROM t WHERE id = 42\n")
    assert line.kind == "slow_query"
    assert line.duration_ms == 12.5
    assert line.message == "duration: 12.5 ms  execute S_1"
    assert line.statement == "SELECT * FROM t WHERE id = $1"
    assert line.fingerprint is not None and len(line.fingerprint) == 16


def test_same_query_shape_same_fingerprint() -> None:
    a = one(f"{T0} [1] a@b/c LOG:  duration: 1 ms  statement: SELECT * FROM t WHERE id = 1\n")
    b = one(f"{T0} [1] a@b/c LOG:  duration: 2 ms  statement: SELECT * FROM t WHERE id = 99\n")
    c = one(f"{T0} [1] a@b/c LOG:  duration: 2 ms  statement: SELECT * FROM u WHERE id = 99\n")
    assert a.fingerprint == b.fingerprint != c.fingerprint


def test_multiline_slow_statement() -> None:
    text = f"{T0} [1] a@b/c LOG:  duration: 5.0 ms  statement: SELECT 1\n\tFROM t\n"
    line = one(text)
    assert (line.kind, line.statement) == ("slow_query", "SELECT $1\nFROM t")
    assert line.message == "duration: 5.0 ms  statement"


def test_statement_kind() -> None:
    line = one(f"{T0} [1] a@b/c LOG:  statement: UPDATE t SET a = 'x'\n")
    assert (line.kind, line.message, line.statement, line.duration_ms) == (
        "statement",
        "statement",
        "UPDATE t SET a = $1",
        None,
    )


# pgaudit's records (pgaudit.c log_audit_event): (message, message kept, statement, safe)
AUDIT_CASES = [
    (
        "AUDIT: SESSION,3,1,WRITE,INSERT,TABLE,public.users,\"INSERT INTO users VALUES ('bob', 'x');\",<none>",
        "AUDIT: SESSION,3,1,WRITE,INSERT,TABLE,public.users,<none>",
        "INSERT INTO users VALUES ('bob', 'x');",
        True,
    ),
    (  # unquoted: no comma, quote or line break in it
        "AUDIT: OBJECT,4,1,READ,SELECT,TABLE,public.users,SELECT * FROM users WHERE ssn = '1';,<not logged>",
        "AUDIT: OBJECT,4,1,READ,SELECT,TABLE,public.users,<not logged>",
        "SELECT * FROM users WHERE ssn = '1';",
        True,
    ),
    (  # pgaudit.log_rows adds the rows; a line break quotes the statement
        'AUDIT: SESSION,8,1,READ,SELECT,,,"SELECT \'a\nb\', ""c""",<none>,1',
        "AUDIT: SESSION,8,1,READ,SELECT,,,<none>,1",
        "SELECT 'a\nb', \"c\"",
        True,
    ),
    (  # log_statement_once / pgaudit.log_statement off: no statement
        'AUDIT: SESSION,9,2,READ,SELECT,TABLE,"public.""Odd, name""",<previously logged>,<previously logged>',
        'AUDIT: SESSION,9,2,READ,SELECT,TABLE,"public.""Odd, name""",<previously logged>',
        None,
        True,
    ),
    (  # pgaudit.log_parameter: the parameters are values (redact.py removes them)
        'AUDIT: SESSION,6,1,READ,SELECT,TABLE,public.users,SELECT $1,"""alice, """"x"""""""',
        'AUDIT: SESSION,6,1,READ,SELECT,TABLE,public.users,"""alice, """"x"""""""',
        "SELECT $1",
        False,
    ),
]


@pytest.mark.parametrize(("message", "kept", "statement", "safe"), AUDIT_CASES)
def test_a_pgaudit_record_is_a_statement(message: str, kept: str, statement: str | None, safe: bool) -> None:
    found = classify("LOG", message, None)
    assert (found.kind, found.message, found.statement, found.safe) == ("statement", kept, statement, safe)
    # a RAISE EXCEPTION (P0001) or another severity writing the same words is not proven
    assert classify("ERROR", message, "P0001").safe is False


@pytest.mark.parametrize(
    "message", ["AUDIT: something else", "AUDIT: SESSION,1,1,READ,SELECT,,,select 1", "AUDIT: SESSION,x,1,READ,S,,,a,b"]
)
def test_an_audit_word_alone_is_not_a_pgaudit_record(message: str) -> None:
    assert classify("LOG", message, None)[:2] == ("other", None)


@pytest.mark.parametrize(
    ("plan", "query"),
    [
        ("\nQuery Text: SELECT 1\nResult  (cost=0.00..0.01 rows=1 width=4)", "SELECT 1"),
        (  # several lines, and PG16+'s parameters (values) after it
            "\nQuery Text: SELECT a\n  FROM t WHERE b = $1\nQuery Parameters: $1 = 'x'"
            "\nSeq Scan on t  (cost=0.00..1.00 rows=1 width=4)",
            "SELECT a\n  FROM t WHERE b = $1",
        ),
        ("\nQuery Text: SELECT a FROM t", None),  # cut before the plan: where the query ends is unknown
        ('\nQuery Text: "SELECT \'a\'\\n;"\nPlan: \n  Node Type: "Result"', "SELECT 'a'\n;"),  # YAML
        ('\n{\n  "Query Text": "SELECT 1 < 2",\n  "Plan": {}\n}', "SELECT 1 < 2"),  # JSON
        ('\n{\n  "Query Text": "SELECT 1', None),  # JSON cut
        (
            '\n<explain xmlns="x">\n  <Query-Text>SELECT 1 &lt; 2 &amp;&amp; &amp;lt;</Query-Text>',
            "SELECT 1 < 2 && &lt;",
        ),
        ('\n<explain xmlns="x">\n  <Query-Text>SELECT 1', None),  # XML cut
        ("\nsomething else", None),
    ],
)
def test_an_auto_explain_plans_query_text(plan: str, query: str | None) -> None:
    assert plan_query(plan) == query
    found = classify("LOG", f"duration: 1.500 ms  plan:{plan}", None)
    assert (found.kind, found.duration_ms, found.statement, found.safe) == ("slow_query", 1.5, query, False)


def test_a_pg_cron_job_start_is_a_statement() -> None:
    text = (
        f"{T0} [7] LOG:  cron job 3 starting: DELETE FROM events WHERE owner = 'alice@example.com'\n"
        f"{T0} [7] LOG:  cron job 3 COMMAND completed: DELETE 5 5\n"
        f'{T0} [7] LOG:  cron job 4 ERROR:  relation "alice@example.com" does not exist\n'
    )
    start, done, failed = parse_text(text)
    assert (start.kind, start.message, start.statement) == (
        "statement",
        "cron job 3 starting",
        "DELETE FROM events WHERE owner = $1",
    )
    assert (done.kind, done.message, done.redacted) == ("other", "cron job 3 COMMAND completed: DELETE 5 5", False)
    assert (failed.message, failed.redacted) == ("cron job 4 ...", True)


def test_a_pgaudit_record_keeps_no_parameter() -> None:
    text = (
        f"{T0} [1] a@b/c LOG:  AUDIT: SESSION,6,1,READ,SELECT,TABLE,public.users,"
        'SELECT * FROM users WHERE name = $1;,"""Jane, """"Doe"""""""\n'
        f'{T0} [1] a@b/c LOG:  AUDIT: SESSION,7,1,READ,SELECT,TABLE,"public.""Odd, name""",select 1,42\n'
    )
    first, odd = parse_text(text)
    assert (first.kind, first.message, first.statement) == (
        "statement",
        "AUDIT: SESSION,6,1,READ,SELECT,TABLE,public.users,...",
        "SELECT * FROM users WHERE name = $1;",
    )
    assert first.redacted and "Jane" not in str(first)
    assert odd.message == "AUDIT: SESSION,7,1,READ,SELECT,TABLE,..." and odd.statement == "select $1"


def test_error_takes_sqlstate_from_the_prefix() -> None:
    line = one(f'{T0} [1] 23505 ERROR:  duplicate key value violates unique constraint "k"\n', prefix="%m [%p] %e ")
    assert (line.kind, line.sqlstate) == ("error", "23505")


def test_sqlstate_is_never_guessed() -> None:
    line = one(f'{T0} [1] a@b/c ERROR:  duplicate key value violates unique constraint "k"\n')
    assert line.sqlstate is None


# (message, safe): `safe` only for a whole message of server facts (see classify's docstring)
SAFE_CASES = [
    ("duration: 1.0 ms", True),
    ("duration: 1.0 ms  statement: SELECT 'x'", True),
    ("duration: 1.0 ms  execute S_1/C_2: SELECT 1", True),
    ("duration: 1.0 ms  execute my 'odd' name: SELECT 1", False),
    ("statement: SELECT 'x'", True),
    ("execute <unnamed>: SELECT 1", True),
    ("connection received: host=10.0.0.1 port=5432", True),
    ("connection received: host=x 'y' port=1", False),
    ("checkpoint starting: time", True),
    ("checkpoint starting: 'secret'", False),
    ('automatic vacuum of table "a.b.c": index scans: 0\npages: 0 removed, 1 remain', True),
    ("automatic vacuum of table \"a.b.c\": index scans: 0\nsecret 'x'", False),
    ('temporary file: path "base/pgsql_tmp/pgsql_tmp1.0", size 8192', True),
    ("process 1 still waiting for ShareLock on transaction 5 after 1000.0 ms", True),
    ("process 1 could not obtain ShareLock on transaction 5", True),
    ("process 1 could not obtain ExclusiveLock on advisory lock [1,2,3,1]", False),
    # PG12-13: an analyze's system usage on the report's first line
    ('automatic analyze of table "a.b.c" system usage: CPU: user: 0.01 s, system: 0.00 s, elapsed: 0.03 s', True),
    ('automatic analyze of table "a.b.c" system usage: John Smith\'s card', False),
    ("process 1 still waiting for ExclusiveLock on advisory lock [1,2,3,1] after 1000.0 ms", False),
    ("deadlock detected", False),  # other kinds go through the template table
    ('relation "t" does not exist', False),
    # The reports' words, then free text (RAISE LOG): never safe, quote or not.
    ("checkpoint starting: immediate force wait", True),
    ("restartpoint starting: shutdown immediate", True),
    ("checkpoint starting: fast force wait", True),  # PG18's word for immediate
    ("checkpoint starting: card 4111 1111 for John Smith", False),
    (
        "checkpoint complete: wrote 3 buffers (0.0%); 0 WAL file(s) added, 0 removed, 0 recycled; write=0.002 s, "
        "sync=0.001 s, total=0.010 s; sync files=2, longest=0.001 s, average=0.001 s; distance=0 kB, "
        "estimate=0 kB; lsn=0/1500100, redo lsn=0/15000C8",
        True,
    ),
    ("checkpoint complete: wrote 3 buffers (0.0%), wrote 1 SLRU buffers; 0 WAL file(s) added", True),  # PG17
    ("checkpoint complete: customer John Smith owes 5000", False),
    ("connection received: host=[local]", True),
    ("connection received: host=johnsmith ssn 123", False),
    ("connection authorized: user=postgres database=postgres application_name=psql", True),
    (
        "connection authorized: user=app database=shop application_name=pgAdmin 4 - DB:shop SSL enabled "
        "(protocol=TLSv1.3, cipher=TLS_AES_256_GCM_SHA384, bits=256)",
        True,
    ),
    ("replication connection authorized: user=rep application_name=walreceiver", True),
    ("connection authorized: user=x ssn 123-45-6789 John Smith", False),
    ("disconnection: session time: 0:00:01.234 user=app database=shop host=10.0.0.1 port=5432", True),
    ("disconnection: session time: 0:00:00.005 user=postgres database=postgres host=[local]", True),
    ("disconnection: session time: 0:00:00.000 user=patient Jane Doe diagnosis HIV", False),
    ('temporary file: path "base/pgsql_tmp/pgsql_tmp1234.0.fileset/i1of2.p0.0", size 8192', True),
    ('temporary file: path "pg_tblspc/16385/PG_15_202209061/pgsql_tmp/pgsql_tmp99.3", size 1', True),
    ('temporary file: path "ssn 123-45-6789 John Smith", size 1', False),
    (
        'automatic vacuum of table "a.b.c": index scans: 0\npages: 0 removed, 1 remain, 1 scanned (100.00% of total)'
        "\nvisibility map: 1 pages set all-visible, 0 pages set all-frozen (0 were all-visible)"
        "\ndelay time: 0.000 ms\nsystem usage: CPU: user: 0.00 s, system: 0.00 s, elapsed: 0.00 s",
        True,
    ),
    # text a child process wrote to stderr, unprefixed, inside the report's entry
    ('automatic vacuum of table "a.b.c": index scans: 0\npages: 0 removed, 1 remain\ndebug: John Smith 4111', False),
    # PostgreSQL prints names as they are: a double quote inside one does not end it (PG15 texts);
    # the name is all up to the fixed tail that ends the first line, and the rest is the template
    (
        'automatic vacuum of table "Shop.public.vac"tbl": index scans: 1\n\tpages: 0 removed, 1 remain, 1 scanned'
        ' (100.00% of total)\n\tindex "vac"tbl_pkey": pages: 2 in total, 0 newly deleted, 0 currently deleted,'
        " 0 reusable\n\tsystem usage: CPU: user: 0.00 s, system: 0.00 s, elapsed: 0.00 s",
        True,
    ),
    (
        'automatic analyze of table "we\'ird "db"; $$ x.public.vac"tbl"\n\tbuffer usage: 188 hits, 0 misses,'
        " 4 dirtied\n\tsystem usage: CPU: user: 0.00 s, system: 0.00 s, elapsed: 0.00 s",
        True,
    ),
    ('automatic analyze of table "a"b.c.d" system usage: CPU: user: 0.01 s, system: 0.00 s, elapsed: 0.03 s', True),
    # ... but never more than the name: text after the tail, a tail of another shape, an index
    # line whose counters are not the template's
    ('automatic vacuum of table "a"b.c.d": index scans: 0 \'secret\'', False),
    ('automatic vacuum of table "a"b.c.d": index scans: 0\nsecret \'x\'', False),
    ('automatic vacuum of table "a"b.c.d": index scans: x \'secret\'', False),
    ('automatic analyze of table "a"b.c.d" system usage: John Smith\'s card', False),
    ('automatic analyze of table "a"b.c.d"\nsecret \'x\'', False),
    ('automatic vacuum of table "a.b.c": index scans: 0\n\tindex "i"x": pages: card 4111 of John', False),
    ('automatic vacuum of table "a.b.c": index scans: 0\n\tindex "i"x": pages: 2 in total, 0 newly deleted', False),
]


@pytest.mark.parametrize(("message", "safe"), SAFE_CASES)
def test_safe_only_for_messages_of_server_facts(message: str, safe: bool) -> None:
    assert classify("LOG", message, None).safe is safe


@pytest.mark.parametrize(
    ("severity", "sqlstate"), [("ERROR", "P0001"), ("WARNING", None), ("LOG", "P0001"), ("NOTICE", None)]
)
def test_a_report_is_the_servers_only_at_log_without_sqlstate(severity: str, sqlstate: str | None) -> None:
    # RAISE EXCEPTION 'checkpoint complete: ...' is an ERROR with P0001; the server's reports are LOG.
    message = "checkpoint complete: wrote 3 buffers (0.0%); 0 WAL file(s) added"
    assert classify("LOG", message, None).safe is True
    assert classify(severity, message, sqlstate).safe is False


def test_an_autovacuum_report_naming_a_quoted_name_is_the_servers_only_from_a_background_process() -> None:
    # A session's RAISE LOG of the same words has a user and database (and a CONTEXT): value removal
    report = (
        'automatic vacuum of table "Shop.public.vac"tbl": index scans: 0\n'
        "\tsystem usage: CPU: user: 0.00 s, system: 0.00 s, elapsed: 0.00 s"
    )
    worker = one(f"{T0} [7] @/ LOG:  {report}\n")
    session = one(f"{T0} [8] app@shop/psql LOG:  {report}\n")
    kept = report.replace("\n\t", "\n")  # a continuation line's TAB is the log's, not the message's
    assert (worker.kind, worker.message, worker.redacted) == ("autovacuum", kept, False)
    assert (session.kind, session.redacted) == ("autovacuum", True) and session.message != kept


def test_many_index_lines_of_a_report_that_is_not_safe_fail_fast() -> None:
    # an index line reads as either index label: no trying every way to read them all
    index = '\n\tindex "i": pages: 2 in total, 0 newly deleted, 0 currently deleted, 0 reusable'
    message = 'automatic vacuum of table "a.b.c": index scans: 1' + index * 5000 + "\n'"
    assert classify("LOG", message, None).safe is False


def test_a_long_report_that_is_not_safe_fails_fast() -> None:
    # possessive quantifiers: no backtracking through the ways to split a long report
    message = "checkpoint complete: " + "wrote 3 buffers (0.0%); " * 20000 + "'"
    assert classify("LOG", message, None).safe is False


def test_the_parser_builds_proper_loglines() -> None:
    line = one(f"{T0} [1] a@b/c LOG:  duration: 2.5 ms  statement: SELECT 'x'\n")
    assert type(line) is LogLine and len(line) == len(LogLine._fields)
    assert line == LogLine(**line._asdict())
    assert (line.kind, line.duration_ms, line.statement, line.redacted) == ("slow_query", 2.5, "SELECT $1", True)
    with pytest.raises(AttributeError):
        line.message = "changed"  # type: ignore[misc]
