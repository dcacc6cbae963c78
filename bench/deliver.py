"""End-to-end delivery benchmark: PostgreSQL log file -> daemon -> signed webhook.

Runs `forwarder run` as a real subprocess with one webhook destination pointing at a fast counting
receiver in its own process (`bench/receiver_proc.py`: counts entries, answers 200, never checks
signatures). All traffic stays on 127.0.0.1.

backlog  The shared generator's 1M-line log (`../shared/bench/gen_pglog.py 1000000 FILE
         --seed 1`, cached under --cache) with prefix `%m [%p] %q%u@%d/%a `, full parsing and value
         removal (`full_text = false`). The destination is created while the log glob matches
         nothing; then the file is hard-linked into place, so the whole backlog must be delivered.
         Wall time from the file's appearance until the receiver has every entry; physical lines/s,
         entries/s, the daemon's CPU seconds and peak RSS (/proc/PID/status VmHWM), and the
         store's size (main file + -wal) once its text index caught up, over the raw log's size.
steady   Appends entries of the generator's mix at --rate physical lines/s for --seconds, each
         stamped (its %m time) with the wall clock when written; the receiver measures arrival
         minus that time: p50/p90/p99/max latency (default 5,000 lines/s for 30 s).
--runs N  the whole benchmark N times in one sitting: a table per run, each with the load average
         before it. Every run is appended to results.jsonl under --cache.
--peers  syslog-ng's file -> http (../shared/bench/configs/sng-http.conf, 1 and 4 workers) on the
         same file in the same run, into the shared counting receiver; prints our rate / theirs.
         syslog-ng is unpacked under $PEER_BENCH_DIR (apt-get download + dpkg -x, so it does not
         replace the rsyslog package the tests need); when that fails the peers are skipped.
--insights  on | off | both: the daemon's `[insights] enabled`. `both` runs the backlog twice in
         the same run, first with insights off, then on (each a fresh daemon and store), and prints
         both rates and on / off (target >= 0.90); the steady phase then runs with insights on.
--profile  samples the daemon with py-spy during the backlog (`.venv/bin/pip install py-spy`) and
         prints the top functions by own and inclusive time and the share of each stage. Sampling
         slows the daemon: the rate of a profiled run is not the figure to report.

    .venv/bin/python bench/deliver.py                   # backlog + steady
    .venv/bin/python bench/deliver.py --peers --runs 3     # the README's table
    .venv/bin/python bench/deliver.py --only backlog --profile
    .venv/bin/python bench/deliver.py --only backlog --insights both
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import importlib.util
import json
import os
import platform
import queue
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# The shared bench kit (generator, peer configs, counting receiver) is ../shared/bench from the
# repository root; SHARED_BENCH names another copy.
PEER_DIR = Path(os.environ.get("PEER_BENCH_DIR", "/tmp/peer-bench"))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling modules, when run as a script
from daemonrun import PREFIX, SHARED, ForwarderProcess, free_port  # noqa: E402

PY = sys.executable
TICK = os.sysconf("SC_CLK_TCK")
# The targets of the performance work, beside each row of the table.
TARGETS = {
    "ratio_1_worker": 1.0,  # our backlog lines/s over syslog-ng file -> http with 1 worker, at least
    "cpu_s": 20.0,  # daemon + parse workers, CPU seconds for the backlog, at most
    "peak_rss_mb": 96.0,  # daemon + parse workers, at most
    "store_ratio": 1.0,  # store bytes (main file + -wal, index caught up) over the raw log's bytes, at most
    "p99_ms": 250.0,  # steady write -> webhook latency
    "insights_on_off": 0.90,
}
FTS_WATERMARK_KEY = "fts_indexed_upto"  # the store's kv key: lines up to this id are in the text index


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _descendants(pid: int) -> list[int]:
    """The process and its live descendants (the daemon's parse workers)."""
    out = [pid]
    for p in out:
        try:
            with open(f"/proc/{p}/task/{p}/children") as f:
                out.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return out


def proc_cpu_rss(pid: int) -> tuple[float, float, float]:
    """(CPU seconds user+sys, peak RSS MB, current RSS MB) of a live process and its children.

    The daemon parses in worker processes: their CPU and memory count. The peaks are summed,
    an upper bound of the peak of the sum (the processes need not peak at the same moment).
    """
    cpu = 0.0
    hwm = rss = 0
    for p in _descendants(pid):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            cpu += (int(fields[11]) + int(fields[12])) / TICK
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        hwm += int(line.split()[1])
                    elif line.startswith("VmRSS:"):
                        rss += int(line.split()[1])
        except OSError:
            continue  # exited meanwhile
    return cpu, hwm / 1024, rss / 1024


# --- input ------------------------------------------------------------------------------------


def backlog_file(cache: Path, lines: int, seed: int) -> Path:
    path = cache / f"pg_{lines}_seed{seed}.log"
    if not path.exists():
        gen = SHARED / "gen_pglog.py"
        log(f"generating {lines} lines with {gen} (about 50 s per million) -> {path}")
        tmp = path.with_suffix(".tmp")
        subprocess.run([PY, str(gen), str(lines), str(tmp), "--seed", str(seed)], check=True, stdout=subprocess.DEVNULL)
        tmp.rename(path)
    return path


# The generator's secondary lines (one entry with the line before) and tab continuations.
_SECONDARY = re.compile(
    rb"^\d{4}-\d\d-\d\d [\d:.]+ \S+ \[\d+\] (?:\S+@\S+ )?(?:DETAIL|HINT|QUERY|CONTEXT|LOCATION|STATEMENT):  "
)


def count_entries(path: Path) -> tuple[int, int]:
    """(physical lines, entries) of a stderr log: cached beside it."""
    cached = path.with_name(path.name + ".counts")
    if cached.exists() and cached.stat().st_mtime >= path.stat().st_mtime:
        lines, entries = map(int, cached.read_text().split())
        return lines, entries
    lines = entries = 0
    with open(path, "rb") as f:
        for raw in f:
            lines += 1
            if raw[:1].isdigit() and not _SECONDARY.match(raw):
                entries += 1
    cached.write_text(f"{lines} {entries}\n")
    return lines, entries


def load_generator() -> Any | None:
    gen = SHARED / "gen_pglog.py"
    if not gen.exists():
        return None
    spec = importlib.util.spec_from_file_location("gen_pglog", gen)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# --- processes --------------------------------------------------------------------------------


class Receiver:
    """bench/receiver_proc.py in its own process; its stdout events are collected by a thread."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [PY, str(HERE / "receiver_proc.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self.events: queue.Queue[tuple[str, str]] = queue.Queue()
        self.done_at: float | None = None
        self.first_at: float | None = None
        threading.Thread(target=self._read, daemon=True).start()
        kind, rest = self.events.get(timeout=10)
        assert kind == "LISTEN", (kind, rest)
        self.port = int(rest)
        self.url = f"http://127.0.0.1:{self.port}/hook"

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            kind, _, rest = line.strip().partition(" ")
            if kind == "DONE":
                self.done_at = float(rest.split()[0])
            elif kind == "FIRST":
                self.first_at = float(rest)
            self.events.put((kind, rest))

    def send(self, cmd: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()

    def report(self) -> dict[str, Any]:
        self.send("REPORT")
        while True:
            kind, rest = self.events.get(timeout=10)
            if kind == "REPORT":
                return dict(json.loads(rest))

    def expect(self, n: int) -> None:
        self.done_at = None
        self.send(f"EXPECT {n}")

    def wait_done(self, timeout: float, stall: float = 20.0) -> bool:
        """Until DONE; gives up after `timeout` or when the count stood still for `stall` seconds."""
        deadline = time.monotonic() + timeout
        last, still_since = -1, time.monotonic()
        while self.done_at is None and time.monotonic() < deadline:
            time.sleep(0.5)
            count = self.report()["count"]
            if count != last:
                last, still_since = count, time.monotonic()
            elif time.monotonic() - still_since > stall:
                return self.done_at is not None
        return self.done_at is not None

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


class Daemon(ForwarderProcess):
    """`forwarder run` with a config of its own under `root`."""

    def __init__(self, root: Path, log_glob: str, poll: float, insights: bool) -> None:
        super().__init__(
            root,
            root / "store.db",
            [
                "[insights]",
                f"enabled = {'true' if insights else 'false'}",
                "[[databases]]",
                'id = "bench"',
                'name = "bench"',
                "full_text = false  # full parsing and value removal",
                "[databases.log]",
                f'path = "{log_glob}"',
                f'line_prefix = "{PREFIX}"',
                f"poll_interval_seconds = {poll}",
            ],
            store_lines=["max_bytes = 8589934592  # 8 GiB: retention by size must not touch the backlog"],
            security_lines=['allowed_destination_networks = ["127.0.0.0/8"]'],
        )
        self.key = self.create_key("read-write", "bench")

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        req = urllib.request.Request(
            self.url + path,
            data=json.dumps(body).encode() if body is not None else None,
            method=method,
            headers={"Authorization": f"Bearer {self.key}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.loads(r.read())


def store_bytes(store: Path) -> int:
    """The store's size on disk: the main file and its -wal (the -shm is a shared-memory index)."""
    return sum(p.stat().st_size for p in (store, store.with_name(store.name + "-wal")) if p.exists())


def store_settled(store: Path, timeout: float, quiet: float = 5.0) -> dict[str, Any]:
    """The store's size once the daemon's background work on the backlog is done.

    Done means: the full-text watermark (kv FTS_WATERMARK_KEY) reached the newest line, when the
    store has that key, and neither the size nor the -wal's modification time changed for `quiet`
    seconds (a layout without the key, or an index built some other way, is judged by those
    alone). Writes go on in a -wal of constant size, hence its time; and `quiet` is longer than the
    daemon's pause before it cuts the -wal (2 s, then its next checkpoint), so the size is the one
    at rest. Returns the bytes, the seconds waited and whether it settled within `timeout`.
    """
    start = time.monotonic()
    db = sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=10)
    last: tuple[int, int] = (-1, -1)
    still_since, indexed = time.monotonic(), False
    try:
        while True:
            try:
                head = db.execute("SELECT max(id) FROM lines").fetchone()[0] or 0
                row = db.execute("SELECT value FROM kv WHERE key = ?", (FTS_WATERMARK_KEY,)).fetchone()
                indexed = row is None or int(row[0]) >= head
            except sqlite3.OperationalError:  # busy, or a layout without these: judge by the size
                indexed = True
            wal = store.with_name(store.name + "-wal")
            state = (store_bytes(store), wal.stat().st_mtime_ns if wal.exists() else 0)
            size = state[0]
            if state != last or not indexed:
                last, still_since = state, time.monotonic()
            waited = time.monotonic() - start
            if time.monotonic() - still_since >= quiet or waited > timeout:
                return {
                    "store_bytes": size,
                    "store_wal_bytes": wal.stat().st_size if wal.exists() else 0,
                    "store_settle_s": round(waited, 1),
                    "store_settled": waited <= timeout,
                }
            time.sleep(0.5)
    finally:
        db.close()


