"""The HTTP server: aiohttp application, middlewares (errors, auth) and its runner.

Lifecycle follows aiohttp's web_runner: `start()` binds (the daemon is ready only after),
`aclose()` stops accepting and lets requests in flight finish.
"""

from __future__ import annotations

import logging
import time
from typing import Final

from aiohttp import web
from aiohttp.typedefs import Handler
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from forwarder import metrics
from forwarder.api import destinations, logs
from forwarder.api.auth import PRINCIPAL, authenticate
from forwarder.api.context import CONTEXT, ApiContext
from forwarder.api.errors import ApiError, json_response
from forwarder.api.openapi import openapi_document

log = logging.getLogger(__name__)

PUBLIC_PATHS: Final = frozenset({"/healthz", "/readyz", "/metrics", "/v1/openapi.json"})


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure leaves as the JSON error shape; unexpected ones are logged, never detailed."""
    try:
        return await handler(request)
    except ApiError as exc:
        return exc.response()
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code = {404: "not_found", 405: "method_not_allowed", 413: "body_too_large"}.get(exc.status, "http_error")
        message = {404: "no such endpoint", 405: f"method {request.method} is not allowed here"}.get(
            exc.status, exc.reason
        )
        resp = ApiError(exc.status, code, message).response()
        if exc.status == 405 and "Allow" in exc.headers:
            resp.headers["Allow"] = exc.headers["Allow"]
        return resp
    except Exception:
        log.exception("request failed", extra={"method": request.method, "path": request.path})
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
    """Prometheus text format; labels carry destination ids and types, never secrets."""
    return web.Response(body=generate_latest(metrics.REGISTRY), headers={"Content-Type": CONTENT_TYPE_LATEST})


async def openapi(request: web.Request) -> web.Response:
    return json_response(openapi_document())


def build_app(ctx: ApiContext) -> web.Application:
    """The aiohttp application serving `ctx`."""
    app = web.Application(middlewares=[metrics_middleware, error_middleware, auth_middleware], client_max_size=1 << 20)
    app[CONTEXT] = ctx
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_endpoint)
    app.router.add_get("/v1/openapi.json", openapi)
    app.router.add_routes(logs.routes)
    app.router.add_routes(destinations.routes)
    return app


class ApiServer:
    """Binds the API on the configured address; `port` is the bound one (useful with port 0)."""

    def __init__(self, ctx: ApiContext) -> None:
        self._ctx = ctx
        self._runner = web.AppRunner(build_app(ctx), access_log=None, handle_signals=False)
        self.port = 0

    async def start(self) -> None:
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._ctx.config.server.host, self._ctx.config.server.port)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1] if sockets else self._ctx.config.server.port
        self._ctx.ready = True

    async def aclose(self, grace_seconds: float = 5.0) -> None:
        self._ctx.ready = False
        await self._runner.shutdown()
        await self._runner.cleanup()
