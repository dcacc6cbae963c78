"""A corpus of PostgreSQL 13-18 log entries: stderr text in, classified and redacted line out.

Each case is the text PostgreSQL writes (prefix `%m [%p] %q%u@%d/%a `, `lc_messages = 'C'`) and
the fields expected after value removal (`full_text` off). Only the fields a case names are
compared; `kind` always is.

Secrets: every value a case puts in its input is spelled with `S3CR` in it (strings) or starts
with `98765` (numbers). `test_no_secret_survives` finds them all in the input and checks that
none is in any field of the output (the SPEC fields plus the fingerprint), and that such an
entry is flagged `redacted`.

Message texts follow PostgreSQL's source (the file is named where the wording varies by version).
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from pglog_helpers import PREFIX as P_PREFIX
from pglog_helpers import T0, parse_text

from forwarder.model import spec_fields

P = f"{T0} [4242] app@shop/web "  # a session's prefix
Q = f"{T0} [62] "  # a process without a session: %q stops the prefix


def entry(*lines: str, session: bool = True) -> str:
    """Log text: each `SEVERITY:  text` line gets the prefix; TAB-led lines are continuations."""
    prefix = P if session else Q
    return "".join((line if line.startswith("\t") else prefix + line) + "\n" for line in lines)


E = "%m [%p] %e "  # a prefix with the SQLSTATE (%e): cases that use it say prefix=E


def case(text: str, kind: str, **expected: Any) -> Any:
    return pytest.param(text, kind, expected, id=f"{kind}:{text[len(P) : len(P) + 60]}")


def parse(text: str, expected: dict[str, Any], *, full_text: bool = False) -> list[Any]:
    return parse_text(text, prefix=expected.get("prefix", P_PREFIX), full_text=full_text)


CASES = [
    # ---------------------------------------------------------------- slow_query (postgres.c)
    case(
        entry("LOG:  duration: 639.686 ms  statement: SELECT * FROM orders WHERE email = 'S3CR@x.io' AND id = 98765"),
        "slow_query",
        duration_ms=639.686,
        message="duration: 639.686 ms  statement",
        statement="SELECT * FROM orders WHERE email = $1 AND id = $2",
        redacted=True,
    ),
    case(
        entry(
            "LOG:  duration: 3065.420 ms  execute <unnamed>: SELECT * FROM t WHERE a = $1 AND b = $2",
            "DETAIL:  parameters: $1 = 'S3CR-a', $2 = '98765'",
        ),
        "slow_query",
        duration_ms=3065.42,
        message="duration: 3065.420 ms  execute <unnamed>",
        statement="SELECT * FROM t WHERE a = $1 AND b = $2",
        detail="parameters: $1 = '...', $2 = '...'",
        redacted=True,
    ),
    case(
        entry(
            "LOG:  duration: 1.5 ms  execute S_1: SELECT name FROM users WHERE id = $1",
            "DETAIL:  Parameters: $1 = 'S3CR'",  # PostgreSQL 18 capitalizes it
        ),
        "slow_query",
        duration_ms=1.5,
        message="duration: 1.5 ms  execute S_1",
        detail="Parameters: $1 = '...'",
    ),
    case(
        entry("LOG:  duration: 0.211 ms  execute S_2/C_3: SELECT 1"),
        "slow_query",
        duration_ms=0.211,
        message="duration: 0.211 ms  execute S_2/C_3",
        statement="SELECT $1",
    ),
    case(
        entry("LOG:  duration: 4.000 ms  execute fetch from S_2/C_3: SELECT * FROM big"),
        "slow_query",
        duration_ms=4.0,
        message="duration: 4.000 ms  execute fetch from S_2/C_3",
        statement="SELECT * FROM big",
        redacted=False,
    ),
    case(
        entry("LOG:  duration: 0.050 ms  parse <unnamed>: SELECT * FROM t WHERE a = 'S3CR'"),
        "slow_query",
        duration_ms=0.05,
        message="duration: 0.050 ms  parse <unnamed>",
        statement="SELECT * FROM t WHERE a = $1",
    ),
    case(
        entry(
            "LOG:  duration: 0.090 ms  bind <unnamed>: INSERT INTO t (a, b) VALUES ($1, $2)",
            "DETAIL:  parameters: $1 = NULL, $2 = 'S3CR it''s'",
        ),
        "slow_query",
        duration_ms=0.09,
        message="duration: 0.090 ms  bind <unnamed>",
        detail="parameters: $1 = NULL, $2 = '...'",
    ),
    case(
        entry(
            "LOG:  duration: 0.090 ms  bind S_7/P_1: SELECT $1",
            "DETAIL:  parameters: $1 = 'S3CR, truncated by log_parameter_max_length...'",
        ),
        "slow_query",
        message="duration: 0.090 ms  bind S_7/P_1",
        detail="parameters: $1 = '...'",
    ),
    case(entry("LOG:  duration: 12.345 ms"), "slow_query", duration_ms=12.345, message="duration: 12.345 ms"),
    case(
        entry("LOG:  duration: 5.0 ms  statement: SELECT a,", "\tb FROM t", "\tWHERE c = 'S3CR'"),
        "slow_query",
        duration_ms=5.0,
        message="duration: 5.0 ms  statement",
        statement="SELECT a,\nb FROM t\nWHERE c = $1",
    ),
    case(
        entry("LOG:  duration: 7.5 ms  statement: SELECT 1 /* user S3CR */ -- card 98765"),
        "slow_query",
        statement="SELECT $1",
        redacted=True,
    ),
    case(
        entry("LOG:  duration: 8 ms  statement: SELECT $$S3CR dollar$$, $q$S3CR$q$, E'S3CR\\n', X'98765'"),
        "slow_query",
        statement="SELECT $1, $2, $3, $4",
    ),
    case(
        entry("LOG:  duration: 9.1 ms  statement: SELECT * FROM t WHERE note = 'S3CR cut by track_activity"),
        "slow_query",
        statement="SELECT * FROM t WHERE note = $1",
    ),
    case(
        entry("LOG:  duration: 2.2 ms  statement: SELECT * FROM t WHERE id IN (98765, 987651, 987652)"),
        "slow_query",
        statement="SELECT * FROM t WHERE id IN ($1, $2, $3)",
    ),
    case(
        entry("LOG:  duration: 2.2 ms  statement: UPDATE t SET n = -98765, f = 9876.5e3 WHERE id = 98765"),
        "slow_query",
        statement="UPDATE t SET n = $1, f = $2 WHERE id = $3",
    ),
    case(
        # a syntax error at SELEC: the strict scrubber (no word from the error on is kept)
        entry("LOG:  duration: 1.0 ms  statement: SELEC 'S3CR' FROM t"),
        "slow_query",
        statement="$1 $2 FROM $3",
    ),
    case(
        entry(  # auto_explain, text format: the plan holds the query text and filter values
            "LOG:  duration: 1002.5 ms  plan:",
            "\tQuery Text: SELECT * FROM t WHERE email = 'S3CR@x.io'",
            "\tSeq Scan on t  (cost=0.00..35.50 rows=10 width=36)",
            "\t  Filter: (email = 'S3CR@x.io'::text)",
        ),
        "slow_query",
        duration_ms=1002.5,
        message="duration: 1002.5 ms  plan:\n...",
        redacted=True,
    ),
    case(
        entry(  # auto_explain, JSON format
            "LOG:  duration: 3.0 ms  plan:",
            "\t{",
            '\t  "Query Text": "SELECT * FROM t WHERE id = 98765",',
            '\t  "Plan": {"Node Type": "Index Scan", "Index Cond": "(id = 98765)"}',
            "\t}",
        ),
        "slow_query",
        duration_ms=3.0,
        message="duration: 3.0 ms  plan:\n...",
    ),
    # ---------------------------------------------------------------- statement (log_statement)
    case(
        entry("LOG:  statement: SELECT * FROM accounts WHERE iban = 'S3CR-IBAN'"),
        "statement",
        message="statement",
        statement="SELECT * FROM accounts WHERE iban = $1",
        duration_ms=None,
        redacted=True,
    ),
    case(
        entry(
            "LOG:  execute <unnamed>: SELECT * FROM t WHERE a = $1",
            "DETAIL:  parameters: $1 = 'S3CR'",
        ),
        "statement",
        message="execute <unnamed>",
        statement="SELECT * FROM t WHERE a = $1",
        detail="parameters: $1 = '...'",
    ),
    case(entry("LOG:  execute S_1: BEGIN"), "statement", message="execute S_1", statement="BEGIN", redacted=False),
    case(
        entry("LOG:  statement: ALTER ROLE bob PASSWORD 'S3CR-pw'"),
        "statement",
        statement="ALTER ROLE bob PASSWORD $1",
    ),
    case(
        entry("LOG:  statement: CREATE ROLE eve LOGIN ENCRYPTED PASSWORD 'SCRAM-SHA-256$4096:S3CR'"),
        "statement",
        statement="CREATE ROLE eve LOGIN ENCRYPTED PASSWORD $1",
    ),
    case(
        entry("LOG:  statement: CREATE TABLE t (a text DEFAULT 'S3CR', b int DEFAULT 98765)"),
        "statement",
        statement="CREATE TABLE t (a text DEFAULT $1, b int DEFAULT $2)",
    ),
    case(
        entry("LOG:  statement: CREATE SUBSCRIPTION s CONNECTION 'host=db password=S3CR' PUBLICATION p"),
        "statement",
        statement="CREATE SUBSCRIPTION s CONNECTION $1 PUBLICATION p",
    ),
    case(
        entry("LOG:  statement: SELECT dblink_connect('host=db user=bob password=S3CR dbname=x')"),
        "statement",
        statement="SELECT dblink_connect($1)",
    ),
    case(
        entry("LOG:  statement: CREATE USER MAPPING FOR bob SERVER s OPTIONS (user 'bob', password 'S3CR')"),
        "statement",
        statement="CREATE USER MAPPING FOR bob SERVER s OPTIONS (user $1, password $2)",
    ),
    case(
        entry("LOG:  statement: PREPARE p AS SELECT * FROM c WHERE n = 98765"),
        "statement",
        statement="PREPARE p AS SELECT * FROM c WHERE n = $1",
    ),
    case(
        entry("LOG:  statement: DO $$BEGIN RAISE NOTICE 'S3CR'; END$$"),
        "statement",
        statement="DO $1",
    ),
    # ---------------------------------------------------------------- lock_wait (proc.c, standby.c)
    case(
        entry(
            "LOG:  process 4242 still waiting for ShareLock on transaction 700737 after 1000.123 ms",
            "DETAIL:  Process holding the lock: 4243. Wait queue: 4242.",
            'CONTEXT:  while updating tuple (0,5) in relation "orders"',
            "STATEMENT:  UPDATE orders SET status = 'S3CR' WHERE id = 98765",
        ),
        "lock_wait",
        duration_ms=1000.123,
        message="process 4242 still waiting for ShareLock on transaction 700737 after 1000.123 ms",
        detail="Process holding the lock: 4243. Wait queue: 4242.",
        context='while updating tuple (0,5) in relation "orders"',
        statement="UPDATE orders SET status = $1 WHERE id = $2",
    ),
    case(
        entry("LOG:  process 4242 acquired ShareLock on transaction 700737 after 2345.500 ms"),
        "lock_wait",
        duration_ms=2345.5,
        redacted=False,
    ),
    case(
        entry(
            "LOG:  process 9 still waiting for AccessExclusiveLock on relation 16384 of database 5 after 1000.004 ms",
            "DETAIL:  Processes holding the lock: 10, 11. Wait queue: 9.",
        ),
        "lock_wait",
        duration_ms=1000.004,
        detail="Processes holding the lock: 10, 11. Wait queue: 9.",
    ),
    case(
        entry(
            "LOG:  process 9 still waiting for ExclusiveLock on tuple (3,7) of relation 16384 of database 5 "
            "after 1000.0 ms"
        ),
        "lock_wait",
        duration_ms=1000.0,
        redacted=False,
    ),
    case(
        entry("LOG:  process 9 still waiting for ExclusiveLock on advisory lock [16384,0,98765,1] after 1001.0 ms"),
        "lock_wait",
        duration_ms=1001.0,
        message="process 9 still waiting for ExclusiveLock on advisory lock [...] after 1001.0 ms",
        redacted=True,
    ),
    case(
        entry(
            "LOG:  process 9 avoided deadlock for ShareLock on transaction 7 by rearranging queue order after 1000.2 ms"
        ),
        "lock_wait",
        duration_ms=1000.2,
        redacted=False,
    ),
    case(
        entry("LOG:  process 9 detected deadlock while waiting for ShareLock on transaction 7 after 1000.1 ms"),
        "lock_wait",
        duration_ms=1000.1,
    ),
    case(
        entry("LOG:  process 9 still waiting for ShareLock on virtual transaction 3/45 after 1500.0 ms"),
        "lock_wait",
        duration_ms=1500.0,
        redacted=False,
    ),
    case(
        entry("LOG:  recovery still waiting after 10.400 ms: recovery conflict on snapshot", session=False),
        "lock_wait",
        duration_ms=10.4,
        redacted=False,
    ),
    case(
        entry("LOG:  recovery finished waiting after 20.5 ms: recovery conflict on lock", session=False),
        "lock_wait",
        duration_ms=20.5,
    ),
    # ---------------------------------------------------------------- deadlock (deadlock.c)
    case(
        entry(
            "ERROR:  deadlock detected",
            "DETAIL:  Process 4242 waits for ShareLock on transaction 9; blocked by process 4243.",
            "\tProcess 4243 waits for ShareLock on transaction 8; blocked by process 4242.",
            "\tProcess 4242: UPDATE accounts SET note = 'S3CR-1' WHERE id = 98765",
            "\tProcess 4243: UPDATE accounts SET note = 'S3CR-2'",
            "\t  WHERE id = 987650",
            "HINT:  See server log for query details.",
            'CONTEXT:  while updating tuple (0,1) in relation "accounts"',
            "STATEMENT:  UPDATE accounts SET note = 'S3CR-1' WHERE id = 98765",
        ),
        "deadlock",
        sqlstate="40P01",
        message="deadlock detected",
        detail="Process 4242 waits for ShareLock on transaction 9; blocked by process 4243.\n"
        "Process 4243 waits for ShareLock on transaction 8; blocked by process 4242.\n"
        "Process 4242: UPDATE accounts SET note = $1 WHERE id = $2\n"
        "Process 4243: UPDATE accounts SET note = $1\n  WHERE id = $2",
        hint="See server log for query details.",
        context='while updating tuple (0,1) in relation "accounts"',
        statement="UPDATE accounts SET note = $1 WHERE id = $2",
        redacted=True,
    ),
    case(
        entry(
            "ERROR:  deadlock detected",
            "DETAIL:  Process 1 waits for ExclusiveLock on advisory lock [16384,0,98765,1]; blocked by process 2.",
        ),
        "deadlock",
        sqlstate="40P01",
        detail="Process 1 waits for ExclusiveLock on advisory lock [...]; blocked by process 2.",  # a key is a value
    ),
    case(
        f"{T0} [4242] 40P01 ERROR:  deadlock detected\n",  # with %e: the log's own code
        "deadlock",
        sqlstate="40P01",
        prefix=E,
    ),
    # ---------------------------------------------------------------- auth_failure (auth.c, hba.c, postinit.c)
    case(
        entry(
            'FATAL:  password authentication failed for user "bob"',
            'DETAIL:  Password does not match for user "bob".',
            '\tConnection matched pg_hba.conf line 95: "host all all 0.0.0.0/0 scram-sha-256"',
        ),
        "auth_failure",
        sqlstate="28P01",
        message='password authentication failed for user "bob"',
        detail='Password does not match for user "bob".\nConnection matched pg_hba.conf line 95: "..."',
        redacted=True,
    ),
    case(
        entry(
            'FATAL:  password authentication failed for user "bob"',
            'DETAIL:  Connection matched file "/etc/postgresql/16/main/pg_hba.conf" line 3: '
            '"host all S3CR 10.0.0.0/8 md5"',
        ),
        "auth_failure",
        sqlstate="28P01",
        detail='Connection matched file "/etc/postgresql/16/main/pg_hba.conf" line 3: "..."',
    ),
    case(
        entry(
            'FATAL:  password authentication failed for user "ghost"',
            'DETAIL:  Role "ghost" does not exist.',
            '\tConnection matched pg_hba.conf line 95: "host all all all md5"',
        ),
        "auth_failure",
        sqlstate="28P01",
        detail='Role "ghost" does not exist.\nConnection matched pg_hba.conf line 95: "..."',
    ),
    case(
        entry('FATAL:  password authentication failed for user "bob"', 'DETAIL:  User "bob" has no password assigned.'),
        "auth_failure",
        detail='User "bob" has no password assigned.',
    ),
    case(
        entry('FATAL:  password authentication failed for user "bob"', 'DETAIL:  User "bob" has an expired password.'),
        "auth_failure",
        detail='User "bob" has an expired password.',
    ),
    case(
        entry('FATAL:  no pg_hba.conf entry for host "10.0.0.9", user "bob", database "shop", no encryption'),
        "auth_failure",
        sqlstate="28000",
        message='no pg_hba.conf entry for host "10.0.0.9", user "bob", database "shop", no encryption',
        redacted=False,
    ),
    case(
        entry('FATAL:  no pg_hba.conf entry for host "10.0.0.9", user "bob", database "shop", SSL off'),  # PG13
        "auth_failure",
        sqlstate="28000",
        redacted=False,
    ),
    case(
        entry('FATAL:  no pg_hba.conf entry for host "10.0.0.9", user "bob", database "shop", GSS encryption'),
        "auth_failure",
        sqlstate="28000",
    ),
    case(
        entry(
            'FATAL:  no pg_hba.conf entry for replication connection from host "10.0.0.9", user "rep", SSL encryption'
        ),
        "auth_failure",
        sqlstate="28000",
        redacted=False,
    ),
    case(
        entry('FATAL:  pg_hba.conf rejects connection for host "10.0.0.9", user "bob", database "shop", no encryption'),
        "auth_failure",
        sqlstate="28000",
        redacted=False,
    ),
    case(
        entry('FATAL:  role "mallory" does not exist'),
        "auth_failure",
        sqlstate="28000",
        message='role "mallory" does not exist',
    ),
    case(entry('FATAL:  role "nologin" is not permitted to log in'), "auth_failure", sqlstate="28000"),
    case(entry('FATAL:  Peer authentication failed for user "bob"'), "auth_failure", sqlstate="28000", redacted=False),
    case(entry('FATAL:  Ident authentication failed for user "bob"'), "auth_failure", sqlstate="28000"),
    case(entry('FATAL:  LDAP authentication failed for user "bob"'), "auth_failure", sqlstate="28000"),
    case(entry('FATAL:  certificate authentication failed for user "bob"'), "auth_failure", sqlstate="28000"),
    case(
        f'{T0} [4242] 28P01 FATAL:  password authentication failed for user "bob"\n',
        "auth_failure",
        sqlstate="28P01",
        prefix=E,
    ),
    # ---------------------------------------------------------------- too_many_connections (postinit.c)
    case(entry("FATAL:  sorry, too many clients already"), "too_many_connections", sqlstate="53300", redacted=False),
    case(
        entry("FATAL:  remaining connection slots are reserved for non-replication superuser connections"),  # PG13-15
        "too_many_connections",
        sqlstate="53300",
        redacted=False,
    ),
    case(
        entry("FATAL:  remaining connection slots are reserved for roles with the SUPERUSER attribute"),  # PG16+
        "too_many_connections",
        sqlstate="53300",
        redacted=False,
    ),
    case(
        entry(
            "FATAL:  remaining connection slots are reserved for roles with privileges of the "
            '"pg_use_reserved_connections" role'
        ),
        "too_many_connections",
        sqlstate="53300",
        redacted=False,
    ),
    case(entry('FATAL:  too many connections for role "bob"'), "too_many_connections", sqlstate="53300"),
    case(entry('FATAL:  too many connections for database "shop"'), "too_many_connections", sqlstate="53300"),
    # ---------------------------------------------------------------- checkpoint (xlog.c, checkpointer.c)
    case(entry("LOG:  checkpoint starting: time", session=False), "checkpoint", message="checkpoint starting: time"),
    case(entry("LOG:  checkpoint starting: immediate force wait", session=False), "checkpoint", redacted=False),
    case(entry("LOG:  checkpoint starting: end-of-recovery immediate wait", session=False), "checkpoint"),
    case(entry("LOG:  checkpoint starting: shutdown immediate", session=False), "checkpoint"),
    case(
        entry(  # PG13-14
            "LOG:  checkpoint complete: wrote 3 buffers (0.0%); 0 WAL file(s) added, 0 removed, 0 recycled; "
            "write=0.001 s, sync=0.001 s, total=0.003 s; sync files=2, longest=0.001 s, average=0.001 s; "
            "distance=0 kB, estimate=0 kB",
            session=False,
        ),
        "checkpoint",
        redacted=False,
    ),
    case(
        entry(  # PG17
            "LOG:  checkpoint complete: wrote 4 buffers (0.0%); 0 WAL file(s) added, 0 removed, 0 recycled; "
            "write=0.303 s, sync=0.001 s, total=0.307 s; sync files=3, longest=0.001 s, average=0.001 s; "
            "distance=16 kB, estimate=16 kB; lsn=0/1A2B3C8, redo lsn=0/1A2B390",
            session=False,
        ),
        "checkpoint",
        redacted=False,
    ),
    case(
        entry(  # PG18
            "LOG:  checkpoint complete: wrote 4 buffers (0.0%), wrote 1 SLRU buffers; 0 WAL file(s) added, "
            "0 removed, 0 recycled; write=0.303 s, sync=0.001 s, total=0.307 s; sync files=3, longest=0.001 s, "
            "average=0.001 s; distance=16 kB, estimate=16 kB; lsn=0/1A2B3C8, redo lsn=0/1A2B390",
            session=False,
        ),
        "checkpoint",
        redacted=False,
    ),
    case(entry("LOG:  restartpoint starting: time", session=False), "checkpoint"),
    case(
        entry(
            "LOG:  restartpoint complete: wrote 10 buffers (0.1%); 0 WAL file(s) added, 0 removed, 1 recycled; "
            "write=1.0 s, sync=0.0 s, total=1.0 s; sync files=1, longest=0.0 s, average=0.0 s; "
            "distance=100 kB, estimate=100 kB",
            session=False,
        ),
        "checkpoint",
    ),
    case(
        entry(
            "LOG:  recovery restart point at 0/3000028",
            "DETAIL:  Last completed transaction was at log time 2026-11-22 02:00:00.123+00.",
            session=False,
        ),
        "checkpoint",
        detail="Last completed transaction was at log time 2026-11-22 02:00:00.123+00.",
    ),
    case(
        entry(
            "LOG:  checkpoints are occurring too frequently (9 seconds apart)",
            'HINT:  Consider increasing the configuration parameter "max_wal_size".',
            session=False,
        ),
        "checkpoint",
        hint='Consider increasing the configuration parameter "max_wal_size".',
        redacted=False,
    ),
    # ---------------------------------------------------------------- autovacuum (vacuumlazy.c, analyze.c)
    case(
        entry(  # PG13
            'LOG:  automatic vacuum of table "shop.public.orders": index scans: 1',
            "\tpages: 0 removed, 94 remain, 0 skipped due to pins, 0 skipped frozen",
            "\ttuples: 1000 removed, 10000 remain, 0 are dead but not yet removable, oldest xmin: 750",
            "\tbuffer usage: 296 hits, 0 misses, 3 dirtied",
            "\tavg read rate: 0.000 MB/s, avg write rate: 2.146 MB/s",
            "\tsystem usage: CPU: user: 0.00 s, system: 0.00 s, elapsed: 0.01 s",
            "\tWAL usage: 291 records, 3 full page images, 36823 bytes",
            session=False,
        ),
        "autovacuum",
        redacted=False,
    ),
    case(
        entry(  # PG15-16
            'LOG:  automatic vacuum of table "shop.public.orders": index scans: 0',
            "\tpages: 0 removed, 1 remain, 1 scanned (100.00% of total)",
            "\ttuples: 0 removed, 10 remain, 0 are dead but not yet removable",
            "\tremovable cutoff: 750, which was 0 XIDs old when operation ended",
            "\tnew relfrozenxid: 750, which is 3 XIDs ahead of previous value",
            "\tfrozen: 0 pages from table (0.00% of total) had 0 tuples frozen",
            "\tindex scan not needed: 0 pages from table (0.00% of total) had 0 dead item identifiers removed",
            '\tindex "orders_pkey": pages: 2 in total, 0 newly deleted, 0 currently deleted, 0 reusable',
            "\tI/O timings: read: 0.000 ms, write: 0.000 ms",
            "\tavg read rate: 0.000 MB/s, avg write rate: 0.000 MB/s",
            "\tbuffer usage: 19 hits, 0 misses, 0 dirtied",
            "\tWAL usage: 1 records, 0 full page images, 237 bytes",
            "\tsystem usage: CPU: user: 0.00 s, system: 0.00 s, elapsed: 0.00 s",
            session=False,
        ),
        "autovacuum",
        redacted=False,
    ),
    case(
        entry(  # PG17-18
            'LOG:  automatic vacuum of table "shop.public.orders": index scans: 0',
            "\tbuffer usage: 19 hits, 0 reads, 0 dirtied",
            "\tWAL usage: 1 records, 0 full page images, 237 bytes, 0 buffers full",
            "\tdelay time: 0.000 ms",
            session=False,
        ),
        "autovacuum",
        redacted=False,
    ),
    case(
        entry('LOG:  automatic aggressive vacuum of table "shop.public.t": index scans: 0', session=False),
        "autovacuum",
    ),
    case(
        entry(
            "LOG:  automatic aggressive vacuum to prevent wraparound of table "
            '"shop.pg_catalog.pg_class": index scans: 1',
            session=False,
        ),
        "autovacuum",
    ),
    case(
        entry(
            'LOG:  automatic analyze of table "shop.public.orders"',
            "\tavg read rate: 0.000 MB/s, avg write rate: 0.000 MB/s",
            "\tsystem usage: CPU: user: 0.01 s, system: 0.00 s, elapsed: 0.02 s",
            session=False,
        ),
        "autovacuum",
        redacted=False,
    ),
    case(
        entry("ERROR:  canceling autovacuum task", 'CONTEXT:  automatic vacuum of table "shop.public.orders"'),
        "autovacuum",
        context='automatic vacuum of table "shop.public.orders"',
        redacted=False,
    ),
    case(entry('LOG:  skipping vacuum of "orders" --- lock not available', session=False), "autovacuum"),
    # ---------------------------------------------------------------- temp_file (fd.c)
    case(
        entry(
            'LOG:  temporary file: path "base/pgsql_tmp/pgsql_tmp4242.7", size 1508885074',
            "STATEMENT:  SELECT * FROM orders WHERE email = 'S3CR@x.io' ORDER BY created_at",
        ),
        "temp_file",
        message='temporary file: path "base/pgsql_tmp/pgsql_tmp4242.7", size 1508885074',
        statement="SELECT * FROM orders WHERE email = $1 ORDER BY created_at",
    ),
    case(
        entry('LOG:  temporary file: path "pg_tblspc/16385/PG_15_202209061/pgsql_tmp/pgsql_tmp4242.0", size 8192'),
        "temp_file",
        redacted=False,
    ),
    # ---------------------------------------------------------------- connection (postmaster.c, postinit.c, ...)
    case(
        f"{T0} [4242] [unknown]@[unknown]/[unknown] LOG:  connection received: host=10.0.1.2 port=5432\n",
        "connection",
        message="connection received: host=10.0.1.2 port=5432",
        redacted=False,
    ),
    case(entry("LOG:  connection received: host=[local]"), "connection", redacted=False),
    case(
        entry('LOG:  connection authenticated: identity="bob" method=scram-sha-256 (/etc/pg_hba.conf:95)'),  # PG14+
        "connection",
        redacted=False,
    ),
    case(
        entry('LOG:  connection authenticated: identity="CN=bob,OU=ops" method=cert (/etc/pg_hba.conf:12)'),
        "connection",
    ),
    case(
        entry(  # PG13
            "LOG:  connection authorized: user=bob database=shop application_name=psql SSL enabled "
            "(protocol=TLSv1.3, cipher=TLS_AES_256_GCM_SHA384, bits=256, compression=off)"
        ),
        "connection",
        redacted=False,
    ),
    case(
        entry("LOG:  connection authorized: user=bob database=shop application_name=psql"),
        "connection",
        message="connection authorized: user=bob database=shop application_name=psql",
        redacted=False,
    ),
    case(entry("LOG:  connection authorized: user=bob database=shop"), "connection", redacted=False),
    case(
        entry("LOG:  replication connection authorized: user=rep application_name=walreceiver"),
        "connection",
        redacted=False,
    ),
    case(
        entry("LOG:  disconnection: session time: 0:00:01.234 user=bob database=shop host=10.0.1.2 port=5432"),
        "connection",
        redacted=False,
    ),
    case(
        entry("LOG:  disconnection: session time: 1:02:03.004 user=bob database=shop host=[local]"),
        "connection",
    ),
    case(
        entry("LOG:  connection ready: setup total=3.021 ms, fork=0.513 ms, authentication=1.212 ms"),  # PG18
        "connection",
        redacted=False,
    ),
    # ---------------------------------------------------------------- server (postmaster.c, xlog*.c, guc*.c)
    case(
        entry(
            "LOG:  starting PostgreSQL 13.16 on x86_64-pc-linux-gnu, compiled by gcc (GCC) 8.5.0, 64-bit", session=False
        ),
        "server",
        redacted=False,
    ),
    case(
        entry(
            "LOG:  starting PostgreSQL 15.8 (Debian 15.8-1.pgdg120+1) on x86_64-pc-linux-gnu, compiled by gcc "
            "(Debian 12.2.0-14) 12.2.0, 64-bit",
            session=False,
        ),
        "server",
        redacted=False,
    ),
    case(
        entry(
            "LOG:  starting PostgreSQL 18.0 on aarch64-unknown-linux-gnu, compiled by clang version 17.0.6, 64-bit",
            session=False,
        ),
        "server",
    ),
    case(entry('LOG:  listening on IPv4 address "0.0.0.0", port 5432', session=False), "server", redacted=False),
    case(entry('LOG:  listening on IPv6 address "::", port 5432', session=False), "server"),
    case(entry('LOG:  listening on Unix socket "/var/run/postgresql/.s.PGSQL.5432"', session=False), "server"),
    case(entry("LOG:  database system was shut down at 2026-11-22 02:00:00 UTC", session=False), "server"),
    case(
        entry("LOG:  database system was interrupted; last known up at 2026-11-22 02:00:00 UTC", session=False),
        "server",
        redacted=False,
    ),
    case(
        entry("LOG:  database system was not properly shut down; automatic recovery in progress", session=False),
        "server",
        redacted=False,
    ),
    case(entry("LOG:  redo starts at 0/16B3748", session=False), "server", redacted=False),
    case(
        entry(
            "LOG:  redo done at 0/16B3830 system usage: CPU: user: 0.00 s, system: 0.00 s, elapsed: 0.00 s",
            session=False,
        ),
        "server",
        redacted=False,
    ),
    case(entry("LOG:  database system is ready to accept connections", session=False), "server", redacted=False),
    case(entry("LOG:  database system is ready to accept read-only connections", session=False), "server"),
    case(entry("LOG:  received fast shutdown request", session=False), "server", redacted=False),
    case(entry("LOG:  received smart shutdown request", session=False), "server"),
    case(entry("LOG:  received immediate shutdown request", session=False), "server"),
    case(entry("LOG:  aborting any active transactions", session=False), "server"),
    case(entry("LOG:  shutting down", session=False), "server", redacted=False),
    case(entry("LOG:  database system is shut down", session=False), "server"),
    case(
        entry(
            "LOG:  server process (PID 4711) was terminated by signal 9: Killed",
            "DETAIL:  Failed process was running: UPDATE cards SET number = '98765' WHERE holder = 'S3CR'",
            session=False,
        ),
        "server",
        message="server process (PID 4711) was terminated by signal 9: Killed",
        detail="Failed process was running: UPDATE cards SET number = $1 WHERE holder = $2",
        redacted=True,
    ),
    case(
        entry("LOG:  server process (PID 4711) exited with exit code 1", session=False),
        "server",
        redacted=False,
    ),
    case(
        entry('LOG:  background worker "logical replication launcher" (PID 60) exited with exit code 1', session=False),
        "server",
        redacted=False,
    ),
    case(entry("LOG:  terminating any other active server processes", session=False), "server"),
    case(entry("LOG:  all server processes terminated; reinitializing", session=False), "server", redacted=False),
    case(entry("LOG:  received SIGHUP, reloading configuration files", session=False), "server", redacted=False),
    case(
        entry('LOG:  parameter "log_min_duration_statement" changed to "250"', session=False),
        "server",
        message='parameter "log_min_duration_statement" changed to "250"',
        redacted=False,
    ),
    case(
        entry('LOG:  parameter "primary_conninfo" changed to "host=db user=rep password=S3CR"', session=False),
        "server",
        message='parameter "primary_conninfo" changed to "..."',
        redacted=True,
    ),
    case(
        entry('LOG:  parameter "shared_buffers" cannot be changed without restarting the server', session=False),
        "server",
        redacted=False,
    ),
    case(
        entry(
            'LOG:  configuration file "/etc/postgresql/15/main/postgresql.conf" contains errors; '
            "unaffected changes were applied",
            session=False,
        ),
        "server",
        redacted=False,
    ),
    case(entry("FATAL:  the database system is starting up"), "server", sqlstate=None, redacted=False),
    case(f"{T0} [4242] 57P03 FATAL:  the database system is shutting down\n", "server", sqlstate="57P03", prefix=E),
    case(
        entry(
            "FATAL:  the database system is not yet accepting connections",  # PG14+
            "DETAIL:  Consistent recovery state has not been yet reached.",
        ),
        "server",
        detail="Consistent recovery state has not been yet reached.",
    ),
    # ------------------------------------------------ error: constraints (nbtinsert.c, ri_triggers.c, execMain.c)
    case(
        entry(
            'ERROR:  duplicate key value violates unique constraint "users_email_key"',
            "DETAIL:  Key (email)=(S3CR@example.com) already exists.",
            "STATEMENT:  INSERT INTO users (email) VALUES ('S3CR@example.com')",
        ),
        "error",
        sqlstate=None,  # never guessed
        message='duplicate key value violates unique constraint "users_email_key"',
        detail="Key (email)=(...) already exists.",
        statement="INSERT INTO users (email) VALUES ($1)",
        redacted=True,
    ),
    case(
        f'{T0} [4242] 23505 ERROR:  duplicate key value violates unique constraint "users_pkey"\n'
        f"{T0} [4242] 23505 DETAIL:  Key (id)=(98765) already exists.\n",
        "error",
        sqlstate="23505",
        prefix=E,
        detail="Key (id)=(...) already exists.",
    ),
    case(
        entry(
            'ERROR:  duplicate key value violates unique constraint "t_a_b_key"',
            "DETAIL:  Key (a, lower(b))=(98765, S3CR (x)) already exists.",
        ),
        "error",
        detail="Key (a, lower(b))=(...) already exists.",
    ),
    case(
        entry(
            'ERROR:  insert or update on table "orders" violates foreign key constraint "orders_customer_id_fkey"',
            'DETAIL:  Key (customer_id)=(98765) is not present in table "customers".',
        ),
        "error",
        message='insert or update on table "orders" violates foreign key constraint "orders_customer_id_fkey"',
        detail='Key (customer_id)=(...) is not present in table "customers".',
    ),
    case(
        entry(
            'ERROR:  update or delete on table "customers" violates foreign key constraint '
            '"orders_customer_id_fkey" on table "orders"',
            'DETAIL:  Key (id)=(98765) is still referenced from table "orders".',
        ),
        "error",
        detail='Key (id)=(...) is still referenced from table "orders".',
    ),
    case(
        entry(
            'ERROR:  null value in column "name" of relation "users" violates not-null constraint',  # PG13+
            "DETAIL:  Failing row contains (98765, null, S3CR, 2026-11-22 02:18:58+00).",
        ),
        "error",
        message='null value in column "name" of relation "users" violates not-null constraint',
        detail="Failing row contains (...).",
    ),
    case(
        entry(
            'ERROR:  new row for relation "orders" violates check constraint "orders_total_check"',
            "DETAIL:  Failing row contains (98765, S3CR, -1).",
        ),
        "error",
        detail="Failing row contains (...).",
    ),
    case(
        entry(
            'ERROR:  conflicting key value violates exclusion constraint "no_overlap"',
            'DETAIL:  Key (room, during)=(98765, ["2026-11-22 10:00:00+00","2026-11-22 11:00:00+00")) conflicts '
            'with existing key (room, during)=(98765, ["2026-11-22 09:00:00+00","2026-11-22 10:30:00+00")).',
        ),
        "error",
        detail="Key (room, during)=(...) conflicts with existing key (room, during)=(...).",
    ),
    case(
        entry(
            'ERROR:  no partition of relation "events" found for row',
            "DETAIL:  Partition key of the failing row contains (created_at) = (2031-01-01 98765).",
        ),
        "error",
        detail="Partition key of the failing row contains (...).",
    ),
    case(
        entry(
            'ERROR:  value for domain email violates check constraint "email_check"',
        ),
        "error",
        message='value for domain email violates check constraint "email_check"',
    ),
    # ---------------------------------------------------------------- error: parser, catalog
    case(
        entry(
            'ERROR:  relation "orders_archive" does not exist at character 15',
            "STATEMENT:  SELECT * FROM orders_archive WHERE id = 98765",
        ),
        "error",
        message='relation "orders_archive" does not exist at character 15',
        statement="SELECT * FROM orders_archive WHERE id = $1",
        redacted=True,
    ),
    case(
        entry(
            'ERROR:  column "emial" does not exist at character 8',
            'HINT:  Perhaps you meant to reference the column "users.email".',
        ),
        "error",
        # an unknown column's name may be a value without its quotes (entry.py, 42703); the
        # catalog's own column in the HINT is a name
        message='column "..." does not exist at character 8',
        hint='Perhaps you meant to reference the column "users.email".',
        redacted=True,
    ),
    case(
        entry("ERROR:  column u.nope does not exist at character 8"),
        "error",
        message="column ... does not exist at character 8",
    ),
    case(
        entry(
            "ERROR:  function lower(integer) does not exist at character 8",
            "HINT:  No function matches the given name and argument types. You might need to add explicit type casts.",
        ),
        "error",
        message="function lower(integer) does not exist at character 8",
        redacted=False,
    ),
    case(
        entry("ERROR:  operator does not exist: integer = text at character 30"),
        "error",
        message="operator does not exist: integer = text at character 30",
    ),
    case(
        entry('ERROR:  syntax error at or near "FORM" at character 10', "STATEMENT:  SELECT * FORM t WHERE a = 'S3CR'"),
        "error",
        message='syntax error at or near "..." at character 10',
        statement="SELECT * $1 $2 WHERE $3 = $4",
    ),
    case(
        entry(
            "ERROR:  syntax error at or near \"'S3CR'\" at character 20",
            "STATEMENT:  SELECT * FROM t WHERE 'S3CR'",
        ),
        "error",
        message='syntax error at or near "..." at character 20',
    ),
    case(entry("ERROR:  syntax error at end of input at character 14"), "error", redacted=False),
    case(
        entry('ERROR:  unterminated quoted string at or near "\'S3CR" at character 20'),
        "error",
        message='unterminated quoted string at or near "..." at character 20',
    ),
    case(entry('ERROR:  missing FROM-clause entry for table "o" at character 8'), "error", redacted=False),
    case(
        entry('ERROR:  column "total" is of type integer but expression is of type text at character 30'),
        "error",
        redacted=False,
    ),
    case(entry("ERROR:  permission denied for table orders"), "error", message="permission denied for table orders"),
    case(entry("ERROR:  permission denied for schema private"), "error", redacted=False),
    case(entry("ERROR:  must be owner of table orders"), "error", redacted=False),
    case(
        entry(
            "ERROR:  permission denied to create role",
            "DETAIL:  Only roles with the CREATEROLE attribute may create roles.",  # PG16+
        ),
        "error",
        detail="Only roles with the CREATEROLE attribute may create roles.",
    ),
    case(
        entry(
            "ERROR:  cannot drop table orders because other objects depend on it",
            "HINT:  Use DROP ... CASCADE to drop the dependent objects too.",
        ),
        "error",
        hint="Use DROP ... CASCADE to drop the dependent objects too.",
    ),
    # ---------------------------------------------------------------- error: values (utils/adt)
    case(entry("ERROR:  division by zero"), "error", message="division by zero", redacted=False),
    case(
        entry('ERROR:  invalid input syntax for type integer: "S3CR" at character 33'),
        "error",
        message='invalid input syntax for type integer: "..." at character 33',
        redacted=True,
    ),
    case(
        entry('ERROR:  invalid input syntax for type timestamp with time zone: "S3CR-yesterday"'),
        "error",
        message='invalid input syntax for type timestamp with time zone: "..."',
    ),
    case(
        entry('ERROR:  invalid input syntax for integer: "S3CR"'),  # before PG12 wording, still seen
        "error",
        message='invalid input syntax for integer: "..."',
    ),
    case(
        entry('ERROR:  invalid input value for enum mood: "S3CR"'),
        "error",
        message='invalid input value for enum mood: "..."',
    ),
    case(
        entry('ERROR:  malformed array literal: "{S3CR"', "DETAIL:  Unexpected end of input."),
        "error",
        message='malformed array literal: "..."',
        detail="Unexpected end of input.",
    ),
    case(entry("ERROR:  value too long for type character varying(10)"), "error", redacted=False),
    case(
        entry(
            "ERROR:  numeric field overflow",
            "DETAIL:  A field with precision 5, scale 2 must round to an absolute value less than 10^3.",
        ),
        "error",
        detail="A field with precision 5, scale 2 must round to an absolute value less than 10^3.",
        redacted=False,
    ),
    case(entry("ERROR:  integer out of range"), "error", redacted=False),
    case(
        entry('ERROR:  value "987659876598765" is out of range for type integer'),
        "error",
        message='value "..." is out of range for type integer',
    ),
    case(
        entry(
            'ERROR:  date/time field value out of range: "S3CR-13-45"',
            'HINT:  Perhaps you need a different "datestyle" setting.',
        ),
        "error",
        message='date/time field value out of range: "..."',
        hint='Perhaps you need a different "datestyle" setting.',
    ),
    case(
        entry(
            "ERROR:  invalid input syntax for type json",
            'DETAIL:  Token "S3CR" is invalid.',
            'CONTEXT:  JSON data, line 1: {"card": S3CR...',
        ),
        "error",
        detail='Token "..." is invalid.',
        context="JSON data, line 1: ...",
    ),
    case(
        entry('ERROR:  invalid byte sequence for encoding "UTF8": 0xe9 0x53 0x33'),
        "error",
        message='invalid byte sequence for encoding "UTF8": ...',
    ),
    case(
        entry(
            'ERROR:  invalid input syntax for type integer: "S3CR"',
            'CONTEXT:  COPY orders, line 3, column total_cents: "S3CR"',
        ),
        "error",
        context="COPY orders, line 3, column total_cents: ...",
    ),
    case(
        entry("ERROR:  extra data after last expected column", 'CONTEXT:  COPY orders, line 3: "1\tS3CR\t2"'),
        "error",
        message="extra data after last expected column",
        context="COPY orders, line 3: ...",
    ),
    case(
        entry(
            'ERROR:  invalid input syntax for type integer: "S3CR"',
            "CONTEXT:  unnamed portal parameter $1 = '...'",
        ),
        "error",
        context="unnamed portal parameter $1 = ...",
    ),
    case(
        entry(
            "ERROR:  division by zero",
            "CONTEXT:  unnamed portal with parameters: $1 = 'S3CR', $2 = '98765'",
        ),
        "error",
        context="unnamed portal with parameters: $1 = '...', $2 = '...'",
    ),
    # ---------------------------------------------------------------- error: PL/pgSQL, SPI (pl_exec.c)
    case(
        entry(
            "ERROR:  division by zero",
            "CONTEXT:  SQL statement \"SELECT 1/0 WHERE 'S3CR' = $$x$$\"",
            "\tPL/pgSQL function f() line 3 at PERFORM",
        ),
        "error",
        context='SQL statement "SELECT $1/$2 WHERE $3 = $4"\nPL/pgSQL function f() line 3 at PERFORM',
    ),
    case(
        entry(
            'ERROR:  column "nope" does not exist at character 8',
            "QUERY:  SELECT nope FROM t WHERE x = 'S3CR'",
            "CONTEXT:  PL/pgSQL function g(integer) line 5 at RETURN",
        ),
        "error",
        context="internal query: SELECT $1 FROM t WHERE x = $2\nPL/pgSQL function g(integer) line 5 at RETURN",
    ),
    case(
        entry(
            'ERROR:  duplicate key value violates unique constraint "t_pkey"',
            "DETAIL:  Key (id)=(98765) already exists.",
            "CONTEXT:  SQL statement \"INSERT INTO t VALUES (98765, 'S3CR')\"",
            "\tPL/pgSQL function add_row(integer) line 4 at SQL statement",
        ),
        "error",
        context='SQL statement "INSERT INTO t VALUES ($1, $2)"\n'
        "PL/pgSQL function add_row(integer) line 4 at SQL statement",
    ),
    case(
        entry(
            "ERROR:  division by zero",
            'CONTEXT:  PL/pgSQL assignment "x := 98765 / 0"',  # PG14+
            "\tPL/pgSQL function inline_code_block line 3 at assignment",
        ),
        "error",
        context='PL/pgSQL assignment "x := $1 / $2"\nPL/pgSQL function inline_code_block line 3 at assignment',
    ),
    case(
        entry("ERROR:  division by zero", 'CONTEXT:  SQL function "calc" statement 1'),
        "error",
        context='SQL function "calc" statement 1',
        redacted=False,
    ),
    # ---------------------------------------------------------------- error: transactions, resources
    case(entry("ERROR:  canceling statement due to statement timeout"), "error", redacted=False),
    case(entry("ERROR:  canceling statement due to lock timeout"), "error", redacted=False),
    case(entry("ERROR:  canceling statement due to user request"), "error", redacted=False),
    case(
        entry(
            "ERROR:  canceling statement due to conflict with recovery",
            "DETAIL:  User query might have needed to see row versions that must be removed.",
        ),
        "error",
        redacted=False,
    ),
    case(
        entry(
            "ERROR:  could not serialize access due to read/write dependencies among transactions",
            "DETAIL:  Reason code: Canceled on identification as a pivot, during commit attempt.",
            "HINT:  The transaction might succeed if retried.",
        ),
        "error",
        detail="Reason code: Canceled on identification as a pivot, during commit attempt.",
        hint="The transaction might succeed if retried.",
        redacted=False,
    ),
    case(entry("ERROR:  could not serialize access due to concurrent update"), "error", redacted=False),
    case(
        entry("ERROR:  current transaction is aborted, commands ignored until end of transaction block"),
        "error",
        redacted=False,
    ),
    case(
        entry("ERROR:  out of memory", 'DETAIL:  Failed on request of size 8192 in memory context "ExecutorState".'),
        "error",
        detail='Failed on request of size 8192 in memory context "ExecutorState".',
        redacted=False,
    ),
    case(
        entry(
            "ERROR:  stack depth limit exceeded",
            'HINT:  Increase the configuration parameter "max_stack_depth" (currently 2048kB), after ensuring '
            "the platform's stack depth limit is adequate.",
        ),
        "error",
        redacted=False,
    ),
    case(entry("ERROR:  temporary file size exceeds temp_file_limit (1024kB)"), "error", redacted=False),
    case(
        entry(
            'ERROR:  could not extend file "base/16384/16385": No space left on device', "HINT:  Check free disk space."
        ),
        "error",
        redacted=False,
    ),
    case(
        entry('PANIC:  could not write to file "pg_wal/xlogtemp.123": No space left on device', session=False),
        "error",
        redacted=False,
    ),
    case(entry('ERROR:  could not obtain lock on row in relation "orders"'), "error", redacted=False),
    case(entry("FATAL:  terminating connection due to administrator command"), "server", redacted=False),
    case(entry("FATAL:  terminating connection due to idle-in-transaction timeout"), "error"),
    case(entry("FATAL:  terminating connection due to idle-session timeout"), "error"),  # PG14+
    case(
        entry(
            "WARNING:  terminating connection because of crash of another server process",
            "DETAIL:  The postmaster has commanded this server process to roll back the current transaction and "
            "exit, because another server process exited abnormally and possibly corrupted shared memory.",
            "HINT:  In a moment you should be able to reconnect to the database and repeat your command.",
        ),
        "server",
        redacted=False,
    ),
    case(
        entry('FATAL:  database "nope" does not exist'),
        "error",
        message='database "nope" does not exist',
        redacted=False,
    ),
    case(
        entry('FATAL:  permission denied for database "shop"', "DETAIL:  User does not have CONNECT privilege."),
        "error",
        redacted=False,
    ),
    case(entry('ERROR:  role "mallory" does not exist'), "error", sqlstate=None),  # DROP ROLE: not a login
    # ---------------------------------------------------------------- default deny: RAISE, extensions
    case(
        entry("NOTICE:  customer S3CR owes 98765"),  # RAISE NOTICE
        "other",
        message="...",
        redacted=True,
    ),
    case(
        entry(
            "ERROR:  card S3CR declined",  # RAISE EXCEPTION ... USING DETAIL, HINT
            "DETAIL:  card number 98765",
            "HINT:  call S3CR",
            "CONTEXT:  PL/pgSQL function charge(integer) line 7 at RAISE",
        ),
        "error",
        message="...",
        detail="...",
        hint="...",
        context="PL/pgSQL function charge(integer) line 7 at RAISE",
        redacted=True,
    ),
    case(
        entry("WARNING:  S3CR", "\tsecond line S3CR", "CONTEXT:  PL/pgSQL function inline_code_block line 2 at RAISE"),
        "other",
        message="...",
        context="PL/pgSQL function inline_code_block line 2 at RAISE",
    ),
    case(entry("LOG:  pg_cron: job 98765 S3CR started"), "other", message="...", redacted=True),  # an extension
    case(
        entry("LOG:  checkpoint starting: S3CR 'x'"),  # RAISE LOG mimicking a checkpoint: kind kept, text not
        "checkpoint",
        message="checkpoint starting: ...",
        redacted=True,
    ),
    case(
        entry("LOG:  checkpoint starting: S3CR and more words"),  # no quote to give it away (terse verbosity)
        "checkpoint",
        message="checkpoint starting: ...",
        redacted=True,
    ),
    case(
        entry("LOG:  connection received: host=S3CR 'x' port=1"),
        "connection",
        message="connection received: host=...",
        redacted=True,
    ),
    case(
        entry("LOG:  connection authorized: user=S3CR and S3CR"),
        "connection",
        message="connection authorized: ...",
        redacted=True,
    ),
    case(
        entry('LOG:  temporary file: path "S3CR S3CR", size 1'),
        "temp_file",
        message='temporary file: path "...", size 1',
        redacted=True,
    ),
    case(entry('NOTICE:  table "t" does not exist, skipping'), "other", message='table "t" does not exist, skipping'),
    case(entry("WARNING:  there is no transaction in progress"), "other", redacted=False),
    case(entry("LOG:  could not receive data from client: Connection reset by peer"), "other", redacted=False),
    case(entry("LOG:  unexpected EOF on client connection with an open transaction"), "other", redacted=False),
    case(
        entry(
            "LOG:  logical decoding found consistent point at 0/16B3748", "DETAIL:  There are no running transactions."
        ),
        "other",
        redacted=False,
    ),
    case("an orphan line S3CR without a prefix\n", "other", message="...", redacted=True),
    case(f"{T0} [4242] app@shop/web DETAIL:  Key (id)=(98765) already exists.\n", "other", message="..."),
]


@pytest.mark.parametrize(("text", "kind", "expected"), CASES)
def test_corpus(text: str, kind: str, expected: dict[str, Any]) -> None:
    lines = parse(text, expected)
    assert len(lines) == 1, lines
    got = spec_fields(lines[0])
    assert got["kind"] == kind, got
    for field, value in expected.items():
        if field != "prefix":
            assert got[field] == value, (field, got)


_SECRET = re.compile(r"S3CR[\w@.-]*|98765\d*")


@pytest.mark.parametrize(("text", "kind", "expected"), CASES)
def test_no_secret_survives(text: str, kind: str, expected: dict[str, Any]) -> None:
    secrets = set(_SECRET.findall(text))
    line = parse(text, expected)[0]
    out = json.dumps(spec_fields(line)) + str(line.fingerprint)
    for secret in secrets:
        assert secret not in out, (secret, out)
    if secrets:
        assert line.redacted


def test_corpus_size() -> None:
    assert len(CASES) >= 150
    assert {c.values[1] for c in CASES} == {
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
    }


def test_full_text_keeps_values_but_not_passwords() -> None:
    text = entry("LOG:  statement: ALTER ROLE bob PASSWORD 'S3CR-pw'; SELECT 'S3CR-kept'")
    line = parse_text(text, full_text=True)[0]
    assert line.statement == "ALTER ROLE bob PASSWORD '...'; SELECT 'S3CR-kept'"
    assert line.redacted
