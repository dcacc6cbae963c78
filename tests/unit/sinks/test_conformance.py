"""Every registered kind keeps the sink contract: the same checks for each, table-driven.

- encode: a few hundred lines of mixed, random sizes (some near 900 KB, some of them multi-byte or
  escape-heavy), batched as the store batches them (the sink's BatchLimits): no request over the
  kind's documented count and size, every line exactly once and in the request that names it, and
  a line too long for the kind is cut, not dropped;
- classify: 2xx delivered, 5xx, 429 (Retry-After honoured), timeouts and connection errors
  retried, each kind's documented 4xx rejected or retried;
- the secret appears neither in the sink's repr, a request's repr, nor any outcome's reason, also
  when the receiver echoes it (`401 invalid token: Bearer <token>`, basic auth's base64, cut short),
  neither from the sink's classify alone nor through the delivery layer's exchange.

A new kind is covered by registering it and adding its sample to SAMPLES (a test fails until then).
"""

from __future__ import annotations

import asyncio
import base64
import gzip
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
import trustme

from forwarder.clock import FakeClock
from forwarder.delivery.deliverer import exchange
from forwarder.sinks import SINK_TYPES, SinkType, build_sink, register, validated_config
from forwarder.sinks._encode import pack
from forwarder.sinks.base import AddressRefused, Outcome, OutLine, Request, Response, Sink, SinkEnv
from forwarder.sinks.credentials import Hidden
from forwarder.sinks.syslog import HandshakeRefused
from tests.linegen import mixed_lines
from tests.sinkhelpers import TRANSPORT_ERRORS, NoHttp, out_lines, response

# (line id, item bytes, the start of the item's message as sent) per item of a request's body.
Items = list[tuple[int, int, str]]


def _webhook_items(request: Request) -> Items:
    body = orjson.loads(request.body)
    return [(int(e["id"]), len(orjson.dumps(e)), e["message"]) for e in body["entries"]]


def _datadog_items(request: Request) -> Items:
    items = orjson.loads(gzip.decompress(request.body))
    return [(int(i["postgresql"]["id"]), len(orjson.dumps(i)), i["postgresql"]["message"]) for i in items]


def _better_stack_items(request: Request) -> Items:
    return [(int(e["id"]), len(orjson.dumps(e)), e["message"]) for e in orjson.loads(request.body)]


def _elasticsearch_items(request: Request) -> Items:
    lines = request.body.split(b"\n")
    assert lines[-1] == b""  # NDJSON: every line ends in "\n"
    out = []
    for action, doc in zip(lines[0:-1:2], lines[1:-1:2], strict=True):
        d = orjson.loads(doc)
        out.append((int(d["id"]), len(action) + len(doc) + 2, d["message"]))
    return out


def _text_message(text: str) -> str:
    """The message of a line as text (`SEVERITY:  message`, parts on further lines)."""
    return text.split(":  ", 1)[1].split("\nDETAIL:  ", 1)[0]


def _loki_items(request: Request) -> Items:
    push = orjson.loads(gzip.decompress(request.body))
    out = []
    for stream in push["streams"]:
        for value in stream["values"]:
            _, line, meta = value
            out.append((int(meta["id"]), len(line.encode()), _text_message(line)))
    return out


def _syslog_items(request: Request) -> Items:
    """RFC 5425 frames, MSG-LEN SP SYSLOG-MSG back to back; the id is in the line@32473 element."""
    out, at, body = [], 0, request.body
    while at < len(body):
        space = body.index(b" ", at)
        length = int(body[at:space])
        message = body[space + 1 : space + 1 + length]
        assert len(message) == length, "a frame shorter than its MSG-LEN"
        line_id = int(message.split(b'[line@32473 id="', 1)[1].split(b'"', 1)[0])
        msg = message.split(b"] ", 1)[1].decode()  # after the structured data
        out.append((line_id, length, _text_message(msg)))
        at = space + 1 + length
    return out


def _no_body(request: Request) -> bytes:
    return b""


def _bulk_created(request: Request) -> bytes:
    return orjson.dumps({"errors": False, "items": [{"create": {"status": 201}} for _ in request.line_ids]})


async def _no_connection(*_: Any) -> Any:
    raise AssertionError("encode and classify never connect")


CLIENT = trustme.CA().issue_cert("forwarder.client.test")


