"""Parse-rate benchmark of the stderr reader.

Feeds a realistic mixed stderr log through `make_reader("stderr", ...).feed` on one core with
value removal and statement normalization on (`full_text=False`), and prints physical lines/s,
entries/s and peak memory.

The log comes from `--file PATH`, or is generated with the shared generator
(`gen_pglog.py` of the shared bench kit: `../shared/bench` beside the checkout, or
`$SHARED_BENCH`; PostgreSQL 15 wording, prefix `%m [%p] %q%u@%d/%a `; its mix: 40% slow
statements with literals, 15% errors with DETAIL/HINT/CONTEXT/STATEMENT, 20% connection lines,
5% each checkpoints, autovacuum reports, lock waits, temp files and auth failures, as shares of
physical lines), or, when that script is absent, by the small generator below.

    .venv/bin/python bench/parse.py                # 500,000 generated lines
    .venv/bin/python bench/parse.py --lines 200000
    .venv/bin/python bench/parse.py --file /var/log/postgresql/postgresql-15-main.log --prefix '%m [%p] '
    .venv/bin/python bench/parse.py --profile      # cProfile of one run, top 25 by own time

Peak memory: the process's maximum resident set (getrusage), which includes the input held in
memory, and what one parse run allocates at most (tracemalloc, on a separate untimed run): the
reader holds one pending entry and the lines of the chunk being fed.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import platform
import pstats
import random
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from forwarder.model import LogLine
from forwarder.pglog import make_reader

# The shared bench kit is ../shared/bench from the repository root; SHARED_BENCH names another copy.
SHARED_BENCH = Path(os.environ.get("SHARED_BENCH", str(Path(__file__).resolve().parents[2] / "shared" / "bench")))
SHARED_GENERATOR = SHARED_BENCH / "gen_pglog.py"
PREFIX = "%m [%p] %q%u@%d/%a "
CHUNK = 256 * 1024  # what the file follower reads at once (forwarder/sources/tail.py CHUNK_BYTES)


def _fallback_log(lines: int, seed: int) -> bytes:
    """A small stand-in for the shared generator with the same mix (shares of physical lines)."""
    r = random.Random(seed)
    out: list[str] = []
    t = "2026-11-21 10:00:00.000 UTC"
    while len(out) < lines:
        pid = r.randint(4000, 4100)
        p = f"{t} [{pid}] app@shop/web-api "
        x = r.random()
        if x < 0.40:
            out.append(
                f"{p}LOG:  duration: {r.uniform(1, 900):.3f} ms  statement: SELECT id, status FROM orders "
                f"WHERE customer_id = {r.randint(1, 10**7)} AND status = 'paid' LIMIT 10"
            )
        elif x < 0.55:
            out.append(f'{p}ERROR:  duplicate key value violates unique constraint "orders_pkey"')
            out.append(f"{p}DETAIL:  Key (id)=({r.randint(1, 10**7)}) already exists.")
            out.append(f"{p}STATEMENT:  INSERT INTO orders (id, email) VALUES ({r.randint(1, 10**7)}, 'a@b.c')")
        elif x < 0.75:
            out.append(
                f"{t} [{pid}] [unknown]@[unknown]/[unknown] LOG:  connection received: "
                f"host=10.0.0.{pid % 250} port={r.randint(1024, 65535)}"
            )
        elif x < 0.80:
            out.append(f"{t} [62] LOG:  checkpoint starting: time")
        elif x < 0.85:
            out.append(f'{t} [{pid}] LOG:  automatic analyze of table "shop.public.orders"')
            out.append("\tsystem usage: CPU: user: 0.01 s, system: 0.00 s, elapsed: 0.02 s")
        elif x < 0.90:
            out.append(f"{p}LOG:  process {pid} still waiting for ShareLock on transaction 7001 after 1000.072 ms")
            out.append(f"{p}DETAIL:  Process holding the lock: 4001. Wait queue: {pid}.")
        elif x < 0.95:
            out.append(f'{p}LOG:  temporary file: path "base/pgsql_tmp/pgsql_tmp{pid}.0", size {r.randint(1, 10**9)}')
            out.append(f"{p}STATEMENT:  SELECT * FROM orders ORDER BY created_at")
        else:
            out.append(f'{p}FATAL:  password authentication failed for user "app"')
            out.append(f'{p}DETAIL:  Connection matched pg_hba.conf line 95: "host all all 0.0.0.0/0 scram-sha-256"')
    return ("\n".join(out[:lines]) + "\n").encode()


def load(args: argparse.Namespace) -> bytes:
    if args.file:
        return Path(args.file).read_bytes()
    if SHARED_GENERATOR.exists():
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "pg.log"
            subprocess.run(
                [sys.executable, str(SHARED_GENERATOR), str(args.lines), str(path), "--seed", str(args.seed)],
                check=True,
                stdout=subprocess.DEVNULL,
            )
            return path.read_bytes()
    return _fallback_log(args.lines, args.seed)


def run(data: bytes, prefix: str) -> tuple[float, int]:
    """Seconds to feed `data` in 64 KiB chunks and flush, and the number of entries."""
    reader = make_reader("stderr", line_prefix=prefix, timezone="UTC", full_text=False)
    view = memoryview(data)
    entries = 0
    lines: list[LogLine]
    start = time.perf_counter()
    for i in range(0, len(data), CHUNK):
        lines = reader.feed(bytes(view[i : i + CHUNK]), 0.0)
        entries += len(lines)
    entries += len(reader.flush())
    return time.perf_counter() - start, entries


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lines", type=int, default=500_000, help="physical lines to generate (default 500000)")
    ap.add_argument("--file", help="a stderr log to read instead of generating one")
    # argparse %-formats help texts: the prefix's own % are doubled.
    prefix_help = f"log_line_prefix of --file (default {PREFIX!r})".replace("%", "%%")
    ap.add_argument("--prefix", default=PREFIX, help=prefix_help)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3, help="runs; the best is reported (default 3)")
    ap.add_argument("--profile", action="store_true", help="print a cProfile of one run instead")
    args = ap.parse_args()

    data = load(args)
    physical = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)

    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        run(data, args.prefix)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
        return

    best = float("inf")
    entries = 0
    for _ in range(args.repeat):
        seconds, entries = run(data, args.prefix)
        best = min(best, seconds)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: kilobytes
    # What parsing itself holds at most (the input, read before, not counted): one more run,
    # traced (tracemalloc slows it down, so it is not timed).
    tracemalloc.start()
    run(data, args.prefix)
    traced_mib = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()

    # The parse runs in this one thread: one core does all the work.
    cpu = platform.processor() or platform.machine()
    print(f"python {platform.python_version()} on {cpu} ({os.cpu_count()} cores), one thread, best of {args.repeat}")
    print(f"{'input':<22}{len(data) / 2**20:>12.1f} MiB")
    print(f"{'physical lines':<22}{physical:>12,}")
    print(f"{'entries':<22}{entries:>12,}")
    print(f"{'seconds':<22}{best:>12.3f}")
    print(f"{'lines/s':<22}{physical / best:>12,.0f}")
    print(f"{'entries/s':<22}{entries / best:>12,.0f}")
    print(f"{'peak RSS':<22}{peak_mib:>12.1f} MiB  (process, input included)")
    print(f"{'peak while parsing':<22}{traced_mib:>12.1f} MiB  (tracemalloc, input excluded)")


if __name__ == "__main__":
    main()
