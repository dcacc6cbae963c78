"""insights pages."""

from __future__ import annotations

from aiohttp import web

routes = web.RouteTableDef()
