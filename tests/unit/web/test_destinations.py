"""The destinations pages: the list, the forms generated from each kind's config model, the secret
shown once, enable/disable, the test line, delete, and what a read-only key may do."""

from __future__ import annotations

import asyncio
import html as html_lib
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trustme

from forwarder.model import LogLine
from forwarder.sinks import SINK_TYPES
from forwarder.sinks.syslog.config import SyslogConfig
from forwarder.sinks.syslog.sink import tls_context
from forwarder.store.destinations import Destination, LineFilter
from forwarder.store.state import DEFAULT_ORG
from forwarder.web.destinations import FAILING_AFTER, delivery_state
from tests.receivers import WebhookReceiver
from tests.unit.web.conftest import Browser, Ui

HOOK_FORM = {"type": "webhook", "name": "siem", "config.url": "http://hook.test:9/in", "enabled": "true"}


def inputs(html: str) -> list[str]:
    """The names of the form controls of a page (hidden ones aside)."""
    controls = re.findall(r"<(?:input|select|textarea)\b[^>]*>", html)
    return [
        m.group(1)
        for c in controls
        if 'type="hidden"' not in c and (m := re.search(r'\bname="([^"]+)"', c)) is not None
    ]


def label_for(html: str, name: str) -> str:
    """The text of the <label for> of the input named `name`."""
    control = re.search(rf'<(?:input|select|textarea)\b[^>]*\bname="{re.escape(name)}"[^>]*>', html)
    assert control is not None, name
    found = re.search(r'\bid="([^"]+)"', control.group(0))
    assert found is not None, name
    label = re.search(rf'<label for="{found.group(1)}">(.*?)</label>', html, re.S)
    assert label is not None, name
    return re.sub(r"<[^>]+>", "", label.group(1))


async def create(b: Browser, form: dict[str, str]) -> tuple[int, str]:
    await b.get("/ui/destinations/new", kind=form["type"])
    status, html, _ = await b.post("/ui/destinations/new", form)
    return status, html


def dest_id_of(html: str) -> str:
    found = re.search(r'href="/ui/destinations/(dst_[0-9a-f]+)"', html)
    assert found is not None
    return found.group(1)


@pytest.mark.parametrize("kind", sorted(SINK_TYPES))
async def test_the_form_has_one_labelled_input_per_setting_of_the_kind(ui: Ui, kind: str) -> None:
    b = await ui.browser("read-write")
    status, html = await b.get("/ui/destinations/new", kind=kind)
    assert status == 200
    names = inputs(html)
    settings = [f"config.{key}" for key in SINK_TYPES[kind].config.model_fields]
    assert sorted(n for n in names if n.startswith("config.")) == sorted(settings)
    for name in [*settings, "name", "secret", "enabled"]:
        assert names.count(name) == 1, name
        assert label_for(html, name).strip()
    assert re.search(r'<input type="password"[^>]*name="secret"', html)
    # Each description is the input's help text.
    for key, info in SINK_TYPES[kind].config.model_fields.items():
        if info.description:
            assert html_lib.escape(info.description, quote=False) in html.replace("&#34;", '"').replace("&#39;", "'"), (
                key
            )


async def test_inputs_follow_the_setting_types_and_defaults(ui: Ui) -> None:
    b = await ui.browser("read-write")
    _, html = await b.get("/ui/destinations/new", kind="syslog")
    assert re.search(r'<input type="number" id="f-config-port" name="config.port" value="6514"[^>]* min="1"', html)
    assert re.search(r'<input type="checkbox" id="f-config-tls" name="config.tls" value="true" checked', html)
    assert re.search(r'<select id="f-config-message_format" name="config.message_format"', html)
    assert '<option value="text" selected>' in html
    assert re.search(r'<textarea id="f-config-ca_certificate_pem"', html)
    _, html = await b.get("/ui/destinations/new", kind="webhook")
    assert re.search(r'<input type="url" id="f-config-url" name="config.url" value="" required', html)
    assert "Leave empty to have one generated" in html


