"""A real daemon reading a container log whose stderr line is in pieces around a stdout line,
killed (SIGKILL) or stopped (SIGTERM) before the line's last piece is written: after the restart
every entry is stored once, and the stderr line whole.

No PostgreSQL is needed: the file is written the way containerd writes a pod's output
(`<time> <stream> <P|F> <text>`, pglog/cri.py).
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.crash import _kill
from tests.daemonproc import DaemonProcess
from tests.harness import poll_until

# Written now (a line older than the store's retention would be deleted as it is stored).
NOW = datetime.now(UTC)
T = NOW.strftime("%Y-%m-%dT%H:%M:%S.5Z ").encode()
STAMP = NOW.strftime("%Y-%m-%d %H:%M:%S").encode()
HEAD = (
    T
    + b"stderr F "
    + STAMP
    + b".000 UTC [7] LOG:  first\n"
    + T
    + b"stderr P "
    + STAMP
    + b".100 UTC [7] LOG:  statement: select 'aaa\n"
    + T
    + b"stdout F hello-from-stdout\n"
)
END = T + b"stderr F bbb'\n"
WHOLE = [("first", None), ("statement", "select 'aaabbb'"), ("hello-from-stdout", None)]


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[DaemonProcess]:
    logs = tmp_path / "pods"
    logs.mkdir()
    (logs / "0.log").write_bytes(HEAD)
    d = DaemonProcess(
        tmp_path / "fwd",
        [
            {
                "id": "db",
                "name": "db",
                "full_text": True,
                "log": {
                    "path": str(logs / "*.log"),
                    "format": "cri",
                    "line_prefix": "%m [%p] ",
                    "poll_interval_seconds": 0.05,
                },
            }
        ],
    )
    try:
        yield d
    finally:
        d.close()


def stored(d: DaemonProcess) -> list[tuple[Any, Any]]:
    return [(line["message"], line["statement"]) for line in d.all_lines("db")]


@pytest.mark.parametrize("stop", ["SIGKILL", "SIGTERM"])
def test_a_restart_while_a_container_line_is_in_pieces_stores_each_entry_once_and_the_line_whole(
    daemon: DaemonProcess, stop: str
) -> None:
    daemon.start()
    # (the stdout line, whole, is read in the same step: stored before its turn it would be here now;
    # that it stays held however long the stderr line waits is the fake-clock tests' in test_tail.py)
    poll_until(lambda: stored(daemon) == [("first", None)], what="the first entry")
    if stop == "SIGKILL":
        _kill(daemon)
    else:
        assert daemon.stop(signal.SIGTERM) == 0
    with (Path(daemon.config_path).parent.parent / "pods" / "0.log").open("ab") as out:
        out.write(END)
    daemon.start()
    # The rest is read from the resume point in one step and stored in one transaction: a line read
    # twice would be stored with the others.
    poll_until(lambda: len(stored(daemon)) >= len(WHOLE), what="the entries after the restart")
    assert stored(daemon) == WHOLE
    assert daemon.stop(signal.SIGTERM) == 0
