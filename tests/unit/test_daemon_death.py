"""No process of the daemon outlives it, however it dies.

`forwarder run` starts a parse worker. It ignores SIGTERM, so after `kill -9` of the daemon
nothing but the worker itself can end it: it exits when its standard input, the daemon's pipe, ends.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from forwarder.config import MAX_RETENTION_DAYS
from tests.daemonproc import DaemonProcess
from tests.processes import is_live, live_descendants

LINE = "2000-01-01 00:00:00.000 UTC [42] app@shop LOG:  connection authorized: user=app database=shop\n"
EXIT_WITHIN_SECONDS = 3.0


def test_no_process_of_the_daemon_survives_its_sigkill(tmp_path: Path) -> None:
    logs = tmp_path / "pglogs"
    logs.mkdir()
    (logs / "postgresql.log").write_text(LINE)
    d = DaemonProcess(
        tmp_path / "fwd",
        [{"id": "main", "name": "shop", "log": {"path": str(logs / "*.log"), "line_prefix": "%m [%p] %q%u@%d "}}],
        retention_days=MAX_RETENTION_DAYS,  # the line's date must not matter
    )
    family: set[int] = set()
    try:
        d.start()
        assert d.wait_for_line("main", "authorized"), "the daemon did not read the log"
        assert d.proc is not None
        family = {p.pid for p in live_descendants(d.proc.pid)}
        assert family, "expected a parse worker beside the daemon"
        d.proc.send_signal(signal.SIGKILL)
        d.proc.wait(10)
        deadline = time.monotonic() + EXIT_WITHIN_SECONDS
        while (left := {p for p in family if is_live(p)}) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not left, f"processes of the killed daemon still run: {left}"
    finally:
        d.close()
        for pid in family:  # never leave one behind, even when the assertion failed
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
