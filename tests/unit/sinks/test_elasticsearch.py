"""The elasticsearch kind's pure parts: config, encode (NDJSON bulk bodies, limits, cuts) and classify."""

from __future__ import annotations

import base64
from collections import Counter
from typing import Any

import aiohttp
import orjson
import pytest
from pydantic import ValidationError

from forwarder.model import LogLine
from forwarder.sinks._encode import water_level
from forwarder.sinks.base import DELIVERED, OutLine, Request, Response
from forwarder.sinks.elasticsearch import (
    DEFAULT_MAX_REQUEST_BYTES,
    FILTER_PATH,
    MIN_CUT_BYTES,
    ElasticsearchConfig,
    ElasticsearchSink,
    authorization,
    bulk_bodies,
    document,
    document_id,
    index_problem,
    item_retried,
)
from forwarder.store.lines import Identity
from tests import sinkhelpers
from tests.linegen import mixed_lines
from tests.receivers_elasticsearch import filter_response
from tests.sinkhelpers import SEVERITY_LEVELS, NoHttp

STORE_ID = "0123456789abcdef"
SECRET = "VnVhQ2ZHY0JDZGJrUW0tZTVhT3g6dWkybHAyYXhUTm1zeWFrdzl0dk5udw=="  # an API key's `encoded` form
IDENT = Identity(code=1, database_id="main", database_name="Main DB", host="db1.example.com")


def sink(**config: Any) -> ElasticsearchSink:
    return ElasticsearchSink(
        ElasticsearchConfig(url="https://es.example.com:9200", **config), SECRET, NoHttp(), STORE_ID
    )


def out_lines(lines: list[LogLine], first_id: int = 1) -> list[OutLine]:
    return sinkhelpers.out_lines(lines, ident=IDENT, first_id=first_id)


def line(**kw: Any) -> LogLine:
    base: dict[str, Any] = {"time_us": 1_700_000_000_123_456, "severity": "ERROR", "kind": "error", "message": "boom"}
    return LogLine(**(base | kw))


def split_body(body: bytes) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    assert body.endswith(b"\n")
    rows = body[:-1].split(b"\n")
    return [(orjson.loads(a), orjson.loads(d)) for a, d in zip(rows[0::2], rows[1::2], strict=True)]


# --- config ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "bulk_url"),
    [
        ({"url": "https://es.example.com:9200"}, "https://es.example.com:9200/_bulk?filter_path=" + FILTER_PATH),
        ({"url": "https://es.example.com:9200/"}, "https://es.example.com:9200/_bulk?filter_path=" + FILTER_PATH),
        ({"url": "http://proxy.example.com/es//"}, "http://proxy.example.com/es/_bulk?filter_path=" + FILTER_PATH),
        (
            {"url": "https://es.example.com", "pipeline": "logs@custom"},
            "https://es.example.com/_bulk?filter_path=" + FILTER_PATH + "&pipeline=logs@custom",
        ),
    ],
)
def test_bulk_url(config: dict[str, Any], bulk_url: str) -> None:
    assert ElasticsearchConfig(**config).bulk_url == bulk_url


