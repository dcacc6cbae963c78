"""HTTP handling shared by every HTTP kind: sending without redirects, judging statuses, Retry-After."""

from __future__ import annotations

import datetime
import email.utils
import ssl
from collections.abc import Mapping

import aiohttp

from forwarder.sinks.base import DELIVERED, AddressRefused, Outcome, Request, Response

MAX_ERROR_BODY = 4096
USER_AGENT = "forwarder/0.1 (+PostgreSQL log forwarder)"


class HttpSender:
    """Sends requests through a session the delivery layer built (the network guard lives there)."""

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self._session = session

    async def send(self, request: Request) -> Response:
        headers = {"User-Agent": USER_AGENT, **dict(request.headers)}
        # Redirects are never followed (SPEC 6.1): a 3xx is a failure, and its target could be an
        # address the network guard would refuse.
        async with self._session.request(
            request.method, request.url, data=request.body, headers=headers, allow_redirects=False
        ) as resp:
            limit = MAX_ERROR_BODY if resp.status >= 300 else request.success_body_bytes
            return Response(resp.status, dict(resp.headers), await _read_up_to(resp.content, limit))


async def _read_up_to(stream: aiohttp.StreamReader, limit: int) -> bytes:
    """At most `limit` bytes of a body (all of it when shorter): `read(n)` alone may return less."""
    chunks: list[bytes] = []
    left = limit
    while left > 0:
        chunk = await stream.read(left)
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def retry_after_seconds(headers: Mapping[str, str], now: float) -> float | None:
    """Retry-After as seconds from now: delta-seconds or an HTTP-date (RFC 9110 section 10.2.3).

    None when the header is absent or neither form; never raises, whatever the receiver sent (this
    runs inside classify, and a raise there would fail the delivery loop, not the attempt).
    """
    value = next((v for k, v in headers.items() if k.lower() == "retry-after"), None)
    if value is None:
        return None
    value = value.strip(" \t")  # OWS around a field value (RFC 9110 section 5.5)
    # delay-seconds = 1*DIGIT, and DIGIT is ASCII 0-9 (RFC 5234 B.1). str.isdigit() alone also
    # takes superscripts (U+00B2, which float() refuses: a raise) and other scripts' digits
    # (full-width U+FF11, which float() reads). A huge value is inf or far beyond a day, which
    # the backoff ignores.
    if value.isascii() and value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: a zone offset like +99999999999
        return None
    if when.tzinfo is None:  # "-0000": an HTTP-date is always UTC (RFC 9110 section 5.6.7), not local time
        when = when.replace(tzinfo=datetime.UTC)
    return max(0.0, when.timestamp() - now)


def error_outcome(error: BaseException) -> Outcome:
    """A request that got no answer. Texts name the failure, never the URL (it may carry a token)."""
    if isinstance(error, TimeoutError):
        # The deliverer's deadline says "no answer within N s"; aiohttp's own timeout texts may
        # carry the URL ("Connection timeout to host <url>"), so they are not shown.
        text = str(error)
        return Outcome("retry", text if text.startswith("no answer within") else "no answer: timed out", "timeout")
    if isinstance(error, AddressRefused):
        return Outcome("retry", f"address refused: {error.reason}", "refused_address")
    # aiohttp wraps the ssl module's error: why a certificate was refused is in its verify message.
    if isinstance(error, aiohttp.ClientConnectorCertificateError) and isinstance(error.certificate_error, ssl.SSLError):
        return tls_outcome(error.certificate_error)
    if isinstance(error, aiohttp.ClientConnectorSSLError) and isinstance(error.os_error, ssl.SSLError):
        return tls_outcome(error.os_error)
    if isinstance(error, aiohttp.ClientSSLError | aiohttp.ServerFingerprintMismatch):
        return Outcome("retry", f"TLS failed: {type(error).__name__}", "tls")
    if isinstance(error, aiohttp.ClientConnectorError):
        cause = error.os_error.strerror or type(error.os_error).__name__
        return Outcome("retry", f"cannot connect: {cause}", "connect")
    if isinstance(error, aiohttp.ClientError | OSError):
        return Outcome("retry", f"connection failed: {type(error).__name__}", "connect")
    return Outcome("retry", f"failed: {type(error).__name__}", "error")


def tls_outcome(error: ssl.SSLError) -> Outcome:
    """A TLS failure as the operator reads it: why OpenSSL refused the certificate ("self-signed
    certificate", "certificate has expired", "Hostname mismatch, certificate is not valid for
    'x'"), or the handshake's alert; the same for every kind, syslog included."""
    if isinstance(error, ssl.SSLCertVerificationError):
        detail = (error.verify_message or "not trusted").rstrip(".")
        return Outcome("retry", f"TLS certificate refused: {detail}", "tls")
    detail = (error.reason or type(error).__name__).replace("_", " ").lower()
    return Outcome("retry", f"TLS failed: {detail}", "tls")


def classify_status(response: Response) -> Outcome:
    """2xx delivered; 3xx, 4xx and 5xx are failures to retry (with Retry-After honoured)."""
    status = response.status
    if 200 <= status < 300:
        return DELIVERED
    if 300 <= status < 400:
        return Outcome("retry", f"HTTP {status}: redirects are not followed", "redirect")
    detail = response.body[:200].decode("utf-8", "replace").strip()
    reason = f"HTTP {status}" + (f": {detail}" if detail else "")
    retry_after = retry_after_seconds(response.headers, response.received_at)
    return Outcome("retry", reason, f"http_{status // 100}xx", retry_after)
