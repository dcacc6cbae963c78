"""Credentials never shown: a destination's secret in every form it travels, and credentials in URLs.

A receiver's answer is untrusted text that may echo what it was sent (`401 invalid token: Bearer
<token>`), so whatever a receiver says passes through `Hidden` before it is shown, logged or stored.
A URL may carry a credential of its own (a token query parameter, or `user:password@`): it is sent
as given but shown through `masked_url`.
"""

from __future__ import annotations

import base64
import dataclasses
import html
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import parse_qsl, quote, quote_plus, unquote_plus, urlsplit, urlunsplit

from forwarder.sinks.base import Outcome, Response

MASK: Final = "***"
HIDDEN: Final = "<hidden>"

# Query parameters that commonly carry a credential (lowercase, "-" read as "_"). A name ending in one
# of SECRET_SUFFIXES counts too (private_token, client_secret, x_amz_signature, dd_api_key, ...).
SECRET_PARAMETERS: Final = frozenset(
    {
        "token",
        "access_token",
        "api_key",
        "apikey",
        "key",
        "sig",
        "signature",
        "secret",
        "password",
        "passwd",
        "pwd",
        "pass",
        "auth",
        "authorization",
        "code",
        "credential",
        "credentials",
        "session",
        "jwt",
    }
)
SECRET_SUFFIXES: Final = ("token", "secret", "password", "signature", "key", "sig", "credential", "auth")

# A form shorter than this is replaced only where it appears whole: matching a shorter one spread
# over whitespace and quotes, or as a cut-off tail, would hide ordinary words of the error.
_FUZZY_MIN: Final = 6
_TAIL_MIN: Final = 4
# A secret of several words (a PEM key) hides each of its pieces this long or longer on its own too.
_PIECE_MIN: Final = 16
# What a receiver may have put between two characters of a secret when it re-wrapped, quoted or
# listed it (pieces joined with `+` or `,` by an echo of the request's code or headers).
_SEPARATORS: Final = frozenset("\"'\\+,")


def is_secret_parameter(name: str) -> bool:
    """Whether a query parameter of this name is taken for a credential."""
    key = name.lower().replace("-", "_")
    return key in SECRET_PARAMETERS or key.endswith(SECRET_SUFFIXES)


def url_credentials(url: str) -> list[str]:
    """The credentials a URL carries: its userinfo's password and the values of secret parameters.

    (The user name is masked where the URL is shown, but is not hidden from other texts: it is often
    an ordinary word.)
    """
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return []
    found = [password] if password else []
    found += [value for name, value in parse_qsl(parts.query, keep_blank_values=False) if is_secret_parameter(name)]
    return found


def masked_url(url: str) -> str:
    """`url` with its userinfo and the values of its secret query parameters replaced by `***`."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return MASK  # not a URL anyone can read the parts of: nothing of it is shown
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{MASK}@{netloc.rsplit('@', 1)[1]}"
    query = "&".join(_masked_parameter(p) for p in parts.query.split("&")) if parts.query else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _masked_parameter(pair: str) -> str:
    # The name decoded as `url_credentials` (parse_qsl) and the receiver read it: `to%6Ben` is `token`.
    name, sep, value = pair.partition("=")
    return f"{name}={MASK}" if sep and value and is_secret_parameter(unquote_plus(name)) else pair


# Any scheme: a config file may hold a URL the API would refuse (ftp://user:password@...), and its
# credentials are masked all the same.
_URL_START: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,30}://")


def _is_url(value: str) -> bool:
    return _URL_START.match(value) is not None


def masked_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A destination's config as shown: every URL in it masked (`masked_url`), everything else as is."""
    return {k: masked_url(v) if isinstance(v, str) and _is_url(v) else v for k, v in config.items()}


def unmasked_config(given: Mapping[str, Any], stored: Mapping[str, Any]) -> dict[str, Any]:
    """`given` with each URL that is exactly the masked form of the stored one put back as stored.

    A client that changes a destination sends back the config it was shown; its masked URL must
    not overwrite the credential it never saw. Any other URL is taken as given.
    """
    return {
        k: stored[k]
        if isinstance(v, str) and isinstance(stored.get(k), str) and v != stored[k] and v == masked_url(stored[k])
        else v
        for k, v in given.items()
    }


def config_credentials(config: Mapping[str, Any]) -> list[str]:
    """The credentials carried by the URLs of a destination's config."""
    return [c for v in config.values() if isinstance(v, str) and _is_url(v) for c in url_credentials(v)]


