"""The databases list and a database's overview (reader, settings, 24-hour chart, retention)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from forwarder.api.auth import Principal
from forwarder.api.context import CONTEXT
from forwarder.api.logs import DAY_US, SettingsPatch, change_settings, database_of, overview_of
from forwarder.model import KIND_ALIASES, KINDS, Kind
from forwarder.web.render import page
from forwarder.web.session import USER

routes = web.RouteTableDef()

ERROR_KINDS = KIND_ALIASES["errors"]


def principal(request: web.Request) -> Principal:
    """The signed-in key as the use cases know a caller."""
    key = request[USER].key
    return Principal(key_id=key.id, org=key.org, role=key.role)


@routes.get("/ui/databases")
async def databases(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    rows: list[dict[str, Any]] = []
    for db in ctx.databases.all():
        o = await overview_of(ctx, db)  # its settings, reader and counts: one read of each
        rows.append(
            {
                "db": o.database,
                "settings": o.settings,
                "source": o.source,
                "lines_today": o.usage_today.lines,
                "errors_24h": sum(n for kind, n in o.counts_24h.items() if kind in ERROR_KINDS),
            }
        )
    return page(request, "databases.html", {"title": "Databases", "section": "databases", "rows": rows})


def hourly_chart(now_us: int, hourly: list[tuple[int, Kind, int]]) -> dict[str, Any]:
    """The 24 hours up to now as uPlot's columns: `x` (hour starts, s) and one series per kind seen."""
    first_hour = (now_us - DAY_US) // 3_600_000_000 * 3_600_000_000
    hours = [first_hour + i * 3_600_000_000 for i in range(25)]
    index = {h: i for i, h in enumerate(hours)}
    series: dict[Kind, list[int]] = {}
    for hour, kind, count in hourly:
        if hour in index:
            series.setdefault(kind, [0] * len(hours))[index[hour]] += count
    ordered = [k for k in KINDS if k in series]
    return {"x": [h // 1_000_000 for h in hours], "series": [{"name": k, "values": series[k]} for k in ordered]}


@routes.get("/ui/databases/{ref}")
async def overview(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    db = database_of(request)
    data = await overview_of(ctx, db)
    now_us = int(ctx.clock.now() * 1_000_000)
    chart = hourly_chart(now_us, await ctx.store.hourly_counts(db.identity.code, now_us - DAY_US - 3_600_000_000))
    context = {
        "title": f"{db.config.name}: overview",
        "section": "databases",
        "db": db.config,
        "o": data,
        "chart": chart,
        "counts": [(k, n) for k, n in data.counts_24h.items() if n],
        "total_24h": sum(data.counts_24h.values()),
    }
    return page(request, "database.html", context)


@routes.post("/ui/databases/{ref}/settings")
async def settings(request: web.Request) -> web.Response:
    """One switch of the overview: `setting` (enabled | full_text) set to `value` (true | false)."""
    ctx = request.app[CONTEXT]
    db = database_of(request)
    form = await request.post()
    name, value = form.get("setting"), form.get("value")
    if name not in ("enabled", "full_text") or value not in ("true", "false"):
        raise web.HTTPBadRequest(reason="setting must be enabled or full_text, value true or false")
    await change_settings(ctx, db, SettingsPatch.model_validate({name: value == "true"}), principal(request))
    raise web.HTTPSeeOther(f"/ui/databases/{db.config.id}")
