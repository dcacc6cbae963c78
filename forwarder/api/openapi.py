"""The OpenAPI 3.1 document served at /v1/openapi.json (the choices are explained in docs/api.md)."""

from __future__ import annotations

from functools import cache
from typing import Any

from forwarder.model import KINDS, SPEC_FIELDS
from forwarder.sinks import SINK_TYPES

_STR_OR_NULL = {"type": ["string", "null"]}
_TIME = {"type": "string", "format": "date-time"}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*statuses: int) -> dict[str, Any]:
    text = {
        400: "A parameter or the body is invalid; `error.field` names it.",
        401: "No key, or an unknown or revoked key.",
        403: "A read-only key on a write.",
        404: "No database with that id or name.",
        409: "The destination is declared in the config file (`managed_by: config`); change it there.",
        415: "The body is not JSON.",
    }
    return {str(s): _json(_ref("Error"), text[s]) for s in statuses}


_REF_PARAM = {
    "name": "ref",
    "in": "path",
    "required": True,
    "description": "The database's id or name.",
    "schema": {"type": "string"},
}


def _query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "description": description, "schema": schema}


_LINE = {
    "type": "object",
    "description": "A log line (SPEC 2.1). Every field is always present; unknown values are null.",
    "required": list(SPEC_FIELDS),
    "properties": {
        "id": {"type": "string", "pattern": "^[0-9]+$", "description": "Increasing; later lines have larger ids."},
        "time": {**_TIME, "description": "When PostgreSQL wrote the line, UTC, milliseconds."},
        "host": {"type": "string"},
        "database_id": {"type": "string"},
        "database_name": {"type": "string"},
        "severity": {"type": "string"},
        "kind": {"type": "string", "enum": list(KINDS)},
        "sqlstate": _STR_OR_NULL,
        "message": {"type": "string"},
        "detail": _STR_OR_NULL,
        "hint": _STR_OR_NULL,
        "context": _STR_OR_NULL,
        "statement": _STR_OR_NULL,
        "user": _STR_OR_NULL,
        "database": _STR_OR_NULL,
        "application": _STR_OR_NULL,
        "client": _STR_OR_NULL,
        "pid": {"type": ["integer", "null"]},
        "duration_ms": {"type": ["number", "null"]},
        "redacted": {"type": "boolean"},
    },
}

_DEST_PARAM = {
    "name": "id",
    "in": "path",
    "required": True,
    "description": "The destination's id.",
    "schema": {"type": "string"},
}

_FILTER = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "kinds": {
            "type": "array",
            "maxItems": 32,
            "items": {"type": "string", "enum": [*KINDS, "errors", "locks", "maintenance"]},
            "description": "Kinds or aliases; empty means every kind.",
        },
        "database_ids": {
            "type": "array",
            "maxItems": 256,
            "items": {"type": "string"},
            "description": "Database ids; empty means every database.",
        },
    },
}

_SETTINGS = {
    "type": "object",
    "required": ["enabled", "full_text"],
    "additionalProperties": False,
    "properties": {"enabled": {"type": "boolean"}, "full_text": {"type": "boolean"}},
}


