"""Rotation in every style a PostgreSQL log sees, with the daemon killed mid-file: no entry is lost,
none is stored twice.

A writer appends multi-line entries (ERROR + DETAIL + STATEMENT, as PostgreSQL writes them) each
naming a unique table, and rotates the way each setup does. The daemon is a real subprocess.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import pytest

from tests.daemonproc import DaemonProcess
from tests.harness import poll_until
from tests.pgcluster import PgClusterFactory

PREFIX = "%m [%p] %q%u@%d "


class Writer:
    """Writes PostgreSQL-style entries with ids 0, 1, 2, ... to a current file, which rotates."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.n = 0
        self.start_ms = (int(time.time()) - 3600) * 1000
        self.fh: BinaryIO = open(path, "ab")  # noqa: SIM115 - the writer's life is the test's

    def entries(self, count: int) -> None:
        out = []
        for _ in range(count):
            # Entry n is written n ms after the writer's start, an hour ago: never on a fixed day,
            # which the store's retention (7 days) would delete once it is past.
            at_ms = self.start_ms + self.n
            t = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at_ms // 1000)) + f".{at_ms % 1000:03d} UTC"
            p = 1000 + self.n % 50
            out.append(
                f'{t} [{p}] app@shop ERROR:  relation "table_{self.n}" does not exist at character 15\n'
                f"{t} [{p}] app@shop DETAIL:  extra detail for this entry\n"
                f"{t} [{p}] app@shop STATEMENT:  SELECT * FROM table_{self.n}\n"
                "\tWHERE id = 42\n"
            )
            self.n += 1
        self.fh.write("".join(out).encode())
        self.fh.flush()

    def reopen(self, path: Path, mode: str = "ab") -> None:
        self.fh.close()
        self.path = path
        self.fh = open(path, mode)  # noqa: SIM115

    def close(self) -> None:
        self.fh.close()


def stored_ids(d: DaemonProcess) -> Counter[int]:
    return Counter(
        int(x["message"].split('"')[1].removeprefix("table_")) for x in d.all_lines("db") if "table_" in x["message"]
    )


def wait_all(d: DaemonProcess, total: int, timeout: float = 30) -> Counter[int]:
    """Poll until the daemon has `total` distinct entries (it reads another process's files)."""
    deadline = time.monotonic() + timeout
    while True:
        ids = stored_ids(d)
        if len(ids) >= total or time.monotonic() > deadline:
            return ids
        time.sleep(0.2)


def check(ids: Counter[int], total: int, d: DaemonProcess | None = None) -> None:
    missing = sorted(set(range(total)) - set(ids))
    twice = sorted(i for i, c in ids.items() if c > 1)
    where = ""
    if d is not None and (missing or twice):
        where = f"; overview source {d.get('/v1/databases/db/logs/overview')['source']}; daemon log: "
        where += d.log_path.read_text()[-3000:]
    assert not missing and not twice, (
        f"missing {missing[:20]} ({len(missing)}), twice {twice[:20]} ({len(twice)}){where}"
    )
    assert set(ids) == set(range(total))


