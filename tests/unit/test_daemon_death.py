"""No process of the daemon outlives it, however it dies.

`forwarder run` starts a parse worker (and, through multiprocessing, a resource tracker). Both
ignore SIGTERM, so after `kill -9` of the daemon nothing but the worker itself can end them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from tests.daemonproc import DaemonProcess

LINE = "2000-01-01 00:00:00.000 UTC [42] app@shop LOG:  connection authorized: user=app database=shop\n"
EXIT_WITHIN_SECONDS = 3.0


def _parents() -> dict[int, int]:
    """pid -> ppid of every process now (from /proc/<pid>/stat; the name may hold spaces)."""
    out = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                stat = Path(entry.path, "stat").read_text()
                out[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    return out


def descendants(pid: int) -> set[int]:
    parents = _parents()
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def alive(pid: int) -> bool:
    """Running (a zombie has exited: it only waits for its parent to read its status)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_no_process_of_the_daemon_survives_its_sigkill(tmp_path: Path) -> None:
    logs = tmp_path / "pglogs"
    logs.mkdir()
    (logs / "postgresql.log").write_text(LINE)
    d = DaemonProcess(
        tmp_path / "fwd",
        [{"id": "main", "name": "shop", "log": {"path": str(logs / "*.log"), "line_prefix": "%m [%p] %q%u@%d "}}],
        retention_days=100_000,  # the line's date must not matter
    )
    family: set[int] = set()
    try:
        d.start()
        assert d.wait_for_line("main", "authorized"), "the daemon did not read the log"
        assert d.proc is not None
        family = descendants(d.proc.pid)
        assert family, "expected a parse worker beside the daemon"
        d.proc.send_signal(signal.SIGKILL)
        d.proc.wait(10)
        deadline = time.monotonic() + EXIT_WITHIN_SECONDS
        while (left := {p for p in family if alive(p)}) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not left, f"processes of the killed daemon still run: {left}"
    finally:
        d.close()
        for pid in family:  # never leave one behind, even when the assertion failed
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
