"""Smoke tests of the PgCluster harness: a real PostgreSQL 15 writes .log, .csv and .json at once."""

from __future__ import annotations

import csv
import io
import json
import subprocess
from typing import Any

from tests.pgcluster import HBA_REJECT_DB, PgCluster, PgClusterFactory, process_exited

SECRET = "s3cret-Pa55"


def _csv_rows(cluster: PgCluster) -> list[list[str]]:
    return list(csv.reader(io.StringIO(cluster.log_text("csv"))))


def _json_entries(cluster: PgCluster) -> list[dict[str, Any]]:
    return [json.loads(line) for line in cluster.log_text("json").splitlines() if line.strip()]


def test_cluster_logs_errors_slow_statements_and_auth_failures_in_all_three_formats(
    pg_cluster_factory: PgClusterFactory,
) -> None:
    cluster = pg_cluster_factory({"log_min_duration_statement": "0"})

    script = f"""
        SELECT 1/0;
        SELECT pg_sleep(0.05);
        CREATE ROLE alice LOGIN PASSWORD '{SECRET}';
    """
    result = cluster.psql(script, app_name="smoke")
    assert "division by zero" in result.stderr  # a failing statement does not stop the script

    wrong = cluster.psql("SELECT 1", user="alice", password="wrong", host_tcp=True, check=False)
    assert wrong.returncode == 2
    assert "password authentication failed" in wrong.stderr
    assert cluster.query("SELECT current_user") == "postgres"
    right = cluster.psql("SELECT current_user", user="alice", password=SECRET, host_tcp=True)
    assert "alice" in right.stdout

    unknown = cluster.psql("SELECT 1", user="nobody", check=False)
    assert unknown.returncode == 2
    rejected = cluster.psql("SELECT 1", db=HBA_REJECT_DB, password="x", host_tcp=True, check=False)
    assert "pg_hba.conf rejects connection" in rejected.stderr
    no_entry = cluster.psql("SELECT 1", db="dbname=postgres replication=true", check=False)
    assert "no pg_hba.conf entry" in no_entry.stderr

    # The logging collector writes asynchronously: wait for each line rather than reading once.
    for pattern in (
        r"postgres@postgres/smoke ERROR:  division by zero\n.*STATEMENT:  SELECT 1/0;",
        r"smoke LOG:  duration: [\d.]+ ms  statement: SELECT pg_sleep\(0\.05\);",
        r'FATAL:  password authentication failed for user "alice"',
        r'FATAL:  role "nobody" does not exist',
        rf'FATAL:  pg_hba\.conf rejects connection for host "127\.0\.0\.1", .*database "{HBA_REJECT_DB}"',
        r"FATAL:  no pg_hba\.conf entry for replication connection",
    ):
        cluster.wait_for_log(pattern, "log")

    cluster.wait_for_log(r"password authentication failed", "csv")
    rows = _csv_rows(cluster)
    assert all(len(row) == 26 for row in rows)  # PostgreSQL 14+ csvlog columns
    by_state = {(row[11], row[12]) for row in rows}
    assert ("ERROR", "22012") in by_state
    assert ("FATAL", "28P01") in by_state
    assert any(row[13].startswith("duration: ") and row[22] == "smoke" for row in rows)

    cluster.wait_for_log(r"password authentication failed", "json")
    entries = _json_entries(cluster)
    assert any(e.get("state_code") == "22012" and e.get("application_name") == "smoke" for e in entries)
    assert any(e.get("message", "").startswith("duration: ") for e in entries)
    assert any(e.get("state_code") == "28P01" and e.get("user") == "alice" for e in entries)

    stems = {p.stem for p in cluster.log_files("log")}
    assert stems == {p.stem for p in cluster.log_files("csv")} == {p.stem for p in cluster.log_files("json")}


def test_lifecycle_lock_wait_reload_immediate_stop_and_close(pg_cluster_factory: PgClusterFactory) -> None:
    cluster = pg_cluster_factory()
    cluster.psql("CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (1);", on_error_stop=True)

    holder = cluster.psql_bg("BEGIN; UPDATE t SET id = 1 WHERE id = 1;", app_name="holder")
    cluster.wait_for_sql("SELECT count(*) = 1 FROM pg_locks WHERE relation = 't'::regclass AND granted")
    waiter = cluster.psql_bg("UPDATE t SET id = 1 WHERE id = 1;", app_name="waiter")
    cluster.wait_for_log(r"waiter LOG:  process \d+ still waiting for ShareLock")
    assert holder.stdin is not None and waiter.stdin is not None
    holder.communicate("COMMIT;\n", timeout=10)
    waiter.communicate(timeout=10)
    cluster.wait_for_log(r"waiter LOG:  process \d+ acquired ShareLock on transaction \d+ after [\d.]+ ms")

    mark = len(cluster.log_text())
    cluster.set_settings({"log_min_duration_statement": "0"})
    cluster.reload()
    cluster.wait_for_log(r'parameter "log_min_duration_statement" changed to "0"', after=mark)

    cluster.kill()
    assert not cluster.running
    cluster.start()
    cluster.wait_for_log(r"database system was interrupted|was not properly shut down")
    port, pid = cluster.port, cluster.postmaster_pid
    assert pid is not None

    cluster.close()
    assert process_exited(pid)
    assert cluster.log_files("log")  # the logs outlive the cluster for post-mortems
    probe = subprocess.run(["bash", "-c", f"exec 3<>/dev/tcp/127.0.0.1/{port}"], capture_output=True)
    assert probe.returncode != 0
