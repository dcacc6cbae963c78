"""Operations in one process: sd_notify, config-declared destinations, SIGHUP's reload, the graceful drain."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from forwarder.app import Daemon, PartFailed
from forwarder.clock import FakeClock
from forwarder.config import ConfigError, config_from_dict, load_config
from forwarder.sdnotify import Notifier
from forwarder.store import Store
from tests.daemonenv import DaemonEnv, operator_config
from tests.receivers import WebhookReceiver

SECRET = "whsec_operations_test_secret_0123456789"

# --- sd_notify ---------------------------------------------------------------------------------


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(tmp_path / "notify"))
    sock.settimeout(2)
    yield sock
    sock.close()


def test_notifier_sends_one_datagram_per_message(tmp_path: Path, listener: socket.socket) -> None:
    with contextlib.closing(Notifier({"NOTIFY_SOCKET": str(tmp_path / "notify")})) as n:
        n.notify("READY=1", "STATUS=serving")
        n.notify("WATCHDOG=1")
    assert listener.recv(100) == b"READY=1\nSTATUS=serving"
    assert listener.recv(100) == b"WATCHDOG=1"


def test_notifier_speaks_to_the_abstract_namespace() -> None:
    name = f"forwarder-test-{os.getpid()}-{time.monotonic_ns()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(2)
        with contextlib.closing(Notifier({"NOTIFY_SOCKET": "@" + name})) as n:
            n.notify("STOPPING=1")
        assert sock.recv(100) == b"STOPPING=1"


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, None),
        ({"WATCHDOG_USEC": "30000000"}, 15.0),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": str(os.getpid())}, 15.0),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "1"}, None),  # meant for another process
        ({"WATCHDOG_USEC": "0"}, None),
        ({"WATCHDOG_USEC": "soon"}, None),
    ],
)
def test_watchdog_interval_is_half_of_watchdog_sec(env: dict[str, str], expected: float | None) -> None:
    assert Notifier(env).watchdog_seconds == expected


def test_without_notify_socket_nothing_is_sent_and_nothing_fails() -> None:
    n = Notifier({})
    assert not n.enabled
    n.notify("READY=1")  # no error


def test_an_unreachable_notify_socket_is_logged_not_raised(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with contextlib.closing(Notifier({"NOTIFY_SOCKET": str(tmp_path / "nobody")})) as n:
        n.notify("READY=1")
    assert "cannot notify systemd" in caplog.text


# --- config-declared destinations ------------------------------------------------------------


def test_destination_mistakes_are_named_by_their_toml_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    data = operator_config(
        tmp_path,
        destinations=[
            {"id": "a", "type": "webhook", "secret_env": "NOT_SET_ANYWHERE", "config": {}},
            {"id": "b", "type": "carrier-pigeon"},
            {"id": "c", "type": "webhook", "secret_file": str(tmp_path / "missing"), "config": {"url": "https://x"}},
            {"id": "d", "type": "webhook", "config": {"url": "https://x", "colour": "red"}},
            {
                "id": "a",
                "type": "webhook",
                "secret_env": "X",
                "secret_file": "/y",
                "filter": {"database_ids": ["nope"]},
            },
        ],
    )
    with pytest.raises(ConfigError) as exc:
        config_from_dict(data)
    problems = "\n".join(exc.value.problems)
    assert "destinations[1].type: unknown destination type 'carrier-pigeon'" in problems
    assert "destinations[4]: give secret_env or secret_file, not both" in problems
    with pytest.raises(ConfigError) as exc:
        config_from_dict({**data, "destinations": data["destinations"][:1] + data["destinations"][2:4]})
    problems = "\n".join(exc.value.problems)
    assert "destinations[0].config.url: Field required" in problems
    assert "destinations[0].secret_env: environment variable NOT_SET_ANYWHERE is not set" in problems
    assert f"destinations[1].secret_file: cannot read {tmp_path / 'missing'}" in problems
    assert "destinations[2].config.colour: Extra inputs are not permitted" in problems
    assert "destinations[2]: a webhook destination needs secret_env or secret_file" in problems


def test_duplicate_destination_ids_and_unknown_filter_databases_are_refused(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text(SECRET + "\n")
    dest = {"id": "a", "type": "webhook", "secret_file": str(secret), "config": {"url": "https://x"}}
    with pytest.raises(ConfigError) as exc:
        config_from_dict(
            operator_config(tmp_path, destinations=[dest, {**dest, "filter": {"database_ids": ["other"]}}])
        )
    assert exc.value.problems == [  # each at its TOML path, on a line of its own
        "destinations[1].id: duplicate destination id 'a'",
        "destinations[1].filter.database_ids[0]: unknown database id 'other'",
    ]
    loaded = config_from_dict(operator_config(tmp_path, destinations=[dest]))
    assert loaded.destinations[0].read_secret() == SECRET  # the file's trailing newline is not part of it


# --- an in-process daemon with a config file -------------------------------------------------


class Env:
    """A config file, and the daemon started from it (again after a stop)."""

    def __init__(self, tmp_path: Path, receiver: WebhookReceiver) -> None:
        self.tmp_path = tmp_path
        self.receiver = receiver
        self.path = tmp_path / "forwarder.toml"
        self.running: DaemonEnv | None = None

    def write(self, destinations: str = "", databases: str = "", grace: float = 30) -> None:
        t = self.tmp_path
        self.path.write_text(
            f'[server]\nhost = "127.0.0.1"\nport = 0\n[store]\npath = "{t / "s.db"}"\n'
            f'[security]\nsecrets_key_file = "{t / "secrets.key"}"\nallowed_destination_networks = ["127.0.0.0/8"]\n'
            f"[delivery]\nshutdown_grace_seconds = {grace}\n"
            f'[[databases]]\nid = "main"\nname = "main"\nhost = "db1"\n[databases.log]\npath = "{t / "none/*.log"}"\n'
            + databases
            + destinations
        )

    def hook(self, dest_id: str = "hook", url: str | None = None, extra: str = "") -> str:
        return (
            f'[[destinations]]\nid = "{dest_id}"\ntype = "webhook"\nsecret_env = "OPS_TEST_SECRET"\n{extra}'
            f'[destinations.config]\nurl = "{url or self.receiver.url}"\n'
        )

    async def start(self, clock: FakeClock | None = None) -> Daemon:
        self.running = await DaemonEnv.launch(load_config(self.path), clock=clock, config_path=self.path)
        return self.running.daemon

    @property
    def live(self) -> DaemonEnv:
        assert self.running is not None
        return self.running

    async def stopped(self) -> None:
        """The test stopped the daemon itself: only the API session is left to close."""
        await self.live.session.close()
        self.running = None

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        return await self.live.call(method, path, body)

    async def add_lines(self, n: int, start: int = 0) -> None:
        await self.live.add_lines(n, start=start)


@pytest.fixture
async def receiver() -> AsyncIterator[WebhookReceiver]:
    r = WebhookReceiver(secret=SECRET, tolerance=None)
    await r.start()
    yield r
    await r.aclose()


@pytest.fixture
async def env(tmp_path: Path, receiver: WebhookReceiver, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Env]:
    monkeypatch.setenv("OPS_TEST_SECRET", SECRET)
    e = Env(tmp_path, receiver)
    yield e
    if e.running is not None:
        await e.running.aclose()


def messages(receiver: WebhookReceiver) -> list[str]:
    return [e["message"] for d in receiver.accepted for e in d.body["entries"]]


async def test_a_config_destination_delivers_and_cannot_be_changed_through_the_api(env: Env) -> None:
    env.write(env.hook())
    await env.start()
    status, body = await env.call("GET", "/v1/log-destinations/hook")
    assert status == 200 and body["managed_by"] == "config" and body["has_secret"] and SECRET not in str(body)
    await env.add_lines(3)
    await env.receiver.wait_for_lines(3)
    assert messages(env.receiver) == ["line 0", "line 1", "line 2"]
    for method, payload in (("PATCH", {"name": "x"}), ("DELETE", None)):
        status, body = await env.call(method, "/v1/log-destinations/hook", payload)
        assert status == 409 and body["error"]["code"] == "managed_by_config", body
    status, body = await env.call("POST", "/v1/log-destinations/hook/test")
    assert status == 200 and body == {"ok": True}


async def test_reload_keeps_the_running_config_when_the_new_one_is_broken(env: Env) -> None:
    env.write(env.hook())
    daemon = await env.start()
    env.path.write_text(env.path.read_text() + '\n[ingest]\nparse_workers = "many"\n')
    assert await daemon.reload() is False
    env.path.write_text("this is not = = toml")
    assert await daemon.reload() is False
    env.path.write_bytes(env.path.read_bytes() + b"\n# caf\xe9\n")  # Latin-1: TOML is UTF-8
    assert await daemon.reload() is False
    env.path.unlink()
    env.path.mkdir()  # the file turned into a directory (a misdirected deploy)
    assert await daemon.reload() is False
    await env.add_lines(2)
    await env.receiver.wait_for_lines(2)
    assert [d["id"] for d in (await env.call("GET", "/v1/log-destinations"))[1]["destinations"]] == ["hook"]


async def test_reload_adds_changes_and_removes_only_what_changed(env: Env, tmp_path: Path) -> None:
    other = WebhookReceiver(secret=SECRET, tolerance=None)
    await other.start()
    try:
        env.write(env.hook())
        daemon = await env.start()
        assert daemon.delivery is not None
        await env.add_lines(5)
        await env.receiver.wait_for_lines(5)
        first_task = daemon.delivery._running["hook"][1]
        reader_task = daemon.registry.by_id["main"].task

        # Add a destination and a database: the running destination and reader are left alone.
        env.write(
            env.hook() + env.hook("second", other.url, extra='[destinations.filter]\nkinds = ["error"]\n'),
            databases=f'[[databases]]\nid = "extra"\nname = "extra"\n[databases.log]\npath = "{tmp_path}/x/*.log"\n',
        )
        assert await daemon.reload() is True
        assert daemon.delivery._running["hook"][1] is first_task
        assert daemon.registry.by_id["main"].task is reader_task
        assert set(daemon.registry.by_id) == {"main", "extra"}
        await env.add_lines(4, start=5)
        await other.wait_for_lines(4)
        await env.receiver.wait_for_lines(9)
        assert messages(other) == [f"line {i}" for i in range(5, 9)]  # a new destination starts at the head
        assert messages(env.receiver) == [f"line {i}" for i in range(9)]

        # Change the first destination's URL: it restarts where it was; remove the second.
        env.write(env.hook(url=other.url))
        assert await daemon.reload() is True
        assert daemon.delivery._running["hook"][1] is not first_task
        assert set(daemon.registry.by_id) == {"main"}
        status, _ = await env.call("GET", "/v1/log-destinations/second")
        assert status == 404
        await env.add_lines(1, start=9)
        await other.wait_for_lines(5)
        # The restarted destination went on from its cursor: only line 9 is new at the other URL.
        assert messages(other) == [f"line {i}" for i in range(5, 9)] + ["line 9"]
        assert messages(env.receiver) == [f"line {i}" for i in range(9)]  # nothing more at the old URL
    finally:
        await other.aclose()


async def test_reload_that_changes_only_the_fix_connection_keeps_the_reader(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPS_TEST_PG_PASSWORD", "pw")
    connection = '[databases.connection]\ndsn = "postgresql://fixer@127.0.0.1:5432/postgres"\n'
    connection += 'password_env = "OPS_TEST_PG_PASSWORD"\n'
    env.write(databases=connection)
    daemon = await env.start()
    reader_task = daemon.registry.by_id["main"].task
    env.write(databases=connection + "allow_fixes = true\n")
    assert await daemon.reload() is True
    found = daemon.registry.by_id["main"]
    assert found.task is reader_task  # still the same reader
    assert found.config.connection is not None and found.config.connection.allow_fixes is True


async def test_stop_lets_the_request_in_flight_finish_and_records_it(env: Env) -> None:
    release = asyncio.Event()

    async def held() -> None:
        await release.wait()

    env.receiver.script.append(held)
    env.write(env.hook(), grace=30)
    daemon = await env.start(clock=None)
    await env.add_lines(3)
    await env.receiver.wait_for(1)
    closing = asyncio.create_task(daemon.aclose())
    await asyncio.sleep(0.2)
    assert not closing.done()  # waiting for the answer
    release.set()
    await asyncio.wait_for(closing, 10)
    await env.stopped()
    # The outcome was recorded: a restart sends nothing again.
    daemon2 = await env.start()
    assert daemon2.delivery is not None
    state = daemon2.delivery.state("hook")
    assert state is not None and state.inflight_lines is None and state.sent_lines == 3


async def test_past_the_grace_the_request_is_cut_off_and_resent_after_the_restart(env: Env) -> None:
    never = asyncio.Event()

    async def held() -> None:
        await never.wait()

    env.receiver.script.append(held)
    env.write(env.hook(), grace=0)
    daemon = await env.start()
    await env.add_lines(3)
    await env.receiver.wait_for(1)
    first = env.receiver.deliveries[0]
    await asyncio.wait_for(daemon.aclose(), 10)
    await env.stopped()
    await env.start()
    await env.receiver.wait_for_lines(3)
    again = env.receiver.accepted[0]
    assert again.delivery_id == first.delivery_id and again.ids == first.ids


def test_a_listener_that_stops_reading_never_blocks_the_daemon(tmp_path: Path, listener: socket.socket) -> None:
    n = Notifier({"NOTIFY_SOCKET": str(tmp_path / "notify")})

    def ping() -> None:
        for _ in range(1000):  # far past a datagram queue's length
            n.notify("WATCHDOG=1")

    sender = threading.Thread(target=ping, daemon=True)
    sender.start()
    sender.join(10)
    n.close()
    assert not sender.is_alive(), "notify blocked on a full socket"
    assert listener.recv(100) == b"WATCHDOG=1"


async def test_reload_that_changes_a_destinations_kind_replaces_only_that_one(env: Env) -> None:
    env.write(env.hook() + env.hook("second"))
    daemon = await env.start()
    assert daemon.delivery is not None
    first_task = daemon.delivery._running["hook"][1]
    loki = '[[destinations]]\nid = "second"\ntype = "loki"\n[destinations.config]\nurl = "http://127.0.0.1:9/"\n'
    env.write(env.hook() + loki)
    assert await daemon.reload() is True
    listed = {d["id"]: d["type"] for d in (await env.call("GET", "/v1/log-destinations"))[1]["destinations"]}
    assert listed == {"hook": "webhook", "second": "loki"}
    assert daemon.delivery._running["hook"][1] is first_task  # the other one was not touched


# --- a part that fails ----------------------------------------------------------------------------


async def test_a_part_that_fails_is_logged_at_once_and_the_daemon_stops_cleanly_for_a_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The store's upkeep (retention, the text index) ending with an error while the API still
    # answered: the disk would fill, and the error showed only in the traceback of the next stop.
    async def broken_upkeep(self: Store) -> None:
        raise RuntimeError("the upkeep broke")

    monkeypatch.setattr(Store, "run", broken_upkeep)
    daemon = Daemon(config_from_dict(operator_config(tmp_path)), clock=FakeClock(), notifier=Notifier({}))
    with pytest.raises(PartFailed, match="store"):
        await asyncio.wait_for(daemon.run(), 30)
    [record] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert record.getMessage().startswith("a part of the daemon failed") and record.__dict__["part"] == "store"
    assert record.exc_info is not None and "the upkeep broke" in str(record.exc_info[1])
    assert not daemon.store.is_open  # stopped the usual way: readers drained, the store closed
