"""A fast counting webhook receiver for `bench/deliver.py`, run as its own process.

HTTP/1.1 on 127.0.0.1, one thread per connection, blocking sockets. Each POST body is counted by
its entries (occurrences of `{"id":"`, the start of every entry the forwarder sends) and answered
200 at once: no signature check, no JSON parsing in the hot path. While latency measuring is on,
the `"time":"..."` of each entry (the PostgreSQL line's own %m time) is read and the latency is
the wall-clock time the body arrived minus that time.

    python bench/receiver_proc.py [--port 0]

stdout (one event a line; t is time.monotonic(), comparable across processes):
    LISTEN <port>        ready
    FIRST <t>            first entry arrived
    DONE <t> <count>     the entry count reached the EXPECT target
    REPORT <json>        answer to REPORT: counts and latency percentiles (ms)
stdin commands: `EXPECT <n>` (print DONE when n entries in all arrived), `MEASURE 1|0` (latency
samples on or off), `RESET` (drop the samples), `REPORT`, `QUIT`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import socket
import sys
import threading
import time

ENTRY = b'{"id":"'
TIME = re.compile(rb'"time":"([^"]+)"')
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nContent-Type: text/plain\r\n\r\n"

lock = threading.Lock()
state: dict[str, object] = {"count": 0, "reqs": 0, "bytes": 0, "first": None, "expect": 0, "done": False}
measure = False
samples: list[float] = []  # latency seconds of each entry received while measuring


def out(line: str) -> None:
    with lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def _check_done_locked() -> str | None:
    expect = int(state["expect"])  # type: ignore[call-overload]
    if not state["done"] and expect and int(state["count"]) >= expect:  # type: ignore[call-overload]
        state["done"] = True
        return f"DONE {time.monotonic():.6f} {state['count']}"
    return None


def add(body: bytes) -> None:
    now_wall = time.time()
    n = body.count(ENTRY)
    lat: list[float] = []
    if measure:
        for m in TIME.finditer(body):
            t = dt.datetime.fromisoformat(m.group(1).decode()).timestamp()
            lat.append(now_wall - t)
    events = []
    with lock:
        if state["first"] is None:
            state["first"] = time.monotonic()
            events.append(f"FIRST {state['first']:.6f}")
        state["count"] = int(state["count"]) + n  # type: ignore[call-overload]
        state["reqs"] = int(state["reqs"]) + 1  # type: ignore[call-overload]
        state["bytes"] = int(state["bytes"]) + len(body)  # type: ignore[call-overload]
        samples.extend(lat)
        done = _check_done_locked()
    if done:
        events.append(done)
    for e in events:
        out(e)


def serve(conn: socket.socket) -> None:
    buf = bytearray()
    rb = bytearray(1 << 18)
    mv = memoryview(rb)

    def fill() -> None:
        n = conn.recv_into(mv)
        if n == 0:
            raise EOFError
        buf.extend(mv[:n])

    try:
        while True:
            while (h := buf.find(b"\r\n\r\n")) < 0:
                fill()
            head = bytes(buf[:h]).lower()
            del buf[: h + 4]
            clen, chunked = 0, False
            for line in head.split(b"\r\n")[1:]:
                k, _, v = line.partition(b":")
                if k == b"content-length":
                    clen = int(v)
                elif k == b"transfer-encoding" and b"chunked" in v:
                    chunked = True
                elif k == b"expect" and b"100-continue" in v:
                    conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
            if chunked:
                body = bytearray()
                while True:
                    while (e := buf.find(b"\r\n")) < 0:
                        fill()
                    size = int(bytes(buf[:e]).split(b";")[0], 16)
                    del buf[: e + 2]
                    while len(buf) < size + 2:
                        fill()
                    body += buf[:size]
                    del buf[: size + 2]
                    if size == 0:
                        break
                data = bytes(body)
            else:
                while len(buf) < clen:
                    fill()
                data = bytes(buf[:clen])
                del buf[:clen]
            conn.sendall(OK)  # answer first: the count is ours, the sender should not wait on it
            add(data)
    except (EOFError, ConnectionError, OSError):
        pass
    finally:
        conn.close()


def percentile(values: list[float], p: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(p / 100 * len(s)))]


def report() -> str:
    with lock:
        lat = list(samples)
        snap = {k: state[k] for k in ("count", "reqs", "bytes")}
    ms = [x * 1000 for x in lat]
    snap["latency_samples"] = len(ms)
    for name, p in (("p50_ms", 50), ("p90_ms", 90), ("p99_ms", 99), ("max_ms", 100)):
        v = percentile(ms, p)
        snap[name] = round(v, 1) if v is not None else None
    return "REPORT " + json.dumps(snap)


def commands() -> None:
    global measure
    for raw in sys.stdin:
        cmd, _, arg = raw.strip().partition(" ")
        if cmd == "EXPECT":
            with lock:
                state["expect"] = int(arg)
                state["done"] = False
                done = _check_done_locked()
            if done:
                out(done)
        elif cmd == "MEASURE":
            measure = arg == "1"
        elif cmd == "RESET":
            with lock:
                samples.clear()
        elif cmd == "REPORT":
            out(report())
        elif cmd == "QUIT":
            break
    out(report())
    sys.stdout.flush()
    os._exit(0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, default=0)
    a = ap.parse_args()
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", a.port))
    srv.listen(64)
    out(f"LISTEN {srv.getsockname()[1]}")
    threading.Thread(target=commands, daemon=True).start()
    while True:
        conn, _ = srv.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


if __name__ == "__main__":
    main()
