"""Signing in with an API key, the session cookie, and the checks every page request passes.

Threat model (OWASP "Session Management" and "CSRF Prevention" cheat sheets):
- the cookie holds a random token; the store keeps only its hash and the key it stands for, so a
  revoked key or an expired session signs the browser out on its next request;
- the cookie is HttpOnly (no script reads it), SameSite=Strict (no other site's page sends it),
  Secure when the page came over TLS, and scoped to /ui;
- every state-changing request must come from this origin (`Origin`, else `Sec-Fetch-Site`) and
  carry the session's CSRF token (a form field or the `X-CSRF-Token` header htmx sends);
- a read-only key's writes are refused here, whatever the page showed.
"""

from __future__ import annotations

import hmac
from typing import Final
from urllib.parse import urlsplit

from aiohttp import web
from aiohttp.typedefs import Handler
from yarl import URL

from forwarder.api.auth import READ_METHODS
from forwarder.api.context import CONTEXT
from forwarder.store.state import WebSession
from forwarder.web.render import is_page, page

COOKIE: Final = "forwarder_session"
USER: Final = web.RequestKey("web_user", WebSession)
SIGN_IN: Final = "/ui/signin"
SIGN_OUT: Final = "/ui/signout"
# Pages anyone may open; everything else under /ui/ needs a session.
OPEN_PATHS: Final = frozenset({SIGN_IN})

routes = web.RouteTableDef()


def _same_origin(request: web.Request) -> bool:
    """Whether a state-changing request came from one of our own pages."""
    origin = request.headers.get("Origin")
    if origin is not None and origin != "null":
        return urlsplit(origin).netloc.lower() == request.host.lower()
    fetch_site = request.headers.get("Sec-Fetch-Site")
    if fetch_site is not None:
        return fetch_site in ("same-origin", "none")
    # Neither header (a script, not a browser): the CSRF token below still has to match.
    return origin is None


async def _presented_csrf(request: web.Request) -> str:
    header = request.headers.get("X-CSRF-Token")
    if header is not None:
        return header
    if request.content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
        value = (await request.post()).get("csrf")
        return value if isinstance(value, str) else ""
    return ""


@web.middleware
async def page_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Sessions, CSRF and roles for /ui/; other paths pass untouched."""
    if not is_page(request.path) or request.path.startswith("/ui/static/"):
        return await handler(request)
    writing = request.method not in READ_METHODS
    if writing and not _same_origin(request):
        raise web.HTTPForbidden(reason="a form of another site cannot post here")
    token = request.cookies.get(COOKIE)
    session = await request.app[CONTEXT].store.web_session(token) if token else None
    if session is not None:
        request[USER] = session
    elif request.path not in OPEN_PATHS:
        if not writing:
            raise web.HTTPSeeOther(URL(SIGN_IN).with_query(next=request.path_qs))
        raise web.HTTPUnauthorized(reason="the session has ended; sign in again")
    if writing and session is not None:
        if not hmac.compare_digest((await _presented_csrf(request)).encode(), session.csrf.encode()):
            raise web.HTTPForbidden(reason="the form has expired; reload the page and try again")
        if session.key.role != "read-write" and request.path != SIGN_OUT:
            raise web.HTTPForbidden(reason="this API key is read-only; sign in with a read-write key to change things")
    return await handler(request)


def _next_page(raw: object) -> str:
    """Where to go after signing in: only a page of ours (no open redirect)."""
    if isinstance(raw, str) and raw.startswith("/ui/") and not raw.startswith("/ui//") and "\\" not in raw:
        return raw
    return "/ui/databases"


def _secure(request: web.Request) -> bool:
    # Behind a TLS-terminating proxy the daemon sees http; the proxy says so in X-Forwarded-Proto.
    return request.secure or request.headers.get("X-Forwarded-Proto", "").lower() == "https"


@routes.get(SIGN_IN)
async def sign_in_page(request: web.Request) -> web.Response:
    if USER in request:
        raise web.HTTPSeeOther(_next_page(request.query.get("next")))
    context = {"title": "Sign in", "next": _next_page(request.query.get("next")), "error": ""}
    return page(request, "signin.html", context)


@routes.post(SIGN_IN)
async def sign_in(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    form = await request.post()
    presented = form.get("key")
    next_page = _next_page(form.get("next"))
    key = await ctx.store.verify_key(presented.strip()) if isinstance(presented, str) and presented.strip() else None
    if key is None:
        context = {"title": "Sign in", "next": next_page, "error": "That key is unknown or revoked."}
        return page(request, "signin.html", context, status=401)
    ttl = ctx.config.web.session_hours * 3600
    token, _ = await ctx.store.create_session(key.id, ttl)
    response = web.HTTPSeeOther(next_page)
    response.set_cookie(
        COOKIE, token, max_age=int(ttl), path="/ui", httponly=True, samesite="Strict", secure=_secure(request)
    )
    raise response


@routes.post(SIGN_OUT)
async def sign_out(request: web.Request) -> web.Response:
    token = request.cookies.get(COOKIE)
    if token:
        await request.app[CONTEXT].store.end_session(token)
    response = web.HTTPSeeOther(SIGN_IN)
    response.del_cookie(COOKIE, path="/ui", httponly=True, samesite="Strict")
    raise response