def test_config_defaults() -> None:
    c = ElasticsearchConfig(url="https://es.example.com")
    assert (c.index, c.username, c.pipeline, c.max_request_bytes) == ("logs-postgresql-default", None, None, 5 << 20)
    assert c.model_dump(exclude_none=True) == {
        "url": "https://es.example.com",
        "index": "logs-postgresql-default",
        "max_request_bytes": DEFAULT_MAX_REQUEST_BYTES,
    }


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"url": "ftp://es.example.com"}, "url"),
        ({"url": "es.example.com:9200"}, "url"),
        ({"url": "https://es.example.com/?x=1"}, "url"),
        ({"url": "https://es.example.com/#top"}, "url"),
        ({"index": "Logs-postgresql-default"}, "index"),
        ({"index": "logs postgresql"}, "index"),
        ({"index": "logs:pg"}, "index"),
        ({"index": "logs,pg"}, "index"),
        ({"index": "_logs"}, "index"),
        ({"index": "-logs"}, "index"),
        ({"index": ".."}, "index"),
        ({"index": ".logs"}, "index"),
        ({"index": "l" * 256}, "index"),
        ({"index": "é" * 128}, "index"),  # 256 bytes
        ({"index": ""}, "index"),
        ({"user": "a:b"}, "user"),
        ({"user": "a\nb"}, "user"),
        ({"username": "a:b"}, "username"),
        ({"pipeline": "a b"}, "pipeline"),
        ({"pipeline": "a&x=1"}, "pipeline"),
        ({"max_request_bytes": 1000}, "max_request_bytes"),
        ({"max_request_bytes": 200 << 20}, "max_request_bytes"),
        ({"max_request_bytes": "1048576"}, "max_request_bytes"),  # a wrong type is refused, not converted
        ({"max_request_bytes": True}, "max_request_bytes"),
        ({"token": "x"}, "token"),
    ],
)
def test_config_refuses(config: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        ElasticsearchConfig(**({"url": "https://es.example.com"} | config))
    assert info.value.errors()[0]["loc"] == (field,)


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("logs-postgresql-default", None),
        ("logs-postgresql.main-prod", None),
        ("pg-logs-000001", None),
        ("é" * 127, None),
        ("UPPER", "must be lowercase"),
        ("a*b", "cannot contain '*'"),
        (".", "cannot be . or .."),
        ("+x", "cannot start with -, _ or +"),
    ],
)
def test_index_rules(name: str, problem: str | None) -> None:
    assert index_problem(name) == problem


@pytest.mark.parametrize(
    ("user", "secret", "header"),
    [
        (None, SECRET, "ApiKey " + SECRET),
        (None, "id1:key2", "ApiKey " + base64.b64encode(b"id1:key2").decode()),  # id:api_key pair, encoded
        ("forwarder", "pä:ss", "Basic " + base64.b64encode("forwarder:pä:ss".encode()).decode()),
    ],
)
def test_authorization(user: str | None, secret: str, header: str) -> None:
    assert authorization(user, secret) == header


def test_repr_never_shows_the_secret() -> None:
    s = sink()
    assert SECRET not in repr(s) and "<hidden>" in repr(s)


# --- encode ---------------------------------------------------------------------------------------


def test_one_line_is_an_action_and_a_document_each_ending_in_newline() -> None:
    [out] = out_lines([line(pid=42, user="app", duration_ms=1.5)], first_id=7)
    [request] = sink().encode([out], "dlv_x", 1_800_000_000.0)
    assert request.line_ids == (7,)
    assert request.method == "POST"
    assert request.url == "https://es.example.com:9200/_bulk?filter_path=" + FILTER_PATH
    headers = dict(request.headers)
    assert headers["Content-Type"] == "application/x-ndjson"
    assert headers["Authorization"] == "ApiKey " + SECRET
    assert request.success_body_bytes > 64 * 1024
    action, doc = request.body.split(b"\n")[:2]
    assert action == b'{"create":{"_index":"logs-postgresql-default","_id":"0123456789abcdef-7"}}'
    assert request.body == action + b"\n" + doc + b"\n"
    stored = orjson.loads(out.doc)
    expected = {"@timestamp": "2023-11-14T22:13:20.123Z", **stored, "log": {"level": "error"}}
    assert orjson.loads(doc) == expected
    assert list(orjson.loads(doc)) == list(expected)  # @timestamp first, SPEC order, log last


@pytest.mark.parametrize(("severity", "level"), SEVERITY_LEVELS)
def test_log_level_is_the_normalized_level(severity: str, level: str) -> None:
    doc = document(orjson.loads(out_lines([line(severity=severity)])[0].doc))
    assert doc["log"] == {"level": level}
    assert doc["severity"] == severity  # the original stays


