"""The HTTP server: aiohttp application, middlewares (errors, auth) and its runner.

Lifecycle follows aiohttp's web_runner: `start()` binds (the daemon is ready only after),
`aclose()` stops accepting and lets requests in flight finish.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.http_exceptions import (
    BadHttpMethod,
    BadStatusLine,
    HttpProcessingError,
    InvalidHeader,
    InvalidURLError,
    LineTooLong,
    PayloadEncodingError,
)
from aiohttp.http_parser import RawRequestMessage
from aiohttp.streams import StreamReader
from aiohttp.typedefs import Handler
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest
from prometheus_client.exposition import choose_encoder

from forwarder import metrics
from forwarder.api import alerts, audit, destinations, fixes, insights, logs
from forwarder.api.auth import PRINCIPAL, authenticate
from forwarder.api.context import CONTEXT, ApiContext
from forwarder.api.errors import ApiError, bad_parameter, json_response
from forwarder.api.lazyroutes import LazyRoutes
from forwarder.clock import Clock
from forwarder.config import ServerConfig
from forwarder.web import add_pages
from forwarder.web.render import error_page, is_page
from forwarder.web.session import page_middleware

log = logging.getLogger(__name__)

MAX_BODY_BYTES: Final = 1 << 20  # the largest body a request may carry (a 413 beyond)

PUBLIC_PATHS: Final = frozenset({"/healthz", "/readyz", "/metrics", "/v1/openapi.json"})


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure leaves as the JSON error shape; unexpected ones are logged, never detailed."""
    try:
        return await handler(request)
    except ApiError as exc:
        if is_page(request.path):
            return error_page(request, exc.status, exc.message)
        return exc.response()
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        if is_page(request.path):
            # A page answers in HTML: a wrong id is a 404 page, a refused form a 403 page.
            text = "no such page" if exc.status == 404 else exc.reason
            return error_page(request, exc.status, text)
        code = {404: "not_found", 405: "method_not_allowed", 413: "body_too_large"}.get(exc.status, "http_error")
        message = {
            404: "no such endpoint",
            405: f"method {request.method} is not allowed here",
            413: f"a request body is at most {MAX_BODY_BYTES // 1024} KiB",
        }.get(exc.status, exc.reason)
        resp = ApiError(exc.status, code, message).response()
        if exc.status == 405 and "Allow" in exc.headers:
            resp.headers["Allow"] = exc.headers["Allow"]
        return resp
    except Exception:
        log.exception("request failed", extra={"method": request.method, "path": request.path})
        if is_page(request.path):
            return error_page(request, 500, "internal error; see the daemon's log")
        return ApiError(500, "internal", "internal error; see the daemon's log").response()


@web.middleware
async def metrics_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Count every request by its route template (never the raw path: ids would explode the series)."""
    started = time.perf_counter()
    status = 500
    try:
        response = await handler(request)
        status = response.status
        return response
    except web.HTTPException as exc:
        status = exc.status
        raise
    finally:
        info = request.match_info.route.resource
        route = info.canonical if info is not None else "unmatched"
        metrics.HTTP_REQUESTS.labels(route, request.method, str(status)).inc()
        metrics.HTTP_DURATION.labels(route, request.method).observe(time.perf_counter() - started)


@web.middleware
async def auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every /v1 path but the OpenAPI document needs a key (SPEC 5)."""
    if request.path.startswith("/v1/") and request.path not in PUBLIC_PATHS:
        request[PRINCIPAL] = await authenticate(request, request.app[CONTEXT].store)
    return await handler(request)


