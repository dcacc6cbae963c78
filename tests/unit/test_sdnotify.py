"""sd_notify(3) details beyond the basics in test_operations.py: a full socket's bounded log, RELOADING=1."""

from __future__ import annotations

import contextlib
import logging
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from forwarder.clock import FakeClock
from forwarder.sdnotify import Notifier


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[socket.socket]:
    """systemd's end, which stops reading: its queue fills and later datagrams cannot go."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(tmp_path / "notify"))
    yield sock
    sock.close()


def drained(sock: socket.socket) -> list[bytes]:
    sock.setblocking(False)
    out = []
    with contextlib.suppress(BlockingIOError):
        while True:
            out.append(sock.recv(4096))
    return out


def full_socket_reports(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage().startswith("systemd's notify socket is full")]


def test_a_full_notify_socket_is_logged_once_then_at_most_once_a_minute_with_a_count(
    tmp_path: Path, listener: socket.socket, caplog: pytest.LogCaptureFixture
) -> None:
    # A 100 ms watchdog on a socket systemd stopped reading logged a warning per ping (43 in 2.5 s).
    clock = FakeClock()
    caplog.set_level(logging.WARNING, logger="forwarder.sdnotify")
    with contextlib.closing(Notifier({"NOTIFY_SOCKET": str(tmp_path / "notify")}, clock=clock)) as n:
        for _ in range(1000):  # far past a datagram queue's length
            n.notify("WATCHDOG=1")
        [first] = full_socket_reports(caplog)
        assert first.levelno == logging.WARNING and first.__dict__["dropped"] == 1
        assert first.__dict__["notification"] == "WATCHDOG=1"

        clock.advance(59)
        for _ in range(100):
            n.notify("WATCHDOG=1")
        assert len(full_socket_reports(caplog)) == 1, "reported again within the minute"

        clock.advance(1)
        n.notify("WATCHDOG=1")
        queued = len(drained(listener))
    [_, later] = full_socket_reports(caplog)
    dropped = 1000 + 100 + 1 - queued
    assert queued > 0 and dropped > 100
    assert later.__dict__["dropped"] == dropped - 1  # every drop since the first report is counted
    assert f"{dropped - 1} messages dropped since the last report" in later.getMessage()


def test_reloading_carries_monotonic_usec(tmp_path: Path, listener: socket.socket) -> None:
    # sd_notify(3): RELOADING=1 must come with MONOTONIC_USEC=, CLOCK_MONOTONIC in microseconds.
    listener.settimeout(2)
    with contextlib.closing(Notifier({"NOTIFY_SOCKET": str(tmp_path / "notify")})) as n:
        before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        n.reloading("reloading the config")
        after = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    fields = listener.recv(4096).decode().split("\n")
    assert fields[0] == "RELOADING=1" and fields[2] == "STATUS=reloading the config"
    key, _, usec = fields[1].partition("=")
    assert key == "MONOTONIC_USEC" and before <= int(usec) <= after
