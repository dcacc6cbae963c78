"""Daemon.run() as systemd drives it, in one process: sd_notify around a reload, signals during the
drain, and the log lines that open and close a run.

Real signals are sent to this process only once the daemon's handler is seen installed (`armed`):
a signal left to its default action would end the test run itself.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from forwarder import metrics
from forwarder.app import Daemon, StopForced
from forwarder.clock import FakeClock
from forwarder.config import load_config
from forwarder.metrics import version
from forwarder.model import LogLine
from forwarder.sdnotify import Notifier
from tests.receivers import WebhookReceiver

SECRET = "whsec_app_run_test_secret_0123456789"
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def write_config(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "forwarder.toml"
    path.write_text(
        f'[server]\nhost = "127.0.0.1"\nport = 0\n[store]\npath = "{tmp_path / "s.db"}"\n'
        f'[security]\nsecrets_key_file = "{tmp_path / "secrets.key"}"\nallowed_destination_networks = ["127.0.0.0/8"]\n'
        "[insights]\nenabled = false\n"
        f'[[databases]]\nid = "main"\nname = "main"\n[databases.log]\npath = "{tmp_path / "none/*.log"}"\n' + extra
    )
    return path


def webhook(url: str) -> str:
    return (
        '[[destinations]]\nid = "hook"\ntype = "webhook"\nsecret_env = "APP_RUN_SECRET"\n'
        f'[destinations.config]\nurl = "{url}"\n'
    )


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(tmp_path / "notify"))
    sock.setblocking(False)
    yield sock
    sock.close()


async def message(sock: socket.socket) -> list[str]:
    data = await asyncio.wait_for(asyncio.get_running_loop().sock_recv(sock, 4096), 10)
    return data.decode().split("\n")


async def until(check: Callable[[], bool]) -> None:
    async with asyncio.timeout(10):
        while not check():
            await asyncio.sleep(0)


def logged(caplog: pytest.LogCaptureFixture, text: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage().startswith(text)]


def current() -> dict[signal.Signals, object]:
    return {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}


def armed(sig: signal.Signals, before: dict[signal.Signals, object]) -> None:
    """Send `sig` to this process, only if the daemon's handler (not a default action) would get it."""
    handler = signal.getsignal(sig)
    assert handler not in (signal.SIG_DFL, signal.SIG_IGN, None, signal.default_int_handler, before[sig]), (
        f"{sig.name} is not handled by the daemon now: its default action would end the test run"
    )
    os.kill(os.getpid(), sig)


@pytest.fixture
def dispositions() -> Iterator[None]:
    before = current()
    yield
    for sig, handler in before.items():  # whatever happened, this process gets its own back
        if handler is not None:
            signal.signal(sig, handler)  # type: ignore[arg-type]


@pytest.fixture
async def receiver() -> AsyncIterator[WebhookReceiver]:
    r = WebhookReceiver(secret=SECRET, tolerance=None)
    await r.start()
    yield r
    await r.aclose()


