"""HTTP handling shared by the HTTP kinds, pure parts: Retry-After and failures as tables."""

from __future__ import annotations

import math
import ssl
import time

import aiohttp
import pytest

from forwarder.delivery.backoff import retry_wait
from forwarder.sinks._http import classify_status, error_outcome, retry_after_seconds
from tests.sinkhelpers import response

DATE = "Sun, 06 Nov 1994 08:49:37 GMT"  # RFC 9110's example HTTP-date
DATE_EPOCH = 784_111_777.0  # the same instant in Unix seconds


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("120", 120.0),
        ("0", 0.0),
        ("  5 ", 5.0),  # OWS around the value (RFC 9110 section 5.5)
        ("\t7", 7.0),
        ("007", 7.0),
        # delay-seconds is 1*DIGIT, ASCII only (RFC 9110 section 10.2.3, RFC 5234 B.1): other Unicode
        # digits pass str.isdigit() but not float(), and are ignored like any other bad value.
        ("\u00b2", None),  # superscript two
        ("\uff11\uff12", None),  # full-width "12"
        ("\u0663", None),  # Arabic-Indic three
        ("1\u00b2", None),
        ("-1", None),
        ("+5", None),
        ("1e3", None),
        ("1.5", None),
        ("5 s", None),
        ("", None),
        ("soon", None),
        (DATE, 100.0),  # an HTTP-date: seconds from now (here DATE_EPOCH - 100)
        ("Sun, 06 Nov 1994 08:47:57 GMT", 0.0),  # already past
        ("Sun, 06 Nov 1994 08:49:37 +99999999999999999999", None),  # the date parser's OverflowError
        ("Sun, 06 Nov 99999 08:49:37 GMT", None),  # the year is out of range
        ("Sun, 32 Nov 1994 08:49:37 GMT", None),
    ],
)
def test_retry_after_seconds(value: str, seconds: float | None) -> None:
    assert retry_after_seconds({"Retry-After": value}, DATE_EPOCH - 100) == seconds


def test_an_http_date_is_utc_whatever_the_hosts_time_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    # "-0000" gives a datetime without a zone, which .timestamp() would read as local time.
    monkeypatch.setenv("TZ", "EST5")  # a POSIX zone: no tz database needed
    time.tzset()
    try:
        assert retry_after_seconds({"Retry-After": "Sun, 06 Nov 1994 08:49:37 -0000"}, DATE_EPOCH - 100) == 100.0
    finally:
        monkeypatch.undo()
        time.tzset()


def test_retry_after_absent_or_under_any_case() -> None:
    assert retry_after_seconds({}, 0.0) is None
    assert retry_after_seconds({"Content-Type": "text/plain"}, 0.0) is None
    assert retry_after_seconds({"retry-after": "9"}, 0.0) == 9.0
    assert retry_after_seconds({"RETRY-AFTER": "9"}, 0.0) == 9.0


@pytest.mark.parametrize("value", ["99999999999", "9" * 400])
def test_a_huge_retry_after_is_a_number_the_backoff_ignores(value: str) -> None:
    seconds = retry_after_seconds({"Retry-After": value}, 0.0)
    assert seconds == float(value) and (seconds > 1e10 or math.isinf(seconds))
    assert retry_wait(1, seconds) == 30.0  # beyond a day: the backoff's own wait (backoff.py)


@pytest.mark.parametrize("value", ["\u00b2", "\uff11\uff12", "1e3", "Sun, 06 Nov 1994 08:49:37 +99999999999999999999"])
def test_classify_status_ignores_a_malformed_retry_after(value: str) -> None:
    outcome = classify_status(response(429, b"slow down", Retry_After=value))
    assert (outcome.status, outcome.failure, outcome.retry_after) == ("retry", "http_4xx", None)


@pytest.mark.parametrize(("retry_after", "wait"), [(10.0, 30.0), (600.0, 600.0), (7200.0, 3600.0), (86_400.0, 3600.0)])
def test_a_retry_after_lengthens_the_wait_up_to_the_hour_cap(retry_after: float, wait: float) -> None:
    # SPEC 8: "first after 30 seconds, doubling, capped at one hour"
    assert retry_wait(1, retry_after) == wait


def _refused(verify_message: str) -> ssl.SSLCertVerificationError:
    err = ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed")
    err.verify_message = verify_message
    err.reason = "CERTIFICATE_VERIFY_FAILED"
    return err


@pytest.mark.parametrize(
    ("verify_message", "shown"),
    [
        ("self-signed certificate", "TLS certificate refused: self-signed certificate"),
        ("certificate has expired", "TLS certificate refused: certificate has expired"),
        (
            "IP address mismatch, certificate is not valid for '127.0.0.1'.",
            "TLS certificate refused: IP address mismatch, certificate is not valid for '127.0.0.1'",
        ),
    ],
)
def test_a_refused_certificate_says_why(verify_message: str, shown: str) -> None:
    # What an operator needs to mend it, as syslog's destinations say it (not the exception's class).
    error = aiohttp.ClientConnectorCertificateError(None, _refused(verify_message))  # type: ignore[arg-type]
    outcome = error_outcome(error)
    assert (outcome.status, outcome.reason, outcome.failure) == ("retry", shown, "tls")