@web.middleware
async def query_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A /v1 route takes query parameters only where its handler reads them (`logs.reads_query`):
    anywhere else one is refused before the handler runs, as the listings refuse an unknown one
    (docs/api.md), so `DELETE /v1/ask/conversations?confirm=no` deletes nothing."""
    info = request.match_info
    if (
        request.query
        and request.path.startswith("/v1/")
        and info.http_exception is None  # (an unknown path stays a 404, a wrong method a 405)
        and not getattr(info.handler, "reads_query", False)
    ):
        raise bad_parameter(next(iter(request.query)), "unknown query parameter; this endpoint takes none")
    return await handler(request)


async def healthz(request: web.Request) -> web.Response:
    """Alive: the event loop answers."""
    return json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    """Ready: the store is open and can write (its last write succeeded), and the API is bound."""
    ctx = request.app[CONTEXT]
    if not ctx.ready:
        return json_response({"status": "starting"}, status=503)
    if not ctx.store.is_open:
        return json_response({"status": "store closed"}, status=503)
    if ctx.store.write_problem is not None:
        return json_response({"status": "store cannot write", "reason": ctx.store.write_problem}, status=503)
    return json_response({"status": "ready"})


async def metrics_endpoint(request: web.Request) -> web.Response:
    """The metrics in the format the scraper asks for in `Accept`: OpenMetrics when it names
    application/openmetrics-text (Prometheus does by default), else the Prometheus text format
    (docs/operations.md). Labels carry destination ids and types, never secrets."""
    encode, content_type = choose_encoder(request.headers.get("Accept", ""))
    return web.Response(body=encode(metrics.REGISTRY), headers={"Content-Type": content_type})


async def openapi(request: web.Request) -> web.Response:
    from forwarder.api.openapi import openapi_document  # every model of the API, Ask's too: on first use

    return json_response(openapi_document())


def build_app(ctx: ApiContext, *, pages: bool) -> web.Application:
    """The aiohttp application serving `ctx`: the API, and with `pages` the web pages under /ui/."""
    middlewares = [metrics_middleware, error_middleware, auth_middleware, query_middleware, page_middleware]
    app = web.Application(middlewares=middlewares, client_max_size=MAX_BODY_BYTES)
    app[CONTEXT] = ctx
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_endpoint)
    app.router.add_get("/v1/openapi.json", openapi)
    app.router.add_routes(logs.routes)
    app.router.add_routes(destinations.routes)
    app.router.add_routes(insights.routes)
    app.router.add_routes(fixes.routes)
    app.router.add_routes(alerts.routes)
    app.router.register_resource(LazyRoutes("/v1/ask", "forwarder.api.ask"))  # imported on first use
    app.router.add_routes(audit.routes)
    if pages:
        add_pages(app)
    return app


# --- the listening side: a cap on connections, a deadline for the request head -----------------


def descriptor_limit() -> int | None:
    """The process's soft limit of open descriptors (RLIMIT_NOFILE), None when unlimited."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """How many connections the API holds and how long a silent one may stay."""

    max_connections: int
    header_timeout_seconds: float

    @classmethod
    def of(cls, server: ServerConfig, nofile: int | None) -> ConnectionLimits:
        """The configured cap, lowered to keep `reserved_descriptors` free below the descriptor limit
        `nofile`: reading logs, the store and deliveries must never starve for descriptors."""
        cap = server.max_connections
        if nofile is not None:
            cap = max(1, min(cap, nofile - server.reserved_descriptors))
        return cls(cap, server.header_timeout_seconds)


class RateLimitedLog:
    """Logs an event at most once per `interval` seconds, saying how many were left unlogged."""

    def __init__(self, clock: Clock, interval: float = 10.0) -> None:
        self._clock = clock
        self._interval = interval
        self._next = float("-inf")
        self._unlogged = 0

    def warning(self, message: str, **extra: Any) -> None:
        now = self._clock.monotonic()
        if now < self._next:
            self._unlogged += 1
            return
        if self._unlogged:
            extra["unlogged_since_last"] = self._unlogged
        log.warning(message, extra=extra)
        self._next, self._unlogged = now + self._interval, 0


# What a malformed request is, by the type of aiohttp's exception (most specific first). Only
# these fixed words are logged: the exceptions' messages quote the request's bytes (a header past
# the size limit with its value, the request line with its query), which may be an API key, a
# session cookie or `?api_key=`; keys never reach the log (docs/operations.md, "Logs").
_MALFORMED: Final[tuple[tuple[type[HttpProcessingError], str], ...]] = (
    (LineTooLong, "request line or header too long"),
    (InvalidHeader, "invalid header"),
    (BadHttpMethod, "bad method"),
    (BadStatusLine, "bad request line"),
    (InvalidURLError, "invalid URL"),
    (PayloadEncodingError, "bad body encoding"),
)
# The C parser (llhttp) reports other faults as a plain BadHttpMessage whose message starts with
# llhttp's own description of the fault, then the bytes around it; only the description is matched.
_MALFORMED_LLHTTP: Final = (
    ("Invalid header", "invalid header"),  # "... value char", "... field char", "... token"
    ("Invalid method", "bad method"),
    ("Invalid URL", "invalid URL"),
    ("Invalid HTTP version", "bad request line"),
    ("Invalid char in url", "invalid URL"),
    ("Missing expected CR", "bad line ending"),
    ("Missing expected LF", "bad line ending"),
    ("Too many headers", "too many headers"),
    ("Duplicate", "duplicate header"),
    ("Missing 'Host'", "missing Host header"),
)


