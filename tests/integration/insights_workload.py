"""A workload that makes one real PostgreSQL 15 log what the insights must find, and the log's own
count of it.

`run_insights_workload(cluster, scratch)` drives a cluster started with `SETTINGS` through:

1. a deadlock between two sessions (`APP_DEADLOCK_A`/`_B`) whose blocking statements are
   `DEADLOCK_STATEMENTS` (two different shapes, so both can be told apart once normalized);
2. frequent checkpoints: `pgbench -i -s PGBENCH_SCALE` writes far more WAL than `max_wal_size`
   (32MB, the least PostgreSQL allows), so the checkpointer starts "checkpoint starting: wal" ones
   (and warns "checkpoints are occurring too frequently") well within `checkpoint_timeout`;
3. temporary files: one sort of a few MB by role `TEMP_USER` under `work_mem = 64kB`;
4. an authentication failure burst: `AUTH_FAILURES` wrong-password TCP logins of `AUTH_USER`;
5. the connection limit: `max_connections` idle sessions, then `REFUSED_CONNECTIONS` more logins
   that get "sorry, too many clients already";
6. `pgbench -M prepared -c PGBENCH_CLIENTS -t PGBENCH_TRANSACTIONS` as role `PGBENCH_USER`, which
   has `log_min_duration_statement = 0`: every execution of the TPC-B statements is logged as a
   `duration: ... execute P_n: <sql>` line (no other role logs durations).

It returns an `InsightsWorkload` (what was caused, by whom). `LogFacts.read(cluster)` counts what
the server's csvlog holds, with the `csv` module alone: a test compares the daemon's numbers with
these, never with anything the daemon computed.
"""

from __future__ import annotations

import csv
import io
import re
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tests.pgcluster import PgCluster

DB = "insights"
PGBENCH_USER = "bench"
PGBENCH_APP = "pgbench"  # pgbench sets application_name itself
PGBENCH_SCALE = 10
PGBENCH_CLIENTS = 2
PGBENCH_TRANSACTIONS = 100  # per client
TEMP_USER = "reporter"
AUTH_USER = "app"
AUTH_CLIENT = "127.0.0.1"
AUTH_FAILURES = 8
REFUSED_CONNECTIONS = 2
MAX_CONNECTIONS = 8

APP_SETUP = "iw-setup"
APP_DEADLOCK_A = "iw-deadlock-a"
APP_DEADLOCK_B = "iw-deadlock-b"
APP_TEMP = "iw-tempfile"
APP_AUTH = "iw-auth"
APP_HOLD = "iw-hold"  # + "-<n>"
APP_CROWD = "iw-crowd"
APP_MARKER = "iw-marker"

SETTINGS: dict[str, str | int] = {
    "log_destination": "stderr,csvlog",
    "log_checkpoints": "on",
    # The least PostgreSQL accepts (2 WAL segments): a checkpoint every ~11MB of WAL.
    "max_wal_size": "32MB",
    "min_wal_size": "32MB",
    "log_temp_files": 0,
    "work_mem": "64kB",
    "log_lock_waits": "on",
    "deadlock_timeout": "100ms",
    "max_connections": MAX_CONNECTIONS,
    "superuser_reserved_connections": 1,
    # Every statement's client (host, without port in the daemon's `client`) and sqlstate.
    "log_line_prefix": "%m [%p] %q%u@%d/%a %r %e ",
}

SETUP_SQL = f"""\
CREATE ROLE {AUTH_USER} LOGIN PASSWORD 'the-right-one';
CREATE ROLE {PGBENCH_USER} LOGIN;
ALTER ROLE {PGBENCH_USER} SET log_min_duration_statement = 0;
CREATE ROLE {TEMP_USER} LOGIN;
CREATE DATABASE {DB};
"""
DB_SQL = f"""\
SET work_mem = '64MB';  -- no temporary file here: the only ones are the sort of APP_TEMP
CREATE TABLE dl (id int PRIMARY KEY, v int NOT NULL, note text);
INSERT INTO dl VALUES (1, 0, NULL), (2, 0, NULL);
CREATE TABLE big AS SELECT g AS x, md5(g::text) AS pad FROM generate_series(1, 100000) g;
GRANT SELECT ON big TO {TEMP_USER};
"""
# Session A takes row 1, B row 2; then A waits for row 2 and B for row 1: B's deadlock check (after
# deadlock_timeout) finds the cycle, B gets "deadlock detected" naming both statements.
DEADLOCK_FIRST = ("UPDATE dl SET v = v + 1 WHERE id = 1;", "UPDATE dl SET v = v + 2 WHERE id = 2;")
DEADLOCK_STATEMENTS = ("UPDATE dl SET note = 'from a' WHERE id = 2;", "UPDATE dl SET v = v * 20 WHERE id = 1;")
# The same with values as positional placeholders (how the statements look once normalized).
DEADLOCK_NORMALIZED = ("UPDATE dl SET note = $1 WHERE id = $2", "UPDATE dl SET v = v * $1 WHERE id = $2")
TEMP_SQL = "SELECT x, pad FROM big ORDER BY pad DESC OFFSET 99999;"