async def test_the_kind_chooser_lists_every_kind_and_an_unknown_kind_is_404(ui: Ui) -> None:
    b = await ui.browser("read-write")
    _, html = await b.get("/ui/destinations/new")
    for kind in SINK_TYPES:
        assert f'href="/ui/destinations/new?kind={kind}"' in html
    status, html = await b.get("/ui/destinations/new", kind="carrier-pigeon")
    assert status == 404 and "carrier-pigeon" in html and "Traceback" not in html


async def test_a_webhook_secret_is_shown_once_then_never(ui: Ui) -> None:
    b = await ui.browser("read-write")
    status, html = await create(b, HOOK_FORM)
    assert status == 200 and "Shown only now" in html
    found = re.search(r'value="(whsec_[A-Za-z0-9_-]+)"', html)
    assert found is not None
    secret = found.group(1)
    dest = dest_id_of(html)
    stored = await ui.api.daemon.store.destination(dest)
    assert stored is not None and stored[0].name == "siem" and stored[0].config == {"url": "http://hook.test:9/in"}
    for path in ("/ui/destinations", f"/ui/destinations/{dest}", f"/ui/destinations/{dest}/edit"):
        status, page = await b.get(path)
        assert status == 200 and "siem" in page and secret not in page, path
    _, page = await b.get(f"/ui/destinations/{dest}/edit")
    assert re.search(r'<input type="password" id="f-secret" name="secret" value=""', page)
    assert "Leave empty to keep the current one" in page
    # A failed edit shows the form again without it, too.
    status, page, _ = await b.post(f"/ui/destinations/{dest}/edit", {**HOOK_FORM, "config.url": "ftp://x/"})
    assert status == 400 and secret not in page


async def test_a_given_secret_is_never_echoed_by_a_refused_form(ui: Ui) -> None:
    b = await ui.browser("read-write")
    form = {**HOOK_FORM, "type": "datadog", "config.site": "datadoghq.com", "config.url": "http://nowhere.test/"}
    status, html = await create(b, {**form, "secret": "dd-api-key-0123456789"})
    assert status == 400 and "dd-api-key-0123456789" not in html
    assert 'value="http://nowhere.test/"' in html and 'value="siem"' in html  # what was typed stays


@pytest.mark.parametrize(
    ("form", "field", "says"),
    [
        ({**HOOK_FORM, "config.url": "ftp://hook.test/"}, "config.url", "http"),
        ({**HOOK_FORM, "config.url": ""}, "config.url", "required"),
        ({**HOOK_FORM, "config.url": "http://10.0.0.5/"}, "config.url", ""),
        ({**HOOK_FORM, "name": ""}, "name", "at least 1"),
        ({**HOOK_FORM, "type": "syslog", "config.host": "hook.test", "config.port": "many"}, "config.port", ""),
        (
            {**HOOK_FORM, "type": "loki", "config.url": "http://hook.test:9/", "config.tenant_id": "a b"},
            "config.tenant_id",
            "",
        ),
    ],
)
async def test_a_refused_form_is_400_with_the_message_at_its_field(
    ui: Ui, form: dict[str, str], field: str, says: str
) -> None:
    b = await ui.browser("read-write")
    status, html = await create(b, form)
    assert status == 400
    shown = re.search(rf'<p class="field-error" id="e-{re.escape(field.replace(".", "-"))}">([^<]*)</p>', html)
    assert shown is not None, html
    assert shown.group(1).startswith(field) and says in shown.group(1)
    control = re.search(rf'<(?:input|select|textarea)\b[^>]*\bname="{re.escape(field)}"[^>]*>', html)
    assert control is not None and 'aria-invalid="true"' in control.group(0)
    assert await ui.api.daemon.store.destinations() == []


