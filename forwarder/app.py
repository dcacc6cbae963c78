"""Builds and runs the daemon: store -> readers -> delivery -> API, and takes them down in reverse.

Start order: open the store (migrations), register each database (seeding its settings), start
one reader per database and the store's background work, start delivery (config-declared
destinations synced first), then bind the API; the daemon is ready once the API is bound, and
tells systemd so (READY=1).

Stop order (SIGTERM/SIGINT): STOPPING=1; stop reading (what was read is stored); close the API;
let requests in flight to destinations finish for up to `delivery.shutdown_grace_seconds`,
recording their outcome (cursors are persisted with every outcome); stop background work; close
the store. SIGHUP reloads the config file: an invalid file is logged and the running config
stays; otherwise only what changed restarts (a database's reader, a destination).

The signal handlers stay installed until the drain is over: a SIGHUP while stopping is ignored (and
logged) instead of killing the daemon with its default action, and a second SIGTERM/SIGINT forces
the stop: the deliveries in flight are cut off (resent after the restart under the same delivery
id, which receivers drop as duplicates), the store is still closed cleanly, and the exit code is
128 + the signal's number (StopForced), as a shell reports a process that signal ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import signal
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forwarder import metrics
from forwarder.api.context import ApiContext, DatabaseView, SourceView
from forwarder.api.server import ApiServer
from forwarder.clock import Clock, SystemClock
from forwarder.config import AskConfig, Config, ConfigError, DatabaseConfig, load_config
from forwarder.delivery.manager import DeliveryManager
from forwarder.delivery.netguard import Resolver
from forwarder.insights.alerts import AlertEvaluator
from forwarder.insights.engine import Insights
from forwarder.metrics import forget_database
from forwarder.sdnotify import Notifier
from forwarder.secrets import SecretBox, load_key
from forwarder.sources.journal import JournalFollower
from forwarder.sources.parsing import ParseWorker
from forwarder.sources.tail import DatabaseFollower
from forwarder.store import DatabaseSettings, Identity, Store
from forwarder.usecases.conversations import ConversationExpiry
from forwarder.usecases.destinations import Ports, sync_declared

if TYPE_CHECKING:
    from forwarder.usecases.ask import AskService

log = logging.getLogger(__name__)

# Sections that are bound at start (a listening socket, an open store, the key of secrets at
# rest, the worker processes): a reload that changes them says a restart is needed.
RESTART_SECTIONS = ("server", "store", "security", "ingest", "insights", "web", "ask")
READER_STOP_SECONDS = 30.0  # a reader stops between chunks of 1 MiB; only a stuck store takes this long


def _reading_part(db: DatabaseConfig) -> DatabaseConfig:
    """What a database's reader depends on: everything but the connection used for fixes."""
    return db.model_copy(update={"connection": None})


def _ask_service(
    config: AskConfig, ctx: ApiContext, box: SecretBox, clock: Clock, expiry: ConversationExpiry
) -> AskService:
    """Ask's service: its modules are imported here, on the first Ask request (ApiContext.ask),
    not at start, where they took ~25 ms of every start (README, "Start to ready")."""
    from forwarder.usecases.ask import AskService

    return AskService(config, ctx, box, clock, expiry)


def _blank(path: str | Path) -> bool:
    """Whether the file at `path` holds nothing but white space (and may be read)."""
    try:
        return not Path(path).read_bytes().strip()
    except OSError:
        return False


class StartupFailed(Exception):
    """The daemon could not start (exit code 3); the message says why, never a secret."""


class StopForced(Exception):
    """A second SIGTERM/SIGINT cut the graceful drain short; the exit code is 128 + its number."""

    def __init__(self, sig: signal.Signals) -> None:
        super().__init__(sig.name)
        self.signal = sig

    @property
    def exit_code(self) -> int:
        return 128 + int(self.signal)


class PartFailed(Exception):
    """A part of the running daemon (a reader, the store's upkeep, the insights, the alerts) ended
    with an error; the daemon logged it, stopped cleanly, and exits 70 for a restart."""