@dataclass(frozen=True, slots=True)
class InsightsWorkload:
    """What `run_insights_workload` caused: who did what, and how many times by design."""

    db: str
    deadlock_statements: tuple[str, str]
    deadlock_normalized: tuple[str, str]
    temp_user: str
    auth_user: str
    auth_client: str
    auth_failures: int
    refused_connections: int
    pgbench_user: str
    pgbench_app: str
    pgbench_clients: int
    pgbench_transactions: int
    marker: str  # the last statement: once the daemon stored its error, it has stored everything before
    seconds: float


@dataclass(frozen=True, slots=True)
class StatementFacts:
    """One statement's `duration` lines in the log: executions (calls) and their total."""

    calls: int = 0
    total_ms: float = 0.0


# postgres.c: "duration: %s ms  statement: %s" | "duration: %s ms  execute %s%s%s: %s"; parse and
# bind durations are not executions.
_CALL = re.compile(r"duration: (\d+(?:\.\d+)?) ms  (?:statement|execute [^:]*): (.*)", re.DOTALL)
_WAL_CHECKPOINT = re.compile(r"checkpoint starting:.* wal\b")


@dataclass(frozen=True, slots=True)
class LogFacts:
    """What the server's csvlog holds, counted with the `csv` module (PostgreSQL's own columns)."""

    wal_checkpoints: int  # "checkpoint starting: ... wal ..." (requested by WAL volume)
    too_frequent_warnings: int  # "checkpoints are occurring too frequently"
    deadlocks: int
    deadlock_details: tuple[str, ...]
    temp_files: Counter[tuple[str, str]]  # (user, database) -> temporary file lines
    temp_bytes: Counter[tuple[str, str]]
    auth_failures: Counter[tuple[str, str]]  # (client host, user) -> FATAL password failures
    too_many_clients: int  # "sorry, too many clients already"
    statements: dict[str, StatementFacts] = field(default_factory=dict)  # pgbench user's, by SQL text

    @classmethod
    def read(cls, cluster: PgCluster, pgbench_user: str = PGBENCH_USER) -> LogFacts:
        """Count the facts in every csvlog file of `cluster`."""
        # csvlog columns (PostgreSQL 15 docs, "Using CSV-Format Log Output").
        user_i, db_i, client_i, severity_i, message_i, detail_i = 1, 2, 4, 11, 13, 14
        wal = frequent = deadlocks = too_many = 0
        details: list[str] = []
        temp: Counter[tuple[str, str]] = Counter()
        temp_bytes: Counter[tuple[str, str]] = Counter()
        auth: Counter[tuple[str, str]] = Counter()
        calls: dict[str, list[float]] = {}
        for row in csv.reader(io.StringIO(cluster.log_text("csv"))):
            message = row[message_i]
            if message.startswith("checkpoint starting:") and _WAL_CHECKPOINT.match(message):
                wal += 1
            elif message.startswith("checkpoints are occurring too frequently"):
                frequent += 1
            elif message == "deadlock detected":
                deadlocks += 1
                details.append(row[detail_i])
            elif message.startswith("temporary file: "):
                temp[(row[user_i], row[db_i])] += 1
                temp_bytes[(row[user_i], row[db_i])] += int(message.rsplit(" ", 1)[1])
            elif row[severity_i] == "FATAL" and message.startswith("password authentication failed for user"):
                auth[(row[client_i].rpartition(":")[0], row[user_i])] += 1
            elif message == "sorry, too many clients already":
                too_many += 1
            elif row[user_i] == pgbench_user and (m := _CALL.fullmatch(message)):
                calls.setdefault(m.group(2), []).append(float(m.group(1)))
        return cls(
            wal_checkpoints=wal,
            too_frequent_warnings=frequent,
            deadlocks=deadlocks,
            deadlock_details=tuple(details),
            temp_files=temp,
            temp_bytes=temp_bytes,
            auth_failures=auth,
            too_many_clients=too_many,
            statements={sql: StatementFacts(len(ms), sum(ms)) for sql, ms in calls.items()},
        )


def _pgbench(cluster: PgCluster, *args: str, user: str | None = None, timeout: float = 120) -> str:
    argv = [str(cluster.pg_bin / "pgbench"), "-h", str(cluster.socket_dir), "-p", str(cluster.port)]
    argv += ["-U", user or cluster.superuser, *args, DB]
    env = cluster._client_env(None, None)  # the harness's clean libpq environment
    result = subprocess.run(
        argv, capture_output=True, text=True, env=env, timeout=timeout, check=False, cwd=cluster.root
    )
    assert result.returncode == 0, f"pgbench {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def _idle_in_tx(cluster: PgCluster, app: str) -> None:
    cluster.wait_for_sql(
        f"SELECT count(*) FROM pg_stat_activity WHERE application_name = '{app}' AND state = 'idle in transaction'",
        "1",
    )


