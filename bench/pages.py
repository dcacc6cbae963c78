"""How fast the Logs listing answers with a million lines stored: the API and the Logs page.

    python bench/pages.py                                  # 1M lines, the API and the page
    python bench/pages.py --lines 200000 --reps 10         # smaller and quicker
    python bench/pages.py --target api=/v1/databases/{ref}/logs?limit=50 --target mine=/ui/...

Fills a store (cached under var/bench-pages/, keyed by the parameters) with lines parsed from the
shared generator's PostgreSQL log, repeated up to `--lines`, spread evenly over `--days` days up to
the moment of the fill, four in five for database `bench` and the rest for `other`; indexes them
for full-text search with the store's own indexer. Then runs a real `forwarder run` on that store,
signs in with a read-only key (`forwarder keys create`, then `POST /ui/signin`, keeping the cookie)
and times each query of `queries()` against each target (`name=path`, `{ref}` the database; a path
under /v1/ is sent with the key as a Bearer token, any other with the session cookie), with a
warm-up and `--reps` repetitions: median and p95 in ms, over one kept-alive connection (the JSON
also keeps each first request's time, which may read pages from disk). A target
that answers 404 is reported as not served. The `store` column is `list_lines` called in this
process on a read-only connection (the query alone, without HTTP). Prints a table and writes JSON.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from forwarder.model import KIND_ALIASES, format_time, parse_time
from forwarder.pglog import make_reader
from forwarder.store import lines as L
from forwarder.store import schema
from forwarder.store.store import open_sync

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling modules, when run as a script
from daemonrun import PREFIX, REPO, SHARED, ForwarderProcess

PY = sys.executable
TARGET_MS = 300.0
DATABASES = ("bench", "other")  # every fifth line is `other`'s
HOUR_US = 3_600_000_000
DEFAULT_TARGETS = ("api=/v1/databases/{ref}/logs?limit=50", "page=/ui/databases/{ref}/logs")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --- the store --------------------------------------------------------------------------------


def source_log(cache: Path, seed: int) -> Path:
    """The generator's 1M-line log (shared with deliver.py's cache)."""
    path = cache / f"pg_1000000_seed{seed}.log"
    if not path.exists():
        cache.mkdir(parents=True, exist_ok=True)
        log(f"generating the input log (about 50 s) -> {path}")
        tmp = path.with_suffix(".tmp")
        subprocess.run(
            [PY, str(SHARED / "gen_pglog.py"), "1000000", str(tmp), "--seed", str(seed)],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        tmp.rename(path)
    return path


def fill(store: Path, src: Path, n: int, days: float) -> dict[str, Any]:
    """Append `n` lines to a fresh store in the daemon's transactions, then index them all."""
    t0 = time.monotonic()
    reader = make_reader("stderr", line_prefix=PREFIX, timezone="UTC", full_text=False)
    entries = []
    with open(src, "rb") as f:
        while chunk := f.read(1 << 22):
            entries.extend(reader.feed(chunk, 0.0))
    entries.extend(reader.flush())
    log(f"parsed {len(entries):,} entries in {time.monotonic() - t0:.1f} s")
    end_us = int(time.time() * 1_000_000)
    start_us = end_us - int(days * 86400 * 1_000_000)
    step = (end_us - start_us) / n
    conn = open_sync(store)
    idents = []
    for db_id in DATABASES:
        code = conn.execute(
            "INSERT INTO databases (id, enabled, full_text, updated_at) VALUES (?, 1, 0, ?)", (db_id, end_us)
        ).lastrowid
        idents.append(L.Identity(int(code or 0), db_id, db_id, "bench-host"))
    conn.commit()
    t1 = time.monotonic()
    batch = 5000
    for first in range(0, n, batch):
        rows: list[L.Row] = []
        for i in range(first, min(n, first + batch)):
            line = entries[i % len(entries)]._replace(time_us=start_us + int(i * step))
            rows.extend(L.encode_rows(idents[1 if i % 5 == 4 else 0], [line]))
        conn.execute("BEGIN IMMEDIATE")
        L.append_rows(conn, rows)
        conn.execute("COMMIT")
    log(f"appended {n:,} lines in {time.monotonic() - t1:.1f} s")
    t2 = time.monotonic()
    while True:
        conn.execute("BEGIN IMMEDIATE")
        done = L.index_fts(conn, 20_000)
        conn.execute("COMMIT")
        if not done:
            break
    log(f"indexed them for full-text search in {time.monotonic() - t2:.1f} s")
    words = pick_words(conn, n)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return {"lines": n, "start_us": start_us, "end_us": end_us, **words}


