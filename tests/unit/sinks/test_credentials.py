"""What is masked in a URL, and what of a receiver's text is hidden (forwarder/sinks/credentials.py)."""

from __future__ import annotations

import base64
import html
from urllib.parse import quote

import pytest

from forwarder.sinks.base import Outcome, Response
from forwarder.sinks.credentials import Hidden, masked_config, masked_url, url_credentials

SECRET = "S3cret/Token+with=odd chars"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://hooks.example.com/in", "https://hooks.example.com/in"),
        ("https://hooks.example.com/in?region=eu", "https://hooks.example.com/in?region=eu"),
        ("https://h.example.com/in?token=abc&region=eu", "https://h.example.com/in?token=***&region=eu"),
        (
            "https://h.example.com/?access_token=a&API-KEY=b&apikey=c",
            "https://h.example.com/?access_token=***&API-KEY=***&apikey=***",
        ),
        (
            "https://h.example.com/?sig=a&signature=b&X-Amz-Signature=c",
            "https://h.example.com/?sig=***&signature=***&X-Amz-Signature=***",
        ),
        (
            "https://h.example.com/?code=a&auth=b&password=c&secret=d",
            "https://h.example.com/?code=***&auth=***&password=***&secret=***",
        ),
        (
            "https://h.example.com/?private_token=a&client_secret=b",
            "https://h.example.com/?private_token=***&client_secret=***",
        ),
        ("https://h.example.com/?token=&key", "https://h.example.com/?token=&key"),  # nothing to hide
        # a name written in percent escapes is the name the receiver reads (and sent decoded)
        (
            "https://h.example.com/y?to%6Ben=T4&api%5Fkey=T5&region=eu",
            "https://h.example.com/y?to%6Ben=***&api%5Fkey=***&region=eu",
        ),
        ("https://user:pw@h.example.com:8443/x", "https://***@h.example.com:8443/x"),
        ("https://user@h.example.com/x#frag", "https://***@h.example.com/x#frag"),
    ],
)
def test_masked_url(url: str, shown: str) -> None:
    assert masked_url(url) == shown


def test_url_credentials_are_the_password_and_secret_parameters() -> None:
    url = "https://fwd:pw-1@h.example.com/?region=eu&token=t%2B1&sig=s-1"
    assert url_credentials(url) == ["pw-1", "t+1", "s-1"]
    config = {"url": url, "index": "logs", "max_request_bytes": 1024}
    assert masked_config(config) == {**config, "url": "https://***@h.example.com/?region=eu&token=***&sig=***"}
    # a config file's URL of another scheme (which check-config now refuses, but an older store
    # may hold) is masked the same way
    assert masked_config({"url": "ftp://user:SUPERSECRET@example.com/"}) == {"url": "ftp://***@example.com/"}


def basic(user: str) -> str:
    return base64.b64encode(f"{user}:{SECRET}".encode()).decode()


@pytest.mark.parametrize(
    "said",
    [
        f"invalid token: Bearer {SECRET}",
        f"invalid: ApiKey {SECRET}",
        f"invalid: Basic {basic('fwd')}",
        f"invalid: Basic {basic('a-much-longer-user-name')}",
        f"invalid: Basic {basic('ab').replace('+', '-').replace('/', '_')}",
        f"bad key {quote(SECRET, safe='')}",
        f'{{"error": "bad key", "key": "{SECRET}"}}',
        f"bad key '{SECRET[:9]}'\n  '{SECRET[9:]}'",
        f"the answer was cut: {SECRET[:7]}...",
    ],
)
def test_a_secret_is_hidden_in_every_form(said: str) -> None:
    shown = Hidden.of([SECRET]).text(said)
    assert "<hidden>" in shown
    assert SECRET[:7] not in shown and "Token" not in shown, shown


ODD = 'Zq9SecRetT0ken/AB+cd="q"<z9Xy'


@pytest.mark.parametrize(
    "said",
    [
        f"echo: '{ODD[:6]}'+'{ODD[6:14]}'+'{ODD[14:]}'",  # the request's code, echoed
        f"keys: {ODD[:6]},{ODD[6:14]},{ODD[14:]}",
        f"<p>bad key {html.escape(ODD)}</p>",
        f"BAD KEY {ODD.upper()}",
        f"bad key {ODD.lower()}",
    ],
    ids=["plus-joined", "comma-joined", "html-escaped", "upper-case", "lower-case"],
)
def test_a_secret_is_hidden_in_the_forms_receivers_were_seen_to_echo(said: str) -> None:
    # Run for real: each of these showed the secret in last_error, the test endpoint and the log.
    shown = Hidden.of([ODD]).text(said)
    assert "<hidden>" in shown
    assert "zq9sec" not in shown.lower() and "rett0ken" not in shown.lower(), shown


def test_ordinary_text_is_left_as_it_is() -> None:
    hidden = Hidden.of([SECRET, "token-2", None, ""])
    text = "HTTP 401: invalid token (see https://docs.example.com/auth) for source s1234"
    assert hidden.text(text) == text
    outcome = Outcome("retry", text, "http_4xx")
    assert hidden.outcome(outcome) is outcome


def test_a_failures_body_is_cleaned_and_a_success_body_is_kept() -> None:
    hidden = Hidden.of([SECRET])
    failed = hidden.response(Response(401, {}, f'{{"bad": "{SECRET}"}}'.encode()))
    assert failed.body == b'{"bad": "<hidden>"}'
    ok = Response(200, {}, f'{{"echo": "{SECRET}"}}'.encode())
    assert hidden.response(ok) is ok


def test_hidden_never_shows_what_it_hides() -> None:
    hidden = Hidden.of([SECRET])
    assert SECRET not in repr(hidden) and SECRET[:7] not in repr(hidden)
    assert hidden and not Hidden.of([None, ""])
