"""log_destination = 'syslog' through a real rsyslogd, read back and compared with the csvlog.

A PostgreSQL 15 cluster logs to syslog and csvlog at once. Its syslog() goes to /dev/log, which
the server finds, in a private mount namespace (tests/pgcluster.py `dev_log`), linked to the
imuxsock socket of an rsyslogd run from the test's own directory: the host's /dev/log and
/var/log are never touched. rsyslog writes two files, its traditional format (also syslog-ng's
default) and RSYSLOG_FileFormat. Each file read with `format = "syslog"` must give the lines
the csvlog gives for the same events.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from forwarder.config import MAX_RETENTION_DAYS
from forwarder.model import LogLine, spec_fields
from forwarder.pglog import make_reader, parse_stream
from forwarder.pglog.syslog import SyslogReader
from tests.daemonproc import DaemonProcess
from tests.integration.test_syslog_rsyslog import MODULE_DIRS, RSYSLOGD
from tests.pgcluster import PgCluster
from tests.unit.pglog.envelopes import cri_of

PREFIX = "%m [%p] %q%u@%d/%a "  # tests/pgcluster.py's default (no %e: csvlog alone has the SQLSTATE)
FIELDS = (
    "time",
    "kind",
    "severity",
    "message",
    "detail",
    "hint",
    "context",
    "statement",
    "user",
    "database",
    "pid",
)
CONFIG = """\
global(workDirectory="{work}" maxMessageSize="64k")
module(load="imuxsock" SysSock.Use="off")
input(type="imuxsock" Socket="{socket}")
template(name="traditional" type="string"
  string="%TIMESTAMP% %HOSTNAME% %syslogtag%%msg:::sp-if-no-1st-sp%%msg:::drop-last-lf%\\n")
action(type="omfile" file="{traditional}" template="traditional")
action(type="omfile" file="{fileformat}" template="RSYSLOG_FileFormat")
"""
PASSWORD = "Sup3rSecretPw"
VALUE = "Hunter2Secret"


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root: the server gets its own /dev/log in a private mount namespace"
    if not Path(RSYSLOGD).is_file() or not any((d / "imuxsock.so").is_file() for d in MODULE_DIRS):
        return "rsyslogd with imuxsock is not installed"
    for tool in ("unshare", "setpriv", "logger"):
        if shutil.which(tool) is None:
            return f"{tool} (util-linux) is not installed"
    return None


needs_rsyslog_and_root = pytest.mark.skipif(_missing() is not None, reason=_missing() or "")


class Rsyslogd:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.socket = root / "log.sock"
        self.traditional = root / "traditional.log"
        self.fileformat = root / "fileformat.log"
        (root / "work").mkdir()
        conf = root / "rsyslog.conf"
        conf.write_text(
            CONFIG.format(
                work=root / "work",
                socket=self.socket,
                traditional=self.traditional,
                fileformat=self.fileformat,
            )
        )
        self.log = root / "rsyslogd.out"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [RSYSLOGD, "-n", "-f", str(conf), "-i", str(root / "rsyslogd.pid")],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 10
        while not self.socket.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"rsyslogd did not create its socket:\n{self.log.read_text()}")
            time.sleep(0.02)
        self.socket.chmod(0o666)  # the server runs as another user

    def wait_for(self, text: str, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while True:
            files = [p.read_text(errors="replace") if p.exists() else "" for p in (self.traditional, self.fileformat)]
            if all(text in f for f in files):
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} not in rsyslog's files within {timeout}s:\n{self.log.read_text()}")
            time.sleep(0.05)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def syslog_root() -> Iterator[Path]:
    # Under /tmp, open to the server's user: it connects to the socket inside.
    root = Path(tempfile.mkdtemp(prefix="fwd-syslog-", dir="/tmp"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def fields(line: LogLine) -> dict[str, Any]:
    spec = spec_fields(line)
    return {k: spec.get(k) for k in FIELDS}


def by_event(lines: list[LogLine]) -> list[dict[str, Any]]:
    return sorted((fields(x) for x in lines), key=lambda f: (f["time"], f["pid"], f["message"], str(f["statement"])))


WORKLOAD = f"""\
CREATE ROLE app LOGIN PASSWORD '{PASSWORD}';
CREATE TABLE t (id int PRIMARY KEY, name text);
INSERT INTO t VALUES (1, 'a');
SELECT id,
\tname
  FROM t
 WHERE name = '{VALUE}';
