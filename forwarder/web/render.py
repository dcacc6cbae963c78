"""Templates, filters and the headers every page leaves with."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from aiohttp import web

from forwarder.model import format_time

if TYPE_CHECKING:
    import jinja2

TEMPLATES_DIR: Final = Path(__file__).parent / "templates"
STATIC_DIR: Final = Path(__file__).parent / "static"

# Only this origin: no inline script or style, no framing, forms post only here. Log text is hostile
# input, so even an escaping mistake could run nothing (MDN, "Content-Security-Policy").
CSP: Final = "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'; object-src 'none'"
SECURITY_HEADERS: Final = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
}


def is_page(path: str) -> bool:
    """Whether `path` is one of the pages (or their static files), answered in HTML."""
    return path == "/" or path == "/ui" or path.startswith("/ui/")


async def security_headers(request: web.Request, response: web.StreamResponse) -> None:
    """on_response_prepare: the CSP and friends on every page, error pages and static files included."""
    if not is_page(request.path):
        return
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    if not request.path.startswith("/ui/static/"):
        # Pages show log text and findings: no shared cache may keep them.
        response.headers.setdefault("Cache-Control", "no-store")


def when(time_us: int | None) -> str:
    """µs since the epoch as `2026-11-22 02:18:58.123 UTC` (the SPEC time, easier to read)."""
    if time_us is None:
        return "never"
    return format_time(time_us).replace("T", " ").removesuffix("Z") + " UTC"


def when_text(rfc3339: str | None) -> str:
    """A SPEC time string (`2026-11-22T02:18:58.123Z`) shown like `when`."""
    if not rfc3339:
        return "never"
    return rfc3339.replace("T", " ").removesuffix("Z") + " UTC"


def number(value: float | int | None) -> str:
    """Thousands separated; floats with up to two decimals."""
    if value is None:
        return "-"
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.2f}"
    return f"{int(value):,}"


def nbytes(value: int | None) -> str:
    """Bytes in B, KiB, MiB or GiB."""
    if value is None:
        return "-"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:,.0f} {unit}" if unit == "B" else f"{size:,.1f} {unit}"
        size /= 1024
    return f"{size:,.1f} GiB"


def _asset(app: web.Application) -> Any:
    def asset(filename: str) -> str:
        # A version query string (a hash of the file) so a browser may cache static files for long.
        return str(app.router["static"].url_for(filename=filename))

    return asset


class Templates:
    """The pages' templates. Their Jinja2 environment is made by the first page rendered: Jinja2
    (~22 ms and ~4 MB to import) is no part of the daemon's start, nor of a daemon whose pages
    nobody opens."""

    def __init__(self, app: web.Application) -> None:
        self._app = app
        self._env: jinja2.Environment | None = None

    def render(self, template: str, context: dict[str, Any]) -> str:
        if self._env is None:
            import jinja2

            env = jinja2.Environment(
                loader=jinja2.FileSystemLoader(TEMPLATES_DIR),
                autoescape=True,  # every {{ }} is escaped: log text shows as text
                undefined=jinja2.StrictUndefined,
                trim_blocks=True,
                lstrip_blocks=True,
            )
            env.filters.update(when=when, when_text=when_text, number=number, nbytes=nbytes)
            env.globals["asset"] = _asset(self._app)
            self._env = env
        return self._env.get_template(template).render(context)


TEMPLATES: Final = web.AppKey("templates", Templates)


def setup_templates(app: web.Application) -> None:
    app[TEMPLATES] = Templates(app)


def page(request: web.Request, template: str, context: dict[str, Any], status: int = 200) -> web.Response:
    """`template` rendered with `context` plus who is signed in (`user`, `csrf`, `can_write`)."""
    from forwarder.web.session import USER  # the session module renders pages too

    user = request.get(USER)
    full = {
        "user": user,
        "csrf": user.csrf if user is not None else "",
        "can_write": user is not None and user.key.role == "read-write",
        "section": "",
        **context,
    }
    html = request.config_dict[TEMPLATES].render(template, full)
    return web.Response(text=html, status=status, content_type="text/html")


def error_page(request: web.Request, status: int, message: str) -> web.Response:
    """The HTML answer for a failed page: its status and a sentence, never a stack trace."""
    titles = {401: "Sign in needed", 403: "Not allowed", 404: "Not found", 405: "Not allowed"}
    title = titles.get(status, "Something went wrong" if status >= 500 else "Cannot do that")
    return page(request, "error.html", {"title": title, "status": status, "message": message}, status)