@pytest.fixture
def logs(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "pglog"
    d.mkdir()
    yield d


def daemon_for(tmp_path: Path, glob: str) -> DaemonProcess:
    d = DaemonProcess(
        tmp_path / "fwd",
        # full_text: these tests are about files; the ids they check live in the message text.
        [
            {
                "id": "db",
                "name": "db",
                "full_text": True,
                "log": {"path": glob, "line_prefix": PREFIX, "poll_interval_seconds": 0.05},
            }
        ],
    )
    start_and_look(d)
    return d


def start_and_look(d: DaemonProcess) -> None:
    """Start the daemon and wait for its first look at the files. Ready means the API is bound, not
    that the follower has polled: a file renamed out of the glob before any poll saw it cannot be
    followed by polling (a test writing and rotating at once would race the first poll)."""
    d.start()
    poll_until(lambda: d.get("/v1/databases/db/logs/overview")["source"]["state"] != "starting", what="a first poll")


def kill_and_restart(d: DaemonProcess) -> None:
    d.stop(signal.SIGKILL)
    start_and_look(d)


def test_rename_out_of_the_glob_keeps_the_late_lines(tmp_path: Path, logs: Path) -> None:
    """logrotate `create`: the file is renamed away while the server still writes to it a moment."""
    w = Writer(logs / "postgresql.log")
    d = daemon_for(tmp_path, str(logs / "postgresql.log"))
    try:
        for rnd in range(5):
            w.entries(300)
            os.rename(logs / "postgresql.log", logs / f"postgresql.log.{rnd}")
            w.entries(50)  # still written to the renamed file (the old descriptor)
            wait_all(d, w.n)  # the daemon catches up before that file is gone for good
            w.reopen(logs / "postgresql.log")
            w.entries(100)
            os.remove(logs / f"postgresql.log.{rnd}")
            # Rotations are hours apart: the daemon has seen the new file before it is rotated in
            # turn (a file renamed away before any poll saw it cannot be followed by polling).
            wait_all(d, w.n)
            if rnd % 2:
                kill_and_restart(d)
        check(wait_all(d, w.n), w.n, d)
    finally:
        w.close()
        d.close()


def test_rename_within_the_glob_is_the_same_file(tmp_path: Path, logs: Path) -> None:
    w = Writer(logs / "postgresql.log")
    d = daemon_for(tmp_path, str(logs / "postgresql.log*"))
    try:
        for rnd in range(4):
            w.entries(400)
            for k in range(rnd, 0, -1):  # postgresql.log.1 -> .2, ... as logrotate numbers them
                os.rename(logs / f"postgresql.log.{k}", logs / f"postgresql.log.{k + 1}")
            os.rename(logs / "postgresql.log", logs / "postgresql.log.1")
            w.entries(20)
            w.reopen(logs / "postgresql.log")
            w.entries(200)
            if rnd == 2:
                kill_and_restart(d)
        check(wait_all(d, w.n), w.n, d)
    finally:
        w.close()
        d.close()


def copy_in_blocks(source: Path, copy: Path) -> None:
    """Copy as logrotate's copytruncate does, a block at a time (its sparse_copy loop): a poll woken
    by the copy's creation can see it empty or part-written."""
    with source.open("rb") as src, copy.open("wb") as dst:
        while block := src.read(4096):
            dst.write(block)
            dst.flush()


def test_copytruncate_with_copies_in_the_glob_reads_each_entry_once(tmp_path: Path, logs: Path) -> None:
    """Debian's logrotate rule for PostgreSQL: copy the file, then truncate it in place."""
    w = Writer(logs / "postgresql-15-main.log")
    d = daemon_for(tmp_path, str(logs / "postgresql-15-main.log*"))
    try:
        for rnd in range(4):
            w.entries(500)
            copy_in_blocks(logs / "postgresql-15-main.log", logs / f"postgresql-15-main.log.{rnd}")
            os.truncate(logs / "postgresql-15-main.log", 0)
            w.reopen(logs / "postgresql-15-main.log")  # the server keeps appending (O_APPEND)
            w.entries(100)
            if rnd == 1:
                kill_and_restart(d)
        check(wait_all(d, w.n), w.n, d)
    finally:
        w.close()
        d.close()


def test_reused_names_truncated_on_rotation(tmp_path: Path, logs: Path) -> None:
    """log_filename = 'postgresql-%a.log' with log_truncate_on_rotation: a name comes back a week later
    and is overwritten. Each day's entries must have been read before that (a week passes)."""
    days = ["Mon", "Tue", "Wed"]
    w = Writer(logs / "postgresql-Mon.log")
    d = daemon_for(tmp_path, str(logs / "postgresql-*.log"))
    try:
        for rnd in range(7):
            w.entries(250)
            wait_all(d, w.n)  # a day passes: everything of it is read
            w.reopen(logs / f"postgresql-{days[(rnd + 1) % 3]}.log", mode="wb")  # truncating open
            if rnd in (2, 5):
                kill_and_restart(d)
        w.entries(250)
        check(wait_all(d, w.n), w.n, d)
    finally:
        w.close()
        d.close()


def test_sigkill_mid_file_loses_and_repeats_nothing(tmp_path: Path, logs: Path) -> None:
    rng = random.Random(7)
    w = Writer(logs / "postgresql.log")
    d = daemon_for(tmp_path, str(logs / "*.log"))
    try:
        for _ in range(10):
            w.entries(rng.randint(100, 3000))
            time.sleep(rng.uniform(0, 0.3))  # kill at a random moment of reading
            kill_and_restart(d)
        check(wait_all(d, w.n, timeout=60), w.n, d)
    finally:
        w.close()
        d.close()


def test_real_postgres_rotating_its_files(tmp_path: Path, pg_cluster_factory: PgClusterFactory) -> None:
    """PostgreSQL's own rotation (pg_rotate_logfile) to new file names, with a SIGKILL in between."""
    cluster = pg_cluster_factory({"log_filename": "postgresql-%H%M%S.log"})
    d = DaemonProcess(
        tmp_path / "fwd",
        [
            {
                "id": "db",
                "name": "db",
                "full_text": True,
                "log": {
                    "path": str(cluster.log_dir / "*.log"),
                    "line_prefix": "%m [%p] %q%u@%d/%a ",
                    "poll_interval_seconds": 0.05,
                },
            }
        ],
    )
    d.start()
    try:
        n = 0
        for rnd in range(4):
            cluster.psql(" ".join(f"SELECT * FROM table_{n + i};" for i in range(200)))
            n += 200
            before = len(cluster.log_files("log"))
            cluster.psql("SELECT pg_sleep(1.05); SELECT pg_rotate_logfile();")  # a new second: a new name
            deadline = time.monotonic() + 10
            while len(cluster.log_files("log")) == before and time.monotonic() < deadline:
                time.sleep(0.05)  # waiting for the server's rotation, another process
            assert len(cluster.log_files("log")) > before
            if rnd == 1:
                kill_and_restart(d)
        cluster.psql(" ".join(f"SELECT * FROM table_{n + i};" for i in range(200)))
        n += 200
        cluster.wait_for_log(f"table_{n - 1}")
        check(wait_all(d, n), n, d)
    finally:
        d.close()