def _deadlock(c: PgCluster) -> None:
    mark = len(c.log_text("csv"))
    a = c.psql_bg(f"BEGIN;\n{DEADLOCK_FIRST[0]}\n", db=DB, app_name=APP_DEADLOCK_A)
    b = c.psql_bg(f"BEGIN;\n{DEADLOCK_FIRST[1]}\n", db=DB, app_name=APP_DEADLOCK_B)
    _idle_in_tx(c, APP_DEADLOCK_A)
    _idle_in_tx(c, APP_DEADLOCK_B)
    assert a.stdin is not None and b.stdin is not None
    a.stdin.write(DEADLOCK_STATEMENTS[0] + "\n")
    a.stdin.flush()
    # A has waited past deadlock_timeout (its own check found no cycle) before B closes the cycle.
    c.wait_for_log(r"still waiting for ShareLock on transaction", "csv", after=mark)
    b.stdin.write(DEADLOCK_STATEMENTS[1] + "\n")
    b.stdin.flush()
    c.wait_for_log(r"deadlock detected", "csv", after=mark)
    a.communicate("COMMIT;\n", timeout=30)
    b.communicate("ROLLBACK;\n", timeout=30)


def _fill_connections(c: PgCluster) -> None:
    mark = len(c.log_text("csv"))
    holds = []
    for n in range(MAX_CONNECTIONS):
        app = f"{APP_HOLD}-{n}"
        holds.append(c.psql_bg(app_name=app))
        c.wait_for_log(rf"connection authorized: .*application_name={app}\b", "csv", after=mark)
    for _ in range(REFUSED_CONNECTIONS):
        result = c.psql("SELECT 1;", app_name=APP_CROWD, check=False)
        assert result.returncode != 0 and "too many clients" in result.stderr, result.stderr
    for proc in holds:
        proc.communicate("", timeout=30)
    # The slots are free again once the server logged every disconnection.
    c.wait_for_sql(f"SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE '{APP_HOLD}-%'", "0")


def run_insights_workload(cluster: PgCluster, scratch: Path) -> InsightsWorkload:
    """Run every part against `cluster` (started with `SETTINGS`); see the module docstring.

    The cluster keeps running; the last statement is `marker`'s failing SELECT.
    """
    started = time.monotonic()
    c = cluster
    scratch.mkdir(parents=True, exist_ok=True)
    c.psql(SETUP_SQL, on_error_stop=True, app_name=APP_SETUP)
    c.psql(DB_SQL, db=DB, on_error_stop=True, app_name=APP_SETUP)

    # 2. checkpoints: pgbench's initial load (as the superuser: its statements are not logged).
    _pgbench(c, "-i", "-q", "-s", str(PGBENCH_SCALE))
    c.psql(f"GRANT ALL ON ALL TABLES IN SCHEMA public TO {PGBENCH_USER};", db=DB, on_error_stop=True)

    # 6. pgbench's transactions, every execution logged with its duration.
    _pgbench(
        c,
        "-n",  # no vacuum before the run (the role does not own the tables)
        "-M",
        "prepared",
        "-c",
        str(PGBENCH_CLIENTS),
        "-t",
        str(PGBENCH_TRANSACTIONS),
        user=PGBENCH_USER,
    )

    # 1. the deadlock
    _deadlock(c)

    # 3. temporary files
    mark = len(c.log_text("csv"))
    c.psql(TEMP_SQL, db=DB, user=TEMP_USER, app_name=APP_TEMP, on_error_stop=True)
    c.wait_for_log(r"temporary file: ", "csv", after=mark)

    # 4. authentication failures
    for n in range(AUTH_FAILURES):
        result = c.psql(
            "SELECT 1;", user=AUTH_USER, password=f"wrong-{n}", host_tcp=True, app_name=APP_AUTH, check=False
        )
        assert "password authentication failed" in result.stderr, result.stderr

    # 5. the connection limit
    _fill_connections(c)

    marker = "insights_workload_done"
    mark = len(c.log_text("csv"))
    c.psql(f"SELECT * FROM {marker};", db=DB, app_name=APP_MARKER)
    c.wait_for_log(marker, "csv", after=mark)
    return InsightsWorkload(
        db=DB,
        deadlock_statements=DEADLOCK_STATEMENTS,
        deadlock_normalized=DEADLOCK_NORMALIZED,
        temp_user=TEMP_USER,
        auth_user=AUTH_USER,
        auth_client=AUTH_CLIENT,
        auth_failures=AUTH_FAILURES,
        refused_connections=REFUSED_CONNECTIONS,
        pgbench_user=PGBENCH_USER,
        pgbench_app=PGBENCH_APP,
        pgbench_clients=PGBENCH_CLIENTS,
        pgbench_transactions=PGBENCH_TRANSACTIONS,
        marker=marker,
        seconds=time.monotonic() - started,
    )
