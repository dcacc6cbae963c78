"""How DICTIONARY_V2 (`docs_v2.zdict`, docs.py) was made: `python -m forwarder.store.dictionary_v2`.

Not imported by the daemon. The dictionary is frozen: documents packed with it are read with it
forever, so running this again (another zstandard version may train other bytes) is only for a
new format byte, never to replace the file of this one.

A zstd dictionary is trained from samples (zstd's `ZDICT_trainFromBuffer`, COVER): besides
common substrings it carries entropy tables, which a document of ~430 bytes is too short to
carry itself. The samples are docs.py's typical documents with their varying fields (pid, user,
database, application, host, durations) drawn from a seeded generator: the shapes of PostgreSQL's
messages as the parser writes them, not the text of any benchmark.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import orjson
import zstandard

from forwarder.store.docs import _EXAMPLES, DICTIONARY_V2_PATH

SAMPLES = 4000
DICTIONARY_BYTES = 8192


def samples(seed: int = 1) -> list[bytes | bytearray | memoryview]:
    rng = random.Random(seed)
    out: list[bytes | bytearray | memoryview] = []
    for _ in range(SAMPLES):
        doc = dict(rng.choice(_EXAMPLES))
        doc["pid"] = rng.randrange(100, 4_000_000)
        if doc.get("user"):
            doc["user"] = rng.choice(["postgres", "app", "web", "report", f"u{rng.randrange(100)}"])
        if doc.get("database"):
            doc["database"] = rng.choice(["postgres", "shop", "app", "analytics"])
        if doc.get("application"):
            doc["application"] = rng.choice(["psql", "pgbench", "[unknown]", "web-1", ""])
        doc["host"] = rng.choice(["db.example.com", "pg-1", "10.0.0.5", "localhost"])
        doc["database_id"] = doc["database_name"] = rng.choice(["main", "orders", "pg15", "primary"])
        if doc.get("duration_ms") is not None:
            doc["duration_ms"] = round(rng.random() * 5000, 3)
        out.append(orjson.dumps(doc))
    return out


def train() -> bytes:
    return bytes(zstandard.train_dictionary(DICTIONARY_BYTES, samples(), level=3, threads=0).as_bytes())


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else DICTIONARY_V2_PATH.with_suffix(".new")
    target.write_bytes(train())
    print(f"wrote {target} (rename it to a new format's file; {DICTIONARY_V2_PATH.name} is frozen)")
