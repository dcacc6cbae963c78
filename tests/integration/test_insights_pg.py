"""Insights against a real PostgreSQL 15: what a DBA would find in the log, the daemon finds too.

The workload (tests/integration/insights_workload.py) causes a deadlock, WAL-triggered
checkpoints, temporary files, an authentication failure burst, the connection limit and a known
pgbench run. The oracle is the server's own csvlog, counted with the `csv` module (`LogFacts`):
the daemon (a real `forwarder run` reading that csvlog) must report the same numbers, and every
line its findings point to must be a stored line of the right kind.
"""

from __future__ import annotations

import json
import re
import sqlite3
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.daemonproc import DaemonProcess
from tests.harness import poll_until
from tests.integration.insights_workload import SETTINGS, InsightsWorkload, LogFacts, run_insights_workload
from tests.pgcluster import PgCluster

DB_ID = "pg15"
# The line kinds a finding of each rule rests on.
EVIDENCE_KINDS = {
    "deadlocks": {"deadlock"},
    "checkpoints": {"checkpoint"},
    "temp_files": {"temp_file"},
    "auth_failures": {"auth_failure"},
    "connection_limit": {"too_many_connections"},
}
# pgbench's TPC-B script (-b tpcb-like): what every transaction executes once.
TPCB_STATEMENTS = 7


@pytest.fixture(scope="module")
def ran(pg_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PgCluster, InsightsWorkload]]:
    """One cluster, one workload, shared by the tests of this module (it takes about half a minute)."""
    root = tmp_path_factory.mktemp("insights")
    cluster = PgCluster(root / "pg", SETTINGS, pg_bin=pg_bin)
    with cluster:
        yield cluster, run_insights_workload(cluster, root / "scratch")


def canonical(sql: str) -> str:
    """A statement's text without layout: whitespace collapsed, no trailing semicolon."""
    return re.sub(r"\s+", " ", sql).strip().rstrip(";").strip()


@pytest.mark.timeout(180)
def test_the_workload_logs_what_it_was_built_to_cause(ran: tuple[PgCluster, InsightsWorkload]) -> None:
    cluster, w = ran
    facts = LogFacts.read(cluster)
    # Several checkpoints requested by WAL volume, far closer together than checkpoint_timeout.
    assert facts.wal_checkpoints >= 3
    assert facts.too_frequent_warnings >= 1
    [detail] = facts.deadlock_details
    for statement in w.deadlock_statements:
        assert statement in detail
    assert facts.temp_files[(w.temp_user, w.db)] >= 1
    assert facts.temp_bytes[(w.temp_user, w.db)] >= 1_000_000  # a sort of a few MB
    assert facts.auth_failures == {(w.auth_client, w.auth_user): w.auth_failures}
    assert facts.too_many_clients == w.refused_connections
    # Every TPC-B statement ran once per transaction of every client, and nothing else ran that often.
    executions = w.pgbench_clients * w.pgbench_transactions
    per_transaction = [sql for sql, s in facts.statements.items() if s.calls == executions]
    assert len(per_transaction) == TPCB_STATEMENTS, facts.statements
    assert any(sql.startswith("UPDATE pgbench_accounts") for sql in per_transaction)
    assert w.seconds < 60


@pytest.fixture
def daemon(ran: tuple[PgCluster, InsightsWorkload], tmp_path: Path) -> Iterator[DaemonProcess]:
    """A real daemon that reads the workload's csvlog from its start, with insights on."""
    cluster, _ = ran
    d = DaemonProcess(
        tmp_path / "fwd",
        [
            {
                "id": DB_ID,
                "name": "insights-db",
                "host": "db1.test",
                "log": {"path": str(cluster.log_dir / "*.csv"), "format": "csvlog", "poll_interval_seconds": 0.1},
            }
        ],
        extra_toml="[insights]\nenabled = true\n",
    )
    d.start()
    try:
        yield d
    finally:
        d.close()


def stored_line(d: DaemonProcess, line_id: str) -> dict[str, Any]:
    """The stored line with this id, through the Logs API (the newest line older than id + 1)."""
    [line] = d.get(f"/v1/databases/{DB_ID}/logs", before=str(int(line_id) + 1), limit=1)["lines"]
    assert line["id"] == line_id, f"line {line_id} is not stored"
    return dict(line)


