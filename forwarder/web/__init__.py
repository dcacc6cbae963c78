"""The web pages under /ui/: server-rendered HTML over the same store, insights and use cases as
the API (never a second copy of a query), signed in with an API key (docs/web.md).

Every page is readable without JavaScript; `static/` adds charts, the live tail and small partial
updates (vendored htmx and uPlot, no CDN, no build step). The Content-Security-Policy allows only
this origin, so no template may hold an inline script or style.
"""

from __future__ import annotations

from aiohttp import web

from forwarder.api.lazyroutes import LazyRoutes
from forwarder.web import alerts, databases, destinations, insights, logs, session
from forwarder.web.render import STATIC_DIR, security_headers, setup_templates


async def _home(request: web.Request) -> web.StreamResponse:
    raise web.HTTPFound("/ui/databases")


def add_pages(app: web.Application) -> None:
    """Serve the pages (and their static files) from `app`."""
    setup_templates(app)
    app.router.add_get("/", _home)
    app.router.add_get("/ui", _home)
    app.router.add_get("/ui/", _home)
    for module in (session, databases, logs, insights, alerts, destinations):
        app.router.add_routes(module.routes)
    app.router.register_resource(LazyRoutes("/ui/ask", "forwarder.web.ask"))  # Ask's pages: imported on first use
    logs.setup(app)
    app.router.add_static("/ui/static/", STATIC_DIR, name="static", append_version=True)
    app.on_response_prepare.append(security_headers)
