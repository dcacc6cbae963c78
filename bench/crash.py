"""Crash safety, the long run: SIGKILL a real daemon at random moments during ingest and delivery.

The harness of the CI crash test (`tests/crash.py`; the test runs 20 rounds), for 100 rounds by
default. Each round writes 50-1500 numbered PostgreSQL stderr entries to a log file and kills
`forwarder run` with SIGKILL, from a seeded RNG either 0-250 ms after the write (during ingest) or
0-150 ms after a request carrying the round's entries reached the strict, signature-checking
webhook receiver (during delivery; the receiver holds each answer 0-150 ms), then restarts it.
Afterwards the store (read through the Logs API) and the receiver are compared with what was
written. Everything runs on 127.0.0.1; no PostgreSQL is needed.

    .venv/bin/python bench/crash.py                       # 100 rounds
    .venv/bin/python bench/crash.py --rounds 20 --seed 7

Prints rounds, entries written/stored/delivered, lost, stored twice, duplicates per kill (max and
mean; the bound is one batch, 500) and the time; appends the figures to
/tmp/fwd-bench/results.jsonl; exits 1 when a property did not hold.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # the harness lives in the test package

from tests.crash import run_crash  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--seed", type=int, default=20261123)
    ap.add_argument("--results", type=Path, default=Path("/tmp/fwd-bench/results.jsonl"))
    ap.add_argument("--quiet", action="store_true", help="no line per round")
    a = ap.parse_args()
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}, {os.cpu_count()} CPUs", flush=True)
    with tempfile.TemporaryDirectory(prefix="fwd-crash-") as tmp:
        report = run_crash(Path(tmp), a.rounds, a.seed, progress=None if a.quiet else lambda s: print(s, flush=True))
    print(report.summary())
    problems = report.problems()
    for p in problems:
        print("FAILED:", p)
    if problems:
        print("daemon log:", report.daemon_log_tail)
    per_kill = [k.duplicates for k in report.kills] or [0]
    a.results.parent.mkdir(parents=True, exist_ok=True)
    with open(a.results, "a") as f:
        row = {
            "bench": "crash",
            "at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "python": platform.python_version(),
            "rounds": len(report.kills),
            "seed": report.seed,
            "written": report.written,
            "stored": report.stored,
            "delivered": report.delivered,
            "lost": len(report.lost),
            "stored_twice": len(report.stored_twice),
            "undelivered": len(report.undelivered),
            "duplicates": report.duplicates,
            "duplicates_per_kill_max": max(per_kill),
            "duplicates_per_kill_mean": round(statistics.fmean(per_kill), 1),
            "kills_in_flight": sum(k.in_flight for k in report.kills),
            "seconds": round(report.seconds, 1),
            "problems": problems,
        }
        f.write(json.dumps(row) + "\n")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
