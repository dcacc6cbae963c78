"""The pages over HTTP, in-process: the API test daemon plus signed-in browser-like sessions."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal

import aiohttp
import pytest

from tests.unit.api.conftest import Api, api, api_overrides  # noqa: F401 - fixtures used by this package

Role = Literal["read-only", "read-write"]
CSRF_FIELD = re.compile(r'name="csrf" value="([^"]+)"')


@dataclass
class Browser:
    """One signed-in cookie jar: GETs pages, POSTs forms with the page's CSRF token and our Origin."""

    base: str
    session: aiohttp.ClientSession
    csrf: str = ""
    extra: dict[str, str] = field(default_factory=dict)

    async def get(self, path: str, **params: Any) -> tuple[int, str]:
        async with self.session.get(self.base + path, params=params, allow_redirects=False) as resp:
            text = await resp.text()
            if found := CSRF_FIELD.search(text):
                self.csrf = found.group(1)
            return resp.status, text

    async def post(
        self, path: str, data: dict[str, str], *, csrf: bool = True, origin: str | None = None
    ) -> tuple[int, str, str | None]:
        """(status, body, Location); the CSRF token of the last page seen unless csrf=False."""
        form = {**data, **({"csrf": self.csrf} if csrf else {})}
        headers = {"Origin": origin or self.base}
        async with self.session.post(self.base + path, data=form, headers=headers, allow_redirects=False) as resp:
            return resp.status, await resp.text(), resp.headers.get("Location")


@dataclass
class Ui:
    api: Api
    opened: list[aiohttp.ClientSession] = field(default_factory=list)

    async def browser(self, role: Role | None = "read-write") -> Browser:
        """A cookie jar signed in with a key of `role` (None: not signed in)."""
        # unsafe=True: keep cookies for an IP address host (127.0.0.1), as a browser does.
        session = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))
        self.opened.append(session)
        b = Browser(self.api.base, session)
        if role is not None:
            key = self.api.read_write if role == "read-write" else self.api.read_only
            status, _, location = await b.post("/ui/signin", {"key": key, "next": "/ui/databases"}, csrf=False)
            assert status == 303 and location == "/ui/databases", (status, location)
            await b.get("/ui/databases")  # picks up the session's CSRF token
        return b


@pytest.fixture
async def ui(api: Api) -> AsyncIterator[Ui]:  # noqa: F811 - the imported fixture
    u = Ui(api)
    yield u
    for s in u.opened:
        await s.close()