def pick_words(conn: sqlite3.Connection, n: int) -> dict[str, Any]:
    """A word in about 1% of lines and a rare one (in at most 30 lines), from the index's vocabulary."""
    docs: Counter[str] = Counter()
    for part in L.fts_parts(conn):  # the index is in parts of 2**20 ids (lines.py)
        conn.execute(f"CREATE VIRTUAL TABLE temp.vocab{part} USING fts5vocab(main, {L.fts_table(part)}, row)")
        sql = f"SELECT term, doc FROM temp.vocab{part} WHERE length(term) >= 5 AND term GLOB '[a-z]*'"
        docs.update(dict(conn.execute(sql).fetchall()))
    terms = list(docs.items())

    def matches(term: str) -> int:
        expr = L.fts_match_expression([term])  # the listing matches prefixes: count those
        return sum(
            int(conn.execute(f"SELECT count(*) FROM {t} WHERE {t} MATCH ?", (expr,)).fetchone()[0])
            for t in map(L.fts_table, L.fts_parts(conn))
        )

    common = min(
        (t for t in terms if t[0].isalpha() and 0.005 * n <= t[1] <= 0.02 * n), key=lambda t: abs(t[1] - 0.01 * n)
    )[0]
    rare = sorted((t for t in terms if t[0].isalnum() and 1 <= t[1] <= 30), key=lambda t: (-t[1], t[0]))
    rare_word = next(t for t, _ in rare if matches(t) <= 30)
    return {
        "common_word": common,
        "common_lines": matches(common),
        "rare_word": rare_word,
        "rare_lines": matches(rare_word),
    }


def cached_store(args: argparse.Namespace) -> tuple[Path, dict[str, Any]]:
    key = f"lines{args.lines}-seed{args.seed}-days{args.days:g}-v1"
    root = args.cache / key
    meta_path = root / "meta.json"
    if meta_path.exists():
        log(f"using the filled store in {root}")
        return root / "store.db", json.loads(meta_path.read_text())
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    meta = fill(root / "store.db", source_log(args.input_cache, args.seed), args.lines, args.days)
    meta_path.write_text(json.dumps(meta))
    return root / "store.db", meta


# --- the daemon -------------------------------------------------------------------------------


class Daemon(ForwarderProcess):
    """`forwarder run` on the filled store; the logs it follows do not exist, so nothing is added."""

    def __init__(self, root: Path, store: Path) -> None:
        dbs = []
        for db_id in DATABASES:
            dbs += ["[[databases]]", f'id = "{db_id}"', f'name = "{db_id}"', "[databases.log]"]
            dbs += [f'path = "{root / "absent" / db_id}-*.log"', f'line_prefix = "{PREFIX}"']
        super().__init__(
            root,
            store,
            ["[insights]", "enabled = false  # they would work through the million lines meanwhile", *dbs],
            store_lines=[
                "max_bytes = 17179869184",
                "retention_days = 36500  # the cached store's lines age between runs",
            ],
        )
        self.key = self.create_key("read-only", "bench-pages")


