"""A real daemon in one process for destination tests: store, API and delivery, with a fake clock.

`start_daemon_env` starts it with the operator config the destination tests share: the store and
the secrets key under `tmp_path`, 127.0.0.0/8 allowed as a destination network (the receivers
listen on loopback, reachable only because the operator allows it, as DEVELOPERS.md requires) and
one database, "main", whose log path matches no file, so lines come only through `append`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import aiohttp
import orjson

from forwarder.app import Daemon
from forwarder.clock import FakeClock
from forwarder.config import Config, config_from_dict
from forwarder.delivery.netguard import Resolver
from forwarder.model import Kind, LogLine

LOOPBACK = ("127.0.0.0/8",)


def main_database(tmp_path: Path, **changes: Any) -> dict[str, Any]:
    """The config of database "main" (no log file ever matches its path), with `changes`."""
    return {"id": "main", "name": "main", "host": "db1", "log": {"path": str(tmp_path / "none/*.log")}} | changes


def operator_config(
    tmp_path: Path,
    *,
    allowed: Sequence[str] = LOOPBACK,
    databases: list[dict[str, Any]] | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    """The operator config as a dict (for config_from_dict); `overrides` adds or replaces top-level sections."""
    return {
        "server": {"host": "127.0.0.1", "port": 0},
        "store": {"path": str(tmp_path / "s.db")},
        "security": {
            "secrets_key_file": str(tmp_path / "secrets.key"),
            "allowed_destination_networks": list(allowed),
        },
        "databases": [main_database(tmp_path)] if databases is None else databases,
        # Off unless a test turns them on: their sweep sleeps on the fake clock, and delivery tests
        # read a destination's backoff from the clock's next sleeper.
        "insights": {"enabled": False},
        **overrides,
    }


@dataclass
class DaemonEnv:
    """A started daemon with a fake clock, a read-write API key and a session to call its API."""

    daemon: Daemon
    clock: FakeClock
    session: aiohttp.ClientSession
    key: str

    @classmethod
    async def launch(
        cls,
        config: Config,
        *,
        clock: FakeClock | None = None,
        resolver: Resolver | None = None,
        config_path: Path | None = None,
    ) -> Self:
        """Start a daemon with `config` (the fake clock at the real epoch: stripe checks a signature's age)."""
        clock = clock or FakeClock(start=time.time())
        daemon = Daemon(config, clock=clock, resolver=resolver, config_path=config_path)
        await daemon.start()
        _, key = await daemon.store.create_key("rw", "read-write")
        return cls(daemon, clock, aiohttp.ClientSession(), key)

    async def aclose(self) -> None:
        await self.session.close()
        await self.daemon.aclose()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.daemon.port}"

    # --- the API ----------------------------------------------------------------------------------

    async def call(self, method: str, path: str, body: Any = None, key: str | None = None) -> tuple[int, Any]:
        """An API request with the read-write key (or `key`): the status and the JSON answer."""
        async with self.session.request(
            method, self.base + path, json=body, headers={"Authorization": f"Bearer {key or self.key}"}
        ) as resp:
            return resp.status, (await resp.json() if resp.status != 204 else None)

    async def create_destination(
        self,
        kind: str,
        config: dict[str, Any],
        secret: str | None = None,
        *,
        name: str | None = None,
        expect: int = 201,
        **fields: Any,
    ) -> dict[str, Any]:
        """POST /v1/log-destinations (`fields`: more of its body, such as `filter`); the answer, its status checked."""
        body_in: dict[str, Any] = {"type": kind, "name": name or kind, "config": config, **fields}
        if secret is not None:
            body_in["secret"] = secret
        status, body = await self.call("POST", "/v1/log-destinations", body_in)
        assert status == expect, body
        return body  # type: ignore[no-any-return]

    async def shown(self, dest_id: str) -> dict[str, Any]:
        """The destination as GET /v1/log-destinations/{id} shows it."""
        status, body = await self.call("GET", f"/v1/log-destinations/{dest_id}")
        assert status == 200, body
        return body  # type: ignore[no-any-return]

    async def delivery(self, dest_id: str) -> dict[str, Any]:
        """The destination's `delivery` part."""
        return (await self.shown(dest_id))["delivery"]  # type: ignore[no-any-return]

    async def metrics(self) -> str:
        async with self.session.get(self.base + "/metrics") as resp:
            return await resp.text()

    # --- the store --------------------------------------------------------------------------------

    async def append(self, lines: list[LogLine]) -> list[int]:
        """Store `lines` for database "main" as its reader would; their ids."""
        ident = self.daemon.registry.by_id["main"].identity
        head = await self.daemon.store.append(ident, lines, [], 0)
        return list(range(head - len(lines) + 1, head + 1))

    async def add_lines(self, n: int, *, start: int = 0, kind: Kind = "error", step_us: int = 1) -> list[int]:
        """`n` ERROR lines "line {start}", "line {start + 1}", ... from now on the fake clock; their ids."""
        now_us = int(self.clock.now() * 1_000_000)
        return await self.append(
            [
                LogLine(time_us=now_us + i * step_us, severity="ERROR", kind=kind, message=f"line {start + i}")
                for i in range(n)
            ]
        )

    async def stored(self, ids: Iterable[int]) -> dict[int, dict[str, Any]]:
        """The stored SPEC 2.1 documents of `ids`, parsed."""
        docs = await self.daemon.store.docs_by_ids(list(ids))
        return {i: orjson.loads(d) for i, d in docs.items()}

    # --- waiting for the delivery loop ---------------------------------------------------------------

    async def until(self, dest_id: str, check: Callable[[dict[str, Any]], bool], timeout: float = 10) -> dict[str, Any]:
        """The destination as shown once `check` holds for its `delivery`."""
        async with asyncio.timeout(timeout):
            while True:
                shown = await self.shown(dest_id)
                if check(shown["delivery"]):
                    return shown
                await asyncio.sleep(0.01)

    async def settled(self, dest_id: str) -> dict[str, Any]:
        """The destination's `delivery` once nothing is in flight, behind or failing."""
        shown = await self.until(
            dest_id, lambda d: d["in_flight_lines"] == 0 and d["lag_lines"] == 0 and d["attempts"] == 0
        )
        return shown["delivery"]  # type: ignore[no-any-return]

    async def until_sent(self, dest_id: str, n: int) -> dict[str, Any]:
        """The destination's `delivery` once it counts `n` lines sent (never more)."""
        shown = await self.until(dest_id, lambda d: d["sent_lines"] >= n)
        assert shown["delivery"]["sent_lines"] == n
        return shown["delivery"]  # type: ignore[no-any-return]

    async def until_sleeping(self, dest_id: str, attempts: int) -> float:
        """Seconds until the loop's next wake, once it has failed `attempts` times and sleeps."""
        delivery = self.daemon.delivery
        assert delivery is not None
        async with asyncio.timeout(10):
            while True:
                state = delivery.state(dest_id)
                if state is not None and state.attempts == attempts:
                    wake = self.clock.next_wake()
                    if wake is not None:
                        return wake
                await asyncio.sleep(0.005)


async def start_daemon_env(
    tmp_path: Path,
    *,
    allowed: Sequence[str] = LOOPBACK,
    resolver: Resolver | None = None,
    databases: list[dict[str, Any]] | None = None,
    **config_overrides: Any,
) -> DaemonEnv:
    """A started DaemonEnv with `operator_config(tmp_path, ...)`; `aclose` it when done."""
    config = config_from_dict(operator_config(tmp_path, allowed=allowed, databases=databases, **config_overrides))
    return await DaemonEnv.launch(config, resolver=resolver)
