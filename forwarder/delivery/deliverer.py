"""One destination's delivery loop: cursor -> filter -> batch -> encode -> send -> outcome -> commit.

    +-> next batch after the cursor (filtered, within the sink's limits)
    |     none stored yet: wait for the store's notify
    |   persist it as IN FLIGHT (delivery_id + line ids)      <- survives a crash
    |   wait until next_attempt_at (backoff)
    |   encode -> send each request (clock-bounded timeout) -> classify
    |   commit in ONE transaction:
    |     delivered: cursor = upto, batch cleared, attempts = 0
    |     retry:     attempts + 1, next_attempt_at = now + wait, the batch stays (maybe narrowed)
    |     rejected:  counted as dropped, cursor = upto
    +---------------------------------------------------------+

Each destination has its own loop, cursor and backoff, so a dead receiver never delays another.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable
from dataclasses import replace

from forwarder import metrics
from forwarder.clock import Clock, with_timeout
from forwarder.delivery.backoff import retry_wait
from forwarder.sinks.base import DELIVERED, Outcome, OutcomeStatus, OutLine, Request, Response, Sink
from forwarder.sinks.credentials import Hidden
from forwarder.store import Store
from forwarder.store.destinations import DeliveryState, Destination

log = logging.getLogger(__name__)

DELIVERY_ID_PREFIX = "dlv_"
LAG_REFRESH_SECONDS = 1.0
NOTHING_HIDDEN = Hidden()


def new_delivery_id() -> str:
    """`dlv_` and an opaque token (SPEC 2.2)."""
    return DELIVERY_ID_PREFIX + secrets.token_urlsafe(16)


def combine(outcomes: list[tuple[Request, Outcome]]) -> Outcome:
    """The batch's outcome from its requests'. Every line ends up sent, rejected or to retry.

    A `rejected` outcome without `rejected_ids` rejects all of its request's lines.
    """
    retry_ids: list[int] = []
    rejected: list[int] = []
    retry_after: float | None = None
    failures: list[Outcome] = []
    for request, o in outcomes:
        rejected += (o.rejected_ids or request.line_ids) if o.status == "rejected" else o.rejected_ids
        if o.status == "retry":
            retry_ids += o.retry_ids if o.retry_ids is not None else request.line_ids
            if o.retry_after:
                retry_after = max(retry_after or 0.0, o.retry_after)
        if o.status != "delivered" or o.rejected_ids:
            failures.append(o)
    if not failures:
        return DELIVERED
    first = failures[0]
    total = sum(len(request.line_ids) for request, _ in outcomes)
    status: OutcomeStatus = "retry" if retry_ids else ("rejected" if len(rejected) >= total else "delivered")
    return Outcome(status, first.reason, first.failure, retry_after, tuple(retry_ids) or None, tuple(rejected))


async def exchange(
    sink: Sink, clock: Clock, request: Request, hidden: Hidden = NOTHING_HIDDEN
) -> tuple[Outcome, float]:
    """Send one request within the sink's timeout (on `clock`) and judge it; (outcome, seconds taken).

    What the receiver said reaches the sink's classify, and its reason everything after (the shown
    error, the store, the log), without `hidden`: the destination's credentials, in any kind.
    """
    started = clock.monotonic()
    response: Response | None = None
    error: BaseException | None = None
    try:
        response = await with_timeout(clock, sink.send(request), sink.timeout_seconds)
        response = hidden.response(replace(response, received_at=clock.now()))
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # judged by the sink's classify
        error = exc
    return hidden.outcome(_judged(sink, request, response, error)), clock.monotonic() - started


def _judged(sink: Sink, request: Request, response: Response | None, error: BaseException | None) -> Outcome:
    """The sink's classify, or a retry when it raised (a bug, or an answer it did not foresee).

    Raised out of here, it would fail the whole loop: the manager restarts it every few seconds,
    without the backoff or an error shown, and /test answers 500. As a retry, the batch waits out
    the backoff (SPEC 6.1) with the failure shown. The text names only the exception's type: its
    message may quote the receiver's answer, which may echo a credential.
    """
    try:
        return sink.classify(request, response, error)
    except Exception as exc:
        log.error(
            "could not judge a delivery attempt; it is retried",
            extra={"kind": sink.kind, "status": response.status if response else None, "error": type(exc).__name__},
        )
        return Outcome("retry", f"could not judge the answer: {type(exc).__name__}", "bad_response")


class Deliverer:
    """Delivers one destination's lines; `run()` until cancelled."""

    def __init__(
        self,
        dest: Destination,
        state: DeliveryState,
        sink: Sink,
        store: Store,
        clock: Clock,
        match: Callable[[int, int], bool],
        hidden: Hidden = NOTHING_HIDDEN,
    ) -> None:
        self.dest = dest
        self._hidden = hidden
        self.state = state  # as last persisted
        self._saving: DeliveryState | None = None
        self.sink = sink
        self._store = store
        self._clock = clock
        self._match = match
        self._labels = (dest.id, dest.type)
        self._lag_at = -1e18
        self.stopping = False  # set by a graceful stop: no new batch is started
        self.sending = False  # an attempt is in flight
        # Its counters exist at 0 from now on, so that the alerts' increase() sees their first
        # increment (metrics.init_destination_series); forget_destination removes them.
        metrics.init_destination_series(*self._labels)
        self._failures_gauge = metrics.CONSECUTIVE_FAILURES.labels(*self._labels)
        self._success_gauge = metrics.LAST_SUCCESS.labels(*self._labels)
        self._publish(state)

    async def run(self) -> None:
        """Deliver until cancelled, or until `stopping` is set (checked between batches)."""
        while not self.stopping:
            await self.step()

    async def step(self) -> None:
        """One batch: read (or reload the one in flight), wait out the backoff, send, commit."""
        s = self.state
        if s.inflight_lines is None:
            limits = self.sink.limits
            batch = await self._store.next_batch(s.cursor, self._match, limits.max_lines, limits.max_bytes)
            if batch is None:
                await self._refresh_lag(force=True)
                await self._store.wait_for_lines(s.cursor, 1.0)
                return
            if not batch.ids:  # everything after the cursor was filtered out
                await self._save(replace(s, cursor=batch.upto))
                return
            s = await self._save(
                replace(s, inflight_id=new_delivery_id(), inflight_lines=tuple(batch.ids), inflight_upto=batch.upto),
                new_batch=True,
            )
            # Retention may have deleted lines of the batch since it was read (and counted them as
            # dropped): the store kept only the others in flight, and only those are sent.
            if not s.inflight_lines:
                await self._save(self._settled(s))
                return
            kept = set(s.inflight_lines)
            lines = [OutLine(i, d) for i, d in zip(batch.ids, batch.docs, strict=True) if i in kept]
        else:
            # Wait out the backoff first: what the batch still holds is known only afterwards.
            wait = (s.next_attempt_at or 0.0) - self._clock.now()
            if wait > 0:
                await self._sleep_showing_lag(wait)
            found = await self._store.docs_by_ids(s.inflight_lines)
            gone = len(s.inflight_lines) - len(found)
            if gone:  # retention deleted lines of the batch before they could be delivered
                metrics.LINES_DROPPED.labels(*self._labels, "retention").inc(gone)
                s = replace(
                    s,
                    inflight_lines=tuple(i for i in s.inflight_lines if i in found),
                    dropped_lines=s.dropped_lines + gone,
                )
                await self._save(s)
            if not s.inflight_lines:
                await self._save(self._settled(s))
                return
            lines = [OutLine(i, found[i]) for i in s.inflight_lines]
        await self._refresh_lag()
        self.sending = True  # a graceful stop lets this attempt finish and be recorded
        try:
            outcome = await self.attempt(lines, self.state.inflight_id or new_delivery_id())
            await self._commit(outcome, len(lines))
        finally:
            self.sending = False

    async def attempt(self, lines: list[OutLine], delivery_id: str) -> Outcome:
        """Encode and send `lines` once; the combined outcome of their requests."""
        results: list[tuple[Request, Outcome]] = []
        for request in self.sink.encode(lines, delivery_id, self._clock.now()):
            outcome, seconds = await exchange(self.sink, self._clock, request, self._hidden)
            metrics.REQUEST_DURATION.labels(*self._labels).observe(seconds)
            if outcome.status == "delivered":
                metrics.BYTES_SENT.labels(*self._labels).inc(len(request.body))
            results.append((request, outcome))
        return combine(results)

    async def _commit(self, outcome: Outcome, n_lines: int) -> None:
        s = self.state
        now = self._clock.now()
        retry_ids = (outcome.retry_ids or s.inflight_lines or ()) if outcome.status == "retry" else ()
        rejected = len(outcome.rejected_ids)
        sent = max(0, n_lines - rejected - len(retry_ids))
        if sent:
            metrics.LINES_SENT.labels(*self._labels).inc(sent)
        if rejected:
            metrics.LINES_DROPPED.labels(*self._labels, "rejected").inc(rejected)
        s = replace(s, sent_lines=s.sent_lines + sent, dropped_lines=s.dropped_lines + rejected)
        if outcome.status != "delivered" or rejected:
            metrics.FAILURES.labels(*self._labels, outcome.failure or "error").inc()
            s = replace(s, last_error=outcome.reason, last_error_at=now)
        if outcome.status == "retry":
            attempts = s.attempts + 1
            wait = retry_wait(attempts, outcome.retry_after)
            await self._save(replace(s, inflight_lines=tuple(retry_ids), attempts=attempts, next_attempt_at=now + wait))
            if attempts == 1 or attempts % 10 == 0:
                log.warning(
                    "delivery failed; will retry",
                    extra={
                        "destination_id": self.dest.id,
                        "attempts": attempts,
                        "error": outcome.reason,
                        "retry_in_seconds": wait,
                    },
                )
            return
        if rejected:
            log.warning(
                "destination refused lines for good",
                extra={"destination_id": self.dest.id, "lines": rejected, "error": outcome.reason},
            )
        settled = self._settled(s)
        await self._save(replace(settled, last_success_at=now) if sent else settled)

    @staticmethod
    def _settled(s: DeliveryState) -> DeliveryState:
        """The batch is accounted for: the cursor moves past it and the backoff resets."""
        return replace(
            s,
            cursor=max(s.cursor, s.inflight_upto or s.cursor),
            inflight_id=None,
            inflight_lines=None,
            inflight_upto=None,
            attempts=0,
            next_attempt_at=None,
        )

    async def _save(self, state: DeliveryState, *, new_batch: bool = False) -> DeliveryState:
        """Persist `state` (with `new_batch`, a batch just read: the store may narrow it); returns it as saved."""
        sent = state.sent_lines - self.state.sent_lines
        dropped = state.dropped_lines - self.state.dropped_lines
        self._saving = state
        try:
            if new_batch:
                state = await self._store.start_batch(self.dest.id, state, sent, dropped)
            else:
                await self._store.save_delivery_state(self.dest.id, state, sent, dropped)
        finally:
            self._saving = None
        self.state = state
        self._publish(state)
        return state

    @property
    def shown_state(self) -> DeliveryState:
        """The state to show: the one being saved, if any, else the last persisted. Whatever a
        read of the store sees, read after it this is at least as new (a save that fails leaves
        `state` as persisted, so the loop's counts stay right)."""
        return self._saving or self.state

    def _publish(self, state: DeliveryState) -> None:
        """The destination's health gauges, from the state just persisted."""
        self._failures_gauge.set(state.attempts)
        self._success_gauge.set(state.last_success_at or 0)

    async def _sleep_showing_lag(self, seconds: float) -> None:
        """Sleep `seconds` (a backoff: up to 1 h, SPEC 6.1), refreshing the lag gauges every
        LAG_REFRESH_SECONDS meanwhile, as the loop does while it waits for new lines: lines stored
        during the backoff must raise forwarder_destination_lag_lines and the oldest line's age
        (docs/operations.md), as they raise the API's status at once. The deadline is fixed before
        the first slice, so the retry comes when one sleep of `seconds` would have ended it."""
        deadline = self._clock.monotonic() + seconds
        while (left := deadline - self._clock.monotonic()) > 0:
            await self._refresh_lag(force=True)
            await self._clock.sleep(min(left, LAG_REFRESH_SECONDS))

    async def _refresh_lag(self, *, force: bool = False) -> None:
        now = self._clock.monotonic()
        if not force and now - self._lag_at < LAG_REFRESH_SECONDS:
            return
        self._lag_at = now
        count, oldest_us = await self._store.lag(self.state.cursor)
        metrics.LAG_LINES.labels(*self._labels).set(count)
        age = max(0.0, self._clock.now() - oldest_us / 1_000_000) if oldest_us is not None else 0.0
        metrics.OLDEST_UNDELIVERED_AGE.labels(*self._labels).set(age)
