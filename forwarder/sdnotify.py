"""systemd's readiness protocol, spoken directly over its datagram socket (sd_notify(3)).

No dependency: a message is `KEY=value` lines sent as one datagram to the AF_UNIX socket named by
$NOTIFY_SOCKET (a path, or `@name` for the abstract namespace). Outside systemd (no
$NOTIFY_SOCKET) every call does nothing, so the daemon runs the same under any supervisor.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping

log = logging.getLogger(__name__)


class Notifier:
    """Sends READY=1, WATCHDOG=1, STOPPING=1, RELOADING=1 and STATUS= to systemd when it listens."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET", "")
        if address.startswith("@"):  # abstract namespace (sd_notify(3), "NOTES")
            address = "\0" + address[1:]
        self._address = address
        self._sock: socket.socket | None = None
        self.watchdog_seconds = _watchdog_seconds(env)

    @property
    def enabled(self) -> bool:
        return bool(self._address)

    def notify(self, *fields: str) -> None:
        """Send one message; a failure is logged once per call, never raised (the daemon keeps running)."""
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
            log.warning("systemd's notify socket is full; message dropped", extra={"notification": fields[0]})
        except OSError as exc:
            log.warning("cannot notify systemd", extra={"error": str(exc)})

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