@dataclass(slots=True)
class _Database:
    config: DatabaseConfig
    identity: Identity
    follower: DatabaseFollower | JournalFollower
    task: asyncio.Task[None]

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
    """The whole daemon; `start()` then `aclose()`, or `run()` until SIGTERM/SIGINT (SIGHUP reloads)."""

    def __init__(
        self,
        config: Config,
        clock: Clock | None = None,
        resolver: Resolver | None = None,
        config_path: str | Path | None = None,
        notifier: Notifier | None = None,
    ) -> None:
        self.config = config
        self.config_path = config_path  # where SIGHUP re-reads the config from; None: no reload
        self.clock = clock or SystemClock()
        self._resolver = resolver  # tests give a scripted one; None resolves with DNS
        self._notifier = notifier or Notifier()
        self.delivery: DeliveryManager | None = None
        self._workers: list[ParseWorker] = []
        self._next_worker = itertools.count()
        self.store = Store(config.store, self.clock, exclusive=True)  # one daemon per store
        self.registry = _Registry()
        self.api: ApiServer | None = None
        self._ctx: ApiContext | None = None
        self._store_task: asyncio.Task[None] | None = None
        self.insights: Insights | None = None
        self._insights_task: asyncio.Task[None] | None = None
        self.alerts: AlertEvaluator | None = None
        self._alerts_task: asyncio.Task[None] | None = None
        self._ask_task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._reload = asyncio.Event()
        self._stop_signals = 0  # SIGTERM/SIGINT received: the second forces the stop
        self._forced = asyncio.Event()  # set by that second signal: the drain is cut short
        self._forced_by: signal.Signals | None = None
        self._failed: str | None = None  # the name of a part that ended with an error (`_supervised`)

    @property
    def port(self) -> int:
        return self.api.port if self.api else 0

    def _destination_ports(self) -> Ports:
        assert self.delivery is not None, "start() first"
        return Ports(self.store, self.clock, self.delivery)

    async def start(self) -> None:
        await self.store.start()
        self._workers = [ParseWorker() for _ in range(self.config.ingest.parse_workers)]
        for db in self.config.databases:
            await self._start_database(db)
        self._store_task = self._supervised(self.store.run(), "store")
        if self.config.insights.enabled:
            self.insights = Insights(
                self.store,
                self.clock,
                retention_days=self.config.store.retention_days,
                max_queries=self.config.insights.max_queries,
                database_ids=[db.id for db in self.config.databases],
            )
            self._insights_task = self._supervised(self.insights.run(), "insights")
        self.alerts = AlertEvaluator(self.store, self.clock, self.config.alerts, self._database_codes())
        self._alerts_task = self._supervised(self.alerts.run(), "alerts")
        box = SecretBox(load_key(self.config.security.secrets_key_file))
        self.delivery = DeliveryManager(
            self.store, self.clock, box, self.config.security.networks(), resolver=self._resolver
        )
        await self.delivery.start()
        await sync_declared(self._destination_ports(), self.config.destinations)
        self._ctx = ApiContext(
            config=self.config,
            store=self.store,
            databases=self.registry,
            clock=self.clock,
            destinations=self.delivery,
            insights=self.insights,
            findings=self.insights,
        )
        expiry = ConversationExpiry(self.store, self.clock)
        self._ctx.ask_service = functools.partial(_ask_service, self.config.ask, self._ctx, box, self.clock, expiry)
        self._ask_task = self._supervised(expiry.run(), "ask-expiry")
        self.api = ApiServer(self._ctx)
        await self.api.start()
        metrics.CONFIG_RELOAD_TIME.set(self.clock.now())
        log.info(
            "forwarder ready",
            extra={
                "version": metrics.version(),
                "host": self.config.server.host,
                "port": self.api.port,
                "databases": len(self.registry.by_id),
            },
        )

    def _supervised(self, work: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        """A task that runs until the daemon stops it. One that ends with an error has stopped doing
        what the daemon promises (reading a log, retention and the text index, insights, alerts)
        while the API still answers: it is logged at once and the daemon stops, cleanly, with exit
        70, for the service manager to start it again (systemd's Restart=on-failure)."""
        task = asyncio.create_task(work, name=name)

        def ended(t: asyncio.Task[None]) -> None:
            if t.cancelled() or (exc := t.exception()) is None:
                return  # stopped on purpose
            if self._stop.is_set():  # the daemon is stopping anyway (maybe for an earlier failure)
                log.warning("a part of the daemon failed while stopping", exc_info=exc, extra={"part": name})
                return
            log.error("a part of the daemon failed; stopping so it is restarted", exc_info=exc, extra={"part": name})
            self._failed = name
            self.request_stop()

        task.add_done_callback(ended)
        return task

    def _database_codes(self) -> dict[str, int]:
        return {db_id: db.identity.code for db_id, db in self.registry.by_id.items()}

    def _private_files(self) -> list[Path]:
        """The daemon's own files a log glob must never read (the store's are known to the follower)."""
        files = [self.config.security.secrets_key_file]
        files += [d.secret_file for d in self.config.destinations if d.secret_file is not None]
        return files + ([Path(self.config_path)] if self.config_path is not None else [])

    async def _start_database(self, db: DatabaseConfig) -> None:
        identity = await self.store.register_database(db)
        worker = self._workers[next(self._next_worker) % len(self._workers)] if self._workers else None
        follower: DatabaseFollower | JournalFollower
        if db.log.format == "journal":
            follower = JournalFollower(db, identity, self.store, self.clock, worker)
        else:
            follower = DatabaseFollower(db, identity, self.store, self.clock, worker, private=self._private_files())
        settings = await self.store.get_settings(db.id) or DatabaseSettings(db.enabled, db.full_text)
        follower.apply_settings(settings.enabled, settings.full_text)
        task = self._supervised(follower.run(), f"read:{db.id}")
        self.registry.by_id[db.id] = _Database(db, identity, follower, task)

    async def _stop_database(self, db_id: str) -> None:
        """Stop one reader between two chunks; it stores what it parsed before returning."""
        found = self.registry.by_id.pop(db_id, None)
        if found is None:
            return
        found.follower.stop()
        forced = asyncio.ensure_future(self._forced.wait())
        try:
            await asyncio.wait({found.task, forced}, timeout=READER_STOP_SECONDS, return_when=asyncio.FIRST_COMPLETED)
        finally:
            forced.cancel()
        if not found.task.done():  # a store that does not answer, or a forced stop: cut it off
            why = "forced_stop" if self._forced.is_set() else "did_not_stop_in_time"
            log.warning(
                "cancelling a reader (its offsets stay consistent)", extra={"database_id": db_id, "reason": why}
            )
            found.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await found.task
        elif not found.task.cancelled() and found.task.exception() is not None:
            log.debug("reader had failed", extra={"database_id": db_id})  # logged as it came (`_supervised`)

    def request_stop(self) -> None:
        self._stop.set()

    def request_reload(self) -> None:
        self._reload.set()

    def _on_signal(self, sig: signal.Signals) -> None:
        """SIGTERM/SIGINT stop (the second one while stopping forces it); SIGHUP reloads, unless
        the daemon is stopping, where a reload makes no sense (logrotate's postrotate may send it)."""
        if sig == signal.SIGHUP:
            if self._stop.is_set():
                log.warning("SIGHUP while stopping: ignored, no reload during the drain", extra={"signal": sig.name})
            else:
                self.request_reload()
            return
        self._stop_signals += 1
        if self._stop_signals == 1:
            log.info("stop requested", extra={"signal": sig.name})
            self.request_stop()
        elif self._forced_by is None:
            log.warning(
                "stop forced by a second signal: deliveries in flight are cut off and resent after the restart"
                " with the same delivery id",
                extra={"signal": sig.name, "exit_code": 128 + int(sig)},
            )
            self._forced_by = sig
            self.request_stop()
            self._forced.set()
        else:
            log.info("already forcing the stop", extra={"signal": sig.name})

    def _serving_status(self, *, reload_failed: bool = False) -> str:
        if reload_failed:
            # STATUS= is what `systemctl status` shows: a rejected reload must not look like a good one.
            return f"STATUS=serving on port {self.port}; the config reload failed, the previous config still runs"
        return f"STATUS=serving on port {self.port}"

    async def run(self) -> None:
        """Start, serve until SIGTERM/SIGINT (reloading on SIGHUP), stop cleanly.

        Raises StartupFailed when the daemon cannot start, PartFailed when a part failed, StopForced
        when a second SIGTERM/SIGINT cut the drain short.
        """
        loop = asyncio.get_running_loop()
        # First thing, and kept until the drain is over: a signal's default action would end the
        # daemon mid-drain (SIGHUP: rc 129 with nothing logged; SIGINT: KeyboardInterrupt through
        # open sessions). What was installed before (`forwarder run` ignores SIGHUP) comes back after.
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
        for sig in previous:
            loop.add_signal_handler(sig, self._on_signal, sig)
        watchdog: asyncio.Task[None] | None = None
        try:
            try:
                await self.start()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.error("startup failed", extra={"error": f"{type(exc).__name__}: {exc}"})
                raise StartupFailed(f"{type(exc).__name__}: {exc}") from exc
            self._notifier.notify("READY=1", f"STATUS=serving on port {self.port}")
            if self._notifier.watchdog_seconds:
                watchdog = asyncio.create_task(self._watchdog(self._notifier.watchdog_seconds), name="watchdog")
            while not self._stop.is_set():
                stop = asyncio.ensure_future(self._stop.wait())
                reload = asyncio.ensure_future(self._reload.wait())
                await asyncio.wait((stop, reload), return_when=asyncio.FIRST_COMPLETED)
                stop.cancel()
                reload.cancel()
                if self._reload.is_set() and not self._stop.is_set():
                    self._reload.clear()
                    self._notifier.reloading("reloading the config")
                    reloaded = await self.reload()
                    metrics.CONFIG_RELOAD_SUCCESSFUL.set(1 if reloaded else 0)
                    if reloaded:
                        metrics.CONFIG_RELOAD_TIME.set(self.clock.now())
                    # READY=1 ends the reload either way (sd_notify(3) has no "reload failed"); a
                    # broken file fails `systemctl reload` through the unit's check-config ExecReload=.
                    self._notifier.notify("READY=1", self._serving_status(reload_failed=not reloaded))
            log.info("stopping")
        finally:
            self._stop.set()  # also after a startup failure: a SIGHUP from now on is not a reload
            self._notifier.notify("STOPPING=1", "STATUS=stopping")
            if watchdog is not None:
                watchdog.cancel()
            try:
                await self.aclose()
            finally:
                for sig, handler in previous.items():
                    loop.remove_signal_handler(sig)
                    if handler is not None:  # None: installed outside Python; the default stays
                        signal.signal(sig, handler)
                self._notifier.close()
        log.info(
            "forwarder stopped",
            extra={
                "version": metrics.version(),
                "forced_by": self._forced_by.name if self._forced_by else None,
                "failed_part": self._failed,
            },
        )
        if self._forced_by is not None:
            raise StopForced(self._forced_by)
        if self._failed is not None:
            raise PartFailed(self._failed)

    async def _watchdog(self, interval_seconds: float) -> None:
        """WATCHDOG=1 from the event loop itself: a loop stuck for WatchdogSec gets the daemon restarted."""
        while True:
            self._notifier.notify("WATCHDOG=1")
            await asyncio.sleep(interval_seconds)

    async def reload(self) -> bool:
        """Re-read the config file and apply what changed; False (old config kept) if it is invalid."""
        if self.config_path is None:
            log.warning("reload asked, but the daemon was not started from a config file")
            return False
        try:
            new = load_config(self.config_path)
            if _blank(self.config_path):
                # Valid TOML with every default: no database, no destination. It is what a file
                # being rewritten in place (truncated, then written) reads as for a moment; taken,
                # it would stop every reader and remove every declared destination with its cursor.
                raise ConfigError([f"{self.config_path}: the file is empty (being written?)"])
        except ConfigError as exc:
            log.error(
                "config reload failed; the running config stays",
                extra={"path": str(self.config_path), "problems": exc.problems},
            )
            return False
        old = self.config
        pinned = [name for name in RESTART_SECTIONS if getattr(new, name) != getattr(old, name)]
        if pinned:
            log.warning("these config sections change only with a restart", extra={"sections": pinned})
        merged = new.model_copy(update={name: getattr(old, name) for name in RESTART_SECTIONS})
        await self._apply_databases(old, merged)
        self.config = merged
        if self._ctx is not None:
            self._ctx.config = merged
        if self.delivery is not None:
            await sync_declared(self._destination_ports(), merged.destinations)
        if self.alerts is not None:
            self.alerts.configure(merged.alerts, self._database_codes())
        if self.insights is not None:  # a removed database's findings series go (and stay gone)
            self.insights.configure(db.id for db in merged.databases)
        log.info("config reloaded", extra={"path": str(self.config_path)})
        return True

    async def _apply_databases(self, old: Config, new: Config) -> None:
        before = {db.id: db for db in old.databases}
        after = {db.id: db for db in new.databases}
        for db_id, db in after.items():
            # Only the fix connection changed: the reader keeps reading, the new one is used from now.
            if (was := before.get(db_id)) is not None and was != db and _reading_part(was) == _reading_part(db):
                self.registry.by_id[db_id].config = db
                before[db_id] = db
        for db_id, db in before.items():
            if after.get(db_id) != db:
                await self._stop_database(db_id)
                if db_id not in after:
                    forget_database(db_id)
                    log.info("database removed from the config; its reader stopped", extra={"database_id": db_id})
        for db_id, db in after.items():
            if before.get(db_id) != db:
                await self._start_database(db)
                log.info(
                    "database reader started" if db_id not in before else "database changed; reader restarted",
                    extra={"database_id": db_id},
                )

    async def aclose(self) -> None:
        # Readers first: cancelling one stores what it has pending.
        for db_id in list(self.registry.by_id):
            await self._stop_database(db_id)
        if self.api is not None:
            await self.api.aclose()
        if self.delivery is not None:
            await self.delivery.drain(self.config.delivery.shutdown_grace_seconds, cut=self._forced)
        # The store's task last: the others write through it.
        for task in (self._ask_task, self._insights_task, self._alerts_task, self._store_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):  # an error: logged as it came
                    await task
        self._ask_task = self._insights_task = self._alerts_task = self._store_task = None
        for worker in self._workers:
            await worker.aclose()
        if self.store.is_open:
            await self.store.aclose()
