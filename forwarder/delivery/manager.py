"""Runs one Deliverer per enabled destination and takes changes (API, config file) without a restart.

What a destination is, and who may change it, is forwarder/usecases/destinations.py's business;
this module owns the loops, the outbound HTTP session, the network guard and the secrets' box.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
import ssl
from collections.abc import Sequence
from typing import Any

import aiohttp

from forwarder import metrics
from forwarder.clock import Clock, with_timeout
from forwarder.delivery.deliverer import Deliverer, combine, exchange, new_delivery_id
from forwarder.delivery.netguard import (
    DnsResolver,
    Refused,
    Resolver,
    check_host,
    guarded_session,
    open_checked_connection,
    parse_destination_url,
    resolve_checked,
)
from forwarder.logsetup import RepeatedFailureLog
from forwarder.model import LogLine
from forwarder.secrets import SecretBox
from forwarder.sinks import build_sink
from forwarder.sinks._http import HttpSender
from forwarder.sinks.base import Address, Outcome, OutLine, Sink, SinkEnv
from forwarder.sinks.credentials import Hidden
from forwarder.store import Store
from forwarder.store.destinations import DeliveryState, Destination
from forwarder.store.lines import Identity, encode_doc, splice_id

log = logging.getLogger(__name__)

TEST_TIMEOUT_SECONDS = 20.0
TEST_LINE_ID = 0  # stored lines start at 1: id "0" marks the test line
RESTART_SECONDS = 5.0  # after a failure of the loop itself (not of a delivery: those back off)
# A changed destination's request in flight may finish this long before its loop restarts: cut
# off, its batch is resent under the same delivery id, which the receiver had likely taken already
# (a burst of config edits resent a batch per edit). The reload or the API change waits as long.
CHANGE_GRACE_SECONDS = 5.0


class DeliveryManager:
    """Owns the outbound HTTP session (through the network guard) and the delivery tasks."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        box: SecretBox,
        allowed_networks: Sequence[ipaddress.IPv4Network | ipaddress.IPv6Network] = (),
        resolver: Resolver | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._box = box
        self.allowed_networks = tuple(allowed_networks)
        self.resolver: Resolver = resolver or DnsResolver()
        self._session: aiohttp.ClientSession | None = None
        self._running: dict[str, tuple[Deliverer, asyncio.Task[None]]] = {}
        self._codes: dict[str, int] = {}

    async def start(self) -> None:
        # No session-wide deadline: every request is bounded by its own kind's `timeout_seconds` on
        # the daemon's clock (deliverer.exchange), and a shorter total here would cut the kinds
        # that allow more (Datadog's and Better Stack's 30 s for a 5-10 MB request) at its own.
        self._session = guarded_session(self.allowed_networks, self.resolver, timeout_seconds=None)
        self._codes = await self._store.database_codes()
        for dest, state in await self._store.destinations():
            if dest.enabled:
                self._start(dest, state)

    async def check_address(self, address: Address) -> str | None:
        """Why a receiver's address is refused (not http(s), or not a public address), or None."""
        try:
            if address.url is not None:
                target = parse_destination_url(address.url)
                host, port = target.host, target.port
            else:
                assert address.host is not None and address.port is not None
                endpoint = check_host(address.host, address.port)
                host, port = endpoint.host, endpoint.port
            await resolve_checked(host, port, self.resolver, self.allowed_networks)
        except Refused as exc:
            return exc.reason
        return None

    async def _open_connection(
        self, host: str, port: int, ssl_context: ssl.SSLContext | None
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await open_checked_connection(host, port, self.resolver, self.allowed_networks, ssl_context)

    def open_secret(self, dest: Destination) -> str | None:
        """The destination's secret in clear (None when it has none)."""
        return self._box.open(dest.sealed_secret, dest.id) if dest.sealed_secret else None

    def seal_secret(self, secret: str, dest_id: str) -> bytes:
        """The secret encrypted for storage, bound to the destination's id."""
        return self._box.seal(secret, dest_id)

    def _sink(self, dest: Destination) -> tuple[Sink, Hidden]:
        """The destination's sink, and what no text from its receiver may show (its credentials)."""
        assert self._session is not None, "start() first"
        env = SinkEnv(HttpSender(self._session), self._open_connection, self._store.store_id)
        secret = self.open_secret(dest)
        return build_sink(dest.type, dest.config, secret, env), Hidden.of_destination(dest.config, secret)

    def _start(self, dest: Destination, state: DeliveryState) -> None:
        sink, hidden = self._sink(dest)
        match = dest.filter.matcher(self._codes)
        deliverer = Deliverer(dest, state, sink, self._store, self._clock, match, hidden)
        task = asyncio.create_task(self._run(deliverer), name=f"deliver:{dest.id}")
        self._running[dest.id] = (deliverer, task)

    async def _run(self, deliverer: Deliverer) -> None:
        # A failure that repeats (a full disk fails every save) is logged once with its traceback,
        # then summed up once a minute, not every 5 s per destination.
        failures = RepeatedFailureLog(log, self._clock)
        extra = {"destination_id": deliverer.dest.id}
        while not deliverer.stopping:
            try:
                await deliverer.step()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a bug must not end this destination's deliveries for good
                failures.failure("delivery loop failed; restarting it", exc, extra)
                await self._clock.sleep(RESTART_SECONDS)
            else:
                failures.ok("delivery loop works again", extra)

    async def _stop(self, dest_id: str, grace_seconds: float = 0.0) -> None:
        """Stop the destination's loop; a request in flight may finish for `grace_seconds`."""
        running = self._running.pop(dest_id, None)
        if running is None:
            return
        deliverer, task = running
        deliverer.stopping = True  # no new batch: the loop ends once this attempt is recorded
        if deliverer.sending and grace_seconds > 0:
            with contextlib.suppress(TimeoutError):
                await with_timeout(self._clock, _settled([task], None), grace_seconds)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await deliverer.sink.aclose()

    def state(self, dest_id: str) -> DeliveryState | None:
        """The running loop's state (fresher than the store's between commits): read after the
        store, it is at least as new as what the store showed."""
        running = self._running.get(dest_id)
        return running[0].shown_state if running else None

    async def apply(self, dest_id: str, *, retry_now: bool = False) -> None:
        """Take a created or changed destination: restart its loop from its stored state.

        `retry_now`: the backoff ends (attempts and next attempt cleared) before the loop restarts,
        so its batch in flight, kept with its delivery id, is sent at once. A request in flight
        may finish first (CHANGE_GRACE_SECONDS): its outcome is recorded, not sent again.
        """
        await self._stop(dest_id, CHANGE_GRACE_SECONDS)
        if retry_now:
            # Only once the old loop is stopped: a save of its last outcome would set them again.
            await self._store.end_backoff(dest_id)
        self._codes = await self._store.database_codes()
        found = await self._store.destination(dest_id)
        if found is not None and found[0].enabled:
            self._start(*found)

    async def remove(self, dest: Destination) -> None:
        """Stop the destination's loop and forget its metrics (before it leaves the store)."""
        await self._stop(dest.id)
        metrics.forget_destination(dest.id, dest.type)

    async def test(self, dest: Destination) -> tuple[bool, str | None]:
        """Send one line marked as a test; (True, None) or (False, the error shown to the caller)."""
        sink, hidden = self._sink(dest)
        now = self._clock.now()
        line = LogLine(
            time_us=int(now * 1_000_000),
            severity="LOG",
            kind="other",
            message=f"forwarder test line for destination {dest.name!r}: delivery works",
        )
        identity = Identity(code=0, database_id="", database_name="", host=socket.gethostname())
        doc = splice_id(TEST_LINE_ID, encode_doc(identity, line))

        async def _send() -> Outcome:
            results = []
            for request in sink.encode([OutLine(TEST_LINE_ID, doc)], new_delivery_id(), self._clock.now()):
                results.append((request, (await exchange(sink, self._clock, request, hidden))[0]))
            return combine(results)

        try:
            outcome = await with_timeout(self._clock, _send(), TEST_TIMEOUT_SECONDS)
        except TimeoutError:
            return False, f"no answer within {TEST_TIMEOUT_SECONDS:g} s"
        finally:
            await sink.aclose()
        if outcome.status == "delivered" and not outcome.rejected_ids:
            return True, None
        return False, outcome.reason

    async def drain(self, grace_seconds: float, cut: asyncio.Event | None = None) -> None:
        """Stop delivering: requests in flight may finish (and be recorded) for `grace_seconds`,
        or until `cut` is set (a second SIGTERM/SIGINT forces the stop).

        A loop that is waiting (for lines, or out a backoff) stops at once; one that is sending
        stops after recording the outcome. Past the grace, the rest are cut off: their batch stays
        persisted as in flight and is resent, under the same delivery id, after the restart. Those
        are logged (their ids, the lines in flight), so that the resend is no surprise.
        """
        sending: dict[str, tuple[Deliverer, asyncio.Task[None]]] = {}
        for dest_id, (deliverer, task) in self._running.items():
            deliverer.stopping = True
            if deliverer.sending:
                sending[dest_id] = (deliverer, task)
            else:
                task.cancel()
        if sending:
            log.info(
                "waiting for deliveries in flight",
                extra={"destinations": len(sending), "grace_seconds": grace_seconds},
            )
            with contextlib.suppress(TimeoutError):
                await with_timeout(self._clock, _settled([t for _, t in sending.values()], cut), grace_seconds)
            cut_off = {dest_id: d for dest_id, (d, task) in sending.items() if not task.done()}
            if cut_off:
                forced = cut is not None and cut.is_set()
                log.warning(  # one message (a log pipeline groups by it); why is the `reason` field
                    "deliveries in flight cut off; they are resent after the restart with the same delivery id",
                    extra={
                        "destination_ids": sorted(cut_off),
                        "lines_in_flight": sum(len(d.shown_state.inflight_lines or ()) for d in cut_off.values()),
                        "reason": "forced" if forced else "grace_expired",
                        "grace_seconds": grace_seconds,
                    },
                )
        await self.aclose()

    async def aclose(self) -> None:
        for dest_id in list(self._running):
            await self._stop(dest_id)
        if self._session is not None:
            await self._session.close()
            self._session = None


async def _settled(tasks: Sequence[asyncio.Task[None]], cut: asyncio.Event | None) -> None:
    """Until every task is done, or `cut` is set."""
    waits: set[asyncio.Future[Any]] = {asyncio.ensure_future(asyncio.wait(tasks))}
    if cut is not None:
        waits.add(asyncio.ensure_future(cut.wait()))
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in waits:
            waiting.cancel()