def shown_texts(finding: dict[str, Any]) -> str:
    """A finding's summary and the texts of its evidence facts, each without layout."""
    texts = [finding["summary"]]
    for value in finding["evidence"]["facts"].values():
        texts += [str(v) for v in value] if isinstance(value, list) else [str(value)]
    return " | ".join(canonical(t) for t in texts)


@pytest.mark.timeout(180)
def test_findings_and_queries_match_the_log(ran: tuple[PgCluster, InsightsWorkload], daemon: DaemonProcess) -> None:
    cluster, w = ran
    d = daemon
    facts = LogFacts.read(cluster)
    assert len(d.wait_for_line(DB_ID, w.marker, timeout=60)) == 1  # read in order: everything before is stored
    findings_path = f"/v1/databases/{DB_ID}/findings"

    def by_rule() -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = {}
        for f in d.get(findings_path, status="open")["findings"]:
            out.setdefault(f["rule"], []).append(f)
        return out

    # The engine follows the store like a destination: wait until it caught up with every rule.
    poll_until(lambda: set(EVIDENCE_KINDS) <= set(by_rule()), timeout=60, what="the five findings", interval=0.2)
    found = by_rule()

    # deadlock: both statements, as normalized text (values removed)
    [deadlock] = found["deadlocks"]
    assert deadlock["evidence"]["count"] == facts.deadlocks == 1
    shown = shown_texts(deadlock)
    for normalized in w.deadlock_normalized:
        assert canonical(normalized) in shown
    assert "from a" not in shown  # the values were removed

    # checkpoints: as many WAL-requested checkpoints as the log holds; the fix raises max_wal_size
    [checkpoints] = found["checkpoints"]
    assert checkpoints["evidence"]["count"] == facts.wal_checkpoints
    [wal_fix] = [f for f in checkpoints["fixes"] if "max_wal_size" in f["sql"]]
    raised = re.fullmatch(r"ALTER SYSTEM SET max_wal_size = '(\d+)MB';?", wal_fix["sql"])
    assert raised is not None, wal_fix["sql"]
    assert int(raised.group(1)) > int(str(SETTINGS["max_wal_size"]).removesuffix("MB"))
    assert wal_fix["needs"] == "reload" and not wal_fix["manual"]

    # temporary files of the role that sorted, in its database
    [temp] = [f for f in found["temp_files"] if f["subject"] == f"{w.temp_user}|{w.db}"]
    assert temp["evidence"]["count"] == facts.temp_files[(w.temp_user, w.db)]
    assert any("work_mem" in f["sql"] and w.temp_user in f["sql"] for f in temp["fixes"])

    # the authentication failure burst, by client and user
    [auth] = [f for f in found["auth_failures"] if f["subject"] == f"{w.auth_client}|{w.auth_user}"]
    assert auth["evidence"]["count"] == w.auth_failures == facts.auth_failures[(w.auth_client, w.auth_user)]

    # the connection limit
    [crowd] = found["connection_limit"]
    assert crowd["evidence"]["count"] == facts.too_many_clients == w.refused_connections

    # every evidence line of every finding is a stored line of the rule's kind
    for rule, kinds in EVIDENCE_KINDS.items():
        for finding in found[rule]:
            evidence = finding["evidence"]
            assert evidence["line_ids"], f"{rule}: no evidence lines"
            assert evidence["lines_available"] == evidence["line_ids"] and evidence["lines_deleted"] == 0
            for line_id in evidence["line_ids"]:
                assert stored_line(d, line_id)["kind"] in kinds, (rule, line_id)
            assert finding["href"] == f"/ui/databases/{DB_ID}/findings/{finding['id']}"
            single = d.get(f"{findings_path}/{finding['id']}")
            stable = ("id", "rule", "subject", "status", "title", "fixes", "href")
            assert {k: single[k] for k in stable} == {k: finding[k] for k in stable}
            assert single["evidence"]["count"] == evidence["count"]

    # queries: pgbench's statements ranked by total time, with the log's call counts and totals
    queries = d.get(f"/v1/databases/{DB_ID}/queries", sort="total", limit=100)["queries"]
    totals = [q["total_ms"] for q in queries]
    assert totals == sorted(totals, reverse=True)
    by_text = {canonical(q["text"]): q for q in queries}
    executions = w.pgbench_clients * w.pgbench_transactions
    tpcb = {sql: s for sql, s in facts.statements.items() if s.calls == executions}
    assert len(tpcb) == TPCB_STATEMENTS
    # (pgbench -M prepared sends them with placeholders already: the log's text is the normalized one)
    for sql, logged in tpcb.items():
        query = by_text.get(canonical(sql))
        assert query is not None, f"{sql!r} not among {sorted(by_text)}"
        assert query["calls"] == logged.calls, sql
        assert query["total_ms"] == pytest.approx(logged.total_ms, abs=0.01), sql
        assert query["users"] == [w.pgbench_user] and w.pgbench_app in query["applications"]
        assert stored_line(d, query["example_line_id"])["kind"] == "slow_query"
    # the statement that took most time in the log leads (no other role logs durations)
    busiest = max(tpcb, key=lambda sql: tpcb[sql].total_ms)
    assert canonical(queries[0]["text"]) == canonical(busiest)