async def test_edit_changes_the_destination_and_keeps_the_secret(ui: Ui) -> None:
    b = await ui.browser("read-write")
    _, html = await create(b, HOOK_FORM)
    dest = dest_id_of(html)
    before = await ui.api.daemon.store.destination(dest)
    assert before is not None
    await b.get(f"/ui/destinations/{dest}/edit")
    form = {"name": "renamed", "config.url": "http://hook.test:10/in", "filter.kinds": "errors", "enabled": "true"}
    status, _, location = await b.post(f"/ui/destinations/{dest}/edit", form)
    assert (status, location) == (303, f"/ui/destinations/{dest}")
    after = await ui.api.daemon.store.destination(dest)
    assert after is not None
    assert after[0].name == "renamed" and after[0].config == {"url": "http://hook.test:10/in"}
    assert after[0].filter.to_json()["kinds"] == ["errors"]
    assert after[0].sealed_secret == before[0].sealed_secret


async def test_enable_disable_and_delete(ui: Ui) -> None:
    b = await ui.browser("read-write")
    _, html = await create(b, HOOK_FORM)
    dest = dest_id_of(html)
    _, page = await b.get(f"/ui/destinations/{dest}")
    assert ">Disable<" in page
    status, _, location = await b.post(f"/ui/destinations/{dest}/enabled", {"value": "false"})
    assert (status, location) == (303, f"/ui/destinations/{dest}")
    _, page = await b.get(f"/ui/destinations/{dest}")
    assert ">Enable<" in page and "state-disabled" in page
    _, page = await b.get(f"/ui/destinations/{dest}/delete")
    assert "cannot be undone" in page
    status, _, location = await b.post(f"/ui/destinations/{dest}/delete", {})
    assert (status, location) == (303, "/ui/destinations")
    assert await ui.api.daemon.store.destination(dest) is None
    status, page = await b.get(f"/ui/destinations/{dest}")
    assert status == 404 and "Traceback" not in page


@pytest.fixture
async def receiver() -> AsyncIterator[WebhookReceiver]:
    r = WebhookReceiver(secret="whsec_test-secret-for-the-receiver", tolerance=None)
    await r.start()
    yield r
    await r.aclose()


async def test_send_test_line_shows_delivered_or_the_error(ui: Ui, receiver: WebhookReceiver) -> None:
    b = await ui.browser("read-write")
    form = {**HOOK_FORM, "config.url": receiver.url, "secret": receiver.secret}
    _, html = await create(b, form)
    dest = dest_id_of(html)
    await b.get(f"/ui/destinations/{dest}")
    # Without JavaScript: back to the page, which shows the outcome.
    status, _, location = await b.post(f"/ui/destinations/{dest}/test", {})
    assert status == 303 and location is not None and location.startswith(f"/ui/destinations/{dest}?test=")
    _, page = await b.get(location.split("#")[0])
    assert "Delivered: the receiver accepted the test line" in page
    assert len(receiver.deliveries) == 1 and not receiver.errors
    # With htmx: the result area's fragment.
    await b.get(f"/ui/destinations/{dest}/edit")
    await b.post(
        f"/ui/destinations/{dest}/edit", {"name": "siem", "config.url": "http://hook.test:9/in", "enabled": "true"}
    )
    async with b.session.post(
        f"{b.base}/ui/destinations/{dest}/test",
        data={"csrf": b.csrf},
        headers={"Origin": b.base, "HX-Request": "true"},
        allow_redirects=False,
    ) as resp:
        fragment = await resp.text()
    assert resp.status == 200 and "Not delivered" in fragment and "<html" not in fragment
    assert "Delivered:" not in fragment and len(receiver.deliveries) == 1
    assert receiver.secret not in fragment


async def test_a_read_only_key_sees_no_write_control_and_cannot_post(ui: Ui) -> None:
    rw = await ui.browser("read-write")
    _, html = await create(rw, HOOK_FORM)
    dest = dest_id_of(html)
    b = await ui.browser("read-only")
    _, page = await b.get("/ui/destinations")
    assert "siem" in page and "New destination" not in page
    _, page = await b.get(f"/ui/destinations/{dest}")
    for control in ("Send test line", ">Edit<", ">Disable<", ">Delete<"):
        assert control not in page
    for path, form in (
        ("/ui/destinations/new", HOOK_FORM),
        (f"/ui/destinations/{dest}/enabled", {"value": "false"}),
        (f"/ui/destinations/{dest}/test", {}),
        (f"/ui/destinations/{dest}/edit", {"name": "x"}),
        (f"/ui/destinations/{dest}/delete", {}),
    ):
        status, page, _ = await b.post(path, form)
        assert status == 403 and "read-only" in page, path
    stored = await ui.api.daemon.store.destinations()
    assert [(d.name, d.enabled) for d, _ in stored] == [("siem", True)]


