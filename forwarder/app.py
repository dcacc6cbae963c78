"""Builds and runs the daemon: store -> readers -> API, and takes them down in reverse.

Start order: open the store (migrations), register each database (seeding its settings), start
one reader per database and the store's background work, then bind the API; the daemon is
ready once the API is bound. Stop order: stop reading (pending entries are stored), close the
API, stop background work, close the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from dataclasses import dataclass

from forwarder.api.context import ApiContext, DatabaseView, SourceView
from forwarder.api.server import ApiServer
from forwarder.clock import Clock, SystemClock
from forwarder.config import Config, DatabaseConfig
from forwarder.delivery.manager import DeliveryManager
from forwarder.delivery.netguard import Resolver
from forwarder.secrets import SecretBox, load_key
from forwarder.sources.parsing import ParseWorker
from forwarder.sources.tail import DatabaseFollower
from forwarder.store import DatabaseSettings, Identity, Store

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Database:
    config: DatabaseConfig
    identity: Identity
    follower: DatabaseFollower

    def source_status(self) -> SourceView:
        return self.follower.status


class _Registry:
    def __init__(self) -> None:
        self.by_id: dict[str, _Database] = {}

    def all(self) -> list[DatabaseView]:
        return list(self.by_id.values())

    def find(self, ref: str) -> DatabaseView | None:
        if ref in self.by_id:
            return self.by_id[ref]
        return next((d for d in self.by_id.values() if d.config.name == ref), None)

    def apply_settings(self, db_id: str, settings: DatabaseSettings) -> None:
        self.by_id[db_id].follower.apply_settings(settings.enabled, settings.full_text)


class Daemon:
    """The whole daemon; `start()` then `aclose()`, or `run()` until SIGTERM/SIGINT."""

    def __init__(self, config: Config, clock: Clock | None = None, resolver: Resolver | None = None) -> None:
        self.config = config
        self.clock = clock or SystemClock()
        self._resolver = resolver  # tests give a scripted one; None resolves with DNS
        self.delivery: DeliveryManager | None = None
        self._workers: list[ParseWorker] = []
        self.store = Store(config.store, self.clock)
        self.registry = _Registry()
        self.api: ApiServer | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._stop = asyncio.Event()

    @property
    def port(self) -> int:
        return self.api.port if self.api else 0

    async def start(self) -> None:
        await self.store.start()
        self._workers = [ParseWorker() for _ in range(self.config.ingest.parse_workers)]
        for i, db in enumerate(self.config.databases):
            identity = await self.store.register_database(db)
            worker = self._workers[i % len(self._workers)] if self._workers else None
            follower = DatabaseFollower(db, identity, self.store, self.clock, worker)
            settings = await self.store.get_settings(db.id) or DatabaseSettings(db.enabled, db.full_text)
            follower.apply_settings(settings.enabled, settings.full_text)
            self.registry.by_id[db.id] = _Database(db, identity, follower)
            self._tasks.append(asyncio.create_task(follower.run(), name=f"read:{db.id}"))
        self._tasks.append(asyncio.create_task(self.store.run(), name="store"))
        box = SecretBox(load_key(self.config.security.secrets_key_file))
        self.delivery = DeliveryManager(
            self.store, self.clock, box, self.config.security.networks(), resolver=self._resolver
        )
        await self.delivery.start()
        ctx = ApiContext(
            config=self.config,
            store=self.store,
            databases=self.registry,
            clock=self.clock,
            destinations=self.delivery,
        )
        self.api = ApiServer(ctx)
        await self.api.start()
        log.info(
            "forwarder ready",
            extra={"host": self.config.server.host, "port": self.api.port, "databases": len(self.registry.by_id)},
        )

    def request_stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        """Start, serve until SIGTERM/SIGINT, stop cleanly."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop)
        try:
            await self.start()
            await self._stop.wait()
            log.info("stopping")
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        # Readers first: cancelling one stores what it has pending (DatabaseFollower.run's finally).
        readers = [t for t in self._tasks if t.get_name().startswith("read:")]
        others = [t for t in self._tasks if t not in readers]
        for group in (readers, others):
            for task in group:
                task.cancel()
            for task in group:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._tasks.clear()
        for worker in self._workers:
            await worker.aclose()
        if self.delivery is not None:
            await self.delivery.aclose()
        if self.api is not None:
            await self.api.aclose()
        if self.store.is_open:
            await self.store.aclose()
