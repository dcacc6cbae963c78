"""The server's lifecycle from a real PostgreSQL 15 is kind `server`, in stderr, csvlog and jsonlog.

One cluster (module scope, `log_min_messages = debug1` for the autovacuum launcher's own lines)
goes through what a DBA's server goes through, each step waited for in the log:

1. start (collector, listening sockets, "ready to accept connections", autovacuum launcher);
2. a reload that changes a setting and one that needs a restart, then a session's `SET` of that
   same setting, which PostgreSQL answers with the reload's words at ERROR (an `error`);
3. `pg_terminate_backend()` of a session (FATAL 57P01);
4. a smart shutdown request while a session is open: a new connection gets FATAL 57P03 "the
   database system is shutting down"; the session ends, the server stops; start again;
5. a backend killed with SIGKILL: crash, "terminating any other active server processes",
   reinitializing, crash recovery. (PostgreSQL 14+ send "terminating connection because of crash
   of another server process" to the clients only: the test checks the client got it.)
6. a fast stop and start, an immediate stop and start (recovery), and a last fast stop.

The tests then read the three log files as the daemon does.
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest

from forwarder.model import LogLine
from forwarder.pglog import Format, make_reader, parse_stream
from tests.pgcluster import PgCluster

PREFIX: Final = "%m [%p] %q%u@%d/%a %e "
FORMATS: Final[dict[Format, str]] = {"stderr": "log", "csvlog": "csv", "jsonlog": "json"}
SETTINGS: Final = {
    "log_line_prefix": PREFIX,
    "log_min_messages": "debug1",
    "log_connections": "off",
    "log_disconnections": "off",
    "autovacuum_naptime": "1s",
}

# (message pattern, severity, kind) the run must have logged, as PostgreSQL 15 words them
EXPECTED: Final = [
    (r"starting PostgreSQL 15\.\d+ .*on ", "LOG", "server"),
    (r'listening on IPv4 address "127\.0\.0\.1", port \d+', "LOG", "server"),
    (r'listening on Unix socket ".*"', "LOG", "server"),
    (r"database system was shut down at ", "LOG", "server"),
    (r"database system is ready to accept connections", "LOG", "server"),
    (r"autovacuum launcher started", "DEBUG", "server"),
    (r"autovacuum launcher shutting down", "DEBUG", "server"),
    (r"received SIGHUP, reloading configuration files", "LOG", "server"),
    (r'parameter "log_min_duration_statement" changed to "250"', "LOG", "server"),
    (r'parameter "max_connections" cannot be changed without restarting the server', "LOG", "server"),
    (r'configuration file ".*" contains errors; unaffected changes were applied', "LOG", "server"),
    (r'parameter "max_connections" cannot be changed without restarting the server', "ERROR", "error"),
    (r"terminating connection due to administrator command", "FATAL", "server"),
    (r"received smart shutdown request", "LOG", "server"),
    (r"the database system is shutting down", "FATAL", "server"),
    (r'background worker "logical replication launcher" \(PID \d+\) exited with exit code 1', "LOG", "server"),
    (r"shutting down", "LOG", "server"),
    (r"database system is shut down", "LOG", "server"),
    (r"checkpoint starting: shutdown immediate", "LOG", "checkpoint"),
    (r"server process \(PID \d+\) was terminated by signal 9: Killed", "LOG", "server"),
    (r"terminating any other active server processes", "LOG", "server"),
    (r"all server processes terminated; reinitializing", "LOG", "server"),
    (r"database system was interrupted; last known up at ", "LOG", "server"),
    (r"database system was not properly shut down; automatic recovery in progress", "LOG", "server"),
    (r"redo starts at [0-9A-F]+/[0-9A-F]+", "LOG", "server"),
    (r"redo done at [0-9A-F]+/[0-9A-F]+ system usage: ", "LOG", "server"),
    (r"checkpoint starting: end-of-recovery immediate wait", "LOG", "checkpoint"),
    (r"received fast shutdown request", "LOG", "server"),
    (r"aborting any active transactions", "LOG", "server"),
    (r"received immediate shutdown request", "LOG", "server"),
]


@dataclass
class Run:
    lines: dict[Format, list[LogLine]]
    startup: list[LogLine]  # pg_ctl's log: what the postmaster writes before the collector takes over
    crash_client_stderr: str


def _parse(cluster: PgCluster, fmt: Format) -> list[LogLine]:
    out: list[LogLine] = []
    for path in cluster.log_files(FORMATS[fmt]):
        reader = make_reader(fmt, line_prefix=PREFIX, timezone="UTC", full_text=False)
        out.extend(parse_stream(reader, [path.read_bytes()]))
    return out


def _mark(cluster: PgCluster) -> int:
    return len(cluster.log_text())


def _backend_pid(cluster: PgCluster, app: str) -> int:
    sql = f"SELECT pid FROM pg_stat_activity WHERE application_name = '{app}'"
    cluster.wait_for_sql(f"SELECT count(*) = 1 FROM ({sql}) a")
    return int(cluster.query(sql))


@pytest.fixture(scope="module")
def run(pg_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    cluster = PgCluster(tmp_path_factory.mktemp("server_kinds") / "pg", SETTINGS, pg_bin=pg_bin)
    try:
        cluster.start()
        cluster.wait_for_log(r"autovacuum launcher started")
        reader = make_reader("stderr", line_prefix=PREFIX, timezone="UTC", full_text=False)
        startup = list(parse_stream(reader, [cluster.startup_log.read_bytes()]))

        # 2. reloads, and the same words in answer to a session's SET
        mark = _mark(cluster)
        cluster.set_settings({"log_min_duration_statement": "250", "max_connections": "21"})
        cluster.reload()
        cluster.wait_for_log(r"contains errors; unaffected changes were applied", after=mark)
        cluster.psql("SET max_connections = 30;")

        # 3. pg_terminate_backend()
        victim = cluster.psql_bg("SELECT pg_sleep(60);", app_name="victim")
        cluster.query(f"SELECT pg_terminate_backend({_backend_pid(cluster, 'victim')})")
        victim.communicate(timeout=30)

        # 4. a smart shutdown waits for the open session; a new connection is turned away
        holder = cluster.psql_bg("SELECT 1;", app_name="holder")
        _backend_pid(cluster, "holder")
        postmaster = cluster.postmaster_pid
        assert postmaster is not None
        mark = _mark(cluster)
        os.kill(postmaster, signal.SIGTERM)  # what pg_ctl stop -m smart sends
        cluster.wait_for_log(r"received smart shutdown request", after=mark)
        cluster.psql("SELECT 1;", check=False)
        cluster.wait_for_log(r"the database system is shutting down", after=mark)
        holder.communicate(timeout=30)
        cluster.wait_for_log(r"database system is shut down", after=mark, timeout=30)
        cluster.stop()  # waits for the postmaster to be gone
        cluster.start()

        # 5. a backend killed: the crash, the others told, recovery
        bystander = cluster.psql_bg("SELECT pg_sleep(60);", app_name="bystander")
        crashed = cluster.psql_bg("SELECT pg_sleep(60);", app_name="crashed")
        _backend_pid(cluster, "bystander")
        mark = _mark(cluster)
        os.kill(_backend_pid(cluster, "crashed"), signal.SIGKILL)
        cluster.wait_for_log(r"database system is ready to accept connections", after=mark, timeout=60)
        _, bystander_err = bystander.communicate(timeout=30)
        crashed.communicate(timeout=30)

        # 6. fast stop, immediate stop (recovery at the next start), a last fast stop
        cluster.restart("fast")
        cluster.restart("immediate")
        cluster.stop("fast")
        yield Run({fmt: _parse(cluster, fmt) for fmt in FORMATS}, startup, bystander_err)
    finally:
        cluster.close()


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize(("pattern", "severity", "kind"), EXPECTED, ids=[p[:50] for p, _, _ in EXPECTED])
def test_each_lifecycle_message_has_its_kind(run: Run, fmt: Format, pattern: str, severity: str, kind: str) -> None:
    regex = re.compile(pattern)
    found = [line for line in run.lines[fmt] if line.severity == severity and regex.match(line.message)]
    assert found, f"{severity}: {pattern} not logged"
    assert {line.kind for line in found} == {kind}


def test_the_collector_handover_written_to_stderr_is_server(run: Run) -> None:
    # syslogger.c: the postmaster's last line on its own stderr (pg_ctl -l, journald, a container's
    # stdout), with a HINT that names the log directory
    logged = [(line.severity, line.message, line.kind) for line in run.startup if line.severity != "DEBUG"]
    assert logged == [("LOG", "redirecting log output to logging collector process", "server")]


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_no_lifecycle_line_is_left_as_other(run: Run, fmt: Format) -> None:
    # Below DEBUG1 PostgreSQL reports its internals (other); every LOG/WARNING line of this run is
    # the lifecycle or a kind of its own.
    others = [f"{line.severity}: {line.message}" for line in run.lines[fmt] if line.kind == "other"]
    assert [o for o in others if not o.startswith("DEBUG")] == []


def test_the_crash_reached_the_other_clients(run: Run) -> None:
    # PostgreSQL 14+ send this WARNING (57P02) to the clients only, not to the server log
    assert "terminating connection because of crash of another server process" in run.crash_client_stderr
    assert not any("crash of another server process" in line.message for line in run.lines["stderr"])
