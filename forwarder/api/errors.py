"""The one error shape of the API: `{"error": {"code", "message", "field"?}}` with a proper status."""

from __future__ import annotations

from typing import Final

import orjson
from aiohttp import web
from pydantic import BaseModel, Field
from pydantic.json_schema import SkipJsonSchema

JSON: Final = "application/json"


class ErrorDetail(BaseModel):
    """What went wrong."""

    code: str = Field(description="Stable, for programs: invalid_parameter, invalid_body, not_found, ...")
    message: str = Field(description="For people; starts with the field's name when one is at fault.")
    field: str | SkipJsonSchema[None] = Field(None, description="The parameter or body field at fault.")


class Error(BaseModel):
    """Every error answer of the API."""

    error: ErrorDetail


class ApiError(Exception):
    """An error the caller caused or must know about; `message` never holds a secret."""

    def __init__(
        self, status: int, code: str, message: str, *, field: str | None = None, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.headers = headers or {}

    def response(self) -> web.Response:
        error = Error(error=ErrorDetail(code=self.code, message=self.message, field=self.field))
        body = orjson.dumps(error.model_dump(exclude_none=True))
        headers = dict(self.headers)
        if self.status == 401:
            headers["WWW-Authenticate"] = 'Bearer realm="forwarder"'
        return web.Response(status=self.status, body=body, content_type=JSON, headers=headers)


def bad_parameter(name: str, message: str) -> ApiError:
    return ApiError(400, "invalid_parameter", f"{name}: {message}", field=name)


def bad_body(name: str, message: str) -> ApiError:
    return ApiError(400, "invalid_body", f"{name}: {message}" if name else message, field=name or None)


def json_response(data: object, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(data), content_type=JSON)


def raw_json_response(body: bytes, status: int = 200) -> web.Response:
    """A body that is already JSON (stored documents spliced together)."""
    return web.Response(status=status, body=body, content_type=JSON)