@dataclass(frozen=True)
class Sample:
    """A kind's sample destination and what its documentation promises."""

    config: dict[str, Any]
    secret: str | None
    items: Callable[[Request], Items]
    max_items: int  # per request
    max_request_bytes: int  # of the body as the receiver reads it (decompressed)
    max_item_bytes: int  # per item (Loki: per line; syslog: per SYSLOG-MSG)
    cuts: bool  # the HUGE lines are over the item limit, so each is cut (and not dropped)
    # A cut text keeps at least this many characters. Elasticsearch cuts every long text to one
    # length in bytes, sized as if a byte cost one in JSON: a text of escapes (two each) is cut to
    # its floor of 64 bytes when it alone is over the limit.
    min_kept: int = 1000
    ordered: bool = True  # the body carries its lines in the request's order (Loki groups them by stream)
    http: bool = True
    rejected: frozenset[int] = frozenset()  # 4xx that drop the lines; every other 4xx is retried
    retried: frozenset[int] = frozenset({400, 401, 403, 404, 408, 413})
    ok_body: Callable[[Request], bytes] = _no_body


SAMPLES: dict[str, Sample] = {
    "webhook": Sample(
        {"url": "https://hooks.example.com/pg"},
        "whsec-S3CRET-signing-key",
        _webhook_items,
        500,  # SPEC 8
        10 * 1024 * 1024,
        10 * 1024 * 1024,
        cuts=False,  # lines are sent as stored
    ),
    "datadog": Sample(
        {"site": "datadoghq.eu"},
        "dd-S3CRET-api-key",
        _datadog_items,
        1000,  # Datadog "Send logs": 1000 entries, 5MB per payload, 1MB per log
        5_000_000,
        1_000_000,
        cuts=True,
        rejected=frozenset({400, 413}),
        retried=frozenset({401, 403, 404, 408}),
    ),
    "better_stack": Sample(
        {"host": "s1234.eu-nbg-2.betterstackdata.com"},
        "bs-S3CRET-source-token",
        _better_stack_items,
        1000,
        10 * 1024 * 1024,  # "Ingesting logs", Request limits
        10 * 1024 * 1024,
        cuts=False,  # an event may be 10 MiB: lines of 900 KB go whole
        retried=frozenset({400, 401, 402, 403, 404, 408, 413}),
    ),
    "elasticsearch": Sample(
        {"url": "https://es.example.com:9200", "username": "forwarder", "max_request_bytes": 512 * 1024},
        "es-S3CRET-password",
        _elasticsearch_items,
        2000,
        512 * 1024,  # config.max_request_bytes
        512 * 1024,
        cuts=True,
        min_kept=60,
        ok_body=_bulk_created,
    ),
    "loki": Sample(
        {"url": "https://logs-prod-012.grafana.net", "username": "1234567"},
        "glc_S3CRET-token",
        _loki_items,
        2000,
        1024 * 1024,  # max_push_bytes (default)
        256 * 1024,  # max_line_bytes (Loki's default max_line_size)
        cuts=True,
        rejected=frozenset({400}),
        retried=frozenset({401, 403, 404, 408, 413}),
        ordered=False,
    ),
    "syslog": Sample(
        {"host": "syslog.example.com", "client_certificate_pem": CLIENT.cert_chain_pems[0].bytes().decode()},
        CLIENT.private_key_pem.bytes().decode(),  # the private key: the kind's secret
        _syslog_items,
        500,
        500 * (8192 + 6),  # one write: 500 frames of at most 8192 bytes and their MSG-LEN
        8192,  # RFC 5425 section 4.3.1: receivers SHOULD accept 8192
        cuts=True,
        http=False,
    ),
}
KINDS = sorted(SINK_TYPES)

# Lines too long for most kinds, each with a text that stresses the cut differently.
HUGE = {
    "ascii": "x" * 900_000,
    "multibyte": "日本語のログ🐘" * 40_000,  # 880 KB: a cut must not split a character
    "escapes": '"\\\n' * 300_000,  # each byte doubles in JSON
    "control": "\x01" * 300_000,  # six bytes each in JSON
}


