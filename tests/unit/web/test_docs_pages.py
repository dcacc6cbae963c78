"""docs/web.md lists every page the daemon serves (derived from the routes, not a second list)."""

from __future__ import annotations

from pathlib import Path
from typing import cast

from forwarder.api.context import ApiContext
from forwarder.api.server import build_app

DOC = (Path(__file__).resolve().parents[3] / "docs" / "web.md").read_text()


def test_every_page_is_in_docs_web_md() -> None:
    app = build_app(cast(ApiContext, None), pages=True)
    pages = {
        r.resource.canonical.replace("{line_id:[0-9]+}", "{line_id}")
        for r in app.router.routes()
        if r.method == "GET" and r.resource is not None and r.resource.canonical.startswith("/ui/")
    }
    pages.discard("/ui/static")
    pages.discard("/ui/")
    missing = sorted(p for p in pages if f"`{p}`" not in DOC)
    assert not missing, f"docs/web.md does not describe {missing}"
