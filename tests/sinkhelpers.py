"""What the sink table tests share: lines as the store hands them out, HTTP stand-ins, common tables."""

from __future__ import annotations

from unittest.mock import Mock

import aiohttp

from forwarder.model import LogLine
from forwarder.sinks.base import AddressRefused, Outcome, OutLine, Request, Response, Sink
from forwarder.store.lines import Identity, encode_doc, splice_id
from tests.linegen import mixed_lines

IDENT = Identity(code=1, database_id="main", database_name="main", host="db1")
T0 = 1_800_000_000_000_000


def out_line(line: LogLine, line_id: int = 1, ident: Identity = IDENT) -> OutLine:
    """One OutLine as the store hands it out: the SPEC document (encode_doc) with the id spliced in."""
    return OutLine(line_id, splice_id(line_id, encode_doc(ident, line)))


def out_lines(lines: list[LogLine], *, ident: Identity = IDENT, first_id: int = 1) -> list[OutLine]:
    """OutLines as the store hands them out, with ids from `first_id` on."""
    return [out_line(line, first_id + i, ident) for i, line in enumerate(lines)]


def limit_lines(n: int, seed: int, every: int = 100) -> list[LogLine]:
    """`n` mixed lines, every `every`th a long one (up to 900 KB: only some, to keep the test fast)."""
    lines = mixed_lines(n, seed)
    big = mixed_lines(n // every, seed + 1, max_text_bytes=900_000)
    for k, line in enumerate(big):
        if k % 4 == 3:  # some long multi-byte ones too
            line = line._replace(message="日本語🐘" * (len(line.message) // 13))
        at = k * every + 7
        lines[at] = line._replace(time_us=lines[at].time_us)
    return lines


class FakeHttp:
    """An HTTP client that records each request and answers `status` (Loki's 204 unless told)."""

    def __init__(self, status: int = 204) -> None:
        self.status = status
        self.sent: list[Request] = []

    async def send(self, request: Request) -> Response:
        self.sent.append(request)
        return Response(self.status, {})


class NoHttp:
    """An HTTP client for encode/classify tests: sending anything fails the test."""

    async def send(self, request: Request) -> Response:
        raise AssertionError("encode and classify never send")


def response(status: int, body: bytes = b"", **headers: str) -> Response:
    """An answer for classify (`Retry_After="7"` is the header Retry-After)."""
    return Response(status, {k.replace("_", "-"): v for k, v in headers.items()}, body, received_at=1_000.0)


def classified(sink: Sink, answer: Response | None, error: BaseException | None = None, lines: int = 2) -> Outcome:
    """How `sink` judges `answer` (or `error`) to its one request for `lines` mixed lines."""
    [request] = sink.encode(out_lines(mixed_lines(lines)), "d", 0)
    return sink.classify(request, answer, error)


# PostgreSQL severities and the level each maps to (Datadog's status, Better Stack's level,
# Elasticsearch's log.level): the same table for each kind.
SEVERITY_LEVELS: list[tuple[str, str]] = [
    ("LOG", "info"),
    ("INFO", "info"),
    ("NOTICE", "notice"),
    ("WARNING", "warning"),
    ("ERROR", "error"),
    ("FATAL", "critical"),
    ("PANIC", "critical"),
    ("DEBUG2", "debug"),
    ("SOMETHING", "info"),
]

# Transport errors of an HTTP sink with a 30 s timeout: (error, failure, reason); each keeps the data.
TRANSPORT_ERRORS: list[tuple[BaseException, str, str]] = [
    (TimeoutError("no answer within 30 s"), "timeout", "no answer within 30 s"),
    (TimeoutError(), "timeout", "no answer: timed out"),
    (aiohttp.ConnectionTimeoutError("Connection timeout to host https://h/?t=s3"), "timeout", "no answer: timed out"),
    (
        aiohttp.ClientConnectorError(Mock(), ConnectionRefusedError(111, "Connection refused")),
        "connect",
        "cannot connect: Connection refused",
    ),
    (aiohttp.ServerDisconnectedError(), "connect", "connection failed: ServerDisconnectedError"),
    (AddressRefused("10.0.0.1 is not public"), "refused_address", "address refused: 10.0.0.1 is not public"),
]
