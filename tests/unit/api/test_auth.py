"""Every route x {no key, unknown key, read-only, read-write} answers with the documented status."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.api.conftest import Api
from tests.unit.api.findings import FINDING, OneFinding


@pytest.fixture
def api_overrides() -> dict[str, Any]:
    return {}  # insights on: their routes are in the matrix


ROUTES = [
    ("GET", "/v1/databases", None),
    ("GET", "/v1/databases/main/findings", None),
    ("GET", "/v1/databases/main/queries", None),
    ("GET", "/v1/alerts", None),
    ("GET", "/v1/databases/main/logs", None),
    ("GET", "/v1/databases/main/logs/groups", None),
    ("GET", "/v1/databases/main/logs/overview", None),
    ("PATCH", "/v1/databases/main/logs/settings", {"full_text": False}),
]


def role_headers(api: Api, role: str) -> dict[str, str]:
    """The Authorization header of each role of the matrix (none: no header)."""
    return {
        "none": {},
        "unknown": api.auth("fwd_000000000000_not-a-real-key"),
        "read-only": api.auth(api.read_only),
        "read-write": api.auth(api.read_write),
    }[role]


EXPECTED = {
    # role: status for a read (GET), status for a write (PATCH)
    "none": (401, 401),
    "unknown": (401, 401),
    "read-only": (200, 403),
    "read-write": (200, 200),
}


DESTINATION_ROUTES = [
    ("GET", "/v1/log-destinations", None, 200),
    ("POST", "/v1/log-destinations", {"type": "webhook", "name": "n", "config": {"url": "http://hook.test:9/"}}, 201),
    ("GET", "/v1/log-destinations/{id}", None, 200),
    ("PATCH", "/v1/log-destinations/{id}", {"name": "renamed"}, 200),
    ("POST", "/v1/log-destinations/{id}/test", None, 200),
    ("DELETE", "/v1/log-destinations/{id}", None, 204),
]


@pytest.mark.parametrize(("method", "path", "body", "ok"), DESTINATION_ROUTES)
@pytest.mark.parametrize("role", list(EXPECTED))
async def test_destination_route_answers_by_role(
    api: Api, method: str, path: str, body: object, ok: int, role: str
) -> None:
    async with api.session.post(
        api.url("/v1/log-destinations"),
        json={"type": "webhook", "name": "d", "config": {"url": "http://hook.test:9/"}},
        headers=api.auth(api.read_write),
    ) as resp:
        assert resp.status == 201
        dest_id = (await resp.json())["id"]
    headers = role_headers(api, role)
    expected = {"none": 401, "unknown": 401, "read-only": ok if method == "GET" else 403, "read-write": ok}[role]
    async with api.session.request(method, api.url(path.format(id=dest_id)), json=body, headers=headers) as resp:
        assert resp.status == expected, await resp.text()


# The routes on findings, with one finding in place; `ok` is what a key allowed to call them gets.
FINDING_ROUTES = [
    # Without [databases.connection] a fix is answered with its SQL to run by hand.
    ("POST", "/v1/databases/main/fixes", {"finding_id": FINDING.id, "fix_id": "raise_max_wal_size"}, 409),
]


@pytest.mark.parametrize(("method", "path", "body", "ok"), FINDING_ROUTES)
@pytest.mark.parametrize("role", list(EXPECTED))
async def test_finding_route_answers_by_role(
    api: Api, method: str, path: str, body: object, ok: int, role: str
) -> None:
    assert api.daemon._ctx is not None
    api.daemon._ctx.findings = OneFinding()
    headers = role_headers(api, role)
    expected = {"none": 401, "unknown": 401, "read-only": ok if method == "GET" else 403, "read-write": ok}[role]
    async with api.session.request(method, api.url(path), json=body, headers=headers) as resp:
        assert resp.status == expected, await resp.text()


@pytest.mark.parametrize(("method", "path", "body"), ROUTES)
@pytest.mark.parametrize("role", list(EXPECTED))
async def test_route_answers_by_role(api: Api, method: str, path: str, body: object, role: str) -> None:
    headers = role_headers(api, role)
    async with api.session.request(method, api.url(path), json=body, headers=headers) as resp:
        expected = EXPECTED[role][0 if method == "GET" else 1]
        assert resp.status == expected, await resp.text()
        data = await resp.json()
        if expected >= 400:
            assert set(data) == {"error"} and data["error"]["code"] in {"unauthorized", "forbidden"}
            assert data["error"]["message"]
        if expected == 401:
            assert resp.headers["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize(
    "header",
    ["Basic dXNlcjpwYXNz", "Bearer", "Bearer ", "bearer fwd_x_y", "Token abc", "Bearer fwd_a_b c"],
)
async def test_malformed_authorization_is_401_and_never_echoes_the_key(api: Api, header: str) -> None:
    async with api.session.get(api.url("/v1/databases"), headers={"Authorization": header}) as resp:
        assert resp.status == 401
        text = await resp.text()
        assert "fwd_x_y" not in text and "dXNlcjpwYXNz" not in text


async def test_two_authorization_headers_are_refused_whichever_comes_first(api: Api) -> None:
    good = api.auth(api.read_write)["Authorization"]
    for pair in ([good, "Bearer fwd_x_y"], ["Bearer fwd_x_y", good], [good, good]):
        async with api.session.get(api.url("/v1/databases"), headers=[("Authorization", h) for h in pair]) as resp:
            assert resp.status == 401, pair
            assert "fwd_x_y" not in await resp.text()


async def test_a_revoked_key_stops_working(api: Api) -> None:
    key, full = await api.daemon.store.create_key("temp", "read-write")
    async with api.session.get(api.url("/v1/databases"), headers=api.auth(full)) as resp:
        assert resp.status == 200
    from forwarder.store import open_sync
    from forwarder.store import state as S

    conn = open_sync(api.daemon.store.path)
    S.revoke_key(conn, key.id, 1)
    conn.close()
    async with api.session.get(api.url("/v1/databases"), headers=api.auth(full)) as resp:
        assert resp.status == 401


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/v1/openapi.json"])
async def test_public_endpoints_need_no_key(api: Api, path: str) -> None:
    async with api.session.get(api.url(path)) as resp:
        assert resp.status == 200


async def test_unknown_database_is_404_for_every_route(api: Api) -> None:
    for method, path, body in [r for r in ROUTES if "/main/" in r[1]]:
        async with api.session.request(
            method, api.url(path.replace("/main/", "/nope/")), json=body, headers=api.auth(api.read_write)
        ) as resp:
            assert resp.status == 404
            assert (await resp.json())["error"]["code"] == "not_found"


@pytest.mark.parametrize("role", list(EXPECTED))
async def test_an_alert_answers_by_role(api: Api, role: str) -> None:
    alert_id = "0123456789abcdef"
    await api.daemon.store.write(
        lambda c: c.execute(
            "INSERT INTO alert_instances VALUES (?, 'r', 'main', 'firing', 1, NULL, 3, 1, 60, 'warning', 1)",
            (alert_id,),
        )
    )
    headers = role_headers(api, role)
    async with api.session.get(api.url(f"/v1/alerts/{alert_id}"), headers=headers) as resp:
        assert resp.status == EXPECTED[role][0], await resp.text()
