"""A real PostgreSQL 15 writes its log; the daemon (a real subprocess) reads it; the Logs API shows it.

The oracle for "nothing lost, nothing twice" is `forwarder parse` run over the very files the
server wrote: the daemon's stored lines must be exactly those entries, in order, also after a
clean restart and after SIGKILL in the middle of a burst.
"""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from forwarder.model import KIND_ALIASES, KINDS
from tests.daemonproc import DaemonProcess
from tests.pgcluster import PgCluster, PgClusterFactory

PREFIX = "%m [%p] %q%u@%d/%a "
SECRETS = ["secret-alice@example.com", "slow-secret-4242", "pw-Wr0ng-S3cret"]
IDENTITY = ("id", "host", "database_id", "database_name")


@pytest.fixture
def cluster(pg_cluster_factory: PgClusterFactory) -> PgCluster:
    return pg_cluster_factory({"log_min_duration_statement": "100"})


@pytest.fixture
def daemon(cluster: PgCluster, tmp_path: Path) -> Any:
    d = DaemonProcess(
        tmp_path / "fwd",
        [
            {
                "id": "pg15",
                "name": "orders-db",
                "host": "db1.test",
                "log": {"path": str(cluster.log_dir / "*.log"), "line_prefix": PREFIX, "poll_interval_seconds": 0.1},
            }
        ],
    )
    d.start()
    yield d
    d.close()


def parsed_from_files(d: DaemonProcess, cluster: PgCluster, full_text: bool = False) -> list[dict[str, Any]]:
    """What `forwarder parse` makes of everything the server wrote (the oracle)."""
    text = b"".join(p.read_bytes() for p in cluster.log_files("log"))
    args = ["parse", "--format", "stderr", "--prefix", PREFIX] + (["--full-text"] if full_text else [])
    out = d.cli(*args, stdin=text.decode())
    return [json.loads(x) for x in out.stdout.splitlines()]


def without_identity(line: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in line.items() if k not in IDENTITY}


def settle(d: DaemonProcess, cluster: PgCluster, marker: str, timeout: float = 20) -> list[dict[str, Any]]:
    """Write a marker error, then wait until the daemon has stored everything the files hold.

    Returns every stored line; asserts they are exactly the oracle's entries (the wait is for
    another process's output, polled, not time-based logic of ours).
    """
    cluster.psql(f"SELECT * FROM {marker};")
    cluster.wait_for_log(marker)
    deadline = time.monotonic() + timeout
    while True:
        lines = d.all_lines("pg15")
        expected = parsed_from_files(d, cluster)
        if [without_identity(x) for x in lines] == expected or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert [without_identity(x) for x in lines] == expected
    return lines


