"""A workload that makes one real PostgreSQL 15 log every kind of SPEC 2.1, with secrets in it.

`run_workload(cluster)` drives a cluster started with `SETTINGS` through every event issue 3
item 7 names and returns when the server is stopped and all three log files (stderr, csvlog,
jsonlog) hold everything. Each part runs in its own session with its own `application_name`
(the `APP_*` constants), so a test can count exactly what one part caused and ignore the
background noise (autovacuum, checkpoints, the polling connections of `wait_for_sql`).

Every value the workload puts into the log that must not leave it contains `SECRET_MARK`
(`s3cr3t`), or is one of `SECRET_NUMBERS`; `SECRETS_IN_RAW_LOG` are those PostgreSQL does write
into its own log (the test checks they are there, so the leak check is not vacuous).

The parts and what each logs (PG15, lc_messages C):

- `APP_ERRORS` (superuser, db shop): unique, not-null, check, foreign-key violations, input syntax, out of
  range, syntax errors (one with a literal in the message), a PL/pgSQL error whose CONTEXT carries
  an `SQL statement "..."` with literals, RAISE EXCEPTION with DETAIL/HINT, JSON and COPY context
  values, division by zero: `ERRORS` errors; `COMMIT` outside a transaction, RAISE WARNING and
  RAISE LOG: `OTHERS` entries of kind other.
- `APP_SLOW` (role `slow`, `log_min_duration_statement = 0` through ALTER ROLE): `SLOW_PSQL`
  statements with literals (one with a value in a comment), incl. PREPARE/EXECUTE (DETAIL
  `prepare: ...`).
- `APP_PGBENCH` (role `slow`): pgbench -M extended and -M prepared with a string variable, i.e.
  real bind parameters (`DETAIL: parameters: $1 = '...'`): parse, bind and execute durations;
  one more run fails at bind (`CONTEXT: unnamed portal parameter $1 = '...'`).
- `APP_LOGSTMT` (superuser, `SET log_statement = 'all'`): ALTER ROLE ... PASSWORD, CREATE USER
  MAPPING ... OPTIONS (password ...), dblink with `password=` in its connection string (which
  fails authentication: an auth_failure and an error), a syntax error.
- Authentication: wrong password and unknown role over TCP (scram), unknown role over the
  socket, the pg_hba `reject` line, a replication connection without a pg_hba line.
- `APP_TEMP`: one sort that spills to one temporary file.
- `APP_LOCK_*`: a row lock held in an open transaction, another session waits past
  deadlock_timeout: "still waiting" then "acquired".
- `APP_DEADLOCK_*`: two sessions update two rows in opposite order: one "still waiting", one
  "detected deadlock while waiting", one deadlock error, one "acquired". One statement is longer
  than track_activity_query_size, so the deadlock DETAIL shows it cut inside a string literal.
- `APP_HOLD_*` sessions fill max_connections: a non-superuser gets "remaining connection slots
  are reserved ...", then a superuser gets "sorry, too many clients already".
- CHECKPOINT, an autovacuum of `shop.public.vac`, a reload that changes deadlock_timeout, a fast
  restart, and a final fast stop.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.pgcluster import HBA_REJECT_DB, PgCluster

# %r and %e on top of the harness's prefix, so stderr knows client and sqlstate like csv/json do.
PREFIX = "%m [%p] %q%u@%d/%a %r %e "
SETTINGS: dict[str, str | int] = {
    "log_line_prefix": PREFIX,
    # Few slots, so that a handful of idle sessions make PostgreSQL refuse connections.
    "max_connections": 6,
    "superuser_reserved_connections": 2,
    "autovacuum_naptime": 1,
    # Bind parameters of a failing statement go into its CONTEXT (default 0: not logged).
    "log_parameter_max_length_on_error": -1,
}

DB = "shop"
SECRET_MARK = "s3cr3t"
SECRET_NUMBERS = ("73737373737373",)

APP_ERRORS = "wl-errors"
APP_SLOW = "wl-slow"
APP_PGBENCH = "pgbench"  # pgbench sets it itself
APP_LOGSTMT = "wl-logstmt"
APP_AUTH = "wl-auth"
APP_TEMP = "wl-tempfile"
APP_LOCK_HOLDER = "wl-lock-holder"
APP_LOCK_WAITER = "wl-lock-waiter"
APP_DEADLOCK_A = "wl-deadlock-a"
APP_DEADLOCK_B = "wl-deadlock-b"
APP_HOLD = "wl-hold"  # + "-<n>"
APP_CROWD_APP = "wl-crowd-app"
APP_CROWD_SUPER = "wl-crowd-super"
APP_CHECKPOINT = "wl-checkpoint"
APP_MARKER = "wl-marker"

SETUP_SQL = f"""\
CREATE ROLE app LOGIN PASSWORD '{SECRET_MARK}-pw-0';
CREATE ROLE slow LOGIN;
ALTER ROLE slow SET log_min_duration_statement = 0;
CREATE DATABASE {DB};
"""

SHOP_SQL = """\
CREATE TABLE customers (id int PRIMARY KEY, email text UNIQUE NOT NULL, age int CHECK (age >= 0), note text);
CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL, note text);
CREATE TABLE orders (id int PRIMARY KEY, customer_email text REFERENCES customers (email));
INSERT INTO accounts VALUES (1, 100, NULL), (2, 100, NULL);
CREATE TABLE big (x int);
SET work_mem = '64MB';  -- no temporary file here: the only one is the sort of APP_TEMP
INSERT INTO big SELECT g FROM generate_series(1, 100000) g;
CREATE TABLE vac (id int, note text) WITH (autovacuum_vacuum_threshold = 0, autovacuum_vacuum_scale_factor = 0,
    autovacuum_analyze_threshold = 0, autovacuum_analyze_scale_factor = 0);
