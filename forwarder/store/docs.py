"""How a line's document is kept on disk: zstd with a trained dictionary, ~4x smaller.

A stored document is the orjson of the SPEC 2.1 fields without `id` (see lines.py). Documents are
short (~430 bytes on a typical log) and alike: compressed one by one they shrink little (zlib
alone: to ~250 bytes), but against a dictionary of typical documents the keys, severities, kinds
and PostgreSQL's usual messages cost a few bytes each. Each one stays readable alone, so reading a
page decompresses only its lines.

The first byte tells the format; every one is read forever, and a better dictionary is a new
format byte, never a change to an existing one:

- `{`: a plain JSON document, `time` included (stores written before compression);
- FORMAT_DEFLATE_V1: a raw deflate stream against DICTIONARY_V1 (RFC 1950 section 2.2, FDICT) of
  the document without `time`, which the lines table holds as `time_us` (lines.py splices it back);
  ~92 bytes a document, but ~17 µs to pack, the largest single cost of storing a line;
- FORMAT_ZSTD_V2 (written now): a zstd frame (RFC 8878) with its content size and without magic
  number, checksum or dictionary id, against DICTIONARY_V2 (`docs_v2.zdict`, made by
  dictionary_v2.py), of the document without `time`: ~99 bytes in ~3.7 µs, read back in ~1.1 µs
  (deflate: ~3.2). The content size (a byte or two) lets one call read a frame back into a buffer
  of the right size; without it a streaming decompressor takes half as long again.
"""

from __future__ import annotations

import threading
import zlib
from pathlib import Path
from typing import Final

import orjson
import zstandard

FORMAT_DEFLATE_V1: Final = 0x01
FORMAT_ZSTD_V2: Final = 0x02
FORMAT_WRITTEN: Final = FORMAT_ZSTD_V2  # what `pack` writes
_PLAIN: Final = 0x7B  # "{"
# FORMAT_DEFLATE_V1 streams were made with a 16 KiB window (the whole dictionary), level 6: the
# window and the dictionary are what reading them needs.
_WBITS: Final = 14


def _example(**fields: object) -> dict[str, object]:
    doc: dict[str, object] = {
        "host": "db.example.com",
        "database_id": "main",
        "database_name": "main",
        "severity": "LOG",
        "kind": "other",
        "sqlstate": None,
        "message": "",
        "detail": None,
        "hint": None,
        "context": None,
        "statement": None,
        "user": "postgres",
        "database": "postgres",
        "application": "psql",
        "client": None,
        "pid": 12345,
        "duration_ms": None,
        "redacted": True,
    }
    doc.update(fields)
    return doc


