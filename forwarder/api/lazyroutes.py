"""Routes whose module is imported on the first request under their prefix.

A feature few requests use should not cost every start: Ask's handlers pull in its engine, tools,
providers and their models, ~25 ms of every start (README, "Start to ready"). aiohttp finds a request's
resource by the path's leading parts (UrlDispatcher.resolve tries /a/b/c, then /a/b, then /a), so
one resource at the prefix stands for all of a module's routes. The first request that reaches it,
or the first look at the application's routes, imports the module and resolves against the
module's own RouteTableDef: the match is that route's, so its handler, the route template the
metrics count by and a 405's Allow header are what they were with the routes added one by one.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any

from aiohttp import web
from aiohttp.web_urldispatcher import AbstractResource, AbstractRoute, PrefixResource, UrlMappingMatchInfo
from yarl import URL


class LazyRoutes(PrefixResource):
    """`module`'s `routes` (a web.RouteTableDef, every path under `prefix`), imported when needed."""

    def __init__(self, prefix: str, module: str) -> None:
        super().__init__(prefix)
        self._module = module
        self._loaded: list[AbstractResource] | None = None

    def _resources(self) -> list[AbstractResource]:
        if self._loaded is None:
            routes: web.RouteTableDef = importlib.import_module(self._module).routes
            router = web.UrlDispatcher()
            router.add_routes(routes)
            outside = [r.canonical for r in router.resources() if not self._covers(r.canonical)]
            if outside:  # such a route would never be reached through this prefix
                raise ValueError(f"{self._module} has routes outside {self._prefix}: {outside}")
            self._loaded = list(router.resources())
        return self._loaded

    def _covers(self, path: str) -> bool:
        return path == self._prefix or path.startswith(self._prefix2)

    async def resolve(self, request: web.Request) -> tuple[UrlMappingMatchInfo | None, set[str]]:
        if not self._covers(request.rel_url.path_safe):
            return None, set()
        allowed: set[str] = set()
        for resource in self._resources():
            match, methods = await resource.resolve(request)
            if match is not None:
                return match, methods
            allowed |= methods
        return None, allowed

    def add_prefix(self, prefix: str) -> None:
        raise NotImplementedError("LazyRoutes is not for sub-applications")

    def url_for(self, **kwargs: Any) -> URL:
        raise NotImplementedError("LazyRoutes has no named routes")

    def get_info(self) -> Any:
        return {"prefix": self._prefix}

    def raw_match(self, path: str) -> bool:
        return False

    def __len__(self) -> int:
        return sum(len(resource) for resource in self._resources())

    def __iter__(self) -> Iterator[AbstractRoute]:
        for resource in self._resources():
            yield from resource
