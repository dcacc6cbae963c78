"""A request the API cannot parse is logged by what was wrong with it, never by its bytes: aiohttp's
own message quotes them, and they may carry an API key, a session cookie or `?api_key=`
(docs/operations.md, "Logs"). Raw requests over a loopback socket to the in-process daemon."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import orjson
import pytest

from tests.unit.api.conftest import Api

SECRET = "fwd_" + "S3CRETpart" * 4  # what must never reach a log record, nor any piece of it
PIECES = [SECRET[i : i + 8] for i in range(0, len(SECRET) - 8, 4)]
LONG = 9_000  # past aiohttp's 8190-byte limits of the request line and of a header


async def exchange(api: Api, raw: bytes) -> bytes:
    """Send `raw` on a new connection; the first line of the answer."""
    return (await answer(api, raw)).split(b"\r\n", 1)[0] + b"\r\n"


async def answer(api: Api, raw: bytes) -> bytes:
    """Send `raw` on a new connection; the whole answer (the server closes the connection)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", api.daemon.port)
    try:
        writer.write(raw)
        await writer.drain()
        async with asyncio.timeout(10):
            return await reader.read()
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


CASES = {
    "long_authorization": (
        b"GET /v1/databases HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
        + SECRET.encode()
        + b"x" * LONG
        + b"\r\n\r\n",
        "request line or header too long",
    ),
    "long_cookie": (
        b"GET /ui/ HTTP/1.1\r\nHost: x\r\nCookie: fwd_session=" + SECRET.encode() + b"y" * LONG + b"\r\n\r\n",
        "request line or header too long",
    ),
    "long_request_line": (
        b"GET /v1/databases?api_key=" + SECRET.encode() + b"&a=" + b"z" * LONG + b" HTTP/1.1\r\nHost: x\r\n\r\n",
        "request line or header too long",
    ),
    "control_char_in_authorization": (
        b"GET /v1/databases HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + SECRET.encode() + b"\x01x\r\n\r\n",
        "invalid header",
    ),
    "control_char_in_header_name": (
        b"GET /v1/databases HTTP/1.1\r\nHost: x\r\nX-" + SECRET.encode() + b"\x01: 1\r\n\r\n",
        "invalid header",
    ),
    # On a connection's first request aiohttp logs a bad method at debug level, with its line.
    "bad_method": (b"G\x01T /v1/databases?api_key=" + SECRET.encode() + b" HTTP/1.1\r\nHost: x\r\n\r\n", "bad method"),
}


@pytest.mark.parametrize("case", CASES)
async def test_a_malformed_request_is_logged_by_its_kind_never_by_its_bytes(
    api: Api, caplog: pytest.LogCaptureFixture, case: str
) -> None:
    raw, reason = CASES[case]
    with caplog.at_level(logging.DEBUG):
        status = await exchange(api, raw)
    assert status.startswith((b"HTTP/1.0 400", b"HTTP/1.1 400")), status
    for record in caplog.records:
        assert not record.exc_info and not record.exc_text, record.getMessage()
        text = record.getMessage() + repr(vars(record))
        leaked = [piece for piece in PIECES if piece in text]
        assert not leaked, f"{record.name}: {text[:300]}"
    assert not [p for p in PIECES if p in caplog.text]
    refused = [r for r in caplog.records if r.getMessage() == "malformed request refused"]
    assert [getattr(r, "reason", None) for r in refused] == [reason]


@pytest.mark.parametrize("case", CASES)
async def test_a_malformed_request_gets_the_apis_json_error(api: Api, case: str) -> None:
    """docs/api.md: every error is JSON, also for a request aiohttp refuses before the app runs."""
    raw, reason = CASES[case]
    head, _, body = (await answer(api, raw)).partition(b"\r\n\r\n")
    assert b"\r\ncontent-type: application/json" in head.lower(), head
    assert orjson.loads(body) == {"error": {"code": "bad_request", "message": f"malformed request: {reason}"}}