@pytest.mark.parametrize(
    ("store_id", "line_id", "doc_id"), [("0123456789abcdef", 1, "0123456789abcdef-1"), ("ab", 0, "ab-0")]
)
def test_document_id(store_id: str, line_id: int, doc_id: str) -> None:
    assert document_id(store_id, line_id) == doc_id


def test_the_same_line_always_gets_the_same_bytes() -> None:
    outs = out_lines(mixed_lines(50, seed=3))
    first = sink().encode(outs, "dlv_a", 1.0)
    again = sink().encode(outs, "dlv_b", 999.0)
    assert [r.body for r in first] == [r.body for r in again]


def test_index_and_pipeline_and_basic_auth_come_from_config() -> None:
    s = ElasticsearchSink(
        ElasticsearchConfig(url="https://os.example.com", index="pg-logs", user="fwd", pipeline="geo"),
        "secret pw",
        NoHttp(),
        STORE_ID,
    )
    [request] = s.encode(out_lines([line()]), "dlv_x", 1.0)
    assert dict(request.headers)["Authorization"] == "Basic " + base64.b64encode(b"fwd:secret pw").decode()
    assert request.url.endswith("&pipeline=geo")
    [(action, _)] = split_body(request.body)
    assert action == {"create": {"_index": "pg-logs", "_id": f"{STORE_ID}-1"}}


def test_requests_split_by_bytes_exactly() -> None:
    outs = out_lines(mixed_lines(300, seed=5, max_text_bytes=3000))
    limit = 64 * 1024
    requests = sink(max_request_bytes=limit).encode(outs, "dlv_x", 1.0)
    assert len(requests) > 3
    assert all(len(r.body) <= limit for r in requests)
    assert [i for r in requests for i in r.line_ids] == [o.id for o in outs]
    [whole] = sink(max_request_bytes=1 << 20).encode(outs, "dlv_x", 1.0)
    assert b"".join(r.body for r in requests) == whole.body  # only split, never changed
    # Packed tight: the next document would not have fitted in each full request.
    sizes = [len(r.body) for r in requests]
    for size, nxt in zip(sizes, requests[1:], strict=False):
        first_entry = nxt.body.split(b"\n", 2)
        assert size + len(first_entry[0]) + len(first_entry[1]) + 2 > limit


def test_a_document_over_the_limit_is_cut_not_dropped() -> None:
    limit = 64 * 1024
    big = "日本語のログ🐘 " * 20_000  # multi-byte UTF-8, about 400 KB
    quoted = '"\\\n' * 10_000  # every byte doubles when JSON-escaped
    outs = out_lines([line(message=big, statement=quoted, detail="kept detail"), line(message="small")])
    [request, after] = sink(max_request_bytes=limit).encode(outs, "dlv_x", 1.0)
    assert (request.line_ids, after.line_ids) == ((1,), (2,))  # the cut document fills its request
    assert limit * 3 // 4 < len(request.body) <= limit  # cut to fit, not to nothing
    [(_, doc)] = split_body(request.body)
    [(_, small)] = split_body(after.body)
    assert doc["message"].endswith("...") and big.startswith(doc["message"][:-3])
    assert doc["statement"].endswith("...") and quoted.startswith(doc["statement"][:-3])
    assert doc["detail"] == "kept detail" and doc["id"] == "1"
    # The two long texts shrink alike (to the same cap), to fit, not to nothing.
    assert len(doc["message"].encode()) == pytest.approx(len(doc["statement"].encode()), abs=8)
    assert len(doc["message"].encode()) > 15_000
    assert small["message"] == "small"


@pytest.mark.parametrize(
    ("sizes", "excess", "cap"),
    [
        ([1000], 100, 900),
        ([1000, 10], 100, 900),
        ([1000, 800], 300, 750),  # both over 750 lose 250 + 50
        ([1000, 800, 100], 1500, 150),
        ([500, 500], 200, 400),
        ([1000, 10], 5000, 64),  # never below MIN_CUT_BYTES (the document may stay over)
        ([], 10, 64),
    ],
)
def test_cut_cap(sizes: list[int], excess: int, cap: int) -> None:
    assert water_level(sizes, excess, MIN_CUT_BYTES) == cap


