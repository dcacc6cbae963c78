"""PostgreSQL's stderr text wrapped as the other sources write it: test-side writers.

- `syslog_of`: what rsyslog's default (traditional) file format holds for a server with
  `log_destination = 'syslog'`. PostgreSQL (elog.c write_syslog) sends each message (its primary
  line and its DETAIL/HINT/CONTEXT/STATEMENT lines, one buffer ending in a newline) as one syslog
  call per line, `[seq-chunk] text`, and cuts a line over PG_SYSLOG_LIMIT (900 bytes) at the last
  blank before the limit (or at the limit); rsyslog writes control characters as `#ooo`.
- `cri_of`: a Kubernetes node's container log, as containerd writes it (pkg/cri/io/logger.go,
  redirectLogs): each line `<RFC3339Nano time> <stream> <P|F> <content>`, a line over
  max_container_log_line_size (16 KiB by default) cut into `P` records of that size and a last
  `F` record (kubernetes/cri-api's CRI logging format).
- `journal_of`: `journalctl -o json` output for a server whose stderr systemd sends to journald:
  one record per line (journald's stdout stream splits at newlines), MESSAGE the line, numbers as
  strings (journalctl's JSON output mode, systemd.journal-fields(7)).
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Final

PG_SYSLOG_LIMIT: Final = 900
CRI_MAX_LINE: Final = 16 * 1024
CRI_T0: Final = datetime(2026, 11, 24, 3, 38, 7, 500000, tzinfo=UTC)
# A line that continues the message above it: TAB-led, or a secondary label after the prefix.
_SECONDARY: Final = re.compile(r"^\t|\b(?:DETAIL|HINT|QUERY|CONTEXT|LOCATION|STATEMENT):  ")


def messages_of(text: str) -> list[list[str]]:
    """The log text's lines grouped into PostgreSQL's messages (one write each)."""
    out: list[list[str]] = []
    for line in text.split("\n")[:-1]:
        if out and _SECONDARY.search(line):
            out[-1].append(line)
        else:
            out.append([line])
    return out


def _pieces(line: str) -> list[str]:
    """elog.c write_syslog's cut of one line into pieces of at most PG_SYSLOG_LIMIT bytes."""
    data = line.encode()
    pieces: list[str] = []
    while data:
        n = min(len(data), PG_SYSLOG_LIMIT)
        while n < len(data) and n > 0 and (data[n] & 0xC0) == 0x80:
            n -= 1  # pg_mbcliplen: never inside a character
        if n < len(data) and not data[n : n + 1].isspace():
            blank = max(data.rfind(b" ", 0, n), data.rfind(b"\t", 0, n))
            if blank > 0:
                n = blank  # the blank starts the next piece
        pieces.append(data[:n].decode())
        data = data[n:]
    return pieces or [""]


def _escape(text: str) -> str:
    """rsyslog's $EscapeControlCharactersOnReceive: a control character as `#` and 3 octal digits."""
    return "".join(f"#{ord(c):03o}" if ord(c) < 32 else c for c in text)


def syslog_of(text: str, *, pid: int = 4242, when: str = "Nov 22 02:18:58", host: str = "db1") -> bytes:
    """`text` (stderr log text) as rsyslog's traditional file format holds it."""
    out: list[str] = []
    for seq, message in enumerate(messages_of(text), start=1):
        chunk = 0
        for line in message:
            for piece in _pieces(line):
                chunk += 1
                out.append(f"{when} {host} postgres[{pid}]: [{seq}-{chunk}] {_escape(piece)}\n")
    return "".join(out).encode()


def rfc3339nano(t: datetime) -> str:
    """Go's time.RFC3339Nano: trailing zeros of the fraction dropped."""
    frac = f"{t.microsecond:06d}000".rstrip("0")
    return t.strftime("%Y-%m-%dT%H:%M:%S") + (f".{frac}" if frac else "") + "Z"


def cri_of(text: bytes, stream: str = "stderr", t0: datetime = CRI_T0) -> bytes:
    """`text` (stderr log bytes) as a container log file on a Kubernetes node."""
    out = []
    for i, line in enumerate(text.split(b"\n")[:-1]):
        stamp = rfc3339nano(t0 + timedelta(microseconds=1001 * i)).encode()
        pieces = [line[k : k + CRI_MAX_LINE] for k in range(0, len(line), CRI_MAX_LINE)] or [b""]
        for j, piece in enumerate(pieces):
            tag = b"F" if j == len(pieces) - 1 else b"P"
            out.append(stamp + b" " + stream.encode() + b" " + tag + b" " + piece + b"\n")
    return b"".join(out)


def journal_of(text: str, *, pid: int = 4242, first_us: int = 1_795_313_938_000_000) -> bytes:
    """`text` (stderr log text) as `journalctl -o json` prints the records journald stored for it."""
    out = []
    for i, line in enumerate(text.split("\n")[:-1]):
        record = {
            "__CURSOR": f"s=0e1f;i={i + 1:x};b=5d6a;m={i:x};t=1;x=2",
            "__REALTIME_TIMESTAMP": str(first_us + i),
            "MESSAGE": line,
            "SYSLOG_IDENTIFIER": "postgres",
            "_PID": str(pid),
            "_SYSTEMD_UNIT": "postgresql@15-main.service",
        }
        out.append(json.dumps(record, ensure_ascii=False) + "\n")
    return "".join(out).encode()