# Typical documents, rarest first: deflate reaches back 32 KiB, and nearer text is cheaper to refer
# to, so the shapes every document shares come last. Messages are PostgreSQL's own (its .po
# msgids), with values removed as the parser removes them.
_EXAMPLES: Final = (
    _example(severity="LOG", kind="server", message="database system is ready to accept connections", user=None,
             database=None, application=None),
    _example(severity="LOG", kind="server", message="received fast shutdown request", user=None, database=None,
             application=None),
    _example(severity="FATAL", kind="too_many_connections", sqlstate="53300",
             message="sorry, too many clients already", application="[unknown]"),
    _example(severity="FATAL", kind="too_many_connections", sqlstate="53300",
             message="remaining connection slots are reserved for roles with the SUPERUSER attribute"),
    _example(severity="ERROR", kind="error", sqlstate="42601", message='syntax error at or near "..."',
             statement="SELECT $1 FROM"),
    _example(severity="ERROR", kind="error", sqlstate="42P01", message='relation "..." does not exist',
             statement="SELECT * FROM orders WHERE id = $1"),
    _example(severity="ERROR", kind="error", sqlstate="42703", message='column "..." does not exist',
             statement="SELECT id, name FROM users WHERE email = $1"),
    _example(severity="ERROR", kind="error", sqlstate="23503",
             message='insert or update on table "..." violates foreign key constraint "..."',
             detail='Key (user_id)=(...) is not present in table "users".',
             statement="INSERT INTO orders (user_id, total) VALUES ($1, $2)"),
    _example(severity="ERROR", kind="error", sqlstate="23502",
             message='null value in column "..." of relation "..." violates not-null constraint',
             detail="Failing row contains (...).", statement="UPDATE users SET email = $1 WHERE id = $2"),
    _example(severity="ERROR", kind="error", sqlstate="22P02", message='invalid input syntax for type integer: "..."',
             statement="SELECT * FROM items WHERE id = $1"),
    _example(severity="ERROR", kind="error", sqlstate="57014", message="canceling statement due to statement timeout",
             statement="SELECT count(*) FROM events WHERE created_at > $1"),
    _example(severity="ERROR", kind="error", sqlstate="57014", message="canceling statement due to user request",
             statement="SELECT * FROM events ORDER BY created_at DESC LIMIT $1"),
    _example(severity="ERROR", kind="error", sqlstate="40001",
             message="could not serialize access due to concurrent update",
             statement="UPDATE accounts SET balance = balance - $1 WHERE id = $2"),
    _example(severity="FATAL", kind="auth_failure", sqlstate="28P01",
             message='password authentication failed for user "..."',
             detail='Connection matched file "/etc/postgresql/pg_hba.conf" line 100:'
             ' "host all all 0.0.0.0/0 scram-sha-256"',
             client="10.0.0.1"),
    _example(severity="FATAL", kind="auth_failure", sqlstate="28000",
             message='no pg_hba.conf entry for host "...", user "...", database "...", no encryption',
             client="10.0.0.1"),
    _example(severity="LOG", kind="temp_file", message='temporary file: path "base/pgsql_tmp/pgsql_tmp0.0", size 0',
             statement="SELECT * FROM orders ORDER BY created_at"),
    _example(severity="LOG", kind="checkpoint", message="checkpoint starting: time", user=None, database=None,
             application=None),
    _example(severity="LOG", kind="checkpoint",
             message="checkpoint complete: wrote 0 buffers (0.0%); 0 WAL file(s) added, 0 removed, 0 recycled;"
             " write=0.000 s, sync=0.000 s, total=0.000 s; sync files=0, longest=0.000 s, average=0.000 s;"
             " distance=0 kB, estimate=0 kB", user=None, database=None, application=None),
    _example(severity="LOG", kind="autovacuum",
             message='automatic vacuum of table "...": index scans: 0\npages: 0 removed, 0 remain, 0 scanned'
             " (0.00% of total)\ntuples: 0 removed, 0 remain, 0 are dead but not yet removable\n"
             "buffer usage: 0 hits, 0 misses, 0 dirtied\navg read rate: 0.000 MB/s, avg write rate: 0.000 MB/s\n"
             "system usage: CPU: user: 0.00 s, system: 0.00 s, elapsed: 0.00 s",
             user=None, database=None, application=None),
    _example(severity="LOG", kind="autovacuum", message='automatic analyze of table "..."', user=None,
             database=None, application=None),
    _example(severity="ERROR", kind="deadlock", sqlstate="40P01", message="deadlock detected",
             detail="Process 0 waits for ShareLock on transaction 0; blocked by process 0.\n"
             "Process 0 waits for ShareLock on transaction 0; blocked by process 0.",
             hint="See server log for query details.", context='while updating tuple (0,0) in relation "..."',
             statement="UPDATE accounts SET balance = balance + $1 WHERE id = $2"),
    _example(severity="LOG", kind="lock_wait", message="process 0 still waiting for ShareLock on transaction 0"
             " after 1000.000 ms", detail="Process holding the lock: 0. Wait queue: 0.",
             context='while updating tuple (0,0) in relation "..."',
             statement="UPDATE inventory SET quantity = quantity - $1 WHERE sku = $2", duration_ms=1000.0),
    _example(severity="LOG", kind="lock_wait",
             message="process 0 acquired ShareLock on transaction 0 after 1000.000 ms",
             context='while updating tuple (0,0) in relation "..."', duration_ms=1000.0),
    _example(severity="ERROR", kind="error", sqlstate="23505",
             message='duplicate key value violates unique constraint "..."', detail="Key (id)=(...) already exists.",
             statement="INSERT INTO sessions (id, user_id, created_at) VALUES ($1, $2, $3)"),
    _example(severity="LOG", kind="connection", message="connection received: host=... port=...", user=None,
             database=None, application=None, client="10.0.0.1"),
    _example(severity="LOG", kind="connection", message="connection authorized: user=... database=..."
             " application_name=... SSL enabled (protocol=TLSv1.3, cipher=TLS_AES_256_GCM_SHA384, bits=256)",
             client="10.0.0.1"),
    _example(severity="LOG", kind="connection", message="disconnection: session time: 0:00:00.000 user=..."
             " database=... host=... port=...", client="10.0.0.1"),
    _example(severity="LOG", kind="statement", message="statement", statement="SELECT * FROM users WHERE id = $1"),
    _example(severity="LOG", kind="slow_query", message="duration: 1000.000 ms  execute <unnamed>",
             statement="SELECT o.id, o.total FROM orders o JOIN users u ON u.id = o.user_id WHERE u.id = $1",
             client="10.0.0.1", duration_ms=1000.0),
    _example(severity="LOG", kind="slow_query", message="duration: 1000.000 ms  statement",
             statement="UPDATE orders SET status = $1, updated_at = now() WHERE id = $2 RETURNING id",
             client="10.0.0.1", duration_ms=1000.0),
)  # fmt: skip