def test_ten_thousand_long_lines_fit_and_each_id_goes_once() -> None:
    """10,000 mixed lines with messages up to 900 KB (in slices of 500: about 225 MB each) under a
    64 KiB limit, where most documents are cut; the first 2,000 also under the default limit."""
    limit = 64 * 1024
    counts: Counter[int] = Counter()
    default_counts: Counter[int] = Counter()
    requests_made = cut = 0
    for start in range(0, 10_000, 500):
        lines = mixed_lines(500, seed=start, max_text_bytes=900_000)
        outs = out_lines(lines, first_id=start + 1)
        for ids, body in bulk_bodies(outs, "logs-postgresql-default", STORE_ID, limit):
            requests_made += 1
            assert len(body) <= limit
            counts.update(ids)
            for (action, doc), line_id in zip(split_body(body), ids, strict=True):
                assert action["create"]["_id"] == f"{STORE_ID}-{line_id}" == f"{STORE_ID}-{doc['id']}"
                original = lines[line_id - start - 1]
                if doc["message"] != original.message:
                    cut += 1
                    assert doc["message"].endswith("...") and original.message.startswith(doc["message"][:-3])
        if start < 2000:
            for ids, body in bulk_bodies(outs, "logs-postgresql-default", STORE_ID, DEFAULT_MAX_REQUEST_BYTES):
                assert len(body) <= DEFAULT_MAX_REQUEST_BYTES and body.count(b"\n") == 2 * len(ids)
                default_counts.update(ids)
    assert counts == Counter(range(1, 10_001))
    assert default_counts == Counter(range(1, 2001))
    assert cut > 9000 and requests_made > 9000  # about one long document per request


# --- classify -------------------------------------------------------------------------------------


def bulk_answer(doc_ids: list[str], statuses: list[int], filtered: bool = True) -> bytes:
    """What Elasticsearch answers (then filtered by our filter_path) for these item statuses."""
    reasons = {
        400: ("document_parsing_exception", "[1:27] failed to parse field [pid] of type [long] in document"),
        403: ("security_exception", "action [indices:data/write/bulk[s]] is unauthorized for API key"),
        409: ("version_conflict_engine_exception", "version conflict, document already exists"),
        429: ("es_rejected_execution_exception", "rejected execution of coordinating operation"),
        503: ("unavailable_shards_exception", "primary shard is not active"),
    }
    items = []
    for doc_id, status in zip(doc_ids, statuses, strict=True):
        item: dict[str, Any] = {"_index": ".ds-logs-x", "_id": doc_id, "status": status}
        if status >= 300:
            kind, reason = reasons.get(status, ("exception", "failed"))
            item["error"] = {"type": kind, "reason": reason, "index_uuid": "u", "shard": "0"}
        else:
            item |= {"_version": 1, "result": "created", "_shards": {"total": 2, "successful": 1, "failed": 0}}
        items.append({"create": item})
    answer = {"took": 5, "errors": any(s >= 300 for s in statuses), "items": items}
    return orjson.dumps(filter_response(answer, FILTER_PATH) if filtered else answer)


def classify_items(statuses: list[int], filtered: bool = True) -> Any:
    ids = tuple(range(1, len(statuses) + 1))
    body = bulk_answer([document_id(STORE_ID, i) for i in ids], statuses, filtered)
    return sink().classify(Request(ids, b"x\n"), Response(200, {}, body), None)


def test_filter_path_keeps_one_entry_per_item() -> None:
    body = orjson.loads(bulk_answer(["a", "b"], [201, 400]))
    assert body == {
        "errors": True,
        "items": [
            {"create": {"_id": "a", "status": 201}},
            {
                "create": {
                    "_id": "b",
                    "status": 400,
                    "error": {
                        "type": "document_parsing_exception",
                        "reason": "[1:27] failed to parse field [pid] of type [long] in document",
                    },
                }
            },
        ],
    }


