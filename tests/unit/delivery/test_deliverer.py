"""The delivery loop on its own: a scripted sink, the fake clock and a real store in a tmp dir.

Each test drives `Deliverer.step()` (one batch) or `run()` and then looks at what a user would:
which lines went out under which delivery id, and the destination's state as the store keeps it
(cursor, batch in flight, attempts, next attempt, counts), which is what survives a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import orjson
import pytest

from forwarder import metrics
from forwarder.clock import FakeClock
from forwarder.config import DatabaseConfig, LogSourceConfig, StoreConfig
from forwarder.delivery.deliverer import LAG_REFRESH_SECONDS, Deliverer
from forwarder.model import Kind, LogLine
from forwarder.sinks.base import DELIVERED, BatchLimits, Outcome, OutLine, Request, Response
from forwarder.store import Identity, Store
from forwarder.store.destinations import DeliveryState, Destination, LineFilter

T0 = 1_800_000_000.0
BACKOFF = [30, 60, 120, 240, 480, 960, 1920, 3600, 3600]  # SPEC 6.1: 30 s, doubling, capped at 1 h
WAIT = 5.0  # seconds any step may take on this machine's real clock before the test fails


@dataclass(frozen=True)
class Sent:
    """What one request carried, read back from its body."""

    delivery_id: str
    ids: list[int]
    messages: list[str]


class FakeSink:
    """A sink with scripted outcomes: one request per `per_request` lines, each answered by the next
    outcome of `script` (then delivered). A request whose outcome is `HANG` gets no answer; one whose
    outcome is an exception has classify raise it (a sink's bug)."""

    kind: ClassVar[str] = "fake"
    timeout_seconds = 10.0

    def __init__(
        self, script: Sequence[Outcome | Exception | None] = (), *, per_request: int = 100, max_lines: int = 100
    ) -> None:
        self.limits = BatchLimits(max_lines=max_lines, max_bytes=1 << 20)
        self.per_request = per_request
        self.script = list(script)
        self.sent: list[Sent] = []  # every request send() was given, in order
        self.release = asyncio.Event()  # ends a HANG
        self.holding = asyncio.Event()  # set while a HANG request waits
        self.errors: list[BaseException | None] = []  # what classify was given instead of an answer
        self.closed = False

    def encode(self, lines: Sequence[OutLine], delivery_id: str, now: float) -> list[Request]:
        return [
            Request(
                line_ids=tuple(line.id for line in chunk),
                body=orjson.dumps(
                    {"delivery_id": delivery_id, "sent_at": now, "lines": [orjson.loads(x.doc) for x in chunk]}
                ),
            )
            for chunk in (lines[i : i + self.per_request] for i in range(0, len(lines), self.per_request))
        ]

    async def send(self, request: Request) -> Response:
        body = orjson.loads(request.body)
        self.sent.append(
            Sent(body["delivery_id"], [int(x["id"]) for x in body["lines"]], [x["message"] for x in body["lines"]])
        )
        outcome = self.script[0] if self.script else DELIVERED
        if outcome is None:  # HANG
            self.holding.set()
            await self.release.wait()
            self.holding.clear()
        return Response(200, {})

    def classify(self, request: Request, response: Response | None, error: BaseException | None) -> Outcome:
        self.errors.append(error)
        outcome = self.script.pop(0) if self.script else DELIVERED
        if isinstance(outcome, Exception):
            raise outcome
        if error is not None:
            return Outcome("retry", str(error) or type(error).__name__, "timeout")
        return outcome or DELIVERED

    async def aclose(self) -> None:
        self.closed = True


HANG = None


def retry(reason: str = "HTTP 503", *, after: float | None = None, ids: tuple[int, ...] | None = None) -> Outcome:
    return Outcome("retry", reason, "http_5xx", retry_after=after, retry_ids=ids)


def rejected(reason: str = "HTTP 400", ids: tuple[int, ...] = ()) -> Outcome:
    return Outcome("rejected", reason, "http_4xx", rejected_ids=ids)


@dataclass
class Env:
    """A store with database "main" and destination "d" (starting at the head), on a fake clock."""

    store: Store
    clock: FakeClock
    identity: Identity
    dest: Destination
    made: list[Deliverer] = field(default_factory=list)

    async def add(self, n: int, *, kind: Kind = "error", start: int = 0) -> list[int]:
        """`n` lines "line {start}", ...; their ids."""
        lines = [
            LogLine(time_us=int(self.clock.now() * 1e6) + i, severity="LOG", kind=kind, message=f"line {start + i}")
            for i in range(n)
        ]
        head = await self.store.append(self.identity, lines, [], 0)
        return list(range(head - n + 1, head + 1))

    async def stored(self) -> DeliveryState:
        """The destination's state as the store has it (what a restart starts from)."""
        found = await self.store.destination(self.dest.id)
        assert found is not None
        return found[1]

    async def deliverer(self, sink: FakeSink, line_filter: LineFilter | None = None) -> Deliverer:
        """A loop for "d" from its stored state, as the delivery manager starts one."""
        match = (line_filter or self.dest.filter).matcher(await self.store.database_codes())
        d = Deliverer(self.dest, await self.stored(), sink, self.store, self.clock, match)
        self.made.append(d)
        return d


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    clock = FakeClock(start=T0)
    store = Store(StoreConfig(path=tmp_path / "s.db"), clock)
    await store.start()
    try:
        identity = await store.register_database(
            DatabaseConfig(id="main", name="Main", host="db1", log=LogSourceConfig(path=str(tmp_path / "none/*.log")))
        )
        dest = Destination("d", "fake", "fake", True, {}, LineFilter(), None, T0, T0)
        await store.add_destination(dest, org="default", actor="test")
        yield Env(store, clock, identity, dest)
    finally:
        await store.aclose()


async def cancelled(task: asyncio.Task[None]) -> None:
    """Cancel `task` (if still running) and wait until it has ended."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def step(d: Deliverer) -> None:
    async with asyncio.timeout(WAIT):
        await d.step()


async def step_after(env: Env, d: Deliverer, seconds: float) -> None:
    """One step that first waits out a backoff: it must wait exactly `seconds`, and sends only after."""
    sink = d.sink
    assert isinstance(sink, FakeSink)
    task = asyncio.create_task(d.step())
    try:
        async with asyncio.timeout(WAIT):
            await waited_out(env, task, sink, seconds)
    finally:
        await cancelled(task)


async def waited_out(env: Env, task: asyncio.Task[None], sink: FakeSink, seconds: float) -> None:
    """Move time `seconds` while `task` waits out a backoff, then let it end; it must send nothing before.

    The loop waits in slices (it refreshes the lag gauges between them): time moves a slice at a
    time, each once the loop sleeps."""
    sent = len(sink.sent)
    waited = 0.0
    while waited < seconds and waited != pytest.approx(seconds):
        slice_ = await env.clock.until_sleeping()
        assert len(sink.sent) == sent, "sent before the backoff ended"
        assert not task.done(), f"the step ended after {waited} s of a {seconds} s backoff"
        assert waited + slice_ <= seconds or waited + slice_ == pytest.approx(seconds), "waited too long"
        env.clock.advance(slice_)
        waited += slice_
    await task


def dropped_metric(reason: str) -> float:
    return (
        metrics.REGISTRY.get_sample_value(
            "forwarder_destination_lines_dropped_total", {"destination_id": "d", "type": "fake", "reason": reason}
        )
        or 0.0
    )


def sent_metric() -> float:
    return (
        metrics.REGISTRY.get_sample_value(
            "forwarder_destination_lines_sent_total", {"destination_id": "d", "type": "fake"}
        )
        or 0.0
    )


# --- delivered --------------------------------------------------------------------------------------


async def test_a_batch_of_new_lines_is_delivered_and_the_cursor_committed(env: Env) -> None:
    ids = await env.add(250)
    sink = FakeSink(max_lines=100)
    d = await env.deliverer(sink)
    for _ in range(3):
        await step(d)
    assert [s.ids for s in sink.sent] == [ids[:100], ids[100:200], ids[200:]]
    assert [m for s in sink.sent for m in s.messages] == [f"line {i}" for i in range(250)]
    assert len({s.delivery_id for s in sink.sent}) == 3
    assert all(s.delivery_id.startswith("dlv_") for s in sink.sent)
    state = await env.stored()
    assert state.cursor == ids[-1] and state.inflight_id is None and state.inflight_lines is None
    assert state.sent_lines == 250 and state.attempts == 0 and state.last_success_at == T0
    assert state.last_error is None


async def test_the_batch_is_stored_as_in_flight_before_it_is_sent(env: Env) -> None:
    ids = await env.add(5)
    sink = FakeSink([HANG])
    d = await env.deliverer(sink)
    task = asyncio.create_task(d.step())
    try:
        async with asyncio.timeout(WAIT):
            await sink.holding.wait()
        state = await env.stored()
        assert state.inflight_lines == tuple(ids) and state.inflight_id == sink.sent[0].delivery_id
        assert state.cursor == 0  # not delivered yet
    finally:
        await cancelled(task)


# --- retries --------------------------------------------------------------------------------------------


async def test_a_failure_retries_the_same_lines_under_the_same_id_after_30_s_doubling_to_1_h(env: Env) -> None:
    ids = await env.add(7)
    sink = FakeSink([retry(f"HTTP 503 #{n}") for n in range(1, len(BACKOFF) + 1)])
    d = await env.deliverer(sink)
    await step(d)
    first = sink.sent[0]
    for attempt, wait in enumerate(BACKOFF, start=1):
        state = await env.stored()
        assert state.attempts == attempt and state.last_error == f"HTTP 503 #{attempt}"
        assert state.inflight_id == first.delivery_id and state.inflight_lines == tuple(ids)
        assert state.next_attempt_at == pytest.approx(env.clock.now() + wait)
        assert state.cursor == 0 and state.sent_lines == 0
        await step_after(env, d, wait)
    assert {s.delivery_id for s in sink.sent} == {first.delivery_id}
    assert [s.ids for s in sink.sent] == [ids] * (len(BACKOFF) + 1)
    state = await env.stored()
    assert state.cursor == ids[-1] and state.attempts == 0 and state.next_attempt_at is None
    assert state.inflight_id is None and state.sent_lines == 7
    assert state.last_error == f"HTTP 503 #{len(BACKOFF)}"  # the last error stays shown, with when it was
    assert state.last_success_at == env.clock.now()


async def test_retry_after_lengthens_the_wait(env: Env) -> None:
    await env.add(3)
    sink = FakeSink([retry("HTTP 429", after=400), retry("HTTP 429", after=5)])
    d = await env.deliverer(sink)
    await step(d)
    await step_after(env, d, 400)  # not the 30 s backoff
    await step_after(env, d, 60)  # a Retry-After shorter than the backoff does not shorten it
    assert len(sink.sent) == 3 and (await env.stored()).sent_lines == 3


async def test_a_classify_that_raises_fails_the_attempt_not_the_loop(env: Env) -> None:
    ids = await env.add(3)
    # What a receiver sent could make a sink's classify raise (Retry-After "\u00b2" once did). Out of
    # the loop, the manager restarted it every 5 s with no backoff and no error shown; as a failed
    # attempt it backs off (SPEC 6.1) and shows an error that quotes nothing of the answer.
    echo = "could not convert string to float: 'Bearer sk-echoed'"
    sink = FakeSink([ValueError(echo), KeyError(echo)])
    d = await env.deliverer(sink)
    await step(d)
    state = await env.stored()
    assert state.attempts == 1 and state.next_attempt_at == pytest.approx(env.clock.now() + 30)
    assert state.last_error == "could not judge the answer: ValueError"
    assert state.inflight_lines == tuple(ids) and state.cursor == 0 and state.sent_lines == 0
    await step_after(env, d, 30)
    state = await env.stored()
    assert state.attempts == 2 and state.last_error == "could not judge the answer: KeyError"
    await step_after(env, d, 60)
    assert [s.ids for s in sink.sent] == [ids] * 3 and len({s.delivery_id for s in sink.sent}) == 1
    state = await env.stored()
    assert state.cursor == ids[-1] and state.sent_lines == 3 and state.attempts == 0


async def test_a_request_with_no_answer_fails_at_the_sinks_timeout_on_the_clock(env: Env) -> None:
    await env.add(2)
    sink = FakeSink([HANG])
    d = await env.deliverer(sink)
    task = asyncio.create_task(d.step())
    try:
        async with asyncio.timeout(WAIT):
            assert await env.clock.until_sleeping() == pytest.approx(sink.timeout_seconds)
            env.clock.advance(sink.timeout_seconds)
            await task
    finally:
        await cancelled(task)
    assert isinstance(sink.errors[0], TimeoutError)
    state = await env.stored()
    assert state.attempts == 1 and state.next_attempt_at == pytest.approx(env.clock.now() + 30)


async def test_a_partial_failure_retries_only_the_lines_still_owed(env: Env) -> None:
    ids = await env.add(6)
    # Two requests of three lines: the first is delivered, the second fails for its middle line only.
    sink = FakeSink([DELIVERED, retry("item failed", ids=(ids[4],))], per_request=3)
    d = await env.deliverer(sink)
    await step(d)
    state = await env.stored()
    assert state.inflight_lines == (ids[4],) and state.sent_lines == 5 and state.cursor == 0
    await step_after(env, d, 30)
    assert [s.ids for s in sink.sent] == [ids[:3], ids[3:], [ids[4]]]
    assert sink.sent[2].delivery_id == sink.sent[0].delivery_id
    state = await env.stored()
    assert state.cursor == ids[-1] and state.sent_lines == 6 and state.inflight_lines is None


async def test_a_failed_request_among_several_retries_only_its_own_lines(env: Env) -> None:
    ids = await env.add(6)
    sink = FakeSink([retry(), DELIVERED], per_request=3)
    d = await env.deliverer(sink)
    await step(d)
    assert (await env.stored()).inflight_lines == tuple(ids[:3])
    await step_after(env, d, 30)
    assert [s.ids for s in sink.sent] == [ids[:3], ids[3:], ids[:3]]
    assert (await env.stored()).sent_lines == 6


# --- rejected ---------------------------------------------------------------------------------------------


async def test_rejected_lines_are_counted_as_dropped_and_the_cursor_moves_on(env: Env) -> None:
    ids = await env.add(4)
    before = dropped_metric("rejected")
    sink = FakeSink([rejected("HTTP 413 too large")])
    d = await env.deliverer(sink)
    await step(d)
    state = await env.stored()
    assert state.cursor == ids[-1] and state.inflight_lines is None and state.attempts == 0
    assert state.dropped_lines == 4 and state.sent_lines == 0
    assert state.last_error == "HTTP 413 too large" and state.last_success_at is None
    assert dropped_metric("rejected") - before == 4
    more = await env.add(2)
    await step(d)  # the next batch goes at once: no backoff after a refusal
    assert sink.sent[-1].ids == more and (await env.stored()).sent_lines == 2


async def test_lines_refused_inside_a_delivered_request_are_dropped_the_rest_sent(env: Env) -> None:
    ids = await env.add(5)
    sink = FakeSink([Outcome("delivered", "mapping error", "rejected", rejected_ids=(ids[1], ids[3]))])
    d = await env.deliverer(sink)
    await step(d)
    state = await env.stored()
    assert state.cursor == ids[-1] and state.sent_lines == 3 and state.dropped_lines == 2
    assert state.last_error == "mapping error" and state.last_success_at == env.clock.now()


# --- retention ------------------------------------------------------------------------------------------


RETENTION = 7 * 86400  # StoreConfig's default retention_days


async def test_retention_during_a_partial_retry_drops_only_the_lines_not_delivered(env: Env) -> None:
    ids = await env.add(10)
    behind = await env.add(4, start=10)  # after the batch: never read
    sent_before, dropped_before = sent_metric(), dropped_metric("retention")
    # Two requests of five lines: one line of the second is to be retried (an Elasticsearch item's
    # 429), so the batch in flight narrows to it while the cursor stays before the batch.
    sink = FakeSink([DELIVERED, retry("item 429", ids=(ids[7],))], per_request=5, max_lines=10)
    d = await env.deliverer(sink)
    await step(d)
    state = await env.stored()
    assert (state.cursor, state.inflight_lines, state.inflight_upto) == (0, (ids[7],), ids[-1])
    assert state.sent_lines == 9
    env.clock.advance(RETENTION + 86400)  # the lines age past retention while the line waits its retry
    assert await env.store.retention_once() == 14
    state = await env.stored()
    assert state.dropped_lines == 4  # the lines behind the batch; not its 9 delivered ones
    await step(d)  # the retry finds its line gone: the loop counts it
    state = await env.stored()
    assert state.cursor == ids[-1] and state.inflight_lines is None
    assert (state.sent_lines, state.dropped_lines) == (9, 5)  # 9 + 5 = the 14 lines, each counted once
    assert (sent_metric() - sent_before, dropped_metric("retention") - dropped_before) == (9, 5)
    assert len(sink.sent) == 2 and set(behind).isdisjoint(i for s in sink.sent for i in s.ids)


def retention_after_reading(env: Env, monkeypatch: pytest.MonkeyPatch, *, deletes: int) -> None:
    """Make retention run (deleting `deletes` lines) right after the loop reads its next batch,
    before the batch is stored as in flight."""
    read = env.store.next_batch

    async def read_then_retention(*args: Any) -> Any:
        batch = await read(*args)
        assert await env.store.retention_once() == deletes
        return batch

    monkeypatch.setattr(env.store, "next_batch", read_then_retention)


async def test_retention_between_reading_a_batch_and_marking_it_in_flight_counts_each_line_once(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = await env.add(3)
    env.clock.advance(RETENTION + 86400)
    new = await env.add(2, start=3)
    sent_before, dropped_before = sent_metric(), dropped_metric("retention")
    # Retention counts the old lines as dropped (after the cursor, nothing in flight). Sent from
    # the copy read, they would count as sent too.
    retention_after_reading(env, monkeypatch, deletes=3)
    sink = FakeSink()
    d = await env.deliverer(sink)
    await step(d)
    assert [s.ids for s in sink.sent] == [new]
    state = await env.stored()
    assert state.cursor == new[-1] and (state.sent_lines, state.dropped_lines) == (2, 3)
    assert (sent_metric() - sent_before, dropped_metric("retention") - dropped_before) == (2, 3)
    assert old[-1] < new[0]


async def test_retention_deleting_a_whole_batch_just_read_moves_the_cursor_past_it(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = await env.add(3)
    env.clock.advance(RETENTION + 86400)
    retention_after_reading(env, monkeypatch, deletes=3)
    sink = FakeSink()
    d = await env.deliverer(sink)
    await step(d)
    assert sink.sent == []
    state = await env.stored()
    assert state.cursor == ids[-1] and state.inflight_lines is None and state.inflight_id is None
    assert (state.sent_lines, state.dropped_lines) == (0, 3)


# --- filter -----------------------------------------------------------------------------------------------


async def test_the_filter_skips_other_lines_but_the_cursor_passes_them(env: Env) -> None:
    errors = await env.add(2, kind="error")
    others = await env.add(3, kind="connection", start=2)
    more = await env.add(1, kind="error", start=5)
    sink = FakeSink()
    d = await env.deliverer(sink, LineFilter(kinds=("error",)))
    await step(d)
    assert [s.ids for s in sink.sent] == [errors + more]
    assert (await env.stored()).cursor == more[-1]
    tail = await env.add(4, kind="connection", start=6)
    await step(d)  # nothing to send: the cursor still moves past them
    assert len(sink.sent) == 1
    state = await env.stored()
    assert state.cursor == tail[-1] and state.sent_lines == 3 and state.dropped_lines == 0
    assert set(others).isdisjoint(i for s in sink.sent for i in s.ids)


# --- restart and stop ---------------------------------------------------------------------------------------


async def test_after_a_restart_the_failed_batch_is_resent_with_the_same_id_when_its_backoff_ends(env: Env) -> None:
    ids = await env.add(3)
    first = FakeSink([retry()])
    await step(await env.deliverer(first))
    await env.add(2)  # new lines do not join a batch already in flight
    env.clock.advance(10)
    second = FakeSink()
    d = await env.deliverer(second)  # a new process: only the stored state carries over
    await step_after(env, d, 20)  # what is left of the 30 s
    assert second.sent == [first.sent[0]]
    assert (await env.stored()).cursor == ids[-1]


async def test_a_batch_cut_off_mid_send_is_resent_at_once_with_the_same_id(env: Env) -> None:
    ids = await env.add(3)
    first = FakeSink([HANG])
    task = asyncio.create_task((await env.deliverer(first)).step())
    async with asyncio.timeout(WAIT):
        await first.holding.wait()
    task.cancel()  # the process dies mid-request: no outcome is ever recorded
    with pytest.raises(asyncio.CancelledError):
        await task
    second = FakeSink()
    await step(await env.deliverer(second))
    assert [(s.delivery_id, s.ids) for s in second.sent] == [(first.sent[0].delivery_id, ids)]
    assert (await env.stored()).cursor == ids[-1]


async def test_stopping_while_sending_records_the_outcome_and_starts_no_new_batch(env: Env) -> None:
    ids = await env.add(3)
    sink = FakeSink([HANG], max_lines=2)
    d = await env.deliverer(sink)
    run = asyncio.create_task(d.run())
    try:
        async with asyncio.timeout(WAIT):
            await sink.holding.wait()
            assert d.sending
            d.stopping = True  # a graceful stop (the manager's drain) while the request is out
            sink.release.set()
            await run
    finally:
        await cancelled(run)
    state = await env.stored()
    assert state.cursor == ids[1] and state.sent_lines == 2 and state.inflight_lines is None
    assert len(sink.sent) == 1  # the third line waits for the next start
    assert not d.sending


# --- metrics --------------------------------------------------------------------------------------------


def dest_metric(name: str, **labels: str) -> float | None:
    return metrics.REGISTRY.get_sample_value(name, {"destination_id": "d", "type": "fake", **labels})


async def test_a_destinations_counters_exist_at_0_from_the_start_of_its_loop(env: Env) -> None:
    """Before any line is sent, dropped or failed: increase() over the first scrapes must see the
    first increment (docs/operations.md, "Metrics"); deleting the destination removes them."""
    metrics.forget_destination("d", "fake")  # whatever an earlier test of this process left
    assert dest_metric("forwarder_destination_lines_sent_total") is None
    await env.deliverer(FakeSink())
    assert dest_metric("forwarder_destination_lines_sent_total") == 0
    for reason in metrics.DROP_REASONS:
        assert dest_metric("forwarder_destination_lines_dropped_total", reason=reason) == 0, reason
    for reason in metrics.failure_reasons("fake"):
        assert dest_metric("forwarder_destination_failures_total", reason=reason) == 0, reason
    metrics.forget_destination("d", "fake")
    for family in metrics.REGISTRY.collect():
        assert not [s for s in family.samples if s.labels.get("destination_id") == "d"], family.name


async def test_the_lag_gauges_follow_new_lines_while_a_backoff_is_waited_out(env: Env) -> None:
    """A backoff lasts up to 1 h: lines stored meanwhile show in the lag gauges within
    LAG_REFRESH_SECONDS, and the retry still comes when the backoff ends."""
    await env.add(3)
    sink = FakeSink([retry()])
    d = await env.deliverer(sink)
    await step(d)  # fails: the batch waits out 30 s
    task = asyncio.create_task(d.step())
    try:
        async with asyncio.timeout(WAIT):
            await env.clock.until_sleeping()  # the wait began with the lag as it was
            assert dest_metric("forwarder_destination_lag_lines") == 3
            assert dest_metric("forwarder_destination_oldest_undelivered_age_seconds") == pytest.approx(0, abs=1e-3)
            env.clock.advance(LAG_REFRESH_SECONDS)
            await env.clock.until_sleeping()
            await env.add(5, start=3)
            env.clock.advance(LAG_REFRESH_SECONDS)
            await env.clock.until_sleeping()  # the loop refreshed the gauges, and waits again
            assert dest_metric("forwarder_destination_lag_lines") == 8
            age = dest_metric("forwarder_destination_oldest_undelivered_age_seconds")
            assert age == pytest.approx(2 * LAG_REFRESH_SECONDS, abs=1e-3)
            assert len(sink.sent) == 1 and not task.done()  # still waiting out the backoff
            await waited_out(env, task, sink, BACKOFF[0] - 2 * LAG_REFRESH_SECONDS)
    finally:
        await cancelled(task)
    assert len(sink.sent) == 2 and (await env.stored()).attempts == 0