def post_json(d: DaemonProcess, path: str, key: str, body: dict[str, Any]) -> tuple[int, Any]:
    """A POST with `key`; the status and the JSON answer, errors included."""
    req = urllib.request.Request(  # noqa: S310 - loopback test URL
        d.url + path,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:  # noqa: S310
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.timeout(180)
def test_the_checkpoint_findings_own_fix_changes_the_real_server(
    ran: tuple[PgCluster, InsightsWorkload], tmp_path: Path
) -> None:
    """Last in this module: it changes the shared server's max_wal_size (and sets it back)."""
    cluster, w = ran
    password = "fix-it's-pw"
    cluster.query("ALTER ROLE postgres PASSWORD 'fix-it''s-pw'")
    password_file = tmp_path / "pg.password"
    password_file.write_text(password + "\n")
    dsn = f"postgresql://postgres@{cluster.host}:{cluster.port}/postgres?sslmode=disable"
    log = {"path": str(cluster.log_dir / "*.csv"), "format": "csvlog", "poll_interval_seconds": 0.1}
    connection = (
        f"[databases.connection]\ndsn = {json.dumps(dsn)}\npassword_file = {json.dumps(str(password_file))}\n"
        "allow_fixes = true\n"
    )
    d = DaemonProcess(tmp_path / "fwd", [{"id": DB_ID, "name": "insights-db", "log": log}], extra_toml=connection)
    d.start()
    before = cluster.query("SHOW max_wal_size")
    try:
        assert len(d.wait_for_line(DB_ID, w.marker, timeout=60)) == 1
        findings_path = f"/v1/databases/{DB_ID}/findings"

        def checkpoint_findings() -> list[dict[str, Any]]:
            return [f for f in d.get(findings_path)["findings"] if f["rule"] == "checkpoints"]

        poll_until(lambda: bool(checkpoint_findings()), timeout=60, what="the checkpoint finding", interval=0.2)
        [finding] = checkpoint_findings()
        [fix] = [f for f in finding["fixes"] if "max_wal_size" in (f["sql"] or "")]
        body = {"finding_id": finding["id"], "fix_id": fix["fix_id"]}
        fixes_path = f"/v1/databases/{DB_ID}/fixes"

        status, answer = post_json(d, fixes_path, d.read_only_key, body)
        assert status == 403 and answer["error"]["code"] == "forbidden"
        assert cluster.query("SHOW max_wal_size") == before

        status, answer = post_json(d, fixes_path, d.key, body)
        assert status == 200, answer
        assert answer["applied"] is True and answer["setting"] == "max_wal_size"
        assert answer["before"] == before and answer["reloaded"] is True
        after = cluster.query("SHOW max_wal_size")
        assert after != before and answer["after"] == after
        wanted_mb = int(re.search(r"'(\d+)MB'", fix["sql"]).group(1))  # type: ignore[union-attr]
        # pg_settings gives max_wal_size in MB: the value the fix's SQL set.
        assert cluster.query("SELECT setting FROM pg_settings WHERE name = 'max_wal_size'") == str(wanted_mb)

        # The audit record: who (the key's id, never the key) and what.
        with sqlite3.connect(f"file:{d.root / 'store.db'}?mode=ro", uri=True) as db:
            rows = db.execute("SELECT actor, target, details FROM audit WHERE action = 'fixes.applied'").fetchall()
        [(actor, target, details)] = rows
        assert target == DB_ID and actor.startswith("key:") and d.key not in actor
        assert fix["sql"].rstrip(";") in details and password not in details
    finally:
        d.close()
        cluster.query("ALTER SYSTEM RESET max_wal_size")
        cluster.query("SELECT pg_reload_conf()")
