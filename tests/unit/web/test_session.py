"""Signing in and out, the session cookie, CSRF, roles, and the headers and errors of every page."""

from __future__ import annotations

from forwarder.store import state as S
from forwarder.web.render import CSP
from tests.unit.web.conftest import Ui


async def test_a_page_without_a_session_sends_to_sign_in_and_back(ui: Ui) -> None:
    b = await ui.browser(None)
    async with b.session.get(b.base + "/ui/databases/main/logs?kind=error&q=a%26b", allow_redirects=False) as resp:
        assert resp.status == 303
        assert resp.headers["Location"] == "/ui/signin?next=/ui/databases/main/logs?kind%3Derror%26q%3Da%2526b"
    form = {"key": ui.api.read_only, "next": "/ui/databases/main"}
    async with b.session.post(b.base + "/ui/signin", data=form, allow_redirects=False) as resp:
        assert (resp.status, resp.headers["Location"]) == (303, "/ui/databases/main")
        cookie = resp.cookies["forwarder_session"]
    assert cookie["httponly"] and cookie["samesite"] == "Strict" and cookie["path"] == "/ui"
    assert not cookie["secure"]  # plain http here; over TLS (or X-Forwarded-Proto: https) it is Secure
    assert ui.api.read_only not in cookie.value
    status, html = await b.get("/ui/databases/main")
    assert status == 200 and "Main DB" in html


async def test_a_wrong_key_is_refused_and_an_outside_next_is_ignored(ui: Ui) -> None:
    b = await ui.browser(None)
    status, html, _ = await b.post("/ui/signin", {"key": "fwd_nope_nope"}, csrf=False)
    assert status == 401 and "unknown or revoked" in html
    _, _, location = await b.post("/ui/signin", {"key": ui.api.read_only, "next": "//evil.test/x"}, csrf=False)
    assert location == "/ui/databases"


async def test_sign_out_ends_the_session(ui: Ui) -> None:
    b = await ui.browser("read-only")
    status, _, location = await b.post("/ui/signout", {})
    assert (status, location) == (303, "/ui/signin")
    status, _ = await b.get("/ui/databases")
    assert status == 303


async def test_a_revoked_key_ends_its_sessions(ui: Ui) -> None:
    b = await ui.browser("read-write")
    assert (await b.get("/ui/databases"))[0] == 200
    key = await ui.api.daemon.store.verify_key(ui.api.read_write)
    assert key is not None
    await ui.api.daemon.store.write(lambda c: S.revoke_key(c, key.id, 0))
    assert (await b.get("/ui/databases"))[0] == 303


async def test_a_session_expires(ui: Ui) -> None:
    b = await ui.browser("read-only")
    ui.api.clock.advance(ui.api.daemon.config.web.session_hours * 3600 + 1)
    assert (await b.get("/ui/databases"))[0] == 303


async def test_a_cross_site_post_or_one_without_the_token_is_refused(ui: Ui) -> None:
    b = await ui.browser("read-write")
    form = {"setting": "enabled", "value": "false"}
    status, html, _ = await b.post("/ui/databases/main/settings", form, origin="http://evil.test")
    assert status == 403 and "another site" in html
    status, _, _ = await b.post("/ui/databases/main/settings", form, csrf=False)
    assert status == 403
    settings = await ui.api.daemon.store.get_settings("main")
    assert settings is None or settings.enabled


async def test_a_read_only_key_sees_no_switch_and_cannot_post_one(ui: Ui) -> None:
    b = await ui.browser("read-only")
    _, html = await b.get("/ui/databases/main")
    assert "Turn off" not in html
    status, html, _ = await b.post("/ui/databases/main/settings", {"setting": "enabled", "value": "false"})
    assert status == 403 and "read-only" in html


async def test_a_read_write_key_switches_a_setting(ui: Ui) -> None:
    b = await ui.browser("read-write")
    await b.get("/ui/databases/main")
    status, _, location = await b.post("/ui/databases/main/settings", {"setting": "full_text", "value": "true"})
    assert (status, location) == (303, "/ui/databases/main")
    settings = await ui.api.daemon.store.get_settings("main")
    assert settings is not None and settings.full_text
    _, html = await b.get("/ui/databases/main")
    assert "Full text (keep values):</span> <strong>on" in html


async def test_every_page_has_the_csp_and_a_wrong_path_is_a_404_page(ui: Ui) -> None:
    b = await ui.browser("read-only")
    for path in ("/ui/databases", "/ui/databases/main", "/ui/databases/nope", "/ui/nothing", "/ui/static/app.css"):
        async with b.session.get(b.base + path, allow_redirects=False) as resp:
            assert resp.headers["Content-Security-Policy"] == CSP, path
            assert resp.headers["X-Content-Type-Options"] == "nosniff"
            if path.endswith(("nope", "nothing")):
                assert resp.status == 404 and resp.content_type == "text/html"
                assert "Traceback" not in await resp.text()
    anonymous = await ui.browser(None)
    async with anonymous.session.get(b.base + "/ui/signin") as resp:
        assert resp.headers["Content-Security-Policy"] == CSP


async def test_the_api_still_answers_json(ui: Ui) -> None:
    async with ui.api.session.get(ui.api.url("/v1/nothing"), headers=ui.api.auth(ui.api.read_only)) as resp:
        assert resp.status == 404 and resp.content_type == "application/json"