def _base64_cores(text: str) -> set[str]:
    """What base64 of ANY text containing `text` contains, whatever comes before and after it.

    base64 turns 3 bytes into 4 characters, so `text` starting at each of the three offsets modulo 3
    gives one spelling; only the characters that depend on `text`'s bytes alone are kept. This is
    how `user:secret` (basic auth) and an Elasticsearch `id:key` hide a secret.
    """
    data = text.encode()
    cores: set[str] = set()
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + data).decode()
        start = (offset * 8 + 5) // 6  # characters touched by the padding bytes before
        end = (offset + len(data)) * 8 // 6  # characters fully made of `text`'s bits
        core = encoded[start:end]
        if len(core) >= _FUZZY_MIN:
            cores.add(core)
            cores.add(core.replace("+", "-").replace("/", "_"))  # the URL-safe alphabet
    return cores


def secret_forms(secret: str) -> set[str]:
    """`secret` as given and as it may travel or be echoed: URL-encoded, JSON- or HTML-escaped,
    inside base64."""
    if not secret:
        return set()
    forms = {secret, quote(secret, safe=""), quote_plus(secret), json.dumps(secret)[1:-1], html.escape(secret)}
    forms |= _base64_cores(secret)
    forms |= {f for f in (secret.strip(), *secret.split()) if len(f) >= _PIECE_MIN}  # a PEM key's lines
    return {f for f in forms if f}


@dataclass(frozen=True, slots=True)
class Hidden:
    """Texts never to show, and how to remove them from what a receiver says."""

    forms: tuple[str, ...] = dataclasses.field(default=(), repr=False)
    compact: tuple[str, ...] = dataclasses.field(default=(), repr=False)  # forms without separators

    @classmethod
    def of(cls, secrets: Iterable[str | None]) -> Hidden:
        """Every form (`secret_forms`) of each of `secrets`; longest first, so a form inside another goes with it."""
        forms: set[str] = set()
        for secret in secrets:
            if secret:
                forms |= secret_forms(secret)
        ordered = tuple(sorted(forms, key=lambda f: (-len(f), f)))
        compact = {_compacted(f).lower() for f in ordered}  # (`_spread` looks in the lower-cased text)
        return cls(ordered, tuple(sorted((c for c in compact if len(c) >= _FUZZY_MIN), key=lambda c: (-len(c), c))))

    @classmethod
    def of_destination(cls, config: Mapping[str, Any], secret: str | None) -> Hidden:
        """A destination's secret and the credentials in its URLs."""
        return cls.of([secret, *config_credentials(config)])

    def __bool__(self) -> bool:
        return bool(self.forms)

    def text(self, text: str) -> str:
        """`text` with every form replaced by <hidden>: whole, spread over whitespace, quotes or list
        separators, or cut at the end; in any case (an answer may upper-case what it echoes)."""
        for form in self.forms:
            if form in text:
                text = text.replace(form, HIDDEN)
        return self._tail(self._spread(text))

    def _spread(self, text: str) -> str:
        # Forms are looked for in the text without its separators, in lower case; each one found is
        # cut out of the text as it was, separators inside it included.
        kept = [i for i, ch in enumerate(text) if not _is_separator(ch)]
        flat = "".join(text[i] for i in kept)
        if len(lowered := flat.lower()) == len(flat):  # (a few letters lower-case to two characters)
            flat = lowered
        spans: list[tuple[int, int]] = []
        for form in self.compact:
            at = flat.find(form)
            while at != -1:
                spans.append((kept[at], kept[at + len(form) - 1] + 1))
                at = flat.find(form, at + len(form))
        if not spans:
            return text
        out, last = [], 0
        for start, end in sorted(spans):
            if start >= last:
                out += [text[last:start], HIDDEN]
            last = max(last, end)
        return "".join([*out, text[last:]])

    def _tail(self, text: str) -> str:
        # An answer cut to a length may end in the start of a secret.
        for form in self.forms:
            if len(form) < _TAIL_MIN:
                continue
            at = text.find(form[:_TAIL_MIN], max(0, len(text) - len(form)))
            while at != -1:
                rest = text[at:].rstrip(".… \n")
                if form.startswith(rest):
                    return text[:at] + HIDDEN
                at = text.find(form[:_TAIL_MIN], at + 1)
        return text

    def outcome(self, outcome: Outcome) -> Outcome:
        """`outcome` with its reason cleaned."""
        if not self.forms or not outcome.reason:
            return outcome
        reason = self.text(outcome.reason)
        return outcome if reason == outcome.reason else dataclasses.replace(outcome, reason=reason)

    def response(self, response: Response) -> Response:
        """`response` with each whole form removed from the body of a failure.

        A 2xx body is left as it is: a sink may parse it (bulk items), and what it takes from it
        reaches a reason, which `outcome` cleans.
        """
        body = response.body
        if not self.forms or not body or 200 <= response.status < 300:
            return response
        for form in self.forms:
            raw = form.encode()
            if raw in body:
                body = body.replace(raw, HIDDEN.encode())
        return response if body is response.body else dataclasses.replace(response, body=body)


def _is_separator(ch: str) -> bool:
    return ch.isspace() or ch in _SEPARATORS


def _compacted(form: str) -> str:
    return "".join(ch for ch in form if not _is_separator(ch))
