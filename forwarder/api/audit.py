"""The audit log, read through the API: the caller's organization's records, newest first.

Read-write keys only, although it is a GET: the records say who changed what (keys, settings,
destinations, fixes, Ask), which a read-only key has no business reading. The records never hold
a secret (the store's `audit` takes none).
"""

from __future__ import annotations

from typing import Any, cast

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

from forwarder.api.auth import PRINCIPAL
from forwarder.api.context import CONTEXT
from forwarder.api.errors import ApiError
from forwarder.api.logs import DEFAULT_LIMIT, LimitParam, Time, _send, parse_query, reads_query
from forwarder.model import format_time

routes = web.RouteTableDef()


class AuditQuery(BaseModel):
    """Query of `GET /v1/audit`."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    limit: LimitParam = Field(DEFAULT_LIMIT, description="At most this many records, newest first.")


class AuditRecordView(BaseModel):
    """One audited operation."""

    time: Time
    org: str = Field(description="The organization it was done in (always the caller's).")
    actor: str = Field(
        description="`key:<id>` for an API key, `cli` for `forwarder keys`, `config` for a destination of the"
        " config file."
    )
    action: str = Field(
        description="What was done: `keys.created`, `keys.revoked`, `logs.settings_changed`,"
        " `destinations.created`, `destinations.changed`, `destinations.deleted`, `fixes.applied`, `ask.enabled`,"
        " `ask.disabled`, `ask.key_set`, `ask.key_removed` or `ask.conversations_deleted`."
    )
    target: str | None = Field(description="What it was done to (a key's, destination's or database's id).")
    details: dict[str, Any] | None = Field(description="More about it; never a secret.")


class AuditList(BaseModel):
    """The organization's audit records, newest first."""

    records: list[AuditRecordView]


def record_view(record: dict[str, object]) -> AuditRecordView:
    return AuditRecordView(
        time=format_time(cast(int, record["time_us"])),
        org=cast(str, record["org"]),
        actor=cast(str, record["actor"]),
        action=cast(str, record["action"]),
        target=cast("str | None", record["target"]),
        details=cast("dict[str, Any] | None", record["details"]),
    )


@routes.get("/v1/audit")
@reads_query
async def list_audit(request: web.Request) -> web.Response:
    """The caller's organization's audit records, newest first; read-write keys only."""
    principal = request[PRINCIPAL]
    if principal.role != "read-write":
        raise ApiError(403, "forbidden", "the audit log needs a read-write key")
    params = parse_query(request, AuditQuery)
    records = await request.app[CONTEXT].store.audit_records(params.limit, org=principal.org)
    return _send(AuditList(records=[record_view(r) for r in records]))
