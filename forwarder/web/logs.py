"""The Logs pages: lines with filters, one line, the live tail, and groups."""

from __future__ import annotations

from aiohttp import web

routes = web.RouteTableDef()
