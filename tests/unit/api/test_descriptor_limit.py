"""A real `forwarder run` with a low descriptor limit, its API port flooded with idle connections:
the excess is refused at once, ingest keeps storing, and a normal client is answered or refused
within a second. Loopback only; every loop is bounded."""

from __future__ import annotations

import contextlib
import resource
import selectors
import socket
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

from forwarder.config import MAX_RETENTION_DAYS
from tests.daemonproc import DaemonProcess
from tests.harness import poll_until

NOFILE = 400  # the daemon's soft RLIMIT_NOFILE
RESERVED = 256  # [server] reserved_descriptors' default: the API may hold NOFILE - RESERVED
FLOOD = 450  # idle connections attempted: more than the daemon could ever hold
LINE = "2000-01-01 00:00:00.000 UTC [42] LOG:  numbered {}\n"
NEW_LINES = 100


@contextlib.contextmanager
def soft_nofile(limit: int) -> Iterator[None]:
    """Children started inside inherit a soft descriptor limit of `limit`."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def stored_lines(store: Path) -> int:
    with contextlib.closing(sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=5)) as db:
        return int(db.execute("SELECT count(*) FROM lines").fetchone()[0])


def closed_by_server(socks: list[socket.socket]) -> set[socket.socket]:
    """The sockets the server has closed (readable at end of file), looked at without waiting."""
    with selectors.DefaultSelector() as sel:
        for s in socks:
            sel.register(s, selectors.EVENT_READ)
        return {key.fileobj for key, _ in sel.select(0)}  # type: ignore[misc]


def normal_request(port: int) -> tuple[float, bytes]:
    """Seconds until a plain GET /healthz is answered or its connection closed, and what came back."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        try:
            got = s.recv(100)
        except ConnectionResetError:
            got = b""
    return time.monotonic() - started, got


def test_idle_connections_up_to_the_descriptor_limit_starve_neither_ingest_nor_clients(tmp_path: Path) -> None:
    logs = tmp_path / "pglogs"
    logs.mkdir()
    log = logs / "postgresql.log"
    log.write_text("2000-01-01 00:00:00.000 UTC [42] LOG:  ready\n")
    d = DaemonProcess(
        tmp_path / "fwd",
        [
            {"id": "main", "name": "shop", "full_text": True, "log": {"path": str(logs / "*.log")}}
        ],  # messages kept whole
        retention_days=MAX_RETENTION_DAYS,  # the lines' date must not matter
    )
    held: list[socket.socket] = []
    try:
        with soft_nofile(NOFILE):
            # Held connections must stay for the whole test: no header or idle deadline cuts them.
            d.start(
                env={
                    "FORWARDER_SERVER__HEADER_TIMEOUT_SECONDS": "600",
                    "FORWARDER_SERVER__KEEPALIVE_TIMEOUT_SECONDS": "600",
                }
            )
        assert d.wait_for_line("main", "ready"), "the daemon did not read the log"
        before = stored_lines(d.root / "store.db")

        for _ in range(FLOOD):
            held.append(socket.create_connection(("127.0.0.1", d.port), timeout=5))
        cap = NOFILE - RESERVED
        poll_until(lambda: len(closed_by_server(held)) >= FLOOD - cap, timeout=10, what="the excess refused")
        assert len(closed_by_server(held)) == FLOOD - cap  # every connection up to the cap is kept

        with log.open("a") as fh:
            fh.writelines(LINE.format(i) for i in range(NEW_LINES))
        poll_until(
            lambda: stored_lines(d.root / "store.db") == before + NEW_LINES,
            timeout=20,
            what="ingest to store the new lines while the API port is full",
        )
        seconds, answer = normal_request(d.port)
        assert seconds < 1.0 and (answer == b"" or answer.startswith(b"HTTP/1.1 200")), (seconds, answer)

        for s in held:
            s.close()
        held.clear()
        poll_until(lambda: normal_request(d.port)[1].startswith(b"HTTP/1.1 200"), timeout=10, what="an answer")
        assert len(d.wait_for_line("main", "numbered", count=NEW_LINES)) == NEW_LINES
        assert d.stop() == 0
        text = d.log_path.read_text()
        assert "API connection refused: too many open" in text and "Traceback" not in text
    finally:
        for s in held:
            s.close()
        d.close()
