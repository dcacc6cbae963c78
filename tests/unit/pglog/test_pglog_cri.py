"""The cri format: a PostgreSQL 15 stderr log as a Kubernetes node writes a container's output.

The stderr fixture was recorded from a real PostgreSQL 15.18 (log_line_prefix '%m [%p] %q%u@%d ',
log_statement = 'all', log_min_duration_statement = 0), with a 40 kB statement, a multi-line
statement and an error. `cri_of` (envelopes.py) writes it the way containerd does.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from envelopes import CRI_MAX_LINE as MAX_LINE
from envelopes import cri_of

from forwarder.model import LogLine, spec_fields
from forwarder.pglog import make_reader, parse_stream

FIXTURES = Path(__file__).parent / "fixtures"
PREFIX = "%m [%p] %q%u@%d "
STDERR = (FIXTURES / "pg15_stderr_for_cri.log").read_bytes()


def fields(lines: list[LogLine]) -> list[dict[str, Any]]:
    return [spec_fields(x) for x in lines]


def read(fmt: str, data: bytes, *, prefix: str = PREFIX, full_text: bool = False) -> list[LogLine]:
    reader = make_reader(fmt, line_prefix=prefix, timezone="UTC", full_text=full_text)  # type: ignore[arg-type]
    return list(parse_stream(reader, [data]))


def test_the_fixture_has_lines_containerd_splits() -> None:
    cri = cri_of(STDERR)
    assert b" stderr P " in cri and max(len(x) for x in STDERR.split(b"\n")) > 2 * MAX_LINE


def test_cri_file_reads_as_the_plain_stderr_log() -> None:
    for full_text in (False, True):
        assert fields(read("cri", cri_of(STDERR), full_text=full_text)) == fields(
            read("stderr", STDERR, full_text=full_text)
        )
    lines = read("cri", cri_of(STDERR))
    assert len(lines) == 19 and not any(x.unparsed for x in lines)
    assert "Hunter4Secret" not in repr(fields(lines)) and "Hunter5Secret" not in repr(fields(lines))
    full = read("cri", cri_of(STDERR), full_text=True)
    assert any(len(x.statement or "") > 40_000 for x in full)


def test_restart_at_the_committed_offset_loses_and_repeats_nothing() -> None:
    data = cri_of(STDERR)
    whole = fields(read("cri", data))
    for cut in [*range(0, len(data), 1499), len(data)]:
        first = make_reader("cri", line_prefix=PREFIX, timezone="UTC", full_text=False)
        got = first.feed(data[:cut], 0.0) + first.flush_written()
        offset = first.committed_offset
        assert offset <= cut
        rest = read("cri", data[offset:])
        assert fields(got) + fields(rest) == whole, cut


def test_partial_lines_are_joined_per_stream_and_bytes_of_a_character_across_records() -> None:
    line = "2026-11-24 03:38:07.970 UTC [7] u@d LOG:  statement: SELECT 'äöü'".encode()
    cut = line.index("ö".encode()) + 1  # inside the two bytes of ö
    data = (
        b"2026-11-24T03:38:07.97Z stderr P " + line[:cut] + b"\n"
        b"2026-11-24T03:38:07.971Z stdout F 2026-11-24 03:38:07.971 UTC [8] LOG:  checkpoint starting: time\n"
        b"2026-11-24T03:38:07.972Z stderr F " + line[cut:] + b"\n"
    )
    first, second = read("cri", data, full_text=True)
    assert (first.pid, first.kind) == (8, "checkpoint")
    assert (second.pid, second.statement) == (7, "SELECT 'äöü'")


def test_without_time_in_the_prefix_the_record_time_is_the_entry_time() -> None:
    data = b"2026-11-24T03:38:07.123456789Z stderr F [7] LOG:  checkpoint starting: time\n"
    (line,) = read("cri", data, prefix="[%p] ")
    assert spec_fields(line)["time"] == "2026-11-24T03:38:07.123Z" and line.kind == "checkpoint"


def test_lines_that_are_not_cri_records_are_kept_unparsed() -> None:
    data = b"not a record\n" + cri_of(STDERR.split(b"\n")[0] + b"\n")
    bad, good = read("cri", data)
    assert bad.unparsed and not good.unparsed and good.kind == "server"


def test_forwarder_parse_reads_cri() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "forwarder", "parse", "--format", "cri", "--prefix", PREFIX],
        input=cri_of(STDERR),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0 and out.stderr == b"", out.stderr
    assert len(out.stdout.splitlines()) == 19
