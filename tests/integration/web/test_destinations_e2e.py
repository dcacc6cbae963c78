"""Destinations through the pages: a webhook created from the generated form shows its signing
secret once; a test line reaches a real receiver that checks the signature with the `stripe`
library; the secret is never shown again; a read-only key sees no write control."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect

from tests.daemonproc import LoopThread
from tests.integration.web.conftest import Site, look, sign_in
from tests.receivers import WebhookReceiver


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    loop = LoopThread()
    recv = WebhookReceiver(secret="", tolerance=300)  # the secret is known once the page shows it
    loop.run(recv.start())
    try:
        yield recv
    finally:
        loop.run(recv.aclose())
        loop.close()


def test_create_a_webhook_see_its_secret_once_and_send_a_test_line(
    page: Page, site: Site, receiver: WebhookReceiver
) -> None:
    sign_in(page, site.read_write)
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Destinations").click()
    page.get_by_role("link", name="New destination").click()
    page.get_by_role("link", name="webhook", exact=True).click()
    look(page, "destination-form")
    name = f"siem-{time.monotonic_ns()}"
    page.get_by_label(re.compile(r"^name")).fill(name)
    page.get_by_label(re.compile(r"^url")).fill(receiver.url)
    page.get_by_role("button", name="Create destination").click()

    expect(page.get_by_text("Shown only now")).to_be_visible()
    secret = page.locator("#secret-value").input_value()
    assert re.fullmatch(r"whsec_\S+", secret), secret
    receiver.secret = secret
    look(page, "destination-created")

    page.get_by_role("link", name=f"Open {name}").click()
    page.get_by_role("button", name="Send test line").click()
    expect(page.locator("#test-result")).to_contain_text("Delivered", timeout=15_000)
    assert len(receiver.deliveries) == 1  # signed with the secret shown (stripe verified it)
    look(page, "destination")

    # Never again: not on its page after a reload, not on the list, not in the edit form.
    page.reload()
    assert secret not in page.content()
    page.goto("/ui/destinations")
    expect(page.get_by_role("link", name=name)).to_be_visible()
    assert secret not in page.content()
    look(page, "destinations")
    page.get_by_role("link", name=name).click()
    page.get_by_role("link", name="Edit").click()
    assert secret not in page.content()
    look(page, "destination-edit")


def test_a_read_only_key_sees_no_write_control(page: Page, site: Site) -> None:
    sign_in(page, site.read_only, "/ui/destinations")
    expect(page.get_by_role("heading", level=1)).to_have_text("Destinations")
    expect(page.get_by_role("link", name="New destination")).to_have_count(0)
    for link in page.locator("table a[href^='/ui/destinations/']").all():
        link.click()
        expect(page.get_by_role("button", name="Send test line")).to_have_count(0)
        expect(page.get_by_role("link", name="Edit")).to_have_count(0)
        break