def insights_caught_up(store: Path, t0: float, timeout: float, absent_after: float = 30) -> float | str:
    """Seconds from t0 until the insights engine's cursor (kv `insights_cursor`) reached the store's
    newest line, read through a read-only connection; or why not: no cursor at all within
    `absent_after` seconds (no engine ran), or not there within `timeout`."""
    start = time.monotonic()
    db = sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=10)
    cursor = head = 0
    try:
        while True:
            try:
                head = db.execute("SELECT max(id) FROM lines").fetchone()[0] or 0
                row = db.execute("SELECT value FROM kv WHERE key = 'insights_cursor'").fetchone()
            except sqlite3.OperationalError:  # busy: look again
                row = None
            if row is not None:
                cursor = int(row[0])
                if cursor >= head:
                    return time.monotonic() - t0
            waited = time.monotonic() - start
            if row is None and waited > absent_after:
                return f"no insights cursor after {absent_after:.0f} s"
            if waited > timeout:
                return f"cursor at line {cursor} of {head} after {timeout:.0f} s"
            time.sleep(0.2)
    finally:
        db.close()


# --- profile ----------------------------------------------------------------------------------

STAGES = [  # (name, substring of a frame "function (file:line)") - inclusive shares
    ("reading files (sources/tail.py)", "sources/tail.py"),
    ("parsing (forwarder/pglog)", "forwarder/pglog/"),
    ("  of which normalize", "pglog/normalize.py"),
    ("  of which redact", "pglog/redact.py"),
    ("store append (store/lines.py append)", "append (forwarder/store/lines.py"),
    ("  of which encode_doc", "encode_doc ("),
    ("store write transaction (store.py _write)", "_txn (forwarder/store/store.py"),
    ("delivery read (destinations.py next_batch)", "next_batch (forwarder/store/destinations.py"),
    ("delivery state save (save_state)", "save_state ("),
    ("lag query (destinations.py lag)", "lag (forwarder/store/destinations.py"),
    ("full-text indexing (index_fts)", "index_fts ("),
    ("retention", "retention"),
    ("webhook encode (sinks/webhook.py)", "encode (forwarder/sinks/webhook.py"),
    ("HTTP (aiohttp)", "aiohttp/"),
    ("asyncio event loop own work", "base_events.py"),
]


