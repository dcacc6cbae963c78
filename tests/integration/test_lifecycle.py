"""The daemon as systemd runs it: readiness and watchdog pings, a graceful stop, a SIGHUP reload.

`forwarder run` is a real subprocess. Its NOTIFY_SOCKET is a datagram socket this test binds and
reads (systemd's side of sd_notify). Lines come from a writer of PostgreSQL stderr entries and go
to strict webhook receivers (signatures verified with stripe) running on their own loop thread.
Destinations are declared in the config file, so a SIGHUP can add one.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.daemonproc import DaemonProcess, LoopThread
from tests.harness import poll_until
from tests.integration.test_rotation import PREFIX, Writer
from tests.receivers import WebhookReceiver
from tests.receivers_base import hold

SECRET_A = "whsec_lifecycle_test_secret_a_0123456789"
SECRET_B = "whsec_lifecycle_test_secret_b_0123456789"


class NotifySocket:
    """systemd's end of the notify protocol: a thread reads every datagram the daemon sends."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0.1)
        self.messages: list[str] = []
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._closed.is_set():
            try:
                self.messages.append(self.sock.recv(4096).decode())
            except TimeoutError:
                continue
            except OSError:
                return

    def collect(self, until: Callable[[list[str]], bool], timeout: float = 20) -> list[str]:
        """Wait until `until(messages)` holds; fails after `timeout` seconds."""
        poll_until(lambda: until(list(self.messages)), timeout, f"a notification; got {self.messages[-5:]}")
        return self.messages

    def fields(self) -> list[str]:
        return [f for m in list(self.messages) for f in m.split("\n")]

    def close(self) -> None:
        self._closed.set()
        self._thread.join(5)
        self.sock.close()


def webhook_toml(dest_id: str, url: str, secret_env: str) -> str:
    return (
        f'[[destinations]]\nid = "{dest_id}"\ntype = "webhook"\nsecret_env = "{secret_env}"\n'
        f'[destinations.config]\nurl = "{url}"\n'
    )


def numbers(recv: WebhookReceiver) -> Counter[int]:
    """How often each writer entry arrived in an accepted request."""
    out: Counter[int] = Counter()
    for delivery in list(recv.accepted):
        out.update(int(e["message"].split('"')[1].removeprefix("table_")) for e in delivery.body["entries"])
    return out


@pytest.fixture
def loop() -> Iterator[LoopThread]:
    thread = LoopThread()
    yield thread
    thread.close()


def start_receiver(loop: LoopThread, secret: str) -> WebhookReceiver:
    recv = WebhookReceiver(secret=secret, tolerance=300)
    loop.run(recv.start())
    return recv


def make_daemon(tmp_path: Path, extra_toml: str) -> tuple[DaemonProcess, Writer]:
    logs = tmp_path / "pglog"
    logs.mkdir()
    writer = Writer(logs / "postgresql.log")
    d = DaemonProcess(
        tmp_path / "fwd",
        [
            {
                "id": "db",
                "name": "db",
                "full_text": True,  # entry numbers live in the message text
                "log": {"path": str(logs / "*.log"), "line_prefix": PREFIX, "poll_interval_seconds": 0.05},
            }
        ],
        allowed_networks=("127.0.0.0/8",),
        extra_toml=extra_toml,
    )
    return d, writer