@pytest.mark.parametrize(
    ("statuses", "status", "retry_ids", "rejected_ids", "failure", "in_reason"),
    [
        ([201, 201, 201], "delivered", None, (), "", ""),
        ([201, 409, 409], "delivered", None, (), "", ""),  # 409: stored by an earlier attempt
        ([201, 409, 429, 400, 429], "retry", (3, 5), (4,), "item_retry", "document_parsing_exception"),
        ([503, 201, 500], "retry", (1, 3), (), "item_retry", "2 of 3 documents to retry (503 unavailable_shards"),
        ([403, 201], "retry", (1,), (), "item_retry", "security_exception"),  # the setup, not the document
        ([404, 408], "retry", (1, 2), (), "item_retry", "404"),
        ([201, 400, 201], "delivered", None, (2,), "item_rejected", "1 of 3 documents refused for good (400 "),
        ([400, 400], "rejected", None, (1, 2), "item_rejected", "failed to parse field [pid]"),
        ([413], "rejected", None, (1,), "item_rejected", "413"),
    ],
)
def test_item_statuses(
    statuses: list[int],
    status: str,
    retry_ids: tuple[int, ...] | None,
    rejected_ids: tuple[int, ...],
    failure: str,
    in_reason: str,
) -> None:
    for filtered in (True, False):  # our filter_path, or a proxy that dropped it: read alike
        o = classify_items(statuses, filtered)
        assert (o.status, o.retry_ids, o.rejected_ids, o.failure) == (status, retry_ids, rejected_ids, failure)
        assert in_reason in o.reason


def test_all_created_is_plain_delivered() -> None:
    assert classify_items([201] * 5) == DELIVERED


def test_an_item_reason_is_cut() -> None:
    body = orjson.dumps(
        {"items": [{"create": {"_id": f"{STORE_ID}-1", "status": 400, "error": {"type": "t", "reason": "é" * 5000}}}]}
    )
    o = sink().classify(Request((1,), b"x\n"), Response(200, {}, body), None)
    assert o.status == "rejected" and len(o.reason) < 400


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"<html>ok</html>", "not JSON"),
        (b'{"errors":false,"items":[{"create":{"_id":"' + STORE_ID.encode() + b'-1","sta', "not JSON"),  # cut
        (b'{"errors":false}', "no items"),
        (b"[]", "no items"),
        (b'{"items":[]}', "0 items for 2 documents"),
        (b'{"items":[{"index":{"status":201}},{"index":{"status":201}}]}', "without a create status"),
        (b'{"items":[{"create":{"status":"201"}},{"create":{"status":201}}]}', "without a create status"),
        (
            b'{"items":[{"create":{"_id":"' + STORE_ID.encode() + b'-2","status":201}},{"create":{"status":201}}]}',
            "out of order",
        ),
    ],
)
def test_an_unusable_2xx_answer_retries_the_whole_request(body: bytes, why: str) -> None:
    o = sink().classify(Request((1, 2), b"x\n"), Response(200, {}, body), None)
    assert (o.status, o.failure, o.retry_ids, o.rejected_ids) == ("retry", "bad_response", None, ())
    assert why in o.reason


def es_error(status: int, kind: str, reason: str) -> bytes:
    return orjson.dumps({"error": {"root_cause": [], "type": kind, "reason": reason}, "status": status})