# Leaf frames that are waits py-spy did not recognise as idle (the loop's select, an idle worker).
WAITING = ("Runner.run (", "_worker (concurrent/futures/thread.py", "select (selectors.py", "wait (threading.py")


def start_profiler(pid: int, out: Path, native: bool) -> subprocess.Popen[bytes] | None:
    spy = shutil.which("py-spy") or str(Path(PY).parent / "py-spy")
    if not Path(spy).exists():
        log("py-spy not found: .venv/bin/pip install py-spy; profiling skipped")
        return None
    return subprocess.Popen(
        [spy, "record", "-p", str(pid), "-r", "200", "-f", "raw", "-o", str(out), "--threads"]
        + (["--native"] if native else ["--nonblocking"]),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def analyse_profile(path: Path, top: int = 25) -> str:
    own: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    stage: collections.Counter[str] = collections.Counter()
    threads: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        count = int(n)
        frames = stack.split(";")
        thread = next((f for f in frames if f.startswith("thread")), "?")
        frames = [f for f in frames if not f.startswith(("process ", "thread "))]
        if not frames or any(w in frames[-1] for w in WAITING):
            continue
        total += count
        threads[thread] += count
        clean = [re.sub(r":\d+\)$", ")", f) for f in frames]
        own[clean[-1]] += count
        for f in set(clean):
            incl[f] += count
        for name, needle in STAGES:
            if any(needle in f for f in frames):
                stage[name] += count
    if not total:
        return "no samples"

    def pct(n: int) -> str:
        return f"{100 * n / total:5.1f}%"

    out = [f"py-spy: {total} busy samples (all threads; idle and waiting leaves excluded)", "", "threads:"]
    out += [f"  {pct(n)}  {t}" for t, n in threads.most_common()]
    out += ["", "stages (inclusive share of busy samples):"]
    out += [f"  {pct(stage[name])}  {name}" for name, _ in STAGES]
    out += ["", f"top {top} by own time:"]
    out += [f"  {pct(n)}  {f}" for f, n in own.most_common(top)]
    out += ["", f"top {top} forwarder functions by inclusive time:"]
    out += [f"  {pct(n)}  {f}" for f, n in incl.most_common() if "forwarder/" in f][:top]
    return "\n".join(out)


# --- phases -----------------------------------------------------------------------------------


def run_backlog(
    a: argparse.Namespace, work: Path, src: Path, lines: int, entries: int, *, insights: bool, steady: bool
) -> dict[str, Any]:
    """One backlog run with a fresh daemon and store; then the steady phase on it when `steady`."""
    logs = work / "logs"
    logs.mkdir(parents=True)
    daemon = Daemon(work / "fwd", str(logs / "*.log"), a.poll, insights)
    recv = Receiver()
    result: dict[str, Any] = {"lines": lines, "entries": entries, "insights": insights}
    prof = None
    try:
        result["startup_s"] = round(daemon.start(), 2)
        created = daemon.request(
            "POST", "/v1/log-destinations", {"type": "webhook", "name": "bench", "config": {"url": recv.url}}
        )
        dest_id = created["id"]
        assert created.get("secret"), "no signing secret returned"
        recv.expect(entries)
        if a.profile:
            prof = start_profiler(daemon.pid, work / "profile.raw", a.native)
            time.sleep(1)
        cpu0 = proc_cpu_rss(daemon.pid)[0]
        t0 = time.monotonic()
        os.link(src, logs / "postgresql.log")  # appears in the glob at once, whole
        ok = recv.wait_done(a.timeout)
        t1 = recv.done_at if ok and recv.done_at else time.monotonic()
        cpu, hwm, rss = proc_cpu_rss(daemon.pid)
        rep = recv.report()
        if prof is not None:
            prof.send_signal(signal.SIGINT)
            prof.wait(60)
        wall = t1 - t0
        result.update(
            ok=ok,
            received=rep["count"],
            requests=rep["reqs"],
            wall_s=round(wall, 2),
            first_after_s=round(recv.first_at - t0, 2) if recv.first_at else None,
            lines_per_s=round(lines / wall),
            entries_per_s=round(entries / wall),
            cpu_s=round(cpu - cpu0, 1),
            peak_rss_mb=round(hwm, 1),
            rss_mb=round(rss, 1),
        )
        if insights:
            # The engine follows the store like a destination: its rate is the time until it caught up too.
            caught = insights_caught_up(work / "fwd" / "store.db", t0, max(60.0, a.timeout - wall))
            result["insights_caught_up_s"] = round(caught, 2) if isinstance(caught, float) else caught
        dest = daemon.request("GET", f"/v1/log-destinations/{dest_id}")
        result["daemon_sent_lines"] = dest["delivery"]["sent_lines"]
        settled = store_settled(work / "fwd" / "store.db", timeout=max(60.0, a.timeout - wall))
        result.update(settled)
        # The text index of the backlog is built after its delivery: its CPU is part of the backlog's cost.
        result["cpu_s_settled"] = round(proc_cpu_rss(daemon.pid)[0] - cpu0, 1)
        result["raw_bytes"] = src.stat().st_size
        result["store_ratio"] = round(settled["store_bytes"] / result["raw_bytes"], 3)
        # The -wal is transient: kept at most ~64 MiB while writes go on, cut once they pause.
        main_bytes = settled["store_bytes"] - settled["store_wal_bytes"]
        result["store_main_ratio"] = round(main_bytes / result["raw_bytes"], 3)
        if not ok:
            log(f"backlog incomplete: received {rep['count']} of {entries}; destination {dest['delivery']}")
        if prof is not None and (work / "profile.raw").exists():
            result["profile"] = analyse_profile(work / "profile.raw")
        if steady:
            result["steady"] = run_steady(a, daemon, recv, logs)
            result["peak_rss_mb_after_steady"] = round(proc_cpu_rss(daemon.pid)[1], 1)
    finally:
        daemon.stop()
        recv.close()
    return result


def run_steady(a: argparse.Namespace, daemon: Daemon, recv: Receiver, logs: Path) -> dict[str, Any]:
    gen_mod = load_generator()
    gen = gen_mod.Gen(7) if gen_mod else None
    entries_iter = gen.entries() if gen else None
    base = recv.report()["count"]
    recv.send("RESET")
    recv.send("MEASURE 1")
    fd = os.open(logs / "steady.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    written_lines = written_entries = 0
    tick = 0.01
    start = time.time()
    next_at = time.monotonic()
    t_end = time.monotonic() + a.seconds
    n = 0
    try:
        while time.monotonic() < t_end:
            target = int((time.monotonic() - (t_end - a.seconds)) * a.rate)
            now = dt.datetime.now(dt.UTC)
            ts = now.strftime("%Y-%m-%d %H:%M:%S.") + f"{now.microsecond // 1000:03d} UTC"
            chunk: list[str] = []
            while written_lines < target:
                if entries_iter is not None and gen_mod is not None:
                    _, e = next(entries_iter)
                    e["ts"] = ts
                    out = gen_mod.stderr_lines(e)
                else:
                    out = [f"{ts} [{4000 + n % 50}] app@shop/web-api LOG:  duration: 1.5 ms  statement: SELECT {n}"]
                n += 1
                chunk += out
                written_lines += len(out)
                written_entries += 1
            if chunk:
                os.write(fd, ("\n".join(chunk) + "\n").encode())
            next_at += tick
            time.sleep(max(0.0, next_at - time.monotonic()))
    finally:
        os.close(fd)
    elapsed = time.time() - start
    recv.expect(base + written_entries)
    ok = recv.wait_done(30, stall=10)
    rep = recv.report()
    recv.send("MEASURE 0")
    return {
        "ok": ok,
        "rate_lines_per_s": round(written_lines / elapsed),
        "seconds": round(elapsed, 1),
        "lines": written_lines,
        "entries": written_entries,
        "received": rep["count"] - base,
        **{k: rep[k] for k in ("latency_samples", "p50_ms", "p90_ms", "p99_ms", "max_ms")},
    }


def run_steady_alone(a: argparse.Namespace, work: Path) -> dict[str, Any]:
    logs = work / "logs"
    logs.mkdir(parents=True)
    daemon = Daemon(work / "fwd", str(logs / "*.log"), a.poll, a.insights != "off")
    recv = Receiver()
    try:
        daemon.start()
        daemon.request(
            "POST", "/v1/log-destinations", {"type": "webhook", "name": "bench", "config": {"url": recv.url}}
        )
        res = run_steady(a, daemon, recv, logs)
        res["peak_rss_mb"] = round(proc_cpu_rss(daemon.pid)[1], 1)
        return res
    finally:
        daemon.stop()
        recv.close()


# --- peers ------------------------------------------------------------------------------------

SNG_DEBS = ["syslog-ng-core", "syslog-ng-mod-http", "libivykis0", "libnet1", "libpcre3", "libwrap0"]


def find_syslog_ng() -> tuple[list[str], dict[str, str]] | str:
    """(argv prefix, env) to run syslog-ng, unpacking it under PEER_BENCH_DIR if needed; or why not."""
    system = shutil.which("syslog-ng")
    if system:
        return [system], {}
    root = PEER_DIR / "opt" / "syslog-ng"
    binary = root / "usr/sbin/syslog-ng"
    if not binary.exists():
        debs = PEER_DIR / "opt" / "debs-sng"
        debs.mkdir(parents=True, exist_ok=True)
        log(f"unpacking syslog-ng under {root} (apt-get download + dpkg -x; rsyslog stays installed)")
        try:
            subprocess.run(["apt-get", "download", *SNG_DEBS], cwd=debs, check=True, capture_output=True, timeout=180)
            for deb in debs.glob("*.deb"):
                subprocess.run(["dpkg", "-x", str(deb), str(root)], check=True, capture_output=True, timeout=60)
        except (OSError, subprocess.SubprocessError) as exc:
            err = getattr(exc, "stderr", b"") or b""
            return f"cannot unpack syslog-ng ({exc}; {err.decode(errors='replace')[-300:]})"
        if not binary.exists():
            return "syslog-ng binary missing after unpacking"
    libs = [root / "usr/lib/x86_64-linux-gnu", root / "lib/x86_64-linux-gnu", root / "usr/lib/syslog-ng"]
    env = {"LD_LIBRARY_PATH": ":".join(str(p) for p in libs)}
    mods = sorted((root / "usr/lib/syslog-ng").glob("3.*"))
    if not mods:
        return "syslog-ng modules missing after unpacking"
    return [str(binary), f"--module-path={mods[-1]}"], env


def run_syslog_ng(a: argparse.Namespace, work: Path, src: Path, lines: int, workers: int) -> dict[str, Any]:
    found = find_syslog_ng()
    if isinstance(found, str):
        return {"skipped": found}
    argv0, env = found
    rundir = work / f"sng-w{workers}"
    rundir.mkdir(parents=True)
    port = free_port()
    conf = (SHARED / "configs" / "sng-http.conf").read_text()
    for k, v in {"LOGFILE": str(src), "PORT": str(port), "RUNDIR": str(rundir), "WORKERS": str(workers)}.items():
        conf = conf.replace(f"@{k}@", v)
    cpath = rundir / "sng-http.conf"
    cpath.write_text(conf)
    recv = subprocess.Popen(
        [PY, str(SHARED / "receiver.py"), "http", "--port", str(port), "--expect", str(lines)],
        stdout=subprocess.PIPE,
        text=True,
    )
    events: dict[str, float] = {}
    got = threading.Event()

    def reader() -> None:
        assert recv.stdout is not None
        for line in recv.stdout:
            parts = line.split()
            if parts and parts[0] in ("FIRST", "DONE", "LISTEN"):
                events[parts[0]] = float(parts[1])
            if parts and parts[0] == "PROGRESS":
                events["count"] = int(parts[2])
            if parts and parts[0] in ("LISTEN", "DONE"):
                got.set()

    threading.Thread(target=reader, daemon=True).start()
    got.wait(10)
    got.clear()
    argv = [*argv0, "-F", "--no-caps", "-f", str(cpath), "-R", str(rundir / "persist")]
    argv += ["-p", str(rundir / "pid"), "-c", str(rundir / "ctl")]
    with open(rundir / "syslog-ng.log", "w") as flog:
        t0 = time.monotonic()
        fwd = subprocess.Popen(argv, stdout=flog, stderr=subprocess.STDOUT, env={**os.environ, **env})
    ok = got.wait(a.timeout)
    res: dict[str, Any] = {"workers": workers, "ok": ok}
    if fwd.poll() is None:
        cpu, hwm, _ = proc_cpu_rss(fwd.pid)
        res.update(cpu_s=round(cpu, 1), peak_rss_mb=round(hwm, 1))
    if ok:
        wall = events["DONE"] - t0
        res.update(wall_s=round(wall, 2), lines_per_s=round(lines / wall))
    else:
        res["why"] = (rundir / "syslog-ng.log").read_text()[-500:] or f"received {events.get('count')}"
    for p in (fwd, recv):
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    return res


# --- main -------------------------------------------------------------------------------------


def machine() -> str:
    load = os.getloadavg()
    with open("/proc/cpuinfo") as f:
        cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "?")
    return (
        f"{os.cpu_count()} CPUs ({cpu}), load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, "
        f"Python {platform.python_version()}, {platform.platform()}"
    )


def peer_runs(res: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """syslog-ng's completed runs by worker count."""
    return {p["workers"]: p for p in res.get("peers", []) if p.get("ok")}


def rows_of(res: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(measure, value, target) of every row of one run, in the order of the issue's table."""
    rows: list[tuple[str, str, str]] = []
    b = res.get("backlog")
    peers = peer_runs(res)
    p1, p4 = peers.get(1), peers.get(4)
    if b:
        rows += [
            ("insights", "on" if b["insights"] else "off", ""),
            ("backlog wall s (file appears -> last entry received)", f"{b['wall_s']}", ""),
            ("backlog entries received / written", f"{b['received']:,} / {b['entries']:,}", "all"),
            ("backlog lines/s, ours", f"{b['lines_per_s']:,}", ""),
            ("backlog entries/s, ours", f"{b['entries_per_s']:,}", ""),
        ]
    for p in res.get("peers", []):
        if "skipped" in p:
            rows.append(("syslog-ng file -> http", "skipped: " + p["skipped"], ""))
        elif not p.get("ok"):
            rows.append((f"syslog-ng file -> http, {p['workers']} worker(s)", "FAILED: " + p.get("why", ""), ""))
        else:
            rows.append((f"syslog-ng file -> http, {p['workers']} worker(s), lines/s", f"{p['lines_per_s']:,}", ""))
    if b:
        target = f">= {TARGETS['ratio_1_worker']:.1f}"
        for workers, peer, want in ((1, p1, target), (4, p4, "reported")):
            if peer:
                ratio = b["lines_per_s"] / peer["lines_per_s"]
                rows.append((f"backlog lines/s ratio to syslog-ng, {workers} worker(s)", f"{ratio:.2f}", want))
        cpu = f"{b['cpu_s']}"
        if p1 and p1.get("cpu_s") is not None:
            cpu += f" (syslog-ng 1 worker: {p1['cpu_s']})"
        rows.append(("daemon CPU s for the backlog (to the last entry received)", cpu, f"<= {TARGETS['cpu_s']:g}"))
        if "cpu_s_settled" in b:
            rows.append(("  the same until the store settled (text index caught up)", f"{b['cpu_s_settled']}", ""))
        rss = f"{b['peak_rss_mb']}"
        peer_rss = [f"{w} worker(s): {p['peak_rss_mb']}" for w, p in sorted(peers.items()) if p.get("peak_rss_mb")]
        if peer_rss:
            rss += " (syslog-ng " + ", ".join(peer_rss) + ")"
        rows.append(
            ("peak RSS MB, daemon + parse workers (sum of VmHWM), backlog", rss, f"<= {TARGETS['peak_rss_mb']:g}")
        )
        if "store_bytes" in b:
            mb = b["store_bytes"] / 2**20
            raw = b["raw_bytes"] / 2**20
            settled = "" if b.get("store_settled", True) else ", NOT settled"
            rows += [
                (
                    "store MB after the backlog: main + -wal (of which -wal); raw log MB",
                    f"{mb:,.0f} ({b.get('store_wal_bytes', 0) / 2**20:,.0f}); {raw:,.0f} "
                    f"(waited {b['store_settle_s']} s{settled})",
                    "",
                ),
                (
                    "store size / raw log size: main file (main + -wal)",
                    f"{b.get('store_main_ratio', b['store_ratio']):.2f} ({b['store_ratio']:.2f})",
                    f"<= {TARGETS['store_ratio']:.1f}",
                ),
            ]
    compare = res.get("insights_compare")
    if compare:
        for mode in ("off", "on"):
            c = compare[mode]
            rows.append(
                (
                    f"backlog lines/s (entries/s, CPU s), insights {mode}",
                    f"{c['lines_per_s']:,} ({c['entries_per_s']:,}, {c['cpu_s']})",
                    "",
                )
            )
        rows.append(
            ("backlog lines/s insights on / off", f"{compare['ratio']:.3f}", f">= {TARGETS['insights_on_off']:.2f}")
        )
    if b and b["insights"]:
        rows.append(
            ("insights caught up with the backlog, s after the file appeared", f"{b.get('insights_caught_up_s')}", "")
        )
    s = res.get("steady") or (b or {}).get("steady")
    if s:
        rows += [
            (
                f"steady {s['rate_lines_per_s']:,} lines/s for {s['seconds']} s: entries received",
                f"{s['received']:,} / {s['entries']:,}",
                "all",
            ),
            ("steady write -> webhook latency p50 / p90 ms", f"{s['p50_ms']} / {s['p90_ms']}", ""),
            (
                "steady write -> webhook latency p99 / max ms",
                f"{s['p99_ms']} / {s['max_ms']}",
                f"p99 <= {TARGETS['p99_ms']:g}",
            ),
        ]
    rss_whole = (b or {}).get("peak_rss_mb_after_steady") or (res.get("steady") or {}).get("peak_rss_mb")
    if rss_whole:
        rows.append(
            ("peak RSS MB, daemon + parse workers, whole run", f"{rss_whole}", f"<= {TARGETS['peak_rss_mb']:g}")
        )
    return rows


def table(res: dict[str, Any]) -> str:
    rows = rows_of(res)
    w = max(len(r[0]) for r in rows)
    v = max(len(r[1]) for r in rows)
    out = [f"| {'measure':<{w}} | {'value':<{v}} | target |", f"|{'-' * (w + 2)}|{'-' * (v + 2)}|--------|"]
    out += [f"| {r[0]:<{w}} | {r[1]:<{v}} | {r[2]} |" for r in rows]
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=["backlog", "steady"], help="run one phase (default: both)")
    ap.add_argument("--lines", type=int, default=1_000_000, help="backlog size in physical lines")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cache", type=Path, default=Path("/tmp/fwd-bench"), help="where the generated log is kept")
    ap.add_argument("--rate", type=int, default=5000, help="steady: physical lines per second")
    ap.add_argument("--seconds", type=float, default=30, help="steady: how long")
    ap.add_argument("--poll", type=float, default=0.25, help="the log source's poll_interval_seconds")
    ap.add_argument("--timeout", type=float, default=600, help="backlog: give up after this many seconds")
    ap.add_argument("--peers", action="store_true", help="also run syslog-ng file -> http on the same file")
    ap.add_argument("--peer-workers", default="1,4", help="syslog-ng http() workers to run, comma-separated")
    ap.add_argument(
        "--insights",
        choices=["on", "off", "both"],
        default="on",
        help="the daemon's [insights] enabled; both: the backlog twice, off then on, and the ratio of the rates",
    )
    ap.add_argument("--profile", action="store_true", help="py-spy the daemon during the backlog")
    ap.add_argument("--native", action="store_true", help="with --profile: C frames too (SQLite; pauses the daemon)")
    ap.add_argument("--keep", action="store_true", help="keep the run directory (store, logs, profile)")
    ap.add_argument("--runs", type=int, default=1, help="repeat the whole benchmark this many times, one table each")
    a = ap.parse_args()

    a.cache.mkdir(parents=True, exist_ok=True)
    results = []
    for run in range(1, a.runs + 1):
        if a.runs > 1:
            log(f"run {run} of {a.runs}")
        res = run_once(a)
        res["run"] = run
        res["runs"] = a.runs
        with open(a.cache / "results.jsonl", "a") as f:
            f.write(json.dumps({"t": time.strftime("%Y-%m-%dT%H:%M:%S"), **res}) + "\n")
        results.append(res)
    for res in results:
        print()
        if a.runs > 1:
            print(f"run {res['run']} of {a.runs}")
        print(f"machine before: {res['machine_before']}")
        print(f"load after: {res['machine_after'].split('load ')[1].split(',')[0]}")
        print(table(res))
        if "profile" in res.get("backlog", {}):
            print("\n(profiled run: rates are lowered by sampling)\n")
            print(res["backlog"]["profile"])


def run_once(a: argparse.Namespace) -> dict[str, Any]:
    """The whole benchmark once: ours (backlog, then steady), then the peers on the same file."""
    # Unique even when runs (or other people's) start within the same second.
    work = Path(tempfile.mkdtemp(prefix=time.strftime("run-%Y%m%d-%H%M%S-"), dir=a.cache))
    res: dict[str, Any] = {"machine_before": machine()}
    log(res["machine_before"])
    try:
        if a.only != "steady":
            src = backlog_file(a.cache, a.lines, a.seed)
            lines, entries = count_entries(src)
            log(f"backlog {src}: {lines:,} physical lines, {entries:,} entries")
            modes = {"on": [True], "off": [False], "both": [False, True]}[a.insights]
            runs: dict[str, dict[str, Any]] = {}
            for n, insights in enumerate(modes):
                mode = "on" if insights else "off"
                last = n == len(modes) - 1
                runs[mode] = run_backlog(
                    a,
                    work / f"ours-insights-{mode}",
                    src,
                    lines,
                    entries,
                    insights=insights,
                    steady=last and a.only != "backlog",
                )
                log(
                    f"backlog, insights {mode}: "
                    + json.dumps({k: v for k, v in runs[mode].items() if k not in ("profile", "steady")})
                )
            res["backlog"] = runs["on" if modes[-1] else "off"]
            if len(runs) == 2:
                res["insights_compare"] = {
                    **{
                        m: {k: r.get(k) for k in ("ok", "wall_s", "lines_per_s", "entries_per_s", "cpu_s")}
                        for m, r in runs.items()
                    },
                    "ratio": runs["on"]["lines_per_s"] / runs["off"]["lines_per_s"],
                }
                log("insights on / off: " + f"{res['insights_compare']['ratio']:.3f}")
            if "steady" in res["backlog"]:
                log("steady: " + json.dumps(res["backlog"]["steady"]))
            if a.peers:
                res["peers"] = []
                for w in (int(x) for x in a.peer_workers.split(",") if x):
                    p = run_syslog_ng(a, work / "peers", src, lines, w)
                    log("syslog-ng: " + json.dumps(p))
                    res["peers"].append(p)
                    if "skipped" in p:
                        break
        else:
            res["steady"] = run_steady_alone(a, work / "ours")
            log("steady: " + json.dumps(res["steady"]))
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    res["machine_after"] = machine()
    return res


if __name__ == "__main__":
    main()
