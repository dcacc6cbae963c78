"""systemd's readiness protocol, spoken directly over its datagram socket (sd_notify(3)).

No dependency: a message is `KEY=value` lines sent as one datagram to the AF_UNIX socket named by
$NOTIFY_SOCKET (a path, or `@name` for the abstract namespace). Outside systemd (no
$NOTIFY_SOCKET) every call does nothing, so the daemon runs the same under any supervisor.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Mapping

from forwarder.clock import Clock, SystemClock

log = logging.getLogger(__name__)

REPORT_INTERVAL_SECONDS = 60.0  # a failure that repeats is logged once, then at most this often


def monotonic_usec() -> int:
    """CLOCK_MONOTONIC in microseconds, the clock sd_notify(3) names for MONOTONIC_USEC=."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000


class _FailureReport:
    """One kind of failure that repeats (a full socket fails every WATCHDOG=1): logged the first
    time, then at most once per `REPORT_INTERVAL_SECONDS` with how many messages were dropped since
    the last report. A 100 ms watchdog on a socket systemd stopped reading logged 17 lines a second.
    No "works again" line: a socket that is full on and off would log two lines per cycle."""

    def __init__(self, msg: str, clock: Clock) -> None:
        self._msg = msg
        self._clock = clock
        self._last_report: float | None = None
        self._dropped = 0  # messages dropped since the last report (the one being reported included)

    def failed(self, extra: Mapping[str, object]) -> None:
        now = self._clock.monotonic()
        self._dropped += 1
        if self._last_report is not None and now - self._last_report < REPORT_INTERVAL_SECONDS:
            return
        if self._last_report is None:
            log.warning(f"{self._msg}; message dropped (logged at most once a minute)", extra={**extra, "dropped": 1})
        else:
            log.warning(
                f"{self._msg}; {self._dropped} messages dropped since the last report",
                extra={**extra, "dropped": self._dropped},
            )
        self._last_report = now
        self._dropped = 0


class Notifier:
    """Sends READY=1, WATCHDOG=1, STOPPING=1, RELOADING=1 and STATUS= to systemd when it listens."""

    def __init__(self, environ: Mapping[str, str] | None = None, clock: Clock | None = None) -> None:
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET", "")
        if address.startswith("@"):  # abstract namespace (sd_notify(3), "NOTES")
            address = "\0" + address[1:]
        self._address = address
        self._sock: socket.socket | None = None
        self.watchdog_seconds = _watchdog_seconds(env)
        clock = clock or SystemClock()
        self._full = _FailureReport("systemd's notify socket is full", clock)
        self._unreachable = _FailureReport("cannot notify systemd", clock)

    @property
    def enabled(self) -> bool:
        return bool(self._address)

    def notify(self, *fields: str) -> None:
        """Send one message; a failure is logged (once, then at most once a minute), never raised."""
        if not self._address:
            return
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
                # Never block the event loop: a listener that stopped reading would otherwise
                # stall the daemon once its queue is full. A message that cannot go is dropped.
                self._sock.setblocking(False)
            self._sock.sendto("\n".join(fields).encode(), self._address)
        except BlockingIOError:
            self._full.failed({"notification": fields[0]})
        except OSError as exc:
            self._unreachable.failed({"notification": fields[0], "error": str(exc)})

    def reloading(self, status: str) -> None:
        """RELOADING=1 with the MONOTONIC_USEC= that sd_notify(3) requires beside it (for
        Type=notify-reload, systemd matches the reload to the time it was asked); READY=1 ends it."""
        self.notify("RELOADING=1", f"MONOTONIC_USEC={monotonic_usec()}", f"STATUS={status}")

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def _watchdog_seconds(env: Mapping[str, str]) -> float | None:
    """The ping interval: half of WatchdogSec (sd_watchdog_enabled(3) advises pinging at half)."""
    usec = env.get("WATCHDOG_USEC", "")
    pid = env.get("WATCHDOG_PID", "")
    if not usec.isdigit() or int(usec) == 0:
        return None
    if pid and pid != str(os.getpid()):  # meant for another process (e.g. a wrapper that exec'd us)
        return None
    return int(usec) / 1_000_000 / 2