INSERT INTO t VALUES (1, '{VALUE}');
SELECT {", ".join(f"'{c * 60}' AS {c.lower()}" for c in "ABCDEFGHIJKLMNOP")}, '{"Y" * 1200}' AS y, '{"ä" * 700}' AS z;
SELECT * FROM nope WHERE x = '{VALUE}';
DO $$ BEGIN RAISE WARNING 'multi
line %', 'message'; END $$;
SELECT 'end-of-workload';
"""


@needs_rsyslog_and_root
def test_syslog_files_read_as_the_csvlog_of_the_same_events(pg_bin: Path, tmp_path: Path, syslog_root: Path) -> None:
    rsyslog = Rsyslogd(syslog_root)
    cluster = PgCluster(
        tmp_path / "pg",
        {
            "log_destination": "syslog,csvlog",
            "syslog_ident": "postgres",
            "dynamic_shared_memory_type": "mmap",  # the namespace has no /dev/shm
            "log_statement": "all",
        },
        pg_bin=pg_bin,
        dev_log=rsyslog.socket,
    )
    try:
        cluster.start()
        subprocess.run(["logger", "-u", str(rsyslog.socket), "-t", "CRON", "(root) CMD (true)"], check=True)
        result = cluster.psql(WORKLOAD)
        assert "end-of-workload" in result.stdout, result.stdout + result.stderr
        cluster.stop()
        rsyslog.wait_for("database system is shut down")
        csv_data = b"".join(p.read_bytes() for p in cluster.log_files("csv"))
    finally:
        cluster.close()
        rsyslog.stop()
    for full_text in (False, True):
        csv_lines = list(
            parse_stream(make_reader("csvlog", line_prefix="", timezone="UTC", full_text=full_text), [csv_data])
        )
        assert any(x.severity == "WARNING" and x.context for x in csv_lines)  # the RAISE
        for path in (rsyslog.traditional, rsyslog.fileformat):
            data = path.read_bytes()
            reader = SyslogReader(line_prefix=PREFIX, timezone="UTC", full_text=full_text)
            lines = list(parse_stream(reader, [data]))
            assert reader.lines_other == 1  # logger's line
            # Before the logging collector starts, the postmaster's first message goes to syslog
            # (and stderr), never to the csvlog.
            lines = [x for x in lines if x.message != "redirecting log output to logging collector process"]
            assert by_event(lines) == by_event(csv_lines), path.name
            assert not any(x.unparsed for x in lines)
            text = repr([spec_fields(x) for x in lines])
            assert PASSWORD not in text and (VALUE in text) == full_text
            if full_text:  # the long statement was split by PostgreSQL and is whole again
                assert b"-3] " in data and any("Y" * 1200 in (x.statement or "") for x in lines)


FIXTURES = Path(__file__).parents[1] / "unit" / "pglog" / "fixtures"


def test_the_daemon_reads_a_syslog_file_and_a_pod_log_and_resumes_where_it_stopped(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    (logs / "pod").mkdir(parents=True)
    syslog = logs / "syslog"
    syslog.write_bytes((FIXTURES / "pg15_syslog_traditional.log").read_bytes())
    (logs / "pod" / "0.log").write_bytes(
        cri_of((Path(__file__).parents[1] / "unit" / "pglog" / "fixtures" / "pg15_stderr_for_cri.log").read_bytes())
    )
    prefix = "%m [%p] %q%u@%d "
    d = DaemonProcess(
        tmp_path / "fwd",
        [
            {"id": "sys", "name": "sys", "log": {"path": str(syslog), "format": "syslog", "line_prefix": prefix}},
            {
                "id": "pod",
                "name": "pod",
                "log": {"path": str(logs / "pod" / "*.log"), "format": "cri", "line_prefix": prefix},
            },
        ],
        # The fixtures' lines were written on 2026-11-24: retention by age must keep them on any
        # day the test runs (the default 7 days deleted them all at the restart from 2026-12-01).
        retention_days=MAX_RETENTION_DAYS,
    )
    try:
        d.start()
        # The last message of the file is complete only after a quiet second: it comes all the same.
        assert d.wait_for_line("sys", "shut down")
        assert d.wait_for_line("pod", "shut down")
        assert len(d.all_lines("sys")) == 36 and len(d.all_lines("pod")) == 19
        assert d.stop() == 0
        with syslog.open("ab") as f:
            f.write(
                b"Nov 24 03:34:00 vm CRON[9]: (root) CMD (true)\n"
                b"Nov 24 03:34:00 vm postgres[77]: [1-1] 2026-11-24 03:34:00.000 UTC [77] LOG:  "
                b"database system is ready to accept connections\n"
            )
        d.start()
        assert len(d.wait_for_line("sys", "ready to accept", count=2)) == 2
        lines = d.all_lines("sys")
        assert len(lines) == 37  # nothing read twice
    finally:
        d.close()
