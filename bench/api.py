"""The Logs API at scale: 10 million stored lines over several databases.

    python bench/api.py                          # 10M lines (built once, then cached), every measure
    python bench/api.py --lines 200000 --reps 10 # smaller and quicker
    python bench/api.py --no-retention           # skip the retention phase (it copies the store)

Build (once, cached under --cache in a directory named after the store's schema version, the
format its documents are written in and the parameters, so a new layout rebuilds): the shared
generator's 1M-line PostgreSQL log is parsed by `forwarder.pglog` and its entries repeated up to
`--lines`, times spread evenly over `--days` days ending at the build, each transaction of 5,000
lines going to the next of `--databases` databases in turn; appended through
`forwarder.store.Store` (the daemon's own write path, transactions and encoding), then indexed for
text search with the store's own indexer until it caught up. An interrupted build resumes where
its last transaction ended. The build's duration is kept and printed.

Then `forwarder run` on that store (insights off, retention far off, no log files, so nothing is
added) with a read-only key, and p50/p99 over --reps requests on one kept-alive connection, of
each query on the database `db1` (a quarter of the lines): the newest page, a kind filter, the 20th
page and a page a week back (`before`), the tail (`after` a recent id), text searches for a common
word, a rare word and a word no line contains, the groups of the newest 24 hours and the overview.
Start to ready: exec of `forwarder run` until /readyz answers 200, --starts times.

Retention (on a copy of the store): the daemon restarts with `retention_days` set so the oldest
day falls out. While it deletes, the script, every 10 ms, appends a line to `db0`'s log, asks
for `db1`'s newest page and asks `db0`'s tail for new lines: the longest API request is the API's
stall; the longest gap between new lines reaching the API is ingest's. The same probe on the copy
without retention first gives the baseline (the log source's poll interval is 0.05 s).
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import itertools
import json
import os
import platform
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from forwarder.clock import SystemClock
from forwarder.config import DatabaseConfig, LogSourceConfig, StoreConfig
from forwarder.model import LogLine
from forwarder.pglog import make_reader
from forwarder.store.docs import FORMAT_WRITTEN
from forwarder.store.schema import SCHEMA_VERSION
from forwarder.store.store import Store

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling modules, when run as a script
from daemonrun import PREFIX, SHARED, ForwarderProcess

PY = sys.executable
DAY_US = 86_400_000_000
BATCH = 5000  # lines per transaction, the daemon's bound
ABSENT_WORD = "zqxjvkwordabsent"
# Targets at 10 million lines, in ms (p99 for the queries).
PAGE_MS, SEARCH_MS, SUMMARY_MS, READY_MS, STALL_MS = 50.0, 200.0, 500.0, 500.0, 100.0


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def machine() -> str:
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    with open("/proc/cpuinfo") as f:
        cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "?")
    return f"{os.cpu_count()} CPUs ({cpu}), load {load}, Python {platform.python_version()}"


# --- the store --------------------------------------------------------------------------------


def source_log(cache: Path, seed: int) -> Path:
    """The generator's 1M-line log, shared with deliver.py's and pages.py's cache."""
    path = cache / f"pg_1000000_seed{seed}.log"
    if not path.exists():
        cache.mkdir(parents=True, exist_ok=True)
        log(f"generating the input log (about 50 s) -> {path}")
        tmp = path.with_suffix(".tmp")
        cmd = [PY, str(SHARED / "gen_pglog.py"), "1000000", str(tmp), "--seed", str(seed)]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        tmp.rename(path)
    return path


def parse_entries(src: Path, limit: int) -> list[LogLine]:
    reader = make_reader("stderr", line_prefix=PREFIX, timezone="UTC", full_text=False)
    entries: list[LogLine] = []
    with open(src, "rb") as f:
        while len(entries) < limit and (chunk := f.read(1 << 22)):
            entries.extend(reader.feed(chunk, 0.0))
    entries.extend(reader.flush())
    return entries[:limit]


_WORD = re.compile(r"[^\W_]+")  # letters and digits: what the text index calls a word


