"""No request exceeds its kind's limits on 10,000 lines of random sizes up to 900 KB (issue 5).

Lines are made 500 at a time (4.5 GB of text at once otherwise) and batched as the delivery layer
batches them (the sink's own BatchLimits); every kind here encodes the same lines. Elasticsearch
and Loki run the same check through their strict receivers in their own test files.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pytest

from forwarder.sinks._encode import pack
from forwarder.sinks.base import OutLine, Request, Sink
from forwarder.sinks.better_stack import BetterStackConfig, BetterStackSink
from forwarder.sinks.datadog import DatadogConfig, DatadogSink
from forwarder.sinks.syslog import SyslogConfig, SyslogSink
from forwarder.store.lines import Identity, encode_doc, splice_id
from tests.linegen import mixed_lines
from tests.sinkhelpers import NoHttp

IDENT = Identity(code=1, database_id="main", database_name="main", host="db1")
LINES = 10_000
SLICE = 500


async def _no_connection(*_: Any) -> Any:
    raise AssertionError("encode must not connect")


def datadog_items(request: Request) -> tuple[list[int], int, list[int]]:
    body = gzip.decompress(request.body)
    items = orjson.loads(body)
    return [int(i["postgresql"]["id"]) for i in items], len(body), [len(orjson.dumps(i)) for i in items]


def better_stack_items(request: Request) -> tuple[list[int], int, list[int]]:
    items = orjson.loads(request.body)
    return [int(i["id"]) for i in items], len(request.body), [len(orjson.dumps(i)) for i in items]


def syslog_frames(request: Request) -> tuple[list[int], int, list[int]]:
    """RFC 5425 frames: MSG-LEN SP SYSLOG-MSG, back to back; the id is in the line@32473 element."""
    ids, sizes, at, body = [], [], 0, request.body
    while at < len(body):
        space = body.index(b" ", at)
        length = int(body[at:space])
        message = body[space + 1 : space + 1 + length]
        assert len(message) == length, "a frame shorter than its MSG-LEN"
        ids.append(int(message.split(b'[line@32473 id="', 1)[1].split(b'"', 1)[0]))
        sizes.append(length)
        at = space + 1 + length
    return ids, len(body), sizes


# kind: (sink, decode a request, max items per request, max request bytes, max bytes per item)
KINDS: dict[str, tuple[Sink, Callable[[Request], tuple[list[int], int, list[int]]], int, int, int]] = {
    "datadog": (
        DatadogSink(DatadogConfig(url="https://intake.test/api/v2/logs"), "k", NoHttp()),
        datadog_items,
        1000,
        5_000_000,  # uncompressed (Datadog "Send logs")
        1_000_000,
    ),
    "better_stack": (
        BetterStackSink(BetterStackConfig(host="in.logs.test"), "t", NoHttp()),
        better_stack_items,
        1000,
        10 * 1024 * 1024,
        10 * 1024 * 1024,
    ),
    "syslog": (
        SyslogSink(SyslogConfig(host="syslog.test"), None, _no_connection),
        syslog_frames,
        500,
        500 * (8192 + 6),  # one write: 500 frames of at most 8192 bytes and their MSG-LEN
        8192,  # RFC 5425 section 4.3.1: receivers SHOULD accept 8192
    ),
}


def random_size_slices() -> Iterator[list[OutLine]]:
    next_id = 1
    for k in range(LINES // SLICE):
        out = []
        for line in mixed_lines(SLICE, 100 + k, max_text_bytes=900_000):
            out.append(OutLine(next_id, splice_id(next_id, encode_doc(IDENT, line))))
            next_id += 1
        yield out


@pytest.fixture(scope="module")
def results() -> dict[str, tuple[list[int], list[str]]]:
    """Every kind's ids in request order and the limit violations, over one pass of the lines."""
    seen: dict[str, list[int]] = {kind: [] for kind in KINDS}
    problems: dict[str, list[str]] = {kind: [] for kind in KINDS}
    biggest = 0
    for outs in random_size_slices():
        biggest = max(biggest, max(len(o.doc) for o in outs))
        for kind, (sink, decode, max_items, max_request, max_item) in KINDS.items():
            batches = pack([(o, len(o.doc)) for o in outs], sink.limits.max_lines, sink.limits.max_bytes)
            for batch in batches:
                for request in sink.encode(batch, "dlv_x", 0.0):
                    ids, size, item_sizes = decode(request)
                    if ids != list(request.line_ids):
                        problems[kind].append(f"request ids {request.line_ids[:3]}... differ from its body's")
                    if not 1 <= len(ids) <= max_items:
                        problems[kind].append(f"{len(ids)} items in one request")
                    if size > max_request:
                        problems[kind].append(f"a request of {size} bytes")
                    if item_sizes and max(item_sizes) > max_item:
                        problems[kind].append(f"an item of {max(item_sizes)} bytes")
                    seen[kind] += ids
    assert biggest > 800_000, "the run had no line near 900 KB"
    return {kind: (seen[kind], problems[kind]) for kind in KINDS}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_no_request_exceeds_the_limits_and_every_line_goes_once(
    kind: str, results: dict[str, tuple[list[int], list[str]]]
) -> None:
    seen, problems = results[kind]
    assert problems == []
    assert seen == list(range(1, LINES + 1))