class Client:
    """One kept-alive HTTP/1.1 connection to the daemon."""

    def __init__(self, port: int, headers: dict[str, str] | None = None) -> None:
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.headers = headers or {}

    def get(self, path: str) -> tuple[int, bytes]:
        self.conn.request("GET", path, headers=self.headers)
        r = self.conn.getresponse()
        return r.status, r.read()

    def sign_in(self, key: str) -> str:
        """The session cookie of a browser that posted the sign-in form."""
        origin = f"http://127.0.0.1:{self.port}"
        body = urlencode({"key": key, "next": "/ui/databases"})
        headers = {"Content-Type": "application/x-www-form-urlencoded", "Origin": origin}
        self.conn.request("POST", "/ui/signin", body=body, headers=headers)
        r = self.conn.getresponse()
        r.read()
        cookie = r.getheader("Set-Cookie") or ""
        if r.status != 303 or not cookie:
            raise RuntimeError(f"sign-in answered {r.status} without a session cookie")
        return cookie.split(";", 1)[0]


# --- the measurements -------------------------------------------------------------------------


@dataclass(frozen=True)
class Query:
    name: str
    params: dict[str, str]


def queries(meta: dict[str, Any], before: int) -> list[Query]:
    two_days_ago = meta["end_us"] - 48 * HOUR_US
    return [
        Query("newest page", {}),
        Query("kind=errors", {"kind": "errors"}),
        Query(f"q={meta['common_word']} (~1%)", {"q": meta["common_word"]}),
        Query(f"q={meta['rare_word']} (rare)", {"q": meta["rare_word"]}),
        Query("1 hour, 2 days ago", {"from": format_time(two_days_ago - HOUR_US), "to": format_time(two_days_ago)}),
        Query("20th older page (before=)", {"before": str(before)}),
    ]


def with_params(path: str, params: dict[str, str]) -> str:
    if not params:
        return path
    return path + ("&" if "?" in path else "?") + urlencode(params)


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"median_ms": round(statistics.median(ordered), 1), "p95_ms": round(p95, 1), "max_ms": round(ordered[-1], 1)}


def time_http(client: Client, path: str, warmup: int, reps: int) -> dict[str, Any]:
    t = time.perf_counter()
    status, body = client.get(path)
    first_ms = round((time.perf_counter() - t) * 1000, 1)
    if status != 200:
        return {"status": status, "served": status != 404}
    for _ in range(warmup - 1):
        client.get(path)
    samples = []
    for _ in range(reps):
        t = time.perf_counter()
        client.get(path)
        samples.append((time.perf_counter() - t) * 1000)
    result: dict[str, Any] = {"status": 200, "served": True, "bytes": len(body), "first_ms": first_ms}
    result |= summary(samples)
    if body.startswith(b'{"lines"'):
        result["lines"] = len(json.loads(body)["lines"])
    return result


def time_store(store: Path, code: int, q: Query, warmup: int, reps: int) -> dict[str, Any]:
    conn = schema.connect(str(store), readonly=True)
    L.register_functions(conn)
    p = q.params
    kinds = KIND_ALIASES.get(p["kind"]) if "kind" in p else None
    lq = L.LineQuery(
        limit=50,
        kinds=kinds,
        q=p.get("q"),
        from_us=parse_time(p["from"]) if "from" in p else None,
        to_us=parse_time(p["to"]) if "to" in p else None,
        before=int(p["before"]) if "before" in p else None,
    )
    samples = []
    for i in range(warmup + reps):
        t = time.perf_counter()
        conn.execute("BEGIN")  # a snapshot, as the daemon's readers take
        page = L.list_lines(conn, code, lq)
        conn.execute("COMMIT")
        if i >= warmup:
            samples.append((time.perf_counter() - t) * 1000)
    conn.close()
    return {"status": 200, "served": True, "lines": len(page.docs), **summary(samples)}


def machine() -> str:
    load = os.getloadavg()
    with open("/proc/cpuinfo") as f:
        cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "?")
    loads = " ".join(f"{x:.2f}" for x in load)
    return f"{os.cpu_count()} CPUs ({cpu}), load {loads}, Python {platform.python_version()}"


def cell(r: dict[str, Any]) -> str:
    if not r.get("served", True):
        return "not served (404)"
    if r["status"] != 200:
        return f"HTTP {r['status']}"
    return f"{r['median_ms']:.1f} / {r['p95_ms']:.1f}"