def test_real_postgres_log_through_the_logs_api(cluster: PgCluster, daemon: DaemonProcess) -> None:
    d = daemon
    # --- a workload: errors (one repeated), a constraint violation with a secret, slow statements,
    # connections, a failed password login.
    for _ in range(3):
        cluster.psql("SELECT * FROM missing_alpha;", app_name="billing")
    cluster.psql(
        "CREATE TABLE users (email text UNIQUE);"
        f" INSERT INTO users VALUES ('{SECRETS[0]}'); INSERT INTO users VALUES ('{SECRETS[0]}');"
        " SELECT 1/0;"
    )
    for _ in range(2):
        cluster.psql(f"SELECT pg_sleep(0.15), '{SECRETS[1]}';")
    cluster.psql("SELECT 1", user="postgres", password=SECRETS[2], host_tcp=True, check=False)
    # Every entry the server wrote, in order, once: exactly what `forwarder parse` sees in the files.
    lines = settle(d, cluster, "marker_one")
    ids = [int(x["id"]) for x in lines]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)

    # --- fields
    [alpha, *_] = [x for x in lines if "missing_alpha" in x["message"]]
    assert alpha["severity"] == "ERROR" and alpha["kind"] == "error"
    assert (alpha["host"], alpha["database_id"], alpha["database_name"]) == ("db1.test", "pg15", "orders-db")
    assert alpha["user"] == "postgres" and alpha["database"] == "postgres" and alpha["application"] == "billing"
    assert isinstance(alpha["pid"], int) and alpha["statement"] == "SELECT * FROM missing_alpha;"
    assert abs(time.time() - time.mktime(time.strptime(alpha["time"][:19], "%Y-%m-%dT%H:%M:%S")) + time.timezone) < 120
    # log_min_duration_statement = 100: the two sleeps, and any other statement a loaded machine
    # took that long over (CI on two busy cores made a third).
    slow = [x for x in lines if x["kind"] == "slow_query"]
    assert all(x["duration_ms"] >= 100 for x in slow)
    sleeps = [x for x in slow if "pg_sleep($1)" in x["statement"]]
    assert len(sleeps) == 2 and all(x["duration_ms"] >= 150 and x["redacted"] for x in sleeps)
    dup = next(x for x in lines if x["message"].startswith("duplicate key value"))
    assert dup["detail"] == "Key (email)=(...) already exists." and dup["redacted"] is True
    everything = json.dumps(lines)
    for secret in SECRETS:
        assert secret not in everything
    assert any(x["kind"] == "connection" for x in lines)
    assert any(x["kind"] == "auth_failure" for x in lines)

    # --- kind filters and aliases
    by_kind = Counter(x["kind"] for x in lines)
    for kind in ("error", "slow_query", "connection", "auth_failure"):
        got = d.all_lines("pg15", kind=kind)
        assert len(got) == by_kind[kind] > 0 and {x["kind"] for x in got} == {kind}
    errors = d.all_lines("pg15", kind="errors")
    assert len(errors) == sum(by_kind[k] for k in KIND_ALIASES["errors"])
    assert {"error", "auth_failure"} <= {x["kind"] for x in errors}

    # --- search
    assert len(d.get("/v1/databases/pg15/logs", q="missing_alpha")["lines"]) == 3
    assert [x["id"] for x in d.get("/v1/databases/pg15/logs", q="duplicate key")["lines"]] == [dup["id"]]

    # --- time window
    middle = lines[len(lines) // 2]["time"]
    window = d.all_lines("pg15", **{"from": middle})
    assert window == [x for x in lines if x["time"] >= middle]
    assert d.all_lines("pg15", to=middle) == [x for x in lines if x["time"] < middle]

    # --- paging both ways with a small page: every line exactly once
    back: list[str] = []
    page = d.get("/v1/databases/pg15/logs", limit=7)
    while True:
        back += [x["id"] for x in page["lines"]]
        if not page["has_more"]:
            break
        page = d.get("/v1/databases/pg15/logs", limit=7, before=page["lines"][-1]["id"])
    forward: list[str] = []
    after = 0
    while page := d.get("/v1/databases/pg15/logs", limit=7, after=after)["lines"]:
        forward += [x["id"] for x in reversed(page)]
        after = int(page[0]["id"])
    assert back == [x["id"] for x in reversed(lines)] and forward == [x["id"] for x in lines]

    # --- groups
    groups = d.get("/v1/databases/pg15/logs/groups")["groups"]
    alpha_group = next(g for g in groups if "missing_alpha" in g["line"]["message"])
    assert alpha_group["count"] == 3 and alpha_group["kind"] == "error"
    assert alpha_group["line"]["id"] == [x for x in lines if "missing_alpha" in x["message"]][-1]["id"]
    assert len(d.get("/v1/databases/pg15/logs", group=alpha_group["group"])["lines"]) == 3

    # --- overview
    ov = d.get("/v1/databases/pg15/logs/overview")
    assert ov["source"]["state"] == "reading"
    assert Path(ov["source"]["file"]).parent == cluster.log_dir
    assert ov["counts_24h"] == {k: by_kind.get(k, 0) for k in KINDS}
    assert ov["usage_today"]["lines"] == len(lines)
    assert ov["usage_today"]["bytes"] == sum(p.stat().st_size for p in cluster.log_files("log"))

    # --- settings: disabled stops reading and keeps the offset; enabling resumes from it
    assert d.patch("/v1/databases/pg15/logs/settings", {"enabled": False}) == {"enabled": False, "full_text": False}
    assert d.get("/v1/databases/pg15/logs/overview")["source"]["state"] == "disabled"
    cluster.psql("SELECT * FROM written_while_disabled;")
    cluster.wait_for_log("written_while_disabled")
    time.sleep(1.0)  # ten poll intervals of a reader that must stay idle (an absence can only be waited for)
    assert d.get("/v1/databases/pg15/logs", q="written_while_disabled")["lines"] == []
    d.patch("/v1/databases/pg15/logs/settings", {"enabled": True, "full_text": True})
    assert len(d.wait_for_line("pg15", "written_while_disabled")) == 1
    cluster.psql("INSERT INTO users VALUES ('kept-in-full-text'); INSERT INTO users VALUES ('kept-in-full-text');")
    [shown] = d.wait_for_line("pg15", "kept")
    assert shown["detail"] == "Key (email)=(kept-in-full-text) already exists."
    assert "'kept-in-full-text'" in shown["statement"] and shown["redacted"] is False
    d.patch("/v1/databases/pg15/logs/settings", {"full_text": False})


def test_restarts_and_sigkill_lose_no_line_and_repeat_none(cluster: PgCluster, daemon: DaemonProcess) -> None:
    d = daemon
    cluster.psql("SELECT * FROM before_restart;")
    before = settle(d, cluster, "marker_before")

    # A clean stop; the server keeps logging while the daemon is down.
    assert d.stop(signal.SIGTERM) == 0
    cluster.psql(" ".join(f"SELECT * FROM while_down_{i};" for i in range(20)))
    cluster.wait_for_log("while_down_19")
    d.start()
    after_restart = settle(d, cluster, "marker_after_restart")
    assert after_restart[: len(before)] == before  # same ids, same content

    # SIGKILL in the middle of a burst, three times.
    for round_no in range(3):
        burst = cluster.psql_bg(
            " ".join(f"SELECT * FROM burst_{round_no}_{i};" for i in range(400)), app_name=f"burst{round_no}"
        )
        d.wait_for_line("pg15", f"burst_{round_no}_", count=1)
        d.stop(signal.SIGKILL)
        burst.communicate(timeout=60)
        cluster.wait_for_log(f"burst_{round_no}_399")
        d.start()

    lines = settle(d, cluster, "marker_end")
    assert lines[: len(before)] == before
    messages = Counter(x["message"] for x in lines if "burst_" in x["message"] or "while_down_" in x["message"])
    assert len(messages) == 3 * 400 + 20 and set(messages.values()) == {1}
