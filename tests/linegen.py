"""Mixed log lines for destination tests: every kind and severity, every SPEC 2.1 field set in most
lines and left out in some, awkward text (quotes, backslashes, brackets, newlines, multi-byte UTF-8).

`mixed_lines(n, seed)` is deterministic for a seed; `max_text_bytes` makes some messages long (for
the limit tests, up to 900 KB).
"""

from __future__ import annotations

import random

from forwarder.model import KINDS, LogLine

SEVERITIES = ("LOG", "ERROR", "WARNING", "FATAL", "PANIC", "NOTICE", "INFO", "DEBUG")
AWKWARD = (
    'relation "orders" does not exist',
    "path C:\\data\\base and a trailing backslash \\",
    'array [1,2] and ] alone and [service@32473 x="y"]',
    "naïve café — 日本語のログ 🐘 ü",
    "first line\nsecond line\ttabbed",
    "duration: ... ms  statement: SELECT $1",
)


def mixed_lines(
    n: int, seed: int = 1, *, start_us: int = 1_700_000_000_000_000, max_text_bytes: int = 0
) -> list[LogLine]:
    """`n` lines in time order (a few share a microsecond); see the module docstring."""
    rnd = random.Random(seed)
    lines: list[LogLine] = []
    t = start_us
    for i in range(n):
        t += rnd.choice((0, 1, 250, 1_000, 40_000))
        kind = KINDS[i % len(KINDS)]
        full = rnd.random() < 0.8  # most lines carry every optional field
        message = f"{rnd.choice(AWKWARD)} #{i}"
        if max_text_bytes:
            size = rnd.randint(0, max_text_bytes)
            message = (message + " " + "x" * size)[:size] if size > len(message) else message
        lines.append(
            LogLine(
                time_us=t,
                severity=rnd.choice(SEVERITIES),
                kind=kind,
                message=message,
                sqlstate=rnd.choice(("23505", "40P01", "57P01", "XX000")) if full else None,
                detail=rnd.choice(AWKWARD) if full else None,
                hint='try "again" \\ later' if full else None,
                context="PL/pgSQL function f() line 3 at RAISE" if full else None,
                statement="SELECT * FROM t WHERE id = $1 AND name = $2" if full else None,
                user="app_ü" if full else None,
                database="shop" if full else None,
                application="psql [x]" if full else None,
                client="10.0.0.7:5432" if full else "[local]",
                pid=rnd.randint(1, 4_000_000) if full else None,
                duration_ms=round(rnd.random() * 5000, 3) if kind in ("slow_query", "lock_wait") else None,
                redacted=full,
            )
        )
    return lines