def pick_words(entries: list[LogLine], databases: int) -> dict[str, str]:
    """A word in about 2% of db1's entries and its rarest word (entries repeat alike in the store)."""
    df: Counter[str] = Counter()
    for i, e in enumerate(entries):
        if (i // BATCH) % databases != 1:
            continue
        text = " ".join(str(getattr(e, f) or "") for f in ("message", "detail", "hint", "context", "statement"))
        df.update({w for w in _WORD.findall(text.casefold()) if len(w) >= 5 and not w.isdigit()})
    n = sum(1 for i in range(len(entries)) if (i // BATCH) % databases == 1)
    common = min((w for w in df if w.isalpha()), key=lambda w: (abs(df[w] - 0.02 * n), w))  # ties: by name
    # The rarest word that starts no other word (the search matches prefixes): in sorted order the
    # words a word starts follow it at once.
    ordered = sorted(df)
    starts_other = {w for w, nxt in itertools.pairwise(ordered) if nxt.startswith(w)}
    rare_word = min((w for w in df if w not in starts_other), key=lambda w: (df[w], w))
    return {"common_word": common, "rare_word": rare_word, "absent_word": ABSENT_WORD}


def database_ids(count: int) -> list[str]:
    return [f"db{i}" for i in range(count)]


async def fill(root: Path, plan: dict[str, Any], entries: list[LogLine]) -> None:
    """Append the plan's lines through the store's write path, from where a previous run stopped."""
    cfg = StoreConfig(path=root / "store.db", retention_days=36500, max_bytes=1 << 42)
    store = Store(cfg, SystemClock())
    await store.start()
    try:
        idents = []
        for db_id in database_ids(plan["databases"]):
            source = LogSourceConfig(path=str(root / "absent" / f"{db_id}-*.log"), line_prefix=PREFIX)
            idents.append(await store.register_database(DatabaseConfig(id=db_id, name=db_id, host="bench", log=source)))
        n, start_us, step = plan["lines"], plan["start_us"], plan["step_us"]
        done = store.head_id  # ids run 1.. without gaps in a store nothing was deleted from
        if done:
            log(f"resuming the build at line {done:,}")
        t0, mark = time.monotonic(), done
        pending: asyncio.Task[int] | None = None
        for first in range(done - done % BATCH, n, BATCH):
            if first < done:
                continue
            lines = [
                entries[i % len(entries)]._replace(time_us=start_us + int(i * step))
                for i in range(first, min(n, first + BATCH))
            ]
            ident = idents[(first // BATCH) % len(idents)]
            # Two transactions in flight: the next batch is encoded while the writer thread commits.
            task = asyncio.create_task(store.append(ident, lines, [], 0))
            if pending is not None:
                await pending
            pending = task
            if first + BATCH - mark >= 1_000_000:
                rate = (first + BATCH - done) / (time.monotonic() - t0)
                log(f"appended {first + BATCH:,} of {n:,} lines ({rate:,.0f}/s)")
                mark = first + BATCH
        if pending is not None:
            await pending
        log(f"appended {n - done:,} lines in {time.monotonic() - t0:.0f} s; indexing them for text search")
        t1 = time.monotonic()
        while await store.index_once(20_000):
            pass
        log(f"indexed in {time.monotonic() - t1:.0f} s")
    finally:
        await store.aclose()


def cached_store(a: argparse.Namespace) -> tuple[Path, dict[str, Any]]:
    """The built store and its description, building (or finishing) it first when needed."""
    key = f"schema{SCHEMA_VERSION}-doc{FORMAT_WRITTEN}-lines{a.lines}-db{a.databases}-days{a.days:g}-seed{a.seed}"
    root = a.cache / key
    meta_path, plan_path = root / "meta.json", root / "plan.json"
    if a.rebuild:
        shutil.rmtree(root, ignore_errors=True)
    if meta_path.exists():
        meta = json.loads(meta_path.read_text())
        log(f"using the store built in {meta['build_s']:.0f} s, {root}")
        return root / "store.db", meta
    root.mkdir(parents=True, exist_ok=True)
    if plan_path.exists():
        plan = json.loads(plan_path.read_text())
    else:
        end_us = int(time.time() * 1_000_000)
        start_us = end_us - int(a.days * DAY_US)
        plan = {"lines": a.lines, "databases": a.databases, "start_us": start_us, "end_us": end_us}
        plan |= {"step_us": (end_us - start_us) / a.lines, "build_s": 0.0, "built_at": time.time()}
        plan_path.write_text(json.dumps(plan))
    t0 = time.monotonic()
    entries = parse_entries(source_log(a.input_cache, a.seed), a.lines)
    log(f"parsed {len(entries):,} entries in {time.monotonic() - t0:.0f} s")
    try:
        asyncio.run(fill(root, plan, entries))
    finally:
        plan["build_s"] += time.monotonic() - t0
        plan_path.write_text(json.dumps(plan))
    with sqlite3.connect(root / "store.db") as conn:  # leave no -wal in the cache
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    meta = {**plan, **pick_words(entries, plan["databases"])}
    meta_path.write_text(json.dumps(meta))
    log(f"built in {meta['build_s']:.0f} s (this session and any interrupted ones)")
    return root / "store.db", meta


def store_bytes(store: Path) -> int:
    return sum(p.stat().st_size for p in (store, store.with_name(store.name + "-wal")) if p.exists())


# --- the daemon -------------------------------------------------------------------------------


class Client:
    """One kept-alive HTTP/1.1 connection."""

    def __init__(self, port: int, key: str | None = None) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        self.headers = {"Authorization": f"Bearer {key}"} if key else {}

    def get(self, path: str) -> tuple[int, bytes]:
        self.conn.request("GET", path, headers=self.headers)
        r = self.conn.getresponse()
        return r.status, r.read()

    def json(self, path: str) -> Any:
        status, body = self.get(path)
        if status != 200:
            raise RuntimeError(f"{path}: HTTP {status} {body[:300]!r}")
        return json.loads(body)


class Daemon(ForwarderProcess):
    """`forwarder run` on a store; only `db0`'s log (under `root`/logs) may exist."""

    def __init__(self, root: Path, store: Path, databases: int, retention_days: float = 36500) -> None:
        (root / "logs").mkdir(parents=True, exist_ok=True)
        dbs: list[str] = []
        for db_id in database_ids(databases):
            glob = root / "logs" / f"{db_id}-*.log"
            dbs += ["[[databases]]", f'id = "{db_id}"', f'name = "{db_id}"', 'host = "bench"', "[databases.log]"]
            dbs += [f'path = "{glob}"', f'line_prefix = "{PREFIX}"', "poll_interval_seconds = 0.05"]
        super().__init__(
            root,
            store,
            ["[insights]", "enabled = false", *dbs],
            store_lines=[f"max_bytes = {1 << 42}", f"retention_days = {retention_days}"],
        )
        self.key = self.create_key("read-only", "bench-api")


# --- the measurements -------------------------------------------------------------------------


def pct(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def timed(client: Client, path: str, warmup: int, reps: int) -> dict[str, Any]:
    status, body = client.get(path)
    if status != 200:
        return {"status": status, "body": body[:200].decode(errors="replace")}
    for _ in range(warmup - 1):
        client.get(path)
    samples = []
    for _ in range(reps):
        t = time.perf_counter()
        client.get(path)
        samples.append((time.perf_counter() - t) * 1000)
    res: dict[str, Any] = {"status": 200, "p50_ms": round(pct(samples, 50), 1), "p99_ms": round(pct(samples, 99), 1)}
    doc = json.loads(body)
    if isinstance(doc, dict) and isinstance(doc.get("lines"), list):
        res["lines"] = len(doc["lines"])
    elif isinstance(doc, dict) and isinstance(doc.get("groups"), list):
        res["groups"] = len(doc["groups"])
    return res


def fmt_time(us: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(us / 1e6)) + f".{us % 1_000_000:06d}Z"


def queries(api: Client, meta: dict[str, Any]) -> list[tuple[str, str, float]]:
    """(name, path, target ms) of every query, on db1; the ids they need are read through the API."""
    base = "/v1/databases/db1/logs"
    page = f"{base}?limit=50"
    before = 0
    for _ in range(19):  # the 20th page starts before the last line of the 19th
        before = int(api.json(page + (f"&before={before}" if before else ""))["lines"][-1]["id"])
    week = api.json(f"{base}?limit=1&to={fmt_time(meta['end_us'] - 7 * DAY_US)}")["lines"]
    recent = int(api.json(f"{base}?limit=200")["lines"][-1]["id"])
    day_before_newest = fmt_time(meta["end_us"] - DAY_US)
    out = [
        ("newest page", page, PAGE_MS),
        ("kind=errors", page + "&kind=errors", PAGE_MS),
        ("before: the 20th page", f"{page}&before={before}", PAGE_MS),
    ]
    if week:
        out.append(("before: a page a week back", f"{page}&before={week[0]['id']}", PAGE_MS))
    week_back = urlencode({"to": fmt_time(meta["end_us"] - 7 * DAY_US)})
    day_window = urlencode({"from": fmt_time(meta["end_us"] - 4 * DAY_US), "to": fmt_time(meta["end_us"] - 3 * DAY_US)})
    out += [
        ("to: the newest page a week back", f"{page}&{week_back}", PAGE_MS),
        ("from/to: a 24 h window 3 days back", f"{page}&{day_window}", PAGE_MS),
        ("from/to and kind=errors, the same window", f"{page}&{day_window}&kind=errors", PAGE_MS),
        (
            f"from/to and q={meta['common_word']}, the same window",
            f"{page}&{day_window}&q={meta['common_word']}",
            SEARCH_MS,
        ),
        ("after: tail, 50 after the 200th newest", f"{page}&after={recent}", PAGE_MS),
        (f"q={meta['common_word']} (common)", f"{page}&q={meta['common_word']}", SEARCH_MS),
        (f"q={meta['rare_word']} (rare)", f"{page}&q={meta['rare_word']}", SEARCH_MS),
        (f"q={meta['absent_word']} (in no line)", f"{page}&q={meta['absent_word']}", SEARCH_MS),
        ("groups over the newest 24 h", f"{base}/groups?{urlencode({'from': day_before_newest})}", SUMMARY_MS),
        ("overview (last 24 h)", f"{base}/overview", SUMMARY_MS),
    ]
    return out


def probe(daemon: Daemon, seconds: float, until: Any = None) -> dict[str, Any]:
    """Every 10 ms: a line appended to db0's log, db1's newest page timed, db0's tail read.

    Runs `seconds`, or, with `until` (a callable), until it returns true and 2 s more. Returns the
    longest API request and the longest gap between new db0 lines showing up (after the first).
    """
    api, tail = Client(daemon.port, daemon.key), Client(daemon.port, daemon.key)
    path = daemon.root / "logs" / "db0-probe.log"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    after = 0
    first = api.json("/v1/databases/db0/logs?limit=1")["lines"]
    after = int(first[0]["id"]) if first else 0
    longest_api = 0.0
    last_new: float | None = None
    longest_gap = 0.0
    n = requests = 0
    t0 = time.monotonic()
    done_at: float | None = None
    try:
        while True:
            now = time.monotonic()
            if until is None and now - t0 > seconds:
                break
            if until is not None and done_at is None and until():
                done_at = now
            if (done_at is not None and now - done_at > 2) or now - t0 > 900:
                break
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()) + ".000 UTC"
            os.write(fd, f"{stamp} [9{n % 100}] app@db0/probe LOG:  probe line {n}\n".encode())
            n += 1
            t = time.perf_counter()
            api.get("/v1/databases/db1/logs?limit=50")
            longest_api = max(longest_api, (time.perf_counter() - t) * 1000)
            doc = tail.json(f"/v1/databases/db0/logs?limit=500&after={after}")
            requests += 1
            if doc["lines"]:
                after = max(int(x["id"]) for x in doc["lines"])
                seen = time.monotonic()
                if last_new is not None:
                    longest_gap = max(longest_gap, (seen - last_new) * 1000)
                last_new = seen
            time.sleep(max(0.0, 0.01 - (time.monotonic() - now)))
    finally:
        os.close(fd)
    return {
        "seconds": round(time.monotonic() - t0, 1),
        "until_s": round(done_at - t0, 1) if done_at is not None else None,
        "requests": requests,
        "api_longest_ms": round(longest_api, 1),
        "ingest_longest_gap_ms": round(longest_gap, 1),
    }


def retention(a: argparse.Namespace, store: Path, meta: dict[str, Any], work: Path) -> dict[str, Any]:
    """Copy the store, probe a baseline, then restart with the oldest day past retention and probe it."""
    work.mkdir(parents=True, exist_ok=True)
    copy = work / "store.db"
    t = time.monotonic()
    shutil.copyfile(store, copy)
    # Flushed before any daemon opens it: otherwise the kernel writes the copy's 2.4 GiB back
    # while the probes run, and the daemon's first sync waits for all of it (a COMMIT right after
    # a copy took 2.3 s here): the gaps measured were the copy's.
    with copy.open("rb+") as f:
        os.fsync(f.fileno())
    log(f"copied the store for retention (and synced it) in {time.monotonic() - t:.0f} s")
    d = Daemon(work / "base", copy, a.databases)
    try:
        d.start()
        base = probe(d, 5.0)
    finally:
        d.stop()
    log(f"baseline probe: {base}")
    cutoff_us = meta["start_us"] + DAY_US  # the oldest day falls out
    days = (time.time() * 1e6 - cutoff_us) / DAY_US
    d = Daemon(work / "ret", copy, a.databases, retention_days=round(days, 6))
    check = Client(d.port, d.key)

    def gone() -> bool:
        return not check.json(f"/v1/databases/db1/logs?limit=1&to={fmt_time(cutoff_us - 60_000_000)}")["lines"]

    try:
        d.start()
        during = probe(d, 0, until=gone)
    finally:
        d.stop()
    log(f"retention probe: {during}")
    return {"baseline": base, "retention": during, "day_lines": int(DAY_US / meta["step_us"])}


def row(name: str, value: str, target: str) -> tuple[str, str, str]:
    return (name, value, target)


def render(rows: list[tuple[str, str, str]]) -> str:
    head = ("measure", "value", "target")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(3)]
    out = ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in [head, *rows]]
    out.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lines", type=int, default=10_000_000, help="lines in the store")
    ap.add_argument("--databases", type=int, default=4)
    ap.add_argument("--days", type=float, default=10.0, help="the lines' times span this many days")
    ap.add_argument("--seed", type=int, default=1, help="the generator's seed")
    ap.add_argument("--reps", type=int, default=30, help="timed requests per query")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--starts", type=int, default=5, help="daemon starts timed to /readyz")
    ap.add_argument("--cache", type=Path, default=Path("/tmp/fwd-bench/api"), help="where built stores are kept")
    ap.add_argument("--input-cache", type=Path, default=Path("/tmp/fwd-bench"), help="where the input log is kept")
    ap.add_argument("--rebuild", action="store_true", help="build the store again even if cached")
    ap.add_argument("--no-retention", action="store_true", help="skip the retention phase")
    a = ap.parse_args()
    if a.databases < 2:
        ap.error("--databases must be at least 2 (db0 takes the probe's lines, db1 is queried)")
    before = machine()
    log(before)
    store, meta = cached_store(a)
    age_h = (time.time() - meta["built_at"]) / 3600
    work = Path(tempfile.mkdtemp(prefix=time.strftime("run-%Y%m%d-%H%M%S-"), dir=a.cache))
    res: dict[str, Any] = {"machine": before, "store": meta, "store_bytes": store_bytes(store), "cache_age_h": age_h}
    rows = [
        row(
            "store",
            f"{meta['lines']:,} lines, {a.databases} databases, {a.days:g} days, {store_bytes(store) / 2**30:.2f} GiB",
            "",
        ),
        row("store build s (cached afterwards)", f"{meta['build_s']:.0f}", "a few minutes"),
    ]
    if age_h > 6:
        log(f"the cached store is {age_h:.0f} h old: the overview's last 24 h hold fewer of its lines (--rebuild)")
    try:
        daemon = Daemon(work / "query", store, a.databases)
        try:
            starts = []
            for _ in range(a.starts):
                starts.append(daemon.start() * 1000)
                daemon.stop()
            res["start_ms"] = starts
            daemon.start()
            api = Client(daemon.port, daemon.key)
            res["queries"] = {}
            for name, path, target in queries(api, meta):
                r = timed(api, path, a.warmup, a.reps)
                res["queries"][name] = {"path": path, **r}
                log(f"{name}: {r}")
                shown = (
                    f"{r['p50_ms']} / {r['p99_ms']}" + (f" ({r['lines']} lines)" if "lines" in r else "")
                    if r["status"] == 200
                    else f"HTTP {r['status']}"
                )
                rows.append(row(f"{name}, p50 / p99 ms", shown, f"p99 <= {target:g}"))
        finally:
            daemon.stop()
        rows.append(
            row(
                f"start to ready (exec -> /readyz 200), {a.starts} starts, median / max ms",
                f"{pct(starts, 50):.0f} / {max(starts):.0f}",
                f"<= {READY_MS:g}",
            )
        )
        if not a.no_retention:
            ret = retention(a, store, meta, work / "retention")
            res["retention"] = ret
            b, r = ret["baseline"], ret["retention"]
            rows += [
                row("retention: lines of the day deleted (about)", f"{ret['day_lines']:,}", ""),
                row("retention: seconds from ready until the day was gone", f"{r['until_s']}", ""),
                row(
                    "retention: longest API request ms (baseline)",
                    f"{r['api_longest_ms']} ({b['api_longest_ms']})",
                    f"<= {STALL_MS:g}",
                ),
                row(
                    "retention: longest ingest gap ms (baseline)",
                    f"{r['ingest_longest_gap_ms']} ({b['ingest_longest_gap_ms']})",
                    f"<= {STALL_MS:g} over the baseline",
                ),
            ]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    res["machine_after"] = machine()
    res["rows"] = rows
    with open(a.cache / "results.jsonl", "a") as f:
        f.write(json.dumps({"t": time.strftime("%Y-%m-%dT%H:%M:%S"), **res}) + "\n")
    print()
    print(f"machine: {before}; load after: {res['machine_after'].split('load ')[1].split(',')[0]}")
    print(render(rows))


if __name__ == "__main__":
    main()
