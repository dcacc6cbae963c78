"""A real `forwarder run` with hostile entries in its log directory: it keeps answering and reading."""

from __future__ import annotations

import os
import threading
import time
import urllib.request
from pathlib import Path

from tests.daemonproc import DaemonProcess
from tests.unit.sources.test_tail import PREFIX, entry

RACE_SECONDS = 3.0


def healthz_answers(d: DaemonProcess) -> bool:
    try:
        with urllib.request.urlopen(d.url + "/healthz", timeout=1) as resp:  # noqa: S310 - loopback
            return bool(resp.status == 200)
    except OSError:
        return False


def test_files_and_fifos_renamed_over_one_name_leave_the_daemon_answering_and_reading(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    real = logs / "postgresql.log"
    real.write_bytes(b"".join(entry(i) for i in range(10)))
    (logs / "loop.log").symlink_to("loop.log")
    secret = tmp_path / "fwd" / "secrets.key"
    (logs / "key.log").symlink_to(secret)
    d = DaemonProcess(
        tmp_path / "fwd",
        [
            {
                "id": "main",
                "name": "main",
                "log": {"path": str(logs / "*.log"), "line_prefix": PREFIX, "poll_interval_seconds": 0.01},
            }
        ],
        retention_days=100_000,  # the lines' date must not matter
    )
    stop = threading.Event()

    def race() -> None:
        """Swap a regular file and a FIFO over one name the glob matches, as fast as it goes."""
        name = logs / "race.log"
        n = 0
        while not stop.is_set():
            tmp = logs / f"tmp{n}"
            if n % 2:
                os.mkfifo(tmp)
            else:
                tmp.write_bytes(b"x\n")
            os.rename(tmp, name)
            n += 1

    racer = threading.Thread(target=race)
    try:
        d.start()
        os.link(secret, logs / "hard.log")  # the key (made at the start) under a name the glob matches
        racer.start()
        deadline = time.monotonic() + RACE_SECONDS
        while time.monotonic() < deadline:
            assert healthz_answers(d), "/healthz did not answer within a second during the FIFO race"
        stop.set()
        racer.join()
        with real.open("ab") as fh:
            fh.write(b"".join(entry(i) for i in range(10, 20)))
        lines = d.wait_for_line("main", "does not exist", count=19)  # the 20th stays pending until idle
        assert len(lines) >= 19
        assert healthz_answers(d)
        overview = d.get("/v1/databases/main/logs/overview")["source"]
        assert "loop.log (a symbolic link loop)" in overview["reason"]
        assert "key.log (a symbolic link out of its directory)" in overview["reason"]
        assert "hard.log (a file of the forwarder itself)" in overview["reason"]
    finally:
        stop.set()
        if racer.is_alive():
            racer.join()
        d.close()