def malformed_reason(exc: HttpProcessingError) -> str:
    """A fixed word for what was wrong with a request aiohttp refused, never built from its bytes."""
    if exc.message == "Received HTTPS traffic on an HTTP port":  # aiohttp's fixed text for a TLS hello
        return "HTTPS on the HTTP port"
    for kind, reason in _MALFORMED:
        if isinstance(exc, kind):
            return reason
    for start, reason in _MALFORMED_LLHTTP:
        if exc.message.startswith(start):
            return reason
    return "malformed request"


class _NoRequestBytes(logging.Filter):
    """Rewrites aiohttp's own records of a malformed request (a bad method on a connection's first
    request is logged at debug, with the exception) to the fixed reason: the exception's text
    quotes the request's bytes."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError):
            record.msg, record.args = "malformed request refused", ()
            record.exc_info, record.exc_text = None, None
            record.status, record.reason = exc.code, malformed_reason(exc)
        return True


# aiohttp's connection handler logs here (a child of aiohttp.server: configured the same way).
AIOHTTP_LOG: Final = logging.getLogger("aiohttp.server.api")
AIOHTTP_LOG.addFilter(_NoRequestBytes())


class _Handler(RequestHandler):
    """aiohttp's connection handler, with a malformed request (a request line past the limit, say)
    logged as one line at a bounded rate instead of a traceback: any client can send one. The line
    names what was wrong (malformed_reason), never the request's bytes."""

    __slots__ = ("_bad_requests",)

    def __init__(self, manager: web.Server, bad_requests: RateLimitedLog, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._bad_requests = bad_requests

    def log_exception(self, *args: Any, **kw: Any) -> None:
        exc = kw.get("exc_info")
        if isinstance(exc, HttpProcessingError):
            self._bad_requests.warning("malformed request refused", status=exc.code, reason=malformed_reason(exc))
        else:
            super().log_exception(*args, **kw)

    def handle_error(
        self, request: BaseRequest, status: int = 500, exc: BaseException | None = None, message: str | None = None
    ) -> web.StreamResponse:
        """A request that never reached the app (aiohttp refused its request line or headers, or
        its handler failed before answering): the API's JSON error shape (docs/api.md, "Every
        error is JSON") instead of aiohttp's text/plain page, with a fixed message (the request's
        bytes are never echoed)."""
        if getattr(self, "_request_count", 0) == 1 and isinstance(exc, BadHttpMethod):
            # A TLS hello or other non-HTTP bytes on a fresh connection: common, logged at debug
            # (through AIOHTTP_LOG's filter, without the bytes), as aiohttp does.
            self.logger.debug("Error handling request from %s", request.remote, exc_info=exc)
        else:
            self.log_exception("Error handling request from %s", request.remote, exc_info=exc)
        if request.writer.output_size > 0:  # an answer was begun: nothing more can be said
            raise ConnectionError("Response is sent already, cannot send another response with the error message")
        if isinstance(exc, HttpProcessingError) and 400 <= status < 500:
            error = ApiError(status, "bad_request", f"malformed request: {malformed_reason(exc)}")
        else:
            error = ApiError(500, "internal", "internal error; see the daemon's log")
        response = error.response()
        response.force_close()  # aiohttp closes the connection after a request it could not read
        return response


class _Refused(asyncio.Protocol):
    """A connection past the cap: closed as soon as it is made, without reading a byte."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()  # nothing is read or written: a flood costs no more than the accepts


class GuardedServer(web.Server):
    """aiohttp's low-level server (one per runner) that keeps the API within `limits`.

    A connection past the cap is closed on arrival (logged at a bounded rate, counted in
    forwarder_http_connections_refused_total). A connection that has not sent a complete request
    head within the header timeout is closed; one idle between requests is closed after
    aiohttp's keep-alive timeout.
    """

    def __init__(self, inner: web.Server, limits: ConnectionLimits, clock: Clock) -> None:
        # The application's handler and request factory as AppRunner made them; the kwargs are
        # the runner's handler arguments (keep-alive timeout, access log).
        super().__init__(
            inner.request_handler,
            request_factory=self._head_received,
            handler_cancellation=inner.handler_cancellation,
            loop=inner._loop,
            **inner._kwargs,
        )
        self._app_request = inner.request_factory
        self.limits = limits
        self._open = 0
        self._awaiting_head: dict[RequestHandler, asyncio.TimerHandle] = {}
        self._refusals = RateLimitedLog(clock)
        self._bad_requests = RateLimitedLog(clock)

    # The factory asyncio calls per accepted connection: refusing here costs no handler at all.
    def __call__(self) -> asyncio.BaseProtocol:  # type: ignore[override]
        if self._open >= self.limits.max_connections:
            metrics.HTTP_CONNECTIONS_REFUSED.inc()
            self._refusals.warning("API connection refused: too many open", max_connections=self.limits.max_connections)
            return _Refused()
        self._open += 1  # until the handler's connection_lost, which asyncio calls for every made connection
        metrics.HTTP_CONNECTIONS_OPEN.set(self._open)
        return _Handler(self, self._bad_requests, loop=self._loop, **{**self._kwargs, "logger": AIOHTTP_LOG})

    def connection_made(self, handler: RequestHandler, transport: asyncio.Transport) -> None:
        super().connection_made(handler, transport)
        self._awaiting_head[handler] = self._loop.call_later(
            self.limits.header_timeout_seconds, self._head_overdue, handler
        )

    def connection_lost(self, handler: RequestHandler, exc: BaseException | None = None) -> None:
        self._open -= 1
        metrics.HTTP_CONNECTIONS_OPEN.set(self._open)
        timer = self._awaiting_head.pop(handler, None)
        if timer is not None:
            timer.cancel()
        super().connection_lost(handler, exc)

    def _head_received(
        self,
        message: RawRequestMessage,
        payload: StreamReader,
        protocol: RequestHandler,
        writer: AbstractStreamWriter,
        task: asyncio.Task[None],
    ) -> BaseRequest:
        timer = self._awaiting_head.pop(protocol, None)
        if timer is not None:
            timer.cancel()
        return self._app_request(message, payload, protocol, writer, task)

    def _head_overdue(self, handler: RequestHandler) -> None:
        if self._awaiting_head.pop(handler, None) is not None:
            metrics.HTTP_CONNECTIONS_TIMED_OUT.inc()
            handler.force_close()


class _Runner(web.AppRunner):
    """AppRunner serving through a GuardedServer."""

    def __init__(self, app: web.Application, limits: ConnectionLimits, clock: Clock, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self._limits = limits
        self._clock = clock

    async def _make_server(self) -> web.Server:
        return GuardedServer(await super()._make_server(), self._limits, self._clock)


class ApiServer:
    """Binds the API on the configured address; `port` is the bound one (useful with port 0)."""

    def __init__(self, ctx: ApiContext) -> None:
        self._ctx = ctx
        server = ctx.config.server
        nofile = descriptor_limit()
        self.limits = ConnectionLimits.of(server, nofile)
        if self.limits.max_connections < server.max_connections:
            log.info(
                "API connections capped below the descriptor limit",
                extra={"max_connections": self.limits.max_connections, "descriptor_limit": nofile},
            )
        self._runner = _Runner(
            build_app(ctx, pages=ctx.config.web.enabled),
            self.limits,
            ctx.clock,
            access_log=None,
            handle_signals=False,
            keepalive_timeout=server.keepalive_timeout_seconds,
        )
        self.port = 0

    async def start(self) -> None:
        await self._runner.setup()
        host, port = self._ctx.config.server.host, self._ctx.config.server.port
        site = web.TCPSite(self._runner, host, port)
        try:
            await site.start()
        except OSError as exc:  # a port in use, a host that does not resolve or is not this machine's
            raise OSError(exc.errno, f"cannot listen on server.host {host!r}, server.port {port}: {exc}") from exc
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1] if sockets else self._ctx.config.server.port
        self._ctx.ready = True

    async def aclose(self, grace_seconds: float = 5.0) -> None:
        self._ctx.ready = False
        await self._runner.shutdown()
        await self._runner.cleanup()
