"""The plumbing the strict test receivers share: an aiohttp server on loopback, scripted answers, waits.

A receiver subclasses `HttpReceiver` and checks each request's wire format in `check` (the point of
each receiver, so that stays in its own module). A request that fails a check is recorded in
`.errors` (a test asserts it stays empty) and refused; one that passes is kept in `requests` and
answered by the next behaviour of `script` (then by the kind's success status), and kept in
`accepted` too when that answer is a 2xx.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Protocol, Self, TypeVar

import orjson
from aiohttp import web

from tests.harness import wait_until

SPEC_FIELDS = [
    "id",
    "time",
    "host",
    "database_id",
    "database_name",
    "severity",
    "kind",
    "sqlstate",
    "message",
    "detail",
    "hint",
    "context",
    "statement",
    "user",
    "database",
    "application",
    "client",
    "pid",
    "duration_ms",
    "redacted",
]
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")


class WireFormatError(AssertionError):
    """The sender broke the documented format."""


# A behaviour answers one request: a status, or a coroutine that makes the answer (or holds it:
# timeouts); one that returns None leaves the answer to the receiver, as if unscripted.
Behaviour = int | Callable[..., Awaitable[web.StreamResponse | None]]


def retry_after(status: int, seconds: int, text: str = "slow down") -> Behaviour:
    """A behaviour: answer `status` with a Retry-After of `seconds`."""

    async def answer(*_: Any) -> web.StreamResponse:
        return web.Response(status=status, headers={"Retry-After": str(seconds)}, text=text)

    return answer


def hang(held: asyncio.Event | None = None) -> Behaviour:
    """A behaviour: never answer (the sender must give up at its timeout); sets `held` once holding."""

    async def answer(*_: Any) -> None:
        if held is not None:
            held.set()
        await asyncio.Event().wait()

    return answer


def hold(seconds: float) -> Behaviour:
    """A behaviour: answer as unscripted (200), but only after `seconds`, as a slow receiver would."""

    async def answer(*_: Any) -> None:
        await asyncio.sleep(seconds)

    return answer


class Received(Protocol):
    """A well-formed request as a receiver keeps it."""

    @property
    def ids(self) -> list[int]: ...


R = TypeVar("R", bound=Received)


@dataclass
class HttpReceiver(Generic[R]):
    """An aiohttp server on a free loopback port; subclasses give `check` and the class settings."""

    script: list[Any] = field(default_factory=list)  # behaviours, one a request, then SUCCESS
    requests: list[R] = field(default_factory=list)  # every well-formed request, in order
    accepted: list[R] = field(default_factory=list)  # those answered 2xx
    errors: list[str] = field(default_factory=list)  # format violations (a test fails on any)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    port: int = 0
    _runner: web.AppRunner | None = None

    URL_PATH: ClassVar[str] = ""  # what `url` adds to http://127.0.0.1:port
    SUCCESS: ClassVar[int] = 200  # the answer when nothing is scripted
    REFUSED: ClassVar[int] = 400  # the answer to a request that fails a check
    AUTO_DECOMPRESS: ClassVar[bool] = True  # False: `check` sees the body as sent (gzip)
    LINES_TIMEOUT: ClassVar[float] = 10  # wait_for_lines' default

    # --- lifecycle --------------------------------------------------------------------------------

    def client_max_size(self) -> int:
        return 64 << 20

    def add_routes(self, app: web.Application) -> None:
        app.router.add_route("*", "/{tail:.*}", self.handle)

    async def start(self) -> None:
        app = web.Application(client_max_size=self.client_max_size())
        self.add_routes(app)
        # Held responses (timeout tests) are not waited for at shutdown.
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5, auto_decompress=self.AUTO_DECOMPRESS)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def aclose(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    @property
    def url(self) -> str:
        """The URL a destination is configured with."""
        return f"http://127.0.0.1:{self.port}{self.URL_PATH}"

    # --- checking and answering ---------------------------------------------------------------------

    def fail(self, msg: str) -> WireFormatError:
        """Record a format violation; the error to raise."""
        self.errors.append(msg)
        return WireFormatError(msg)

    def json_array(self, data: bytes, max_items: int, what: str) -> list[Any]:
        """`data` parsed as a JSON array of 1 to `max_items` `what`, else a failure."""
        try:
            items = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise self.fail(f"body is not JSON: {exc}") from None
        if not isinstance(items, list) or not 1 <= len(items) <= max_items:
            raise self.fail(f"not an array of 1..{max_items} {what}")
        return items

    def check_increasing(self, ids: list[int], what: str) -> None:
        """The line ids of one request: each once, in order."""
        if ids != sorted(ids) or len(set(ids)) != len(ids):
            raise self.fail(f"{what} not increasing")

    def check(self, request: web.Request, raw: bytes) -> R:
        """The request as kept, or WireFormatError (from `fail`)."""
        raise NotImplementedError

    def refuse(self, exc: WireFormatError) -> web.StreamResponse:
        """The answer to a request that failed a check."""
        return web.Response(status=self.REFUSED, text=str(exc))

    async def handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            received = self.check(request, raw)
        except WireFormatError as exc:
            return self.refuse(exc)
        self.requests.append(received)
        self.arrived.set()
        return await self.respond(received)

    async def respond(self, received: R) -> web.StreamResponse:
        """Answer a well-formed request by the script."""
        behaviour = self.script.pop(0) if self.script else self.SUCCESS
        if callable(behaviour):
            result = await self.perform(behaviour, received)
            if result is not None:
                if 200 <= result.status < 300:
                    self.accept(received)
                return result
            behaviour = self.SUCCESS
        if 200 <= behaviour < 300:
            self.accept(received)
        return self.answer(behaviour)

    async def perform(self, behaviour: Callable[..., Any], received: R) -> web.StreamResponse | None:
        """Run a scripted coroutine (a receiver whose behaviours take the request passes it)."""
        return await behaviour()  # type: ignore[no-any-return]

    def accept(self, received: R) -> None:
        self.accepted.append(received)
        self.arrived.set()

    def answer(self, status: int) -> web.StreamResponse:
        """The answer of a scripted (or the SUCCESS) status."""
        if 200 <= status < 300:
            return web.Response(status=status)
        return web.Response(status=status, text="scripted")

    # --- waiting --------------------------------------------------------------------------------------

    async def wait_for(self, count: int, timeout: float = 10) -> None:
        """Until `count` well-formed requests arrived."""
        await wait_until(self.arrived, lambda: len(self.requests) >= count, timeout)

    async def wait_for_lines(self, count: int, timeout: float | None = None) -> None:
        """Until the accepted requests carry `count` lines in all."""

        def done() -> bool:
            return sum(len(r.ids) for r in self.accepted) >= count

        await wait_until(self.arrived, done, self.LINES_TIMEOUT if timeout is None else timeout)