def conformance_lines() -> list[OutLine]:
    """300 mixed lines, every 37th up to 900 KB, and the HUGE ones spread among them."""
    lines = mixed_lines(300, 11)
    big = mixed_lines(300 // 37, 12, max_text_bytes=900_000)
    for k, line in enumerate(big):
        lines[k * 37 + 5] = line._replace(time_us=lines[k * 37 + 5].time_us)
    for k, text in enumerate(HUGE.values()):
        at = 20 + 70 * k
        lines[at] = lines[at]._replace(message=text)
    return out_lines(lines)


LINES = conformance_lines()
MESSAGES = {line.id: str(line.fields()["message"]) for line in LINES}


def sink_of(kind: str) -> Sink:
    sample = SAMPLES[kind]
    env = SinkEnv(NoHttp(), _no_connection, "store-1")
    return build_sink(kind, validated_config(kind, sample.config), sample.secret, env)


def requests_of(sink: Sink) -> list[Request]:
    """The requests for LINES, batched as the store batches them (a line over max_bytes goes alone)."""
    batches = pack([(line, len(line.doc)) for line in LINES], sink.limits.max_lines, sink.limits.max_bytes)
    return [r for batch in batches for r in sink.encode(batch, "dlv_conformance", 1_800_000_000.0)]


@pytest.fixture(scope="module", params=KINDS)
def encoded(request: pytest.FixtureRequest) -> tuple[str, Sink, list[Request]]:
    kind: str = request.param
    assert kind in SAMPLES, f"{kind} is registered without a sample here"
    sink = sink_of(kind)
    return kind, sink, requests_of(sink)


def test_the_lines_have_what_the_checks_need() -> None:
    assert 250 <= len(LINES) <= 400
    assert sum(len(line.doc) > 800_000 for line in LINES) >= 3
    assert {m for m in MESSAGES.values() if m in HUGE.values()} == set(HUGE.values())


def test_every_request_keeps_the_kind_limits(encoded: tuple[str, Sink, list[Request]]) -> None:
    kind, _, requests = encoded
    sample = SAMPLES[kind]
    for request in requests:
        items = sample.items(request)
        body = gzip.decompress(request.body) if request.body[:2] == b"\x1f\x8b" else request.body
        assert 1 <= len(items) <= sample.max_items
        assert len(body) <= sample.max_request_bytes
        assert max(size for _, size, _ in items) <= sample.max_item_bytes
        carried = [i for i, _, _ in items]
        if sample.ordered:
            assert carried == list(request.line_ids)  # the body carries what the request names
        else:
            assert sorted(carried) == sorted(request.line_ids)


def test_every_line_goes_exactly_once_in_order(encoded: tuple[str, Sink, list[Request]]) -> None:
    _, _, requests = encoded
    assert [i for r in requests for i in r.line_ids] == [line.id for line in LINES]


def test_a_line_too_long_is_cut_not_dropped(encoded: tuple[str, Sink, list[Request]]) -> None:
    kind, _, requests = encoded
    sample = SAMPLES[kind]
    sent = {line_id: message for r in requests for line_id, _, message in sample.items(r)}
    for line_id, original in MESSAGES.items():
        kept = sent[line_id]
        if kept.endswith("...") and kept != original:
            assert sample.cuts
            assert original.startswith(kept[:-3]) and len(kept) > sample.min_kept  # its start stays
        else:
            assert original.startswith(kept)  # whole (a text kind shows its first line)
    cut = [line_id for line_id, original in MESSAGES.items() if original in HUGE.values()]
    assert all(sent[i].endswith("...") for i in cut) == sample.cuts


def _classified(kind: str, answer: Response | None, error: BaseException | None = None) -> Outcome:
    sink = sink_of(kind)
    [request] = sink.encode(LINES[:3], "dlv_conformance", 1_800_000_000.0)
    if answer is not None and 200 <= answer.status < 300:
        answer = Response(answer.status, answer.headers, SAMPLES[kind].ok_body(request), answer.received_at)
    return sink.classify(request, answer, error)


HTTP_KINDS = [k for k in KINDS if SAMPLES[k].http]


@pytest.mark.parametrize("kind", HTTP_KINDS)
@pytest.mark.parametrize("status", [200, 202, 204])
def test_2xx_is_delivered(kind: str, status: int) -> None:
    assert _classified(kind, response(status)).status == "delivered"


@pytest.mark.parametrize("kind", HTTP_KINDS)
@pytest.mark.parametrize("status", [500, 502, 503])
def test_5xx_is_retried(kind: str, status: int) -> None:
    outcome = _classified(kind, response(status, b"unavailable"))
    assert (outcome.status, outcome.failure) == ("retry", "http_5xx")


@pytest.mark.parametrize("kind", HTTP_KINDS)
def test_429_is_retried_after_retry_after(kind: str) -> None:
    outcome = _classified(kind, response(429, b"slow down", Retry_After="7"))
    assert (outcome.status, outcome.retry_after) == ("retry", 7.0)


@pytest.mark.parametrize("kind", HTTP_KINDS)
def test_documented_4xx(kind: str) -> None:
    sample = SAMPLES[kind]
    for status in sample.rejected:
        assert _classified(kind, response(status, b"refused")).status == "rejected", status
    for status in sample.retried:
        assert _classified(kind, response(status, b"refused")).status == "retry", status


SYSLOG_ERRORS: list[BaseException] = [
    TimeoutError("no answer"),
    ConnectionRefusedError(111, "Connection refused"),
    ConnectionResetError(104, "Connection reset by peer"),
    asyncio.IncompleteReadError(b"", 10),
    AddressRefused("10.0.0.1 is not public"),
]


@pytest.mark.parametrize("kind", KINDS)
def test_no_answer_is_retried(kind: str) -> None:
    errors = [e for e, _, _ in TRANSPORT_ERRORS] if SAMPLES[kind].http else SYSLOG_ERRORS
    for error in errors:
        outcome = _classified(kind, None, error)
        assert outcome.status == "retry" and outcome.reason, error


@pytest.mark.parametrize("kind", KINDS)
def test_the_secret_is_never_shown(kind: str) -> None:
    secret = SAMPLES[kind].secret
    assert secret
    shown = secret[-30:]  # a PEM key's lines differ only at their end
    sink = sink_of(kind)
    assert shown not in repr(sink)
    requests = sink.encode(LINES[:3], "dlv_conformance", 1_800_000_000.0)
    assert all(shown not in repr(r) for r in requests)
    # A receiver's error text may echo what it was sent: the credential, also as it travels.
    echoes = [secret.encode(), *(v.encode() for r in requests for k, v in r.headers if k.lower() == "authorization")]
    answers = [response(s, b"refused: " + e) for s in (200, 400, 401, 403, 413, 429, 500) for e in echoes]
    reasons = [_classified(kind, a).reason for a in answers]
    reasons += [_classified(kind, None, e).reason for e, _, _ in TRANSPORT_ERRORS]
    assert all(shown not in reason for reason in reasons)


def echoes_of(secret: str) -> list[bytes]:
    """What receivers were seen to say back: the credential as sent, in the forms it travels."""
    basic = base64.b64encode(f"forwarder:{secret}".encode()).decode()
    other_user = base64.b64encode(f"someone-else:{secret}".encode()).decode()
    return [
        f"invalid token: Bearer {secret}".encode(),
        f"invalid credentials: Basic {basic}".encode(),
        f"invalid credentials: Basic {other_user}".encode(),
        f"invalid api key: ApiKey {base64.b64encode(f'key-id:{secret}'.encode()).decode()}".encode(),
        f'{{"error": "bad key {secret!r}", "token": {orjson.dumps(secret).decode()}}}'.encode(),
        # Cut by the receiver (or by the 200 characters a reason keeps) in the middle of the secret.
        b"x" * 180 + f"bad token {secret}".encode(),
    ]


@pytest.mark.parametrize("kind", HTTP_KINDS)
@pytest.mark.parametrize("status", [401, 403, 400, 500])
def test_an_echoed_credential_never_reaches_the_reason(kind: str, status: int) -> None:
    secret = SAMPLES[kind].secret
    assert secret
    for echo in echoes_of(secret):
        reason = _classified(kind, response(status, echo)).reason
        assert secret[:8] not in reason and "<hidden>" in reason, (echo, reason)


class Echo:
    """A receiver that answers `status` with `body` to every request."""

    def __init__(self, status: int, body: bytes) -> None:
        self.status, self.body = status, body

    async def send(self, request: Request) -> Response:
        return Response(self.status, {}, self.body)


async def _refused_handshake(host: str, port: int, context: Any) -> Any:
    raise HandshakeRefused(f"the receiver ended the connection: {SAMPLES['syslog'].secret}")


@pytest.mark.parametrize("kind", KINDS)
async def test_the_delivery_layer_hides_what_any_receiver_echoes(kind: str) -> None:
    # Through `exchange` (the delivery loop and the test endpoint): every kind, what the receiver
    # said or what its connection raised, and the credentials a URL carries too.
    sample = SAMPLES[kind]
    assert sample.secret
    secret = sample.secret.strip().splitlines()[1] if not sample.http else sample.secret
    hidden = Hidden.of_destination(sample.config, sample.secret)
    for echo in echoes_of(secret) if sample.http else [b""]:
        env = SinkEnv(Echo(401, echo), _refused_handshake, "store-1")
        sink = build_sink(kind, validated_config(kind, sample.config), sample.secret, env)
        [request] = sink.encode(LINES[:3], "dlv_conformance", 1_800_000_000.0)
        outcome, _ = await exchange(sink, FakeClock(), request, hidden)
        assert outcome.status == "retry" and secret[:8] not in outcome.reason, outcome.reason


def test_a_kind_registers_once() -> None:
    loki = SINK_TYPES["loki"]
    with pytest.raises(ValueError, match="registered twice"):
        register(
            SinkType(
                **{f: getattr(loki, f) for f in ("config", "build", "address")},
                kind="loki",
                secret_required=False,
                secret_generated=False,
            )
        )
    assert SINK_TYPES["loki"] is loki