def test_notify_ready_watchdog_and_a_graceful_stop_that_lets_the_batch_in_flight_finish(
    tmp_path: Path, loop: LoopThread
) -> None:
    recv = start_receiver(loop, SECRET_A)
    d, w = make_daemon(tmp_path, "[delivery]\nshutdown_grace_seconds = 20\n" + webhook_toml("a", recv.url, "SECRET_A"))
    notify = NotifySocket(tmp_path / "notify.sock")
    env = {"NOTIFY_SOCKET": str(notify.path), "WATCHDOG_USEC": "200000", "SECRET_A": SECRET_A}
    try:
        d.start(env=env)
        notify.collect(lambda m: "READY=1" in "\n".join(m))
        # WatchdogSec=0.2 s: pings every 0.1 s from the event loop.
        notify.collect(lambda m: sum("WATCHDOG=1" in x for x in m) >= 3, timeout=5)

        w.entries(700)
        poll_until(lambda: len(numbers(recv)) == 700, what="the first 700 entries")
        # The next request is held for 1.5 s; SIGTERM arrives while it is in flight.
        recv.script.append(hold(1.5))
        sent_before = len(recv.deliveries)
        w.entries(300)
        poll_until(lambda: len(recv.deliveries) > sent_before, what="the held request")
        held = recv.deliveries[-1]
        assert d.proc is not None
        # To the whole process group, as systemd's default KillMode does: the parse worker
        # ignores it and the daemon still drains through it.
        os.killpg(d.proc.pid, signal.SIGTERM)
        code = d.proc.wait(30)
        d.proc = None
        assert code == 0, d.log_path.read_text()[-3000:]
        notify.collect(lambda m: "STOPPING=1" in "\n".join(m), timeout=2)
        # The in-flight request was answered before the daemon exited, and its outcome recorded.
        assert any(x.delivery_id == held.delivery_id for x in recv.accepted)
        # The newest entry may still have been pending in the reader (an entry ends only when the
        # next begins): it was stored on the way out and is delivered after the restart.
        assert len(numbers(recv)) >= 999
        order = notify.fields()
        assert order.index("READY=1") < order.index("STOPPING=1")

        # No cursor lost: after a restart nothing is sent again, and new entries still arrive once.
        requests = len(recv.deliveries)
        d.start(env={"SECRET_A": SECRET_A})
        w.entries(50)
        poll_until(lambda: len(numbers(recv)) == 1050, what="entries after the restart")
        got = numbers(recv)
        assert set(got) == set(range(1050)) and max(got.values()) == 1, "an entry arrived twice"
        assert all(len(x.ids) <= 500 for x in recv.deliveries[requests:])
        assert not recv.errors, recv.errors[:3]
    finally:
        notify.close()
        w.close()
        d.close()
        loop.run(recv.aclose())


def test_sighup_keeps_the_old_config_when_the_new_is_broken_and_adds_a_destination_without_a_gap(
    tmp_path: Path, loop: LoopThread
) -> None:
    a = start_receiver(loop, SECRET_A)
    b = start_receiver(loop, SECRET_B)
    d, w = make_daemon(tmp_path, webhook_toml("a", a.url, "SECRET_A"))
    env = {"SECRET_A": SECRET_A, "SECRET_B": SECRET_B}
    try:
        d.start(env=env)
        assert d.proc is not None
        w.entries(400)
        poll_until(lambda: len(numbers(a)) == 400, what="a's first entries")

        # A broken config: logged, and the running one stays (a keeps receiving, the API answers).
        d.write_config(whole=d.base_toml.replace(f"port = {d.port}", 'port = "not a port"'))
        d.proc.send_signal(signal.SIGHUP)
        poll_until(lambda: "config reload failed" in d.log_path.read_text(), what="the reload error in the log")
        assert "server.port" in d.log_path.read_text()
        w.entries(200)
        poll_until(lambda: len(numbers(a)) == 600, what="a's entries after the failed reload")
        assert d.proc.poll() is None
        assert [x["id"] for x in d.get("/v1/log-destinations")["destinations"]] == ["a"]

        # Add b while entries keep coming: a is not restarted and misses nothing.
        d.write_config(webhook_toml("a", a.url, "SECRET_A") + webhook_toml("b", b.url, "SECRET_B"))
        d.proc.send_signal(signal.SIGHUP)
        for _ in range(20):
            w.entries(20)
            time.sleep(0.02)
        poll_until(lambda: {x["id"] for x in d.get("/v1/log-destinations")["destinations"]} == {"a", "b"})
        listed = {x["id"]: x for x in d.get("/v1/log-destinations")["destinations"]}
        assert listed["b"]["managed_by"] == "config" and listed["b"]["has_secret"]
        assert SECRET_B not in str(listed)
        w.entries(100)
        total = w.n
        poll_until(lambda: len(numbers(a)) == total, what="every entry at a")
        poll_until(lambda: total - 1 in numbers(b), what="b's entries")
        got_a = numbers(a)
        assert set(got_a) == set(range(total)) and max(got_a.values()) == 1
        got_b = numbers(b)
        first_b = min(got_b)
        assert set(got_b) == set(range(first_b, total)), "b skipped entries after it started"
        assert max(got_b.values()) == 1
        # A config-declared destination is changed in the file, not through the API.
        status, _ = api_status(d, "DELETE", "/v1/log-destinations/b")
        assert status == 409
        assert not a.errors and not b.errors
        assert d.stop() == 0
    finally:
        w.close()
        d.close()
        loop.run(a.aclose())
        loop.run(b.aclose())


