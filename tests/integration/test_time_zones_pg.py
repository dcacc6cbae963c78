"""Logs of real PostgreSQL 15 servers whose `log_timezone` is not UTC, with unusual prefixes.

Every time read back is the instant PostgreSQL itself gives the same text (`'<time>'::timestamptz`
on the running server, which reads zone abbreviations with its default set), whether `log.timezone`
is the server's zone or the default UTC; with UTC the reader also says that the zone does not
match. Fields: empty `%u`/`%d` of the checkpointer are empty, application names with brackets and
commas come out whole.
"""

from __future__ import annotations

import re

import pytest

from forwarder.model import LogLine
from forwarder.pglog import Format, TimeCounts, make_reader, parse_stream
from tests.pgcluster import PgCluster, PgClusterFactory

APPS = ("app=[x] y,z", "[bracket] app, with comma")
TIME = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} [-+A-Z0-9]+")


def run_workload(cluster: PgCluster) -> dict[str, bytes]:
    """The workload's log, stderr ("log") and jsonlog ("json"), complete: the server is stopped."""
    cluster.psql("SELECT 1/0;", app_name=APPS[0])
    cluster.psql("SELECT 'x'::int;", app_name=APPS[1])
    cluster.query("CHECKPOINT")
    cluster.stop()
    return {ext: b"".join(p.read_bytes() for p in cluster.log_files(ext)) for ext in ("log", "json")}


def read(data: bytes, fmt: Format, prefix: str, timezone: str) -> tuple[list[LogLine], TimeCounts]:
    reader = make_reader(fmt, line_prefix=prefix, timezone=timezone, full_text=True)
    lines = list(parse_stream(reader, [data]))
    assert lines and not any(line.unparsed for line in lines)
    return lines, reader.time_counts


def server_instants(cluster: PgCluster, texts: list[str]) -> list[int]:
    """Microseconds since the epoch that PostgreSQL gives each time text, read on the server."""
    values = ",".join(f"('{t}'::timestamptz)" for t in texts)
    out = cluster.query(f"SELECT (extract(epoch FROM t) * 1000000)::bigint FROM (VALUES {values}) AS v(t)")
    return [int(v) for v in out.split()]


@pytest.mark.parametrize(
    ("zone", "prefix"),
    [
        ("America/New_York", "%p %m %q%u@%d "),
        ("America/Sao_Paulo", "%m [%p] %q%u@%d "),  # a zone without letters: `-03`
    ],
)
def test_times_are_the_servers_instants_with_either_setting(
    pg_cluster_factory: PgClusterFactory, zone: str, prefix: str
) -> None:
    cluster = pg_cluster_factory({"log_timezone": zone, "log_line_prefix": prefix, "log_destination": "stderr,jsonlog"})
    logs = run_workload(cluster)
    text = logs["log"].decode()
    primary = [line for line in text.splitlines() if not re.search(r" (STATEMENT|DETAIL|HINT|CONTEXT):  ", line)]
    cluster.start()  # PostgreSQL's own reading of each time it wrote is the truth
    truth = server_instants(cluster, [TIME.search(line).group(0) for line in primary])  # type: ignore[union-attr]

    right, right_counts = read(logs["log"], "stderr", prefix, zone)
    assert [line.time_us for line in right] == truth
    assert right_counts.zone_mismatches == 0
    as_utc, utc_counts = read(logs["log"], "stderr", prefix, "UTC")
    assert [line.time_us for line in as_utc] == truth  # the default abbreviations resolve EST/EDT/-03
    assert utc_counts.zone_mismatches == len(primary)
    expected_zone = {"America/New_York": ("EST", "EDT"), "America/Sao_Paulo": ("-03",)}[zone]
    assert utc_counts.foreign_zone in expected_zone
    # jsonlog writes the same times (in log_timezone too): same instants, same report
    json_lines, json_counts = read(logs["json"], "jsonlog", prefix, "UTC")
    assert [line.time_us for line in json_lines] == truth
    assert json_counts.foreign_zone == utc_counts.foreign_zone

    for line in right:
        if "checkpoint" in line.message:
            assert (line.user, line.database) == (None, None)
    errors = [line for line in right if line.severity == "ERROR"]
    assert [line.statement for line in errors] == ["SELECT 1/0;", "SELECT 'x'::int;"]


def test_key_value_prefix_without_a_time_and_an_epoch_prefix(pg_cluster_factory: PgClusterFactory) -> None:
    kv = "pid=%p,user=%u,db=%d,app=%a,client=%h,xid=%x,vxid=%v "
    cluster = pg_cluster_factory(
        {"log_timezone": "America/Sao_Paulo", "log_line_prefix": kv, "log_destination": "stderr,jsonlog"}
    )
    logs = run_workload(cluster)
    lines, counts = read(logs["log"], "stderr", kv, "America/Sao_Paulo")
    json_lines, _ = read(logs["json"], "jsonlog", kv, "America/Sao_Paulo")
    assert counts.read_time == len(lines)  # no time in the prefix: each entry says so
    assert [(x.pid, x.user, x.database, x.application, x.client, x.message) for x in lines] == [
        (x.pid, x.user, x.database, x.application, x.client, x.message) for x in json_lines
    ]
    errors = [line for line in lines if line.severity == "ERROR"]
    assert [line.application for line in errors] == list(APPS)
    checkpoints = [line for line in lines if line.message.startswith("checkpoint starting")]
    assert checkpoints and all((c.user, c.database, c.application, c.client) == (None,) * 4 for c in checkpoints)
    assert not any(line.message.startswith((" ", "user=", "db=")) for line in lines)


def test_epoch_and_padded_user_against_jsonlog(pg_cluster_factory: PgClusterFactory) -> None:
    prefix = "%n [%-10u] "
    cluster = pg_cluster_factory(
        {"log_timezone": "America/New_York", "log_line_prefix": prefix, "log_destination": "stderr,jsonlog"}
    )
    logs = run_workload(cluster)
    lines, counts = read(logs["log"], "stderr", prefix, "UTC")
    json_lines, json_counts = read(logs["json"], "jsonlog", prefix, "UTC")
    assert [line.time_us for line in lines] == [line.time_us for line in json_lines]
    assert counts == TimeCounts()  # %n is exact: nothing to report
    assert json_counts.foreign_zone in ("EST", "EDT")  # jsonlog's own times are New York's
    assert [line.user for line in lines] == [line.user for line in json_lines]
    assert {line.user for line in lines} == {None, "postgres"}