def table(result: dict[str, Any], names: list[str]) -> str:
    head = ["query", "lines", *(f"{n} median / p95 ms" for n in names)]
    ratio_of = [n for n in names[1:] if n != "store"]
    head += [f"{n} / {names[0]} (median)" for n in ratio_of]
    rows = [head]
    for row in result["queries"]:
        r = row["results"]
        first = r[names[0]]
        cells = [row["query"], str(first.get("lines", "")), *(cell(r[n]) for n in names)]
        for n in ratio_of:
            ok = r[n].get("status") == 200 and first.get("status") == 200
            cells.append(f"{r[n]['median_ms'] / first['median_ms']:.2f}" if ok else "")
        rows.append(cells)
    widths = [max(len(c[i]) for c in rows) for i in range(len(head))]
    out = ["| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |" for cells in rows]
    out.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--days", type=float, default=7.0)
    ap.add_argument("--seed", type=int, default=1, help="the generator's seed")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--target", action="append", help="name=path ({ref}: the database); repeatable")
    ap.add_argument("--no-store", action="store_true", help="skip the in-process list_lines row")
    ap.add_argument("--cache", type=Path, default=REPO / "var" / "bench-pages")
    ap.add_argument("--input-cache", type=Path, default=Path("/tmp/fwd-bench"), help="where the input log is kept")
    ap.add_argument("--out", type=Path, help="the JSON result (default: results.json in --cache)")
    args = ap.parse_args()
    targets = [t.split("=", 1) for t in (args.target or DEFAULT_TARGETS)]
    log(machine())
    store, meta = cached_store(args)
    log(f"words: {meta['common_word']!r} in {meta['common_lines']:,}, {meta['rare_word']!r} in {meta['rare_lines']}")
    daemon = Daemon(args.cache / "daemon", store)
    result: dict[str, Any] = {"machine": machine(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "store": meta}
    try:
        daemon.start()
        api = Client(daemon.port, {"Authorization": f"Bearer {daemon.key}"})
        browser = Client(daemon.port)
        browser.headers = {"Cookie": browser.sign_in(daemon.key)}
        # The 20th page's `before`: walk 19 pages of the API.
        before = 0
        for _ in range(19):
            _status, body = api.get(
                with_params("/v1/databases/bench/logs?limit=50", {"before": str(before)} if before else {})
            )
            before = int(json.loads(body)["lines"][-1]["id"])
        code = dict(
            sqlite3.connect(f"file:{store}?mode=ro", uri=True).execute("SELECT id, code FROM databases").fetchall()
        )["bench"]
        names = [n for n, _ in targets] + ([] if args.no_store else ["store"])
        result["targets"] = dict(targets)
        result["queries"] = []
        for q in queries(meta, before):
            row: dict[str, Any] = {"query": q.name, "params": q.params, "results": {}}
            for name, path in targets:
                client = api if path.startswith("/v1/") else browser
                row["results"][name] = time_http(
                    client, with_params(path.format(ref="bench"), q.params), args.warmup, args.reps
                )
            if not args.no_store:
                row["results"]["store"] = time_store(store, code, q, args.warmup, args.reps)
            log(f"{q.name}: " + ", ".join(f"{n} {cell(r)}" for n, r in row["results"].items()))
            result["queries"].append(row)
    finally:
        daemon.stop()
    result["machine_after"] = machine()
    over = [
        f"{row['query']} ({n})"
        for row in result["queries"]
        for n, r in row["results"].items()
        if r.get("status") == 200 and r["p95_ms"] >= TARGET_MS
    ]
    result["over_target"] = over
    print(
        f"\n{meta['lines']:,} lines stored ({meta['lines'] * 4 // 5:,} in the database listed), {args.reps} repetitions"
    )
    print(result["machine"], "->", result["machine_after"].split("load ")[1].split(",")[0])
    print(table(result, names))
    print(
        f"target p95 < {TARGET_MS:.0f} ms: "
        + ("met by every query served" if not over else "MISSED by " + ", ".join(over))
    )
    args.out = args.out or args.cache / "results.json"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    log(f"wrote {args.out}")


if __name__ == "__main__":
    main()
