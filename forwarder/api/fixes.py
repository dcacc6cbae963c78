"""Applying a finding's fix: `POST /v1/databases/{ref}/fixes`. Choices: docs/api.md and docs/insights.md.

The handler reads the body; the use case (forwarder/usecases/fixes.py) decides and runs it.
A read-only key never gets here: the auth middleware answers 403 to every write.
"""

from __future__ import annotations

from typing import Final

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from forwarder.api.auth import PRINCIPAL, Principal
from forwarder.api.context import CONTEXT, ApiContext, DatabaseView
from forwarder.api.errors import ApiError, ErrorDetail, json_response
from forwarder.api.logs import database_of, read_json_object, validation_error
from forwarder.usecases import fixes as cases
from forwarder.usecases.destinations import Actor

routes = web.RouteTableDef()

ID_PATTERN: Final = r"^[A-Za-z0-9_.:-]{1,128}$"


class FixBody(BaseModel):
    """Body of POST /v1/databases/{ref}/fixes: which fix of which finding to apply."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    finding_id: str = Field(pattern=ID_PATTERN, description="The finding's id (from the findings endpoint).")
    fix_id: str = Field(pattern=ID_PATTERN, description="One of the finding's `fixes[].fix_id`.")


class FixApplied(BaseModel):
    """A fix that ran on the database's server."""

    applied: bool = Field(description="Always true.")
    sql: list[str] = Field(description="The statements run, in order (the fix's, then `SELECT pg_reload_conf()`).")
    setting: str | None = Field(description="The server setting the fix changes, when it changes one.")
    before: str | None = Field(description="The setting's value before, as SHOW prints it.")
    after: str | None = Field(description="Its value after, as a new session sees it.")
    reloaded: bool = Field(description="Whether the server's configuration was reloaded (pg_reload_conf()).")
    pending_restart: bool = Field(description="Whether the setting still waits for a server restart.")


class FixNotApplied(BaseModel):
    """The fix was not applied: run its SQL by hand (a fix without SQL says what to do in `label`)."""

    error: ErrorDetail
    reason: cases.NotAppliedReason = Field(
        description="no_connection: the database has no [databases.connection]; fixes_not_allowed: its"
        " allow_fixes is false; needs_restart: the fix takes effect only after a server restart; manual: the"
        " fix is done by hand."
    )
    sql: str | None = Field(description="The SQL to run by hand; null for a fix done by hand.")
    label: str = Field(description="What the fix does.")


async def run_fix(
    ctx: ApiContext, db: DatabaseView, finding_id: str, fix_id: str, principal: Principal
) -> cases.Applied:
    """Apply a fix through the use case, as the API's and the finding page's callers do.

    Raises the use case's NotFound (also when insights are off: no finding exists), NotApplied or Failed.
    """
    if ctx.findings is None:  # insights are off: there is no finding, so none to fix
        raise cases.NotFound(f"no finding {finding_id!r}: insights are off in the daemon's config")
    # The config as it is now (a SIGHUP may have changed the connection since the database started).
    database = next((d for d in ctx.config.databases if d.id == db.config.id), db.config)
    ports = cases.Ports(ctx.findings, ctx.store, cases.asyncpg_connect)
    return await cases.apply_fix(ports, database, finding_id, fix_id, Actor(principal.org, principal.actor))


@routes.post("/v1/databases/{ref}/fixes")
async def apply_fix(request: web.Request) -> web.Response:
    """Apply one fix of one of the database's findings through the operator's connection."""
    ctx = request.app[CONTEXT]
    db = database_of(request)
    data = await read_json_object(request)
    try:
        body = FixBody.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc) from None
    try:
        done = await run_fix(ctx, db, body.finding_id, body.fix_id, request[PRINCIPAL])
    except cases.NotFound as exc:
        raise ApiError(404, "not_found", exc.message) from None
    except cases.NotApplied as exc:
        answer = FixNotApplied(
            error=ErrorDetail(code="fix_not_applied", message=exc.message),
            reason=exc.reason,
            sql=exc.sql,
            label=exc.label,
        )
        return json_response(answer.model_dump(mode="json", exclude_none=True) | {"sql": exc.sql}, status=409)
    except cases.Failed as exc:
        raise ApiError(502, "fix_failed", exc.message) from None
    return json_response(
        FixApplied(
            applied=True,
            sql=list(done.sql),
            setting=done.setting,
            before=done.before,
            after=done.after,
            reloaded=done.reloaded,
            pending_restart=done.pending_restart,
        ).model_dump(mode="json")
    )