def main_of(html: str) -> str:
    """The page's own content: the header (with Sign out) left out."""
    return html.split('<main id="main">', 1)[1].split("</main>", 1)[0]


async def test_a_read_only_key_opening_a_change_form_sees_it_disabled_without_its_button(ui: Ui) -> None:
    rw = await ui.browser("read-write")
    _, html = await create(rw, HOOK_FORM)
    dest = dest_id_of(html)
    ro = await ui.browser("read-only")
    for path, button in (
        ("/ui/destinations/new?kind=webhook", "Create destination"),
        (f"/ui/destinations/{dest}/edit", "Save changes"),
        (f"/ui/destinations/{dest}/delete", "Delete siem"),
    ):
        _, writer = await rw.get(path)
        status, page = await ro.get(path)
        assert button in main_of(writer), path
        # The page reads (what the form holds), says why nothing can be sent, and has no button.
        assert status == 200 and "This API key is read-only" in page, path
        assert "<button" not in main_of(page), path
        controls = re.findall(r"<(?:input|select|textarea)\b[^>]*>", main_of(page))
        assert all(" disabled" in c for c in controls if 'type="hidden"' not in c), path
    _, page = await ro.get(f"/ui/destinations/{dest}/edit")
    assert 'value="http://hook.test:9/in"' in page  # the settings still show


async def test_hostile_names_show_as_text(ui: Ui) -> None:
    b = await ui.browser("read-write")
    evil = '<script>alert(1)</script>"><img src=x>'
    _, html = await create(b, {**HOOK_FORM, "name": evil})
    dest = dest_id_of(html)
    for path in ("/ui/destinations", f"/ui/destinations/{dest}", f"/ui/destinations/{dest}/edit"):
        _, page = await b.get(path)
        assert "<script>alert(1)" not in page and "<img src=x>" not in page, path
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page, path


async def test_the_list_shows_delivery_state_and_counts(ui: Ui) -> None:
    b = await ui.browser("read-write")
    await create(b, HOOK_FORM)
    status, page = await b.get("/ui/destinations")
    assert status == 200
    row: dict[str, Any] = {"kind": "kind-webhook", "state": "state-up-to-date", "lag": "0 lines"}
    for text in row.values():
        assert text in page


async def test_a_config_file_destination_cannot_be_changed_from_the_pages(ui: Ui) -> None:
    declared = Destination(
        "hook",
        "webhook",
        "from the file",
        True,
        {"url": "http://hook.test:9/in"},
        LineFilter.of([], []),
        None,
        0.0,
        0.0,
        "config",
    )
    await ui.api.daemon.store.add_destination(declared, org=DEFAULT_ORG, actor="config")
    b = await ui.browser("read-write")
    _, page = await b.get("/ui/destinations")
    assert "from the file" in page and "config file" in page
    _, page = await b.get("/ui/destinations/hook")
    assert "Send test line" in page and ">Edit<" not in page and ">Delete<" not in page and ">Disable<" not in page
    status, page = await b.get("/ui/destinations/hook/edit")
    assert status == 409 and "config file" in page
    for path in ("/ui/destinations/hook/edit", "/ui/destinations/hook/delete", "/ui/destinations/hook/enabled"):
        status, _, _ = await b.post(path, {"name": "x", "value": "false"})
        assert status == 409, path
    assert await ui.api.daemon.store.destination("hook") is not None