@pytest.mark.parametrize(
    ("status", "headers", "body", "failure", "reason", "retry_after"),
    [
        (
            401,
            {},
            es_error(401, "security_exception", "unable to authenticate with provided credentials"),
            "http_4xx",
            "HTTP 401: security_exception: unable to authenticate with provided credentials",
            None,
        ),
        (401, {}, b"Unauthorized", "http_4xx", "HTTP 401: Unauthorized", None),  # OpenSearch's plain text
        (
            413,
            {},
            b"",
            "http_4xx",
            "HTTP 413 (a request of 2 bytes is over the cluster's http.max_content_length: "
            "lower config.max_request_bytes)",
            None,
        ),
        (
            429,
            {"Retry-After": "7"},
            es_error(429, "circuit_breaking_exception", "[parent] Data too large"),
            "http_4xx",
            "HTTP 429: circuit_breaking_exception: [parent] Data too large",
            7.0,
        ),
        (500, {}, es_error(500, "exception", "boom"), "http_5xx", "HTTP 500: exception: boom", None),
        (503, {}, b'{"error":"plain string error"}', "http_5xx", "HTTP 503: plain string error", None),
        (302, {"Location": "http://x/"}, b"", "redirect", "HTTP 302: redirects are not followed", None),
    ],
)
def test_a_refused_request_is_retried_whole(
    status: int, headers: dict[str, str], body: bytes, failure: str, reason: str, retry_after: float | None
) -> None:
    o = sink().classify(Request((1, 2), b"x\n"), Response(status, headers, body), None)
    assert (o.status, o.failure, o.reason, o.retry_after, o.retry_ids) == ("retry", failure, reason, retry_after, None)


@pytest.mark.parametrize(
    ("error", "failure", "reason"),
    [
        (TimeoutError("no answer within 20 s"), "timeout", "no answer within 20 s"),
        (aiohttp.ServerDisconnectedError(), "connect", "connection failed: ServerDisconnectedError"),
        (ConnectionResetError(), "connect", "connection failed: ConnectionResetError"),
    ],
)
def test_no_answer_is_retried(error: BaseException, failure: str, reason: str) -> None:
    o = sink().classify(Request((1,), b"x\n"), None, error)
    assert (o.status, o.failure, o.reason, o.retry_ids) == ("retry", failure, reason, None)


@pytest.mark.parametrize("user", [None, "fwd"])
def test_the_secret_never_reaches_a_reason(user: str | None) -> None:
    s = ElasticsearchSink(ElasticsearchConfig(url="https://es.example.com", user=user), SECRET, NoHttp(), STORE_ID)
    token = authorization(user, SECRET).split(" ", 1)[1]
    for leaked in (SECRET, token):
        body = es_error(401, "security_exception", f"bad credentials [{leaked}]")
        o = s.classify(Request((1,), b"x\n"), Response(401, {}, body), None)
        assert leaked not in o.reason and "<hidden>" in o.reason


@pytest.mark.parametrize("char", ['"', "\\", "\x01", "\n"])
def test_a_text_that_escaping_makes_longer_is_cut_only_as_far_as_needed(char: str) -> None:
    # Each of these takes 2 (or 6) bytes in JSON: the cut must count that, not cut to the floor.
    limit = 64 * 1024
    [request] = sink(max_request_bytes=limit).encode(out_lines([line(message=char * 100_000)]), "dlv_x", 1.0)
    [(_, doc)] = split_body(request.body)
    assert doc["message"].endswith("...") and set(doc["message"][:-3]) == {char}
    assert limit * 3 // 4 < len(request.body) <= limit


@pytest.mark.parametrize(
    ("error", "retried"),
    [
        # the cluster's setup, answered per item with a 400: fixing it makes the documents welcome
        ({"type": "index_closed_exception", "reason": "closed", "index": "logs"}, True),
        ({"type": "illegal_argument_exception", "reason": "pipeline with id [logs@custom] does not exist"}, True),
        ({"type": "illegal_argument_exception", "reason": "no write index is defined for alias [logs]. The ..."}, True),
        # the document itself: it would fail again
        ({"type": "illegal_argument_exception", "reason": "Limit of total fields [1000] has been exceeded"}, False),
        ({"type": "document_parsing_exception", "reason": "failed to parse field [pid]"}, False),
        ("not an object", False),
        (None, False),
    ],
)
def test_a_setup_error_answered_with_400_is_retried(error: object, retried: bool) -> None:
    assert item_retried(400, error) is retried