async def test_a_rejected_reload_says_so_in_status_and_reloading_carries_monotonic_usec(
    tmp_path: Path,
    listener: socket.socket,
    caplog: pytest.LogCaptureFixture,
    dispositions: None,
) -> None:
    path = write_config(tmp_path)
    notifier = Notifier({"NOTIFY_SOCKET": str(tmp_path / "notify")})
    daemon = Daemon(load_config(path), clock=FakeClock(start=time.time()), config_path=path, notifier=notifier)
    before = current()  # in the test's loop (asyncio's runner has its own SIGINT handler)
    caplog.set_level(logging.INFO, logger="forwarder.app")
    running = asyncio.create_task(daemon.run())
    try:
        ready = await message(listener)
        serving = f"STATUS=serving on port {daemon.port}"
        assert ready == ["READY=1", serving]

        # A broken file: sd_notify(3) wants MONOTONIC_USEC= with RELOADING=1, and the status must
        # not read like a reload that worked.
        path.write_text(path.read_text() + '\n[ingest]\nparse_workers = "many"\n')
        asked = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        armed(signal.SIGHUP, before)
        reloading = await message(listener)
        assert reloading[0] == "RELOADING=1" and reloading[2] == "STATUS=reloading the config"
        key, _, usec = reloading[1].partition("=")
        assert key == "MONOTONIC_USEC" and asked <= int(usec) <= time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        failed = await message(listener)
        assert failed[0] == "READY=1"
        assert failed[1] == f"{serving}; the config reload failed, the previous config still runs"
        assert logged(caplog, "config reload failed")
        assert metrics.REGISTRY.get_sample_value("forwarder_config_last_reload_successful") == 0

        # A good file again: the status is the plain one.
        write_config(tmp_path)
        armed(signal.SIGHUP, before)
        assert (await message(listener))[0] == "RELOADING=1"
        assert await message(listener) == ["READY=1", serving]
        assert metrics.REGISTRY.get_sample_value("forwarder_config_last_reload_successful") == 1

        # An empty file (one being rewritten in place, truncated then written, read at that moment)
        # is valid TOML with every default: taken, it stopped every reader and removed every
        # declared destination, cursor and all.
        databases = daemon.config.databases
        path.write_text("\n")
        armed(signal.SIGHUP, before)
        assert (await message(listener))[0] == "RELOADING=1"
        assert (await message(listener))[1] == f"{serving}; the config reload failed, the previous config still runs"
        [refused] = logged(caplog, "config reload failed")[-1:]
        assert refused.__dict__["problems"] == [f"{path}: the file is empty (being written?)"]
        assert daemon.config.databases == databases and databases
    finally:
        daemon.request_stop()
        await asyncio.wait_for(running, 30)
    assert (await message(listener))[0] == "STOPPING=1"
    [ready_line] = logged(caplog, "forwarder ready")
    assert ready_line.__dict__["version"] == version()
    assert caplog.records[-1].getMessage() == "forwarder stopped"
    assert caplog.records[-1].__dict__["forced_by"] is None


@pytest.mark.parametrize("second", [signal.SIGTERM, signal.SIGINT])
async def test_signals_during_the_drain_hup_is_ignored_and_a_second_stop_signal_forces_the_stop(
    tmp_path: Path,
    receiver: WebhookReceiver,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    dispositions: None,
    second: signal.Signals,
) -> None:
    # Run by hand, the daemon died of a SIGHUP during the drain (rc 129, nothing logged), of a second
    # SIGTERM at once (rc 143), of a second SIGINT with an 'Unclosed client session' (rc 130).
    monkeypatch.setenv("APP_RUN_SECRET", SECRET)
    path = write_config(tmp_path, "[delivery]\nshutdown_grace_seconds = 30\n" + webhook(receiver.url))
    never = asyncio.Event()

    async def held(*_: object) -> None:
        await never.wait()

    receiver.script.append(held)
    clock = FakeClock(start=time.time())  # never moves: only a forced stop ends the 30 s of grace
    daemon = Daemon(load_config(path), clock=clock, config_path=path, notifier=Notifier({}))
    before = current()  # in the test's loop (asyncio's runner has its own SIGINT handler)
    caplog.set_level(logging.INFO)
    running = asyncio.create_task(daemon.run())
    await until(lambda: bool(logged(caplog, "forwarder ready")))
    now_us = int(clock.now() * 1_000_000)
    lines = [LogLine(time_us=now_us + i, severity="ERROR", kind="error", message=f"line {i}") for i in range(3)]
    await daemon.store.append(daemon.registry.by_id["main"].identity, lines, [], 0)
    await receiver.wait_for(1)

    armed(signal.SIGTERM, before)
    await until(lambda: bool(logged(caplog, "waiting for deliveries in flight")))
    armed(signal.SIGHUP, before)  # logrotate's postrotate, or `systemctl reload`, mid-drain
    await until(lambda: bool(logged(caplog, "SIGHUP while stopping: ignored")))
    assert not running.done()
    assert not logged(caplog, "config reloaded")

    armed(second, before)
    with pytest.raises(StopForced) as forced:
        await asyncio.wait_for(running, 30)
    assert forced.value.signal == second and forced.value.exit_code == 128 + int(second)
    [cut] = logged(caplog, "deliveries in flight cut off")
    assert cut.__dict__["destination_ids"] == ["hook"] and cut.__dict__["lines_in_flight"] == 3
    assert cut.__dict__["reason"] == "forced"
    assert logged(caplog, "stop forced by a second signal")[0].__dict__["signal"] == second.name
    assert caplog.records[-1].getMessage() == "forwarder stopped"
    assert caplog.records[-1].__dict__["forced_by"] == second.name
    assert not daemon.store.is_open  # the store was still closed cleanly
    assert daemon.delivery is not None and daemon.delivery._session is None  # no unclosed client session
    assert current() == before  # given back after the drain
    never.set()
