"""How fast the store appends parsed lines: entries/s of `lines.append` in transactions of N lines.

    python bench/store_append.py [--log FILE] [--batch 2000]

Parses a generated PostgreSQL log once (not timed), then appends every entry to a fresh store the
way the daemon does (one transaction per batch, the schema's indexes and pragmas).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from forwarder.pglog import make_reader
from forwarder.store import lines as L
from forwarder.store import schema

# The shared bench kit is ../shared/bench from the repository root; SHARED_BENCH names another copy.
SHARED_BENCH = Path(os.environ.get("SHARED_BENCH", str(Path(__file__).resolve().parents[2] / "shared" / "bench")))
GENERATOR = SHARED_BENCH / "gen_pglog.py"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--log", type=Path, default=Path("/tmp/pg200k.log"))
    ap.add_argument("--batch", type=int, default=2000)
    args = ap.parse_args()
    if not args.log.exists():
        subprocess.run([sys.executable, str(GENERATOR), "200000", str(args.log), "--seed", "1"], check=True)
    reader = make_reader("stderr", line_prefix="%m [%p] %q%u@%d/%a ", timezone="UTC", full_text=False)
    lines = reader.feed(args.log.read_bytes(), 0.0) + reader.flush()
    with tempfile.TemporaryDirectory() as tmp:
        conn = schema.connect(f"{tmp}/store.db")
        schema.migrate(conn)
        conn.execute("INSERT INTO databases (id, enabled, full_text, updated_at) VALUES ('main', 1, 0, 0)")
        identity = L.Identity(1, "main", "main", "bench")
        started = time.perf_counter()
        for i in range(0, len(lines), args.batch):
            conn.execute("BEGIN IMMEDIATE")
            L.append(conn, identity, lines[i : i + args.batch])
            conn.execute("COMMIT")
        seconds = time.perf_counter() - started
    print(f"{len(lines)} entries in {seconds:.2f} s: {len(lines) / seconds:,.0f} entries/s ({args.batch}/transaction)")


if __name__ == "__main__":
    main()
