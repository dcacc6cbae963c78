"""The alerts pages: every rule's alerts (firing first) and one alert with the lines it counts."""

from __future__ import annotations

from typing import Any, Final

from aiohttp import web
from yarl import URL

from forwarder.api.alerts import AlertView, alert_instance, alert_view
from forwarder.api.context import CONTEXT, ApiContext
from forwarder.insights.alerts import list_instances
from forwarder.model import format_time
from forwarder.web.render import page

routes = web.RouteTableDef()

LISTED: Final = 200  # of each state


@routes.get("/ui/alerts")
async def alerts(request: web.Request) -> web.Response:
    store = request.app[CONTEXT].store
    firing = await store.read(lambda c: list_instances(c, "firing", LISTED))
    resolved = await store.read(lambda c: list_instances(c, "resolved", LISTED))
    context = {
        "title": "Alerts",
        "section": "alerts",
        "firing": [alert_view(a) for a in firing],
        "resolved": [alert_view(a) for a in resolved],
        "limit": LISTED,
    }
    return page(request, "alerts.html", context)


def logs_link(ctx: ApiContext, alert: AlertView, started_us: int, resolved_us: int | None) -> tuple[str, bool]:
    """The Logs page filtered as the alert's rule counts lines, over the window that made it fire up
    to its end (now while firing); and whether the rule is still in the config (else: no filter)."""
    rule = next((r for r in ctx.config.alerts if r.id == alert.rule), None)
    end_us = resolved_us if resolved_us is not None else int(ctx.clock.now() * 1_000_000)
    # `to` is exclusive on the Logs page; the rule counts lines up to and including its evaluation.
    query: list[tuple[str, str]] = [
        ("from", format_time(started_us - alert.window_seconds * 1_000_000)),
        ("to", format_time(end_us + 1_000)),
    ]
    if rule is not None:
        if rule.kinds:
            query.append(("kind", ",".join(rule.kinds)))
        if rule.text:
            query.append(("q", rule.text))
    return str(URL(f"/ui/databases/{alert.database_id}/logs").with_query(query)), rule is not None


@routes.get("/ui/alerts/{alert_id}")
async def alert(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    found = await alert_instance(request)
    view = alert_view(found)
    logs, rule_known = logs_link(ctx, view, found.started_us, found.resolved_us)
    database = ctx.databases.find(view.database_id)
    context: dict[str, Any] = {
        "title": f"Alert {view.rule}",
        "section": "alerts",
        "a": view,
        "logs": logs,
        "rule_known": rule_known,
        "database_name": database.config.name if database is not None else None,
    }
    return page(request, "alert.html", context)