@cache
def openapi_document() -> dict[str, Any]:
    """The document; built once."""
    bearer: list[dict[str, list[str]]] = [{"bearer": []}]
    kind_values = [*KINDS, "errors", "locks", "maintenance"]
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "forwarder Logs API",
            "version": "1",
            "description": "PostgreSQL log lines: list, search, group, overview and settings. See docs/api.md.",
        },
        "servers": [{"url": "/"}],
        "security": bearer,
        "paths": {
            "/v1/databases": {
                "get": {
                    "operationId": "listDatabases",
                    "summary": "The configured databases",
                    "responses": {
                        "200": _json(
                            {
                                "type": "object",
                                "required": ["databases"],
                                "properties": {"databases": {"type": "array", "items": _ref("Database")}},
                            },
                            "The databases.",
                        ),
                        **_errors(400, 401),
                    },
                }
            },
            "/v1/databases/{ref}/logs": {
                "get": {
                    "operationId": "listLogs",
                    "summary": "Log lines, newest first",
                    "parameters": [
                        _REF_PARAM,
                        _query(
                            "kind",
                            {"type": "string", "enum": kind_values},
                            "A kind, or an alias: errors, locks, maintenance. Comma-separated or repeated for several.",
                        ),
                        _query(
                            "q",
                            {"type": "string", "minLength": 1, "maxLength": 500},
                            "Words that must all appear (as word prefixes) in message, detail, hint, context or"
                            " statement; text without letters or digits is matched as a substring.",
                        ),
                        _query("group", {"type": "string", "pattern": "^[0-9a-f]{16}$"}, "A group id."),
                        _query("from", _TIME, "Lines written at or after this time."),
                        _query("to", _TIME, "Lines written before this time."),
                        _query("before", {"type": "string", "pattern": "^[0-9]{1,18}$"}, "Lines older than this id."),
                        _query(
                            "after",
                            {"type": "string", "pattern": "^[0-9]{1,18}$"},
                            "The lines right after this id (live tail); never skips a line.",
                        ),
                        _query(
                            "limit", {"type": "integer", "minimum": 1, "maximum": 500, "default": 100}, "Page size."
                        ),
                        _query(
                            "wait_seconds",
                            {"type": "integer", "minimum": 0, "maximum": 30, "default": 0},
                            "With `after`: wait up to this long for a new line before answering empty.",
                        ),
                    ],
                    "responses": {
                        "200": _json(
                            {
                                "type": "object",
                                "required": ["lines", "has_more"],
                                "properties": {
                                    "lines": {"type": "array", "items": _ref("LogLine"), "maxItems": 500},
                                    "has_more": {"type": "boolean"},
                                },
                            },
                            "A page of lines, newest first.",
                        ),
                        **_errors(400, 401, 404),
                    },
                }
            },
            "/v1/databases/{ref}/logs/groups": {
                "get": {
                    "operationId": "listLogGroups",
                    "summary": "Repeated messages (last 24 hours unless `from`)",
                    "parameters": [
                        _REF_PARAM,
                        _query("from", _TIME, "Start of the window; default 24 hours ago."),
                        _query("limit", {"type": "integer", "minimum": 1, "maximum": 500, "default": 100}, "Groups."),
                    ],
                    "responses": {
                        "200": _json(
                            {
                                "type": "object",
                                "required": ["from", "groups"],
                                "properties": {
                                    "from": _TIME,
                                    "groups": {"type": "array", "items": _ref("LogGroup")},
                                },
                            },
                            "Groups, most frequent first.",
                        ),
                        **_errors(400, 401, 404),
                    },
                }
            },
            "/v1/databases/{ref}/logs/overview": {
                "get": {
                    "operationId": "getLogOverview",
                    "summary": "Settings, reading state, 24-hour counts, retention and today's usage",
                    "parameters": [_REF_PARAM],
                    "responses": {"200": _json(_ref("LogOverview"), "The overview."), **_errors(400, 401, 404)},
                }
            },
            "/v1/databases/{ref}/logs/settings": {
                "patch": {
                    "operationId": "updateLogSettings",
                    "summary": "Change the database's log settings",
                    "parameters": [_REF_PARAM],
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "additionalProperties": False,
                                    "minProperties": 1,
                                    "properties": {"enabled": {"type": "boolean"}, "full_text": {"type": "boolean"}},
                                }
                            }
                        },
                    },
                    "responses": {
                        "200": _json(_ref("LogSettings"), "The settings now in force."),
                        **_errors(400, 401, 403, 404, 415),
                    },
                }
            },
            "/v1/log-destinations": {
                "get": {
                    "operationId": "listLogDestinations",
                    "summary": "Destinations with their delivery state",
                    "responses": {
                        "200": _json(
                            {
                                "type": "object",
                                "required": ["destinations"],
                                "properties": {"destinations": {"type": "array", "items": _ref("Destination")}},
                            },
                            "Every destination.",
                        ),
                        **_errors(400, 401),
                    },
                },
                "post": {
                    "operationId": "createLogDestination",
                    "summary": "Add a destination; it receives lines stored from now on",
                    "requestBody": {
                        "required": True,
                        "content": {"application/json": {"schema": _ref("DestinationCreate")}},
                    },
                    "responses": {
                        "201": _json(
                            {
                                "allOf": [_ref("Destination")],
                                "properties": {
                                    "secret": {
                                        "type": "string",
                                        "description": "The webhook's signing secret, shown once.",
                                    }
                                },
                            },
                            "The new destination.",
                        ),
                        **_errors(400, 401, 403, 415),
                    },
                },
            },
            "/v1/log-destinations/{id}": {
                "parameters": [_DEST_PARAM],
                "get": {
                    "operationId": "getLogDestination",
                    "summary": "One destination",
                    "responses": {"200": _json(_ref("Destination"), "The destination."), **_errors(401, 404)},
                },
                "patch": {
                    "operationId": "updateLogDestination",
                    "summary": "Change a destination; applies at once, its cursor is kept",
                    "requestBody": {
                        "required": True,
                        "content": {"application/json": {"schema": _ref("DestinationPatch")}},
                    },
                    "responses": {
                        "200": _json(_ref("Destination"), "The destination now."),
                        **_errors(400, 401, 403, 404, 409, 415),
                    },
                },
                "delete": {
                    "operationId": "deleteLogDestination",
                    "summary": "Remove a destination",
                    "responses": {"204": {"description": "Removed."}, **_errors(401, 403, 404, 409)},
                },
            },
            "/v1/log-destinations/{id}/test": {
                "parameters": [_DEST_PARAM],
                "post": {
                    "operationId": "testLogDestination",
                    "summary": 'Send one line marked as a test (id "0"); answers within 20 s',
                    "responses": {
                        "200": _json(
                            {
                                "type": "object",
                                "required": ["ok"],
                                "properties": {"ok": {"type": "boolean"}, "error": {"type": "string"}},
                            },
                            "Whether the destination accepted it, and its error if not.",
                        ),
                        **_errors(401, 403, 404),
                    },
                },
            },
            "/metrics": {
                "get": {
                    "operationId": "metrics",
                    "security": [],
                    "summary": "Prometheus metrics",
                    "responses": {
                        "200": {
                            "description": "Text exposition format.",
                            "content": {"text/plain": {"schema": {"type": "string"}}},
                        }
                    },
                }
            },
            "/healthz": {
                "get": {
                    "operationId": "healthz",
                    "security": [],
                    "summary": "Alive",
                    "responses": {"200": _json({"type": "object"}, "The daemon answers.")},
                }
            },
            "/readyz": {
                "get": {
                    "operationId": "readyz",
                    "security": [],
                    "summary": "Ready: store open and API bound",
                    "responses": {
                        "200": _json({"type": "object"}, "Ready."),
                        "503": _json({"type": "object"}, "Not ready."),
                    },
                }
            },
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "description": "An API key."}},
            "schemas": {
                "LogLine": _LINE,
                "DestinationFilter": _FILTER,
                "DestinationCreate": {
                    "type": "object",
                    "required": ["type", "name"],
                    "additionalProperties": False,
                    "properties": {
                        "type": {"type": "string", "enum": sorted(SINK_TYPES)},
                        "name": {"type": "string", "minLength": 1, "maxLength": 200},
                        "config": {"type": "object", "description": "Settings of the kind (docs/destinations.md)."},
                        "filter": _ref("DestinationFilter"),
                        "secret": {"type": "string", "minLength": 1, "maxLength": 4096, "writeOnly": True},
                        "enabled": {"type": "boolean", "default": True},
                    },
                },
                "DestinationPatch": {
                    "type": "object",
                    "additionalProperties": False,
                    "minProperties": 1,
                    "properties": {
                        "name": {"type": "string", "minLength": 1, "maxLength": 200},
                        "enabled": {"type": "boolean"},
                        "config": {"type": "object"},
                        "filter": _ref("DestinationFilter"),
                        "secret": {"type": "string", "minLength": 1, "maxLength": 4096, "writeOnly": True},
                    },
                },
                "Destination": {
                    "type": "object",
                    "required": [
                        "id",
                        "type",
                        "name",
                        "enabled",
                        "config",
                        "filter",
                        "has_secret",
                        "managed_by",
                        "created_at",
                        "updated_at",
                        "delivery",
                    ],
                    "properties": {
                        "id": {"type": "string"},
                        "type": {"type": "string"},
                        "name": {"type": "string"},
                        "enabled": {"type": "boolean"},
                        "config": {"type": "object"},
                        "filter": _ref("DestinationFilter"),
                        "has_secret": {"type": "boolean"},
                        "managed_by": {
                            "type": "string",
                            "enum": ["api", "config"],
                            "description": "config: declared in the config file; PATCH and DELETE answer 409",
                        },
                        "created_at": _TIME,
                        "updated_at": _TIME,
                        "delivery": {
                            "type": "object",
                            "required": [
                                "cursor",
                                "lag_lines",
                                "oldest_undelivered_age_seconds",
                                "in_flight_lines",
                                "attempts",
                                "next_attempt_at",
                                "last_error",
                                "last_error_at",
                                "last_success_at",
                                "sent_lines",
                                "dropped_lines",
                            ],
                            "properties": {
                                "cursor": {"type": "string", "pattern": "^[0-9]+$"},
                                "lag_lines": {"type": "integer", "minimum": 0},
                                "oldest_undelivered_age_seconds": {"type": "number", "minimum": 0},
                                "in_flight_lines": {"type": "integer", "minimum": 0},
                                "attempts": {"type": "integer", "minimum": 0},
                                "next_attempt_at": {"type": ["string", "null"], "format": "date-time"},
                                "last_error": _STR_OR_NULL,
                                "last_error_at": {"type": ["string", "null"], "format": "date-time"},
                                "last_success_at": {"type": ["string", "null"], "format": "date-time"},
                                "sent_lines": {"type": "integer", "minimum": 0},
                                "dropped_lines": {"type": "integer", "minimum": 0},
                            },
                        },
                    },
                },
                "LogSettings": _SETTINGS,
                "Database": {
                    "type": "object",
                    "required": ["id", "name", "host", "enabled", "full_text"],
                    "properties": {
                        "id": {"type": "string"},
                        "name": {"type": "string"},
                        "host": {"type": "string"},
                        "enabled": {"type": "boolean"},
                        "full_text": {"type": "boolean"},
                    },
                },
                "LogGroup": {
                    "type": "object",
                    "required": ["group", "kind", "count", "first_time", "last_time", "line"],
                    "properties": {
                        "group": {"type": "string", "pattern": "^[0-9a-f]{16}$"},
                        "kind": {"type": "string", "enum": list(KINDS)},
                        "count": {"type": "integer", "minimum": 1},
                        "first_time": _TIME,
                        "last_time": _TIME,
                        "line": _ref("LogLine"),
                    },
                },
                "LogOverview": {
                    "type": "object",
                    "required": ["database", "settings", "source", "counts_24h", "retention", "usage_today"],
                    "properties": {
                        "database": {
                            "type": "object",
                            "required": ["id", "name", "host"],
                            "properties": {
                                "id": {"type": "string"},
                                "name": {"type": "string"},
                                "host": {"type": "string"},
                            },
                        },
                        "settings": _ref("LogSettings"),
                        "source": {
                            "type": "object",
                            "required": ["path", "format", "state", "file", "reason"],
                            "properties": {
                                "path": {"type": "string"},
                                "format": {"type": "string", "enum": ["stderr", "csvlog", "jsonlog"]},
                                "state": {
                                    "type": "string",
                                    "enum": [
                                        "starting",
                                        "reading",
                                        "disabled",
                                        "no_file",
                                        "permission_denied",
                                        "format_mismatch",
                                        "error",
                                    ],
                                },
                                "file": _STR_OR_NULL,
                                "reason": _STR_OR_NULL,
                            },
                        },
                        "counts_24h": {
                            "type": "object",
                            "required": list(KINDS),
                            "properties": {k: {"type": "integer", "minimum": 0} for k in KINDS},
                        },
                        "retention": {
                            "type": "object",
                            "required": ["days", "max_bytes", "store_bytes", "oldest_time"],
                            "properties": {
                                "days": {"type": "number"},
                                "max_bytes": {"type": "integer"},
                                "store_bytes": {"type": "integer"},
                                "oldest_time": {"type": ["string", "null"], "format": "date-time"},
                            },
                        },
                        "usage_today": {
                            "type": "object",
                            "required": ["day", "lines", "bytes"],
                            "properties": {
                                "day": {"type": "string", "format": "date"},
                                "lines": {"type": "integer"},
                                "bytes": {"type": "integer"},
                            },
                        },
                    },
                },
                "Error": {
                    "type": "object",
                    "required": ["error"],
                    "properties": {
                        "error": {
                            "type": "object",
                            "required": ["code", "message"],
                            "properties": {
                                "code": {"type": "string"},
                                "message": {"type": "string"},
                                "field": {"type": "string"},
                            },
                        }
                    },
                },
            },
        },
    }
