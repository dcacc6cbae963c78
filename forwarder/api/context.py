"""What the API reads: the store and the running databases. Built by `app.py`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from aiohttp import web

from forwarder.clock import Clock
from forwarder.config import Config, DatabaseConfig
from forwarder.insights.engine import Insights
from forwarder.pglog import TimeCounts
from forwarder.store import DatabaseSettings, Identity, Store
from forwarder.store.destinations import DeliveryState, Destination
from forwarder.usecases.destinations import Delivery
from forwarder.usecases.fixes import Findings

if TYPE_CHECKING:
    from forwarder.usecases.ask import AskService


class SourceView(Protocol):
    """How reading a database's log is going (state, current file, reason it cannot)."""

    @property
    def state(self) -> str: ...
    @property
    def file(self) -> str | None: ...
    @property
    def reason(self) -> str | None: ...
    @property
    def times(self) -> TimeCounts: ...
    @property
    def time_note(self) -> str | None: ...


class DatabaseView(Protocol):
    """A configured database as the API sees it."""

    @property
    def config(self) -> DatabaseConfig: ...
    @property
    def identity(self) -> Identity: ...
    def source_status(self) -> SourceView: ...


class Databases(Protocol):
    """The configured databases; `apply_settings` hands a settings change to the reader."""

    def all(self) -> list[DatabaseView]: ...
    def find(self, ref: str) -> DatabaseView | None: ...
    def apply_settings(self, db_id: str, settings: DatabaseSettings) -> None: ...


class Destinations(Delivery, Protocol):
    """The delivery layer as the API drives it (implemented by delivery.manager.DeliveryManager):
    what the destination use cases need, plus the live state and the test send."""

    def state(self, dest_id: str) -> DeliveryState | None: ...
    async def test(self, dest: Destination) -> tuple[bool, str | None]: ...


@dataclass(slots=True)
class ApiContext:
    """Everything a handler needs."""

    config: Config
    store: Store
    databases: Databases
    clock: Clock
    destinations: Destinations | None = None
    insights: Insights | None = None  # None when [insights] is off
    findings: Findings | None = None
    ask_service: Callable[[], AskService] | None = None  # makes Ask's service (set by the daemon)
    ready: bool = False
    _ask: AskService | None = None

    @property
    def ask(self) -> AskService | None:
        """Ask's service, made on its first use: the Ask feature's modules (its engine, tools and
        providers) are imported then, not at the daemon's start."""
        if self._ask is None and self.ask_service is not None:
            self._ask = self.ask_service()
        return self._ask


CONTEXT = web.AppKey("context", ApiContext)
