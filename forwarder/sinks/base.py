"""The one seam every destination kind fills (DESIGN section 4).

A sink turns lines into requests (`encode`, pure), sends one request (`send`, I/O only) and
judges what came back (`classify`, pure). Retries, backoff, cursors, metrics and the error shown
on the destination live in `delivery/`, once for every kind.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol

import orjson


class AddressRefused(Exception):
    """A destination address the network guard will not connect to (raised by delivery/netguard.py).

    Defined here so sinks can recognise it without importing the delivery layer.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class BatchLimits:
    """At most this many lines and encoded bytes (before compression) per batch."""

    max_lines: int
    max_bytes: int


@dataclass(frozen=True, slots=True)
class OutLine:
    """A stored line on its way out: its id and SPEC 2.1 document (id spliced in, serialized once)."""

    id: int
    doc: bytes

    def fields(self) -> dict[str, Any]:
        """The document as a dict, for kinds that reshape it."""
        result: dict[str, Any] = orjson.loads(self.doc)
        return result


@dataclass(frozen=True, slots=True)
class Request:
    """One request (or one write, for stream kinds) carrying `line_ids`."""

    line_ids: tuple[int, ...]
    body: bytes = field(repr=False)  # up to megabytes
    method: str = "POST"
    url: str = ""
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # may carry a credential
    success_body_bytes: int = 0  # how much of a 2xx answer's body the sink's classify reads (bulk items)


@dataclass(frozen=True, slots=True)
class Response:
    """What the receiver answered. The body of an error is cut to a few KiB (enough for its text);
    a 2xx body is read only up to the request's `success_body_bytes`."""

    status: int
    headers: Mapping[str, str]
    body: bytes = b""
    received_at: float = 0.0  # unix seconds, stamped by the delivery loop from its clock


OutcomeStatus = Literal["delivered", "retry", "rejected"]


@dataclass(frozen=True, slots=True)
class Outcome:
    """How one request went.

    `retry_ids` narrows a retry to some lines (a partial failure); `rejected_ids` are lines the
    receiver will never accept (counted as dropped). `failure` is the metric reason label;
    `reason` the text shown on the destination (never a secret).
    """

    status: OutcomeStatus
    reason: str = ""
    failure: str = ""
    retry_after: float | None = None
    retry_ids: tuple[int, ...] | None = None
    rejected_ids: tuple[int, ...] = ()


DELIVERED = Outcome("delivered")


class Sink(Protocol):
    """A destination kind."""

    kind: ClassVar[str]  # == the API's `type`
    limits: BatchLimits
    timeout_seconds: float  # a request with no answer by then is a failure (connect and TLS included)

    def encode(self, lines: Sequence[OutLine], delivery_id: str, now: float) -> list[Request]:
        """Requests carrying `lines`; pure. `now` (unix seconds) dates the attempt (signatures, sent_at)."""
        ...

    async def send(self, request: Request) -> Response:
        """Send one request; raises on a connection failure. I/O only."""
        ...

    def classify(self, request: Request, response: Response | None, error: BaseException | None) -> Outcome:
        """Judge an answer (or the error instead of one); pure."""
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...


@dataclass(frozen=True, slots=True)
class Address:
    """Where a destination connects, named by the config key that holds it (for the API's error).

    HTTP kinds give a `url`; stream kinds (syslog) give `host` and `port`.
    """

    field: str
    url: str | None = None
    host: str | None = None
    port: int | None = None


def url_address(field: str, url: str) -> Address:
    return Address(field, url=url)


class HttpClient(Protocol):
    """Sends one HTTP request (sinks/_http.py's HttpSender, behind the network guard)."""

    async def send(self, request: Request) -> Response: ...


# Opens a stream to host:port at an address the network guard checked: TLS verified against the host
# name with the given context (syslog over TLS), or plain TCP when it is None (syslog to a local relay).
OpenConnection = Callable[
    [str, int, ssl.SSLContext | None], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]
]


@dataclass(frozen=True, slots=True)
class SinkEnv:
    """What the delivery layer lends a sink: guarded I/O and the store's identity."""

    http: HttpClient
    open_connection: OpenConnection
    store_id: str  # stable random identity of this store (Elasticsearch derives `_id` from it)
