"""Who is calling: `Authorization: Bearer <key>` checked against the store's hashed keys.

Read-only keys may call GET (and HEAD); every other method needs a read-write key (SPEC 5.1).
The CLI's login stores a key and sends it the same way (SPEC 5.5: one header form).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from aiohttp import web

from forwarder.api.errors import ApiError
from forwarder.store import ApiKey, Store

READ_METHODS: Final = frozenset({"GET", "HEAD"})


@dataclass(frozen=True, slots=True)
class Principal:
    """The authenticated caller."""

    key_id: str
    org: str
    role: str

    @property
    def actor(self) -> str:
        return f"key:{self.key_id}"


PRINCIPAL: Final = web.RequestKey("principal", Principal)


async def authenticate(request: web.Request, store: Store) -> Principal:
    """The caller of `request`, or ApiError 401/403."""
    given = request.headers.getall("Authorization", [])
    if len(given) > 1:
        # RFC 9110 section 11.6.2 allows one credential; which one a proxy or a client meant is unknown.
        raise ApiError(401, "unauthorized", "one Authorization header, not several")
    header = given[0] if given else ""
    scheme, _, token = header.partition(" ")
    if not header:
        raise ApiError(401, "unauthorized", "missing Authorization: Bearer <key> header")
    if scheme.lower() != "bearer" or not token.strip():
        raise ApiError(401, "unauthorized", "the Authorization header must be 'Bearer <key>'")
    key: ApiKey | None = await store.verify_key(token.strip())
    if key is None:
        raise ApiError(401, "unauthorized", "unknown or revoked API key")
    if request.method not in READ_METHODS and key.role != "read-write":
        raise ApiError(403, "forbidden", "this API key is read-only; a read-write key is needed")
    return Principal(key_id=key.id, org=key.org, role=key.role)