INSERT INTO vac SELECT g, 'row ' || g FROM generate_series(1, 200) g;
DELETE FROM vac WHERE id % 2 = 0;
GRANT ALL ON ALL TABLES IN SCHEMA public TO slow, app;
CREATE EXTENSION dblink;
CREATE EXTENSION postgres_fdw;
CREATE FUNCTION add_customer(p_email text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE format('INSERT INTO customers (id, email, age, note) VALUES (1, %L, 1, %L)', p_email, p_email);
END
$$;
"""

S = SECRET_MARK
# (sql, kind it logs): the errors session. Every statement logs exactly one entry.
ERRORS_SESSION: list[tuple[str, str]] = [
    (f"INSERT INTO customers VALUES (1, '{S}-1@example.com', 30, '{S}-note-1');", ""),
    (f"INSERT INTO customers VALUES (2, '{S}-1@example.com', 31, '{S}-note-2');", "error"),  # unique (email)
    (f"INSERT INTO customers (id, email, age, note) VALUES (3, NULL, 4242, '{S}-2');", "error"),  # not null
    (f"INSERT INTO customers VALUES (4, '{S}-3@example.com', -1, '{S}-4');", "error"),  # check
    (f"SELECT '{S}-5'::int;", "error"),  # invalid input syntax
    (f"SELECT '{SECRET_NUMBERS[0]}'::int;", "error"),  # out of range
    (f"SELEC '{S}-6' FROM customers;", "error"),  # syntax error, literal in STATEMENT only
    (f"SELECT 1 FROM customers WHERE email = '{S}-7' '{S}-8';", "error"),  # literal in the message
    (f"INSERT INTO orders VALUES (1, '{S}-fk@example.com');", "error"),  # foreign key: Key (...)=(...)
    (f"SELECT add_customer('{S}-10@example.com');", "error"),  # unique (id) in plpgsql, SQL statement "..."
    # RAISE texts are the user's own: no digits in these secrets, so nothing but default deny hides them.
    (
        f"DO $$ BEGIN RAISE EXCEPTION 'custom %', '{S}-eleven' USING DETAIL = 'detail {S}-twelve', "
        f"HINT = 'hint {S}-thirteen'; END $$;",
        "error",
    ),
    (f'SELECT \'{{"token": "{S}-json"\'::json;', "error"),  # JSON data context
    (
        f"COPY customers (id, email, age, note) FROM stdin;\n9\t{S}-copy@example.com\tnotanumber-{S}\tx\n\\.",
        "error",
    ),  # COPY context with the column value
    (
        f"COPY customers (id, email) FROM stdin;\n10\t{S}-copyline@example.com\textra-{S}\n\\.",
        "error",
    ),  # COPY context with the whole line ("extra data after last expected column")
    (f"SELECT '{S}-17' AS tag, 1 / 0;", "error"),  # division by zero
    ("COMMIT;", "other"),  # WARNING: there is no transaction in progress
    (f"DO $$ BEGIN RAISE WARNING 'warn %', '{S}-fifteen'; END $$;", "other"),
    (f"DO $$ BEGIN RAISE LOG 'log %', '{S}-sixteen'; END $$;", "other"),
]
ERRORS = sum(1 for _, kind in ERRORS_SESSION if kind == "error")
OTHERS = sum(1 for _, kind in ERRORS_SESSION if kind == "other")

# Statements of role slow: each logs one "duration: ... statement: ..." line.
SLOW_SESSION = [
    f"SELECT count(*) FROM customers WHERE email = '{S}-20@example.com';",
    f"SELECT '{S}-21' AS x, 42 AS y /* a comment with a value: {S}-comment */;",
    "PREPARE q(text) AS SELECT count(*) FROM customers WHERE email = $1;",
    f"EXECUTE q('{S}-22@example.com');",
]
SLOW_PSQL = len(SLOW_SESSION)
# pgbench: -M extended and -M prepared each log parse, bind and execute durations of one statement.
PGBENCH_OK_MODES = ("extended", "prepared")
PGBENCH_SLOW = 3 * len(PGBENCH_OK_MODES) + 1  # + the parse of the statement whose bind fails
PGBENCH_ERRORS = 1

# After SET log_statement = 'all': (sql, logged as a statement, fails).
LOGSTMT_SESSION: list[tuple[str, bool, str]] = [
    ("SET log_statement = 'all';", False, ""),
    (f"ALTER ROLE app PASSWORD '{S}-pw-1';", True, ""),
    ("CREATE SERVER loop FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '127.0.0.1', dbname 'shop');", True, ""),
    (f"CREATE USER MAPPING FOR slow SERVER loop OPTIONS (user 'app', password '{S}-fdw-1');", True, ""),
    (f"SELECT '{S}-30' AS logged;", True, ""),
    # dblink over TCP with a wrong password in its connection string: auth_failure + error.
    (
        "SELECT * FROM dblink('host=127.0.0.1 port={port} dbname=shop user=app password={s}-dblink-pw', "
        "'SELECT 1') AS t(x int);",
        True,
        "error",
    ),
    (f"SELEC '{S}-31';", False, "error"),  # a statement that does not parse is not logged as one
]
LOGSTMT_STATEMENTS = sum(1 for _, logged, _ in LOGSTMT_SESSION if logged)
LOGSTMT_ERRORS = sum(1 for _, _, fails in LOGSTMT_SESSION if fails)

WRONG_PASSWORDS = (f"{S}-wrong-1", f"{S}-wrong-2")
# auth failures: wrong password (TCP), unknown role (TCP), unknown role (socket), hba reject,
# replication without a pg_hba line, dblink's wrong password.
AUTH_FAILURES = 6

TEMP_SQL = (
    "SET max_parallel_workers_per_gather = 0;\n"
    "SET work_mem = '64kB';\n"
    f"SELECT x, '{S}-50' AS tag FROM big ORDER BY x DESC OFFSET 99999;\n"
)
LOCK_HOLDER_SQL = "BEGIN;\nSELECT id FROM accounts WHERE id = 1 FOR UPDATE;\n"
LOCK_WAITER_SQL = f"UPDATE accounts SET balance = balance + 1, note = '{S}-40' WHERE id = 1;\n"
# lock_wait entries: still waiting + acquired (lock part); still waiting, detected deadlock while
# waiting, acquired (deadlock part).
LOCK_WAITS_LOCK = 2
LOCK_WAITS_DEADLOCK = 3
HOLD_SESSIONS = 6  # = max_connections

SECRETS_IN_RAW_LOG = [
    f"{S}-1@example.com",  # unique violation DETAIL
    f"{S}-2",  # not-null Failing row
    f"{S}-4",  # check Failing row
    f"{S}-5",  # input syntax
    SECRET_NUMBERS[0],
    f"{S}-6",
    f"{S}-8",  # syntax error message
    f"{S}-fk@example.com",  # foreign key DETAIL
    f"{S}-10@example.com",  # CONTEXT SQL statement
    f"{S}-eleven",
    f"{S}-twelve",
    f"{S}-thirteen",
    f"{S}-json",
    f"notanumber-{S}",
    f"extra-{S}",  # COPY line context
    f"{S}-17",
    f"{S}-fifteen",
    f"{S}-sixteen",
    f"{S}-20@example.com",
    f"{S}-21",
    f"{S}-comment",
    f"{S}-22@example.com",
    f"{S}-23",  # pgbench bind parameter
    f"{S}-24",  # pgbench failing bind parameter
    f"{S}-pw-1",
    f"{S}-fdw-1",
    f"{S}-30",
    f"{S}-dblink-pw",
    f"{S}-31",
    f"{S}-40",
    f"{S}-43",
    f"{S}-44",
    f"{S}-50",
]


@dataclass
class WorkloadRun:
    """What `run_workload` did: the cluster (stopped) and timings for the report."""

    cluster: PgCluster
    pids: dict[str, int] = field(default_factory=dict)  # application -> backend pid, where needed
    seconds: float = 0.0


def _log_marks(cluster: PgCluster) -> dict[str, int]:
    return {ext: len(cluster.log_text(ext)) for ext in ("log", "csv", "json")}


def _wait_all(cluster: PgCluster, pattern: str, marks: dict[str, int], timeout: float = 15) -> None:
    """Wait until `pattern` is in all three formats after `marks` (csv/json quote differently)."""
    for ext, mark in marks.items():
        cluster.wait_for_log(pattern, ext, timeout=timeout, after=mark)


def _finish(proc: subprocess.Popen[str], sql: str = "") -> str:
    """Send the last statements of a background session, end it, and return its stderr."""
    _out, err = proc.communicate(sql, timeout=30)
    return err


def _pgbench(cluster: PgCluster, script: Path, mode: str, value: str) -> subprocess.CompletedProcess[str]:
    argv = [
        str(cluster.pg_bin / "pgbench"),
        "-n",
        "-c1",
        "-t1",
        f"-M{mode}",
        "-h",
        str(cluster.socket_dir),
        "-p",
        str(cluster.port),
        "-U",
        "slow",
        "-D",
        f"secret={value}",
        "-f",
        str(script),
        DB,
    ]
    env = cluster._client_env(None, None)  # the harness's clean libpq environment
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=30, check=False, cwd=cluster.root)


def _session_idle_in_tx(cluster: PgCluster, app: str) -> None:
    cluster.wait_for_sql(
        f"SELECT count(*) FROM pg_stat_activity WHERE application_name = '{app}' AND state = 'idle in transaction'",
        "1",
    )


def run_workload(cluster: PgCluster, scratch: Path) -> WorkloadRun:
    """Run every part against `cluster` (started with `SETTINGS`), then stop it; see the module doc."""
    started = time.monotonic()
    run = WorkloadRun(cluster)
    c = cluster

    c.psql(SETUP_SQL, on_error_stop=True)
    c.psql(SHOP_SQL, db=DB, on_error_stop=True)
    # The DELETE above gives autovacuum something to do; its log line is awaited at the end.

    # --- errors, other
    marks = _log_marks(c)
    c.psql("\n".join(sql for sql, _ in ERRORS_SESSION) + "\n", db=DB, app_name=APP_ERRORS)
    _wait_all(c, rf"log {S}-sixteen", marks)

    # --- slow statements with literals, PREPARE/EXECUTE
    c.psql("\n".join(SLOW_SESSION) + "\n", db=DB, user="slow", app_name=APP_SLOW)

    # --- bind parameters (extended protocol) through pgbench
    ok_script = scratch / "bind_ok.sql"
    ok_script.write_text("SELECT :secret::text AS bind_probe;\n")
    fail_script = scratch / "bind_fail.sql"
    fail_script.write_text("SELECT :secret::int AS bind_fail;\n")
    for mode in PGBENCH_OK_MODES:
        result = _pgbench(c, ok_script, mode, f"{S}-23")
        assert result.returncode == 0, result.stderr
    result = _pgbench(c, fail_script, "extended", f"{S}-24")
    assert result.returncode != 0, "the bind of a non-integer to $1::int should fail"

    # --- log_statement = 'all', passwords in statements, dblink's connection string
    marks = _log_marks(c)
    logstmt = "\n".join(sql for sql, _, _ in LOGSTMT_SESSION).replace("{port}", str(c.port)).replace("{s}", S)
    c.psql(logstmt + "\n", db=DB, app_name=APP_LOGSTMT)
    _wait_all(c, r"syntax error at or near \W*SELEC", marks)

    # --- authentication failures (and one good TCP login with the new password)
    marks = _log_marks(c)
    c.psql("SELECT 1;", user="app", password=f"{S}-pw-1", host_tcp=True, app_name=APP_AUTH)
    c.psql("SELECT 1;", user="app", password=WRONG_PASSWORDS[0], host_tcp=True, app_name=APP_AUTH, check=False)
    c.psql("SELECT 1;", user="ghost", password=WRONG_PASSWORDS[1], host_tcp=True, app_name=APP_AUTH, check=False)
    c.psql("SELECT 1;", user="ghost_local", app_name=APP_AUTH, check=False)
    c.psql("SELECT 1;", db=HBA_REJECT_DB, password=WRONG_PASSWORDS[0], host_tcp=True, app_name=APP_AUTH, check=False)
    c.psql("SELECT 1;", db="dbname=postgres replication=true", host_tcp=True, app_name=APP_AUTH, check=False)
    _wait_all(c, r"no pg_hba.conf entry for replication connection", marks)

    # --- a temporary file
    marks = _log_marks(c)
    c.psql(TEMP_SQL, db=DB, app_name=APP_TEMP)
    _wait_all(c, r"temporary file: ", marks)

    # --- a lock wait: "still waiting" after deadlock_timeout, then "acquired"
    marks = _log_marks(c)
    holder = c.psql_bg(LOCK_HOLDER_SQL, db=DB, app_name=APP_LOCK_HOLDER)
    _session_idle_in_tx(c, APP_LOCK_HOLDER)
    waiter = c.psql_bg(LOCK_WAITER_SQL, db=DB, app_name=APP_LOCK_WAITER)
    c.wait_for_log(r"still waiting for ShareLock on transaction", after=marks["log"])
    _finish(holder, "COMMIT;\n")
    c.wait_for_log(r"acquired ShareLock on transaction", after=marks["log"])
    _finish(waiter)

    # --- a deadlock: A waits for B (logged as still waiting), then B waits for A and detects it
    marks = _log_marks(c)
    a = c.psql_bg(f"BEGIN;\nUPDATE accounts SET note = '{S}-41' WHERE id = 1;\n", db=DB, app_name=APP_DEADLOCK_A)
    b = c.psql_bg(f"BEGIN;\nUPDATE accounts SET note = '{S}-42' WHERE id = 2;\n", db=DB, app_name=APP_DEADLOCK_B)
    _session_idle_in_tx(c, APP_DEADLOCK_A)
    _session_idle_in_tx(c, APP_DEADLOCK_B)
    assert a.stdin is not None and b.stdin is not None
    # Longer than track_activity_query_size (1024): the deadlock DETAIL cuts it inside the literal.
    a.stdin.write(f"UPDATE accounts SET note = '{S}-43-{'x' * 1100}' WHERE id = 2;\n")
    a.stdin.flush()
    c.wait_for_log(r"still waiting for ShareLock on transaction", after=marks["log"])
    b.stdin.write(f"UPDATE accounts SET note = '{S}-44' WHERE id = 1;\n")
    b.stdin.flush()
    c.wait_for_log(r"acquired ShareLock on transaction", after=marks["log"])
    _finish(a, "COMMIT;\n")
    _finish(b, "ROLLBACK;\n")
    _wait_all(c, r"deadlock detected", marks)

    # --- too many connections: fill the slots with idle superuser sessions
    holds: list[subprocess.Popen[str]] = []
    marks = _log_marks(c)

    def hold(n: int) -> None:
        app = f"{APP_HOLD}-{n}"
        holds.append(c.psql_bg(app_name=app))
        c.wait_for_log(rf"connection authorized: .*application_name={app}$", after=marks["log"])

    reserved = HOLD_SESSIONS - int(SETTINGS["superuser_reserved_connections"])
    for n in range(reserved):
        hold(n)
    c.psql("SELECT 1;", user="app", app_name=APP_CROWD_APP, check=False)
    c.wait_for_log(r"remaining connection slots are reserved", after=marks["log"])
    for n in range(reserved, HOLD_SESSIONS):
        hold(n)
    c.psql("SELECT 1;", app_name=APP_CROWD_SUPER, check=False)
    c.wait_for_log(r"sorry, too many clients already", after=marks["log"])
    for proc in holds:
        _finish(proc)

    # --- checkpoint
    marks = _log_marks(c)
    c.psql("CHECKPOINT;", app_name=APP_CHECKPOINT)
    _wait_all(c, r"checkpoint complete: ", marks)

    # --- autovacuum of the table the setup left dead rows in (started long ago, naptime 1 s)
    _wait_all(c, r"automatic vacuum of table \W*shop\.public\.vac", dict.fromkeys(("log", "csv", "json"), 0), 30)

    # --- reload with a changed parameter, then a fast restart
    marks = _log_marks(c)
    c.set_settings({"deadlock_timeout": "250ms"})
    c.reload()
    _wait_all(c, r"parameter \W*deadlock_timeout\W* changed", marks)
    c.restart("fast")
    marks = _log_marks(c)
    c.psql("SELECT * FROM end_of_workload_marker;", app_name=APP_MARKER)
    _wait_all(c, r"end_of_workload_marker", marks)

    # --- stop, and wait for the logging collector to write the last line everywhere
    c.stop("fast")
    _wait_all(c, r"database system is shut down", marks)
    run.seconds = time.monotonic() - started
    return run
