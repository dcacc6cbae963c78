"""A throwaway cluster's log files parsed as the daemon parses them: one reader per file."""

from __future__ import annotations

from forwarder.model import LogLine
from forwarder.pglog import Format, make_reader, parse_stream
from tests.pgcluster import PgCluster

FORMATS: tuple[tuple[Format, str], ...] = (("stderr", "log"), ("csvlog", "csv"), ("jsonlog", "json"))


def parsed_logs(cluster: PgCluster, fmt: Format, ext: str, *, prefix: str, full_text: bool = False) -> list[LogLine]:
    """Every line of the cluster's .`ext` files in format `fmt` (stderr with `prefix`), in order."""
    files = cluster.log_files(ext)
    assert files, f"no .{ext} log"
    lines: list[LogLine] = []
    for path in files:
        reader = make_reader(fmt, line_prefix=prefix, timezone="UTC", full_text=full_text)
        lines += parse_stream(reader, [path.read_bytes()])
    return lines
