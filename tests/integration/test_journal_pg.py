"""A real PostgreSQL 15 logging to a real systemd-journald, read by a real daemon through journalctl.

The test host runs no journald, so the test starts its own in a mount namespace: a tmpfs over
/run (and over /var/log/journal) inside it, the journal's files bound to a directory of the test,
so the host is untouched. The server runs in that namespace with `logging_collector = off` and its
stderr going to the journal through `systemd-cat -t postgres` (a journal stream, as a systemd
unit's stderr is); `tee` keeps the same bytes in a file. The daemon, outside the namespace, reads
the journal's files with `journalctl --directory`.

csvlog and jsonlog need the logging collector, which would take the server's stderr away from
the journal: the reference here is the same server's stderr output, read as a stderr file.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from forwarder.model import spec_fields
from forwarder.pglog import make_reader, parse_stream
from tests.crash import _kill
from tests.daemonproc import DaemonProcess
from tests.harness import free_port, poll_until
from tests.pgcluster import PgCluster, _live

JOURNALD = Path("/lib/systemd/systemd-journald")
PREFIX = "%m [%p] %q%u@%d/%a "
TOOLS = ("unshare", "nsenter", "systemd-cat", "journalctl", "tee")


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "a private journald needs root (a mount namespace)"
    if not JOURNALD.exists():
        return f"{JOURNALD} is not installed"
    absent = [tool for tool in TOOLS if shutil.which(tool) is None]
    return f"not installed: {', '.join(absent)}" if absent else None


pytestmark = pytest.mark.skipif(_missing() is not None, reason=_missing() or "")


class PrivateJournal:
    """A systemd-journald of the test's own, in a mount namespace; its files in `directory`."""

    def __init__(self, root: Path) -> None:
        self.directory = root / "journal"
        self.directory.mkdir(parents=True)
        script = (
            "set -e; mount -t tmpfs none /run; mkdir -p /run/systemd/journal /run/log/journal; "
            f"mount --bind {self.directory} /run/log/journal; "
            "if [ -d /var/log/journal ]; then mount -t tmpfs none /var/log/journal; fi; "
            f"exec {JOURNALD}"
        )
        self.proc = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", script])
        stdout_socket = Path(f"/proc/{self.proc.pid}/root/run/systemd/journal/stdout")
        poll_until(lambda: self.proc.poll() is not None or stdout_socket.exists(), timeout=20, what="journald")
        assert self.proc.poll() is None, "journald did not start"

    def inside(self) -> list[str]:
        """The command prefix that runs a program in the journal's namespace."""
        return ["nsenter", f"--mount=/proc/{self.proc.pid}/ns/mnt"]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        self.proc.wait(10)


class JournaldServer:
    """A PostgreSQL 15 whose stderr goes to the private journal (and, through tee, to `stderr_file`)."""

    def __init__(self, root: Path, journal: PrivateJournal) -> None:
        self.cluster = PgCluster(
            root,
            {
                "logging_collector": "off",
                "log_destination": "stderr",
                "log_line_prefix": PREFIX,
                "log_min_duration_statement": "0",
            },
        )
        # PgCluster starts servers with pg_ctl (stderr to a file): here the server is started in
        # the journal's namespace instead, with the cluster's data directory and settings.
        self.cluster._init()
        self.cluster._port = free_port()
        self.cluster._write_config()
        _live.add(self.cluster)  # the atexit safety net stops it
        self.stderr_file = self.cluster.root / "stderr.log"
        pw = self.cluster._pw
        pipeline = (
            f"{self.cluster.pg_bin / 'postgres'} -D {self.cluster.data_dir} 2>&1 "
            f"| tee {self.stderr_file} | systemd-cat -t postgres"
        )
        self.proc = subprocess.Popen(
            [*journal.inside(), f"--setuid={pw.pw_uid}", f"--setgid={pw.pw_gid}", "sh", "-c", pipeline],
            env={"PATH": "/usr/bin:/bin", "LANG": "C", "LC_ALL": "C", "TZ": "UTC", "HOME": pw.pw_dir},
            cwd=self.cluster.root,
        )
        poll_until(lambda: self.cluster.postmaster_pid is not None and self._accepts(), timeout=60, what="postgres")

    def _accepts(self) -> bool:
        return self.cluster.psql("SELECT 1", check=False).returncode == 0

    def stop(self) -> None:
        self.cluster.stop("fast")
        self.proc.wait(20)

    def close(self) -> None:
        self.cluster.close()
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[PrivateJournal]:
    j = PrivateJournal(tmp_path)
    try:
        yield j
    finally:
        j.close()


