"""Alerts of the `[[alerts]]` rules (docs/insights.md says how they are evaluated): read-only routes.

Each alert carries `href`, its path among this daemon's pages, for the pages and Ask.
"""

from __future__ import annotations

from typing import Annotated, Final, get_args

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

from forwarder.api.context import CONTEXT
from forwarder.api.errors import ApiError
from forwarder.api.logs import (
    DEFAULT_LIMIT,
    HEX_ID,
    LimitParam,
    QueryValue,
    Time,
    _send,
    hex_path_id,
    parse_query,
    reads_query,
)
from forwarder.insights.alerts import AlertInstance, get_instance, list_instances
from forwarder.insights.model import AlertState, Severity
from forwarder.model import format_time

routes = web.RouteTableDef()

STATES: Final[tuple[AlertState, ...]] = get_args(AlertState)


def _state(raw: str) -> AlertState:
    for state in STATES:
        if raw == state:
            return state
    raise ValueError(f"must be one of {', '.join(STATES)}")


StateParam = Annotated[AlertState, QueryValue(_state, {"type": "string", "enum": list(STATES)})]


class AlertsQuery(BaseModel):
    """Query of `GET /v1/alerts`."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    state: StateParam | SkipJsonSchema[None] = Field(
        None, description="`firing` (the current alerts) or `resolved`; both when left out."
    )
    limit: LimitParam = Field(DEFAULT_LIMIT, description="At most this many, newest `started_at` first.")


class AlertView(BaseModel):
    """An alert: a rule of the config firing (or having fired) for one database."""

    id: str = Field(pattern=f"^{HEX_ID.pattern}$", description="16 hex digits; a rule firing again is a new alert.")
    rule: str = Field(description="The id of the `[[alerts]]` rule.")
    database_id: str
    state: AlertState = Field(description="`firing` while the count reaches the threshold, then `resolved`.")
    started_at: Time = Field(description="The evaluation that first found the threshold reached.")
    resolved_at: Time | None = Field(description="The evaluation that found the count below it; null while firing.")
    value: int = Field(
        ge=0,
        description="Matching lines in the window at the latest evaluation (for a resolved alert: the one that"
        " resolved it).",
    )
    threshold: int = Field(ge=1, description="The rule's threshold (as of the latest evaluation).")
    window_seconds: int = Field(description="The window the lines are counted over.")
    severity: Severity
    href: str = Field(description="Its page among this daemon's pages.")


class AlertList(BaseModel):
    """Alerts, newest `started_at` first."""

    alerts: list[AlertView]


def alert_href(alert_id: str) -> str:
    return f"/ui/alerts/{alert_id}"


def alert_view(a: AlertInstance) -> AlertView:
    return AlertView(
        id=a.id,
        rule=a.rule,
        database_id=a.database_id,
        state=a.state,
        started_at=format_time(a.started_us),
        resolved_at=None if a.resolved_us is None else format_time(a.resolved_us),
        value=a.value,
        threshold=a.threshold,
        window_seconds=a.window_seconds,
        severity=a.severity,
        href=alert_href(a.id),
    )


async def alert_instance(request: web.Request) -> AlertInstance:
    """The alert named by the path's `alert_id` (the API's and the alert page's); ApiError 404 if none."""
    alert_id = hex_path_id(request, "alert_id", "alert")
    found = await request.app[CONTEXT].store.read(lambda c: get_instance(c, alert_id))
    if found is None:
        raise ApiError(404, "not_found", f"no alert with id {alert_id[:40]!r}")
    return found


@routes.get("/v1/alerts")
@reads_query
async def list_alerts(request: web.Request) -> web.Response:
    """Alerts of every rule and database (`state=firing`: the current ones), newest first."""
    params = parse_query(request, AlertsQuery)
    found = await request.app[CONTEXT].store.read(lambda c: list_instances(c, params.state, params.limit))
    return _send(AlertList(alerts=[alert_view(a) for a in found]))


@routes.get("/v1/alerts/{alert_id}")
async def get_alert(request: web.Request) -> web.Response:
    """One alert."""
    return _send(alert_view(await alert_instance(request)))
