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


def differences(a: LogLine, b: LogLine) -> dict[str, tuple[object, object]]:
    """The fields in which two lines differ, with both values."""
    da, db = a._asdict(), b._asdict()
    return {k: (da[k], db[k]) for k in da if da[k] != db[k]}


def agreeing_lines(cluster: PgCluster, *, prefix: str, full_text: bool) -> list[LogLine]:
    """The cluster's stderr, csvlog and jsonlog files read as the daemon reads them, asserted to
    give the same lines (every stderr line in the format); returns them."""
    stderr, csvlog, jsonlog = (
        parsed_logs(cluster, fmt, ext, prefix=prefix, full_text=full_text) for fmt, ext in FORMATS
    )
    assert not [line for line in stderr if line.unparsed]
    assert len(stderr) == len(csvlog) == len(jsonlog)
    for s, c, j in zip(stderr, csvlog, jsonlog, strict=True):
        assert differences(s, c) == {}, (s, c)
        assert differences(s, j) == {}, (s, j)
    return stderr