async def test_a_failing_destination_shows_its_lag_state_and_error(ui: Ui) -> None:
    b = await ui.browser("read-write")
    _, html = await create(b, HOOK_FORM)  # hook.test:9 is a closed loopback port
    dest = dest_id_of(html)
    daemon = ui.api.daemon
    line = LogLine(time_us=int(ui.api.clock.now() * 1_000_000), severity="LOG", kind="other", message="one line")
    await daemon.store.append(daemon.registry.by_id["main"].identity, [line], [], 0)
    assert daemon.delivery is not None
    async with asyncio.timeout(30):
        while (state := daemon.delivery.state(dest)) is None or state.last_error is None:
            await asyncio.sleep(0.01)  # the delivery loop is another task of this event loop
    ui.api.clock.advance(90)
    for path in ("/ui/destinations", f"/ui/destinations/{dest}"):
        _, page = await b.get(path)
        assert "state-retrying" in page and "cannot connect" in page, path
        assert re.search(r"1 line\b.*oldest 1 min", page, re.S), path


@pytest.mark.parametrize(
    ("enabled", "attempts", "lag", "state"),
    [
        (False, 5, 10, "disabled"),
        (True, 0, 0, "up_to_date"),
        (True, 0, 3, "delivering"),
        (True, 1, 3, "retrying"),
        (True, FAILING_AFTER, 3, "failing"),
    ],
)
def test_the_state_in_a_word(enabled: bool, attempts: int, lag: int, state: str) -> None:
    shown = {"enabled": enabled, "delivery": {"attempts": attempts, "lag_lines": lag, "in_flight_lines": 0}}
    assert delivery_state(shown) == state


async def test_a_client_key_pasted_into_the_password_input_still_loads(ui: Ui) -> None:
    # A browser's password input drops the line breaks of a pasted PEM key.
    cert = trustme.CA().issue_cert("hook.test")
    flat_key = cert.private_key_pem.bytes().decode().replace("\n", "")
    form = {
        "type": "syslog",
        "name": "relay",
        "config.host": "hook.test",
        "config.port": "6514",
        "config.tls": "true",
        "config.message_format": "text",
        "config.client_certificate_pem": cert.cert_chain_pems[0].bytes().decode().replace("\n", "\r\n"),
        "secret": flat_key,
        "enabled": "false",
    }
    b = await ui.browser("read-write")
    status, html = await create(b, form)
    assert status == 200, html
    stored = await ui.api.daemon.store.destination(dest_id_of(html))
    assert stored is not None and ui.api.daemon.delivery is not None
    key = ui.api.daemon.delivery.open_secret(stored[0])
    assert key is not None and key.replace("\n", "") == flat_key
    tls_context(SyslogConfig.model_validate(stored[0].config), key)  # OpenSSL reads the key and certificate


async def test_a_token_in_the_url_is_masked_and_kept_by_an_edit(ui: Ui) -> None:
    b = await ui.browser("read-write")
    url = "http://hook.test:9/in?token=url-token-0123456789"
    _, html = await create(b, {**HOOK_FORM, "config.url": url})
    dest = dest_id_of(html)
    for path in ("/ui/destinations", f"/ui/destinations/{dest}", f"/ui/destinations/{dest}/edit"):
        _, page = await b.get(path)
        assert "url-token-0123456789" not in page, path
    assert 'value="http://hook.test:9/in?token=***"' in page
    # The form sent back as shown (masked) keeps the stored URL.
    status, _, _ = await b.post(
        f"/ui/destinations/{dest}/edit",
        {"name": "renamed", "config.url": "http://hook.test:9/in?token=***", "enabled": "true"},
    )
    stored = await ui.api.daemon.store.destination(dest)
    assert status == 303 and stored is not None
    assert stored[0].name == "renamed" and stored[0].config == {"url": url}


async def test_an_unknown_destination_is_a_404_page(ui: Ui) -> None:
    b = await ui.browser("read-write")
    for path in ("/ui/destinations/dst_0000000000000000", "/ui/destinations/dst_0000000000000000/edit"):
        status, page = await b.get(path)
        assert status == 404 and "<h1>Not found</h1>" in page and "dst_0000000000000000" in page, path
    status, page, _ = await b.post("/ui/destinations/dst_0000000000000000/test", {})
    assert status == 404 and "Traceback" not in page