@pytest.fixture
def server(tmp_path: Path, journal: PrivateJournal, pg_bin: Path) -> Iterator[JournaldServer]:
    s = JournaldServer(tmp_path / "pg", journal)
    try:
        yield s
    finally:
        s.close()


def _shown(line: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(line.get(k) for k in ("time", "pid", "severity", "kind", "message", "detail", "statement", "user"))


def test_the_journal_reads_as_the_servers_stderr_and_a_kill_9_loses_and_repeats_nothing(
    tmp_path: Path, journal: PrivateJournal, server: JournaldServer
) -> None:
    db = {
        "id": "pg",
        "name": "pg",
        "host": "localhost",
        "full_text": True,
        "log": {
            "format": "journal",
            "line_prefix": PREFIX,
            "journal_match": ["SYSLOG_IDENTIFIER=postgres"],
            "journal_directory": str(journal.directory),
        },
    }
    daemon = DaemonProcess(tmp_path / "daemon", [db])
    try:
        daemon.start()
        poll_until(lambda: len(daemon.all_lines("pg")) >= 4, timeout=30, what="the server's start lines")
        overview = daemon.get("/v1/databases/pg/logs/overview")
        assert overview["source"]["state"] == "reading", overview
        # A workload of a few thousand entries, with continuations; the daemon is killed while it reads them.
        statements = "\\o /dev/null\n" + "".join(f"SELECT {i} AS n;\n" for i in range(3000))
        statements += "CREATE TABLE t (id int PRIMARY KEY);\nINSERT INTO t VALUES (1);\nINSERT INTO t VALUES (1);\n"
        statements += "SELECT *\n  FROM t\n WHERE id = 12345;\nSELECT 1/0;\n"
        psql = server.cluster.psql_bg(statements, app_name="load")
        poll_until(lambda: len(daemon.all_lines("pg")) > 50, timeout=30, what="some of the workload stored")
        _kill(daemon)
        psql.communicate(timeout=60)
        daemon.start()
        server.stop()  # its shutdown messages are the last entries

        reader = make_reader("stderr", line_prefix=PREFIX, timezone="UTC", full_text=True)
        written = [spec_fields(line) for line in parse_stream(reader, [server.stderr_file.read_bytes()])]
        assert len(written) > 3000
        poll_until(lambda: len(daemon.all_lines("pg")) >= len(written), timeout=60, what="every entry stored")
        stored = daemon.all_lines("pg")
        assert [_shown(line) for line in stored] == [_shown(line) for line in written]
        dup = next(line for line in stored if line["message"].startswith("duplicate key"))
        assert dup["detail"] == "Key (id)=(1) already exists." and dup["statement"] == "INSERT INTO t VALUES (1);"
        # Stopped cleanly: no journalctl is left behind.
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
        assert daemon.stop(signal.SIGTERM) == 0
        poll_until(lambda: not _journalctl_of(journal, pids), timeout=10, what="journalctl to end")
    finally:
        daemon.close()


def _journalctl_of(journal: PrivateJournal, pids: list[str]) -> list[str]:
    """The journalctl processes among `pids` that read `journal` and still run."""
    out = []
    for pid in pids:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if f"--directory={journal.directory}".encode() in cmdline and state != "Z":
            out.append(pid)
    return out