# zlib uses at most the window size minus MIN_LOOKAHEAD (262) bytes of a dictionary (deflate.c).
DICTIONARY_V1: Final = b"\n".join(orjson.dumps(d) for d in _EXAMPLES)[-((1 << _WBITS) - 262) :]


DICTIONARY_V2_PATH: Final = Path(__file__).with_name("docs_v2.zdict")
DICTIONARY_V2: Final = DICTIONARY_V2_PATH.read_bytes()
_ZSTD_DICT: Final = zstandard.ZstdCompressionDict(DICTIONARY_V2)
# Level 5 (greedy) trying 16 candidate matches instead of 8 (search_log): against the dictionary
# a document is ~99 bytes in ~3.7 µs. Measured on 38,000 of the benchmark's documents: level 3
# (dfast) 111.6 bytes in 2.7 µs; lazy strategies (6-7) ~100.5 in ~7 µs; 32 candidates 99.2 in 3.8.
# Only the dictionary and the frame format bind the reader: the parameters can change freely.
_ZSTD_PARAMS: Final = zstandard.ZstdCompressionParameters.from_level(
    5,
    search_log=4,
    format=zstandard.FORMAT_ZSTD1_MAGICLESS,
    write_checksum=0,
    write_content_size=1,
    write_dict_id=0,
)


class _Codecs(threading.local):
    """A compressor and a decompressor per thread: zstandard's contexts are not thread-safe."""

    def __init__(self) -> None:
        self.compressor = zstandard.ZstdCompressor(dict_data=_ZSTD_DICT, compression_params=_ZSTD_PARAMS)
        self.decompressor = zstandard.ZstdDecompressor(dict_data=_ZSTD_DICT, format=zstandard.FORMAT_ZSTD1_MAGICLESS)


_CODECS: Final = _Codecs()
_WRITTEN: Final = bytes((FORMAT_WRITTEN,))


def pack(doc: bytes) -> bytes:
    """The stored form of a JSON document (without `time`)."""
    return _WRITTEN + _CODECS.compressor.compress(doc)


def is_plain(stored: bytes) -> bool:
    """Whether a stored document is plain JSON, `time` included (written before compression)."""
    return stored[0] == _PLAIN


def unpack(stored: bytes) -> bytes:
    """The JSON document of a stored one as it was packed (a plain one has `time`, a packed one not)."""
    first = stored[0]
    if first == FORMAT_ZSTD_V2:
        return _CODECS.decompressor.decompress(stored[1:])
    if first == _PLAIN:
        return stored
    if first == FORMAT_DEFLATE_V1:
        d = zlib.decompressobj(-_WBITS, DICTIONARY_V1)
        return d.decompress(stored[1:]) + d.flush()
    raise ValueError(f"unknown stored document format {first:#04x}")