def test_signals_during_the_drain_sighup_is_ignored_and_a_second_sigint_forces_the_stop(
    tmp_path: Path, loop: LoopThread
) -> None:
    # Run for real, a SIGHUP during the drain ended the daemon (rc 129, nothing logged) and a second
    # SIGINT ended it with rc 130 and asyncio's 'Unclosed client session'.
    recv = start_receiver(loop, SECRET_A)
    d, w = make_daemon(tmp_path, "[delivery]\nshutdown_grace_seconds = 60\n" + webhook_toml("a", recv.url, "SECRET_A"))
    release = threading.Event()

    async def held(*_: object) -> None:  # answered only once the test releases it
        await asyncio.get_running_loop().run_in_executor(None, release.wait)

    try:
        d.start(env={"SECRET_A": SECRET_A})
        assert d.proc is not None
        ready = [json.loads(x) for x in d.log_path.read_text().splitlines() if '"forwarder ready"' in x]
        assert ready and ready[0]["version"]
        recv.script.append(held)
        w.entries(101)  # the 101st ends the 100th; it may stay pending in the reader
        poll_until(lambda: len(recv.deliveries) >= 1, what="the held request")
        first = recv.deliveries[0]

        def logged(text: str) -> bool:
            return text in d.log_path.read_text()

        d.proc.send_signal(signal.SIGTERM)
        poll_until(lambda: logged("waiting for deliveries in flight"), what="the drain")
        d.proc.send_signal(signal.SIGHUP)  # logrotate's postrotate, or `systemctl reload`
        poll_until(lambda: logged("SIGHUP while stopping: ignored"), what="the ignored SIGHUP")
        assert d.proc.poll() is None, "a SIGHUP during the drain ended the daemon"
        d.proc.send_signal(signal.SIGINT)
        code = d.proc.wait(30)
        d.proc = None
        text = d.log_path.read_text()
        assert code == 130, text[-3000:]  # 128 + SIGINT, as documented
        records = [json.loads(x) for x in text.splitlines() if x.startswith("{")]
        [cut] = [r for r in records if r["msg"].startswith("deliveries in flight cut off")]
        assert cut["destination_ids"] == ["a"] and cut["lines_in_flight"] == len(first.ids)
        assert cut["reason"] == "forced"
        assert records[-1]["msg"] == "forwarder stopped" and records[-1]["forced_by"] == "SIGINT"
        assert "Unclosed client session" not in text and "Traceback" not in text
        release.set()

        # The batch cut off is resent, under the same delivery id, after the restart.
        d.start(env={"SECRET_A": SECRET_A})
        poll_until(lambda: any(x.delivery_id == first.delivery_id for x in recv.accepted), what="the resend")
        assert d.stop() == 0
    finally:
        release.set()
        w.close()
        d.close()
        loop.run(recv.aclose())


def api_status(d: DaemonProcess, method: str, path: str) -> tuple[int, bytes]:
    import urllib.error
    import urllib.request

    req = urllib.request.Request(  # noqa: S310 - loopback test URL
        d.url + path, method=method, headers={"Authorization": f"Bearer {d.key}"}
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_metrics_after_real_traffic_pass_promtool(tmp_path: Path, loop: LoopThread) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian package prometheus; make test installs it as root)")
    recv = start_receiver(loop, SECRET_A)
    d, w = make_daemon(tmp_path, webhook_toml("a", recv.url, "SECRET_A"))
    try:
        d.start(env={"SECRET_A": SECRET_A})
        w.entries(300)
        poll_until(lambda: len(numbers(recv)) == 300, what="delivery")
        d.all_lines("db")
        d.get("/v1/databases/db/logs/overview")
        import urllib.request

        with urllib.request.urlopen(d.url + "/metrics", timeout=10) as resp:  # noqa: S310 - loopback
            scrape = resp.read()
        text = scrape.decode()
        for name in (
            'forwarder_ingest_lines_total{database_id="db",kind="error"} 300.0',
            'forwarder_ingest_source_up{database_id="db"} 1.0',
            'forwarder_destination_lines_sent_total{destination_id="a",type="webhook"} 300.0',
            'forwarder_destination_consecutive_failures{destination_id="a",type="webhook"} 0.0',
            'forwarder_http_requests_total{method="GET",route="/v1/databases/{ref}/logs/overview",status="200"}',
            "forwarder_store_size_bytes",
            "process_resident_memory_bytes",
        ):
            assert name in text, f"{name} missing from the scrape"
        result = subprocess.run([promtool, "check", "metrics"], input=scrape, capture_output=True, timeout=30)
        assert result.returncode == 0 and not result.stdout and not result.stderr, (
            result.stdout.decode() + result.stderr.decode()
        )
        assert d.stop() == 0
    finally:
        w.close()
        d.close()
        loop.run(recv.aclose())
