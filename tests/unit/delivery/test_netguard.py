"""The network guard: what it refuses, what it lets through, and that a connection goes where the check looked.

No real DNS and no traffic off this host: names resolve through StaticResolver or a DNS server on 127.0.0.1,
and every connection goes to a server on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import re
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from ipaddress import IPv4Address, IPv6Address, ip_address
from typing import cast

import aiohttp
import dns.message
import dns.rcode
import dns.rdatatype
import dns.rrset
import pytest
import trustme
from aiohttp import web

from forwarder.delivery.netguard import (
    DnsFailure,
    DnsResolver,
    Endpoint,
    Refused,
    StaticResolver,
    Target,
    check_destination_host,
    check_destination_url,
    check_host,
    guarded_session,
    is_public,
    open_checked_connection,
    parse_allowed_networks,
    parse_destination_url,
    resolve_checked,
)

LOOPBACK = parse_allowed_networks(["127.0.0.0/8", "::1/128"])
PUBLIC_V4 = "93.184.215.14"
PUBLIC_V6 = "2606:4700:4700::1111"

# ---------------------------------------------------------------------------------------------------------------
# What must be refused
# ---------------------------------------------------------------------------------------------------------------

# (address, a word the reason must contain). Checked directly, as a URL literal and as a DNS answer.
REFUSED_ADDRESSES: list[tuple[str, str]] = [
    # IPv4 (RFC 6890 special-purpose registry)
    ("127.0.0.1", "loopback"),
    ("127.255.255.254", "loopback"),
    ("10.0.0.1", "private"),
    ("172.16.0.1", "private"),
    ("172.31.255.255", "private"),
    ("192.168.1.1", "private"),
    ("169.254.0.1", "link-local"),
    ("169.254.169.254", "metadata"),  # AWS, GCP, Azure
    ("169.254.170.2", "metadata"),  # AWS ECS
    ("100.100.100.200", "metadata"),  # Alibaba
    ("192.0.0.192", "metadata"),  # Oracle
    ("100.64.0.1", "carrier-grade NAT"),
    ("100.127.255.254", "carrier-grade NAT"),
    ("0.0.0.0", "this network"),
    ("0.1.2.3", "this network"),
    ("224.0.0.1", "multicast"),
    ("239.255.255.250", "multicast"),
    ("255.255.255.255", "broadcast"),
    ("240.0.0.1", "reserved"),
    ("192.0.2.1", "documentation"),
    ("198.51.100.7", "documentation"),
    ("203.0.113.9", "documentation"),
    ("198.18.0.1", "benchmarking"),
    ("198.19.255.1", "benchmarking"),
    ("192.0.0.8", "IETF"),
    ("192.88.99.1", "6to4 relay"),
    # IPv6
    ("::", "unspecified"),
    ("::1", "loopback"),
    ("fe80::1", "link-local"),
    ("febf:ffff::1", "link-local"),
    ("fec0::1", "site-local"),
    ("fc00::1", "unique local"),
    ("fd12:3456:789a::1", "unique local"),
    ("fd00:ec2::254", "metadata"),  # AWS IMDS over IPv6
    ("ff02::1", "multicast"),
    ("ff0e::1", "multicast"),
    ("2001:db8::1", "documentation"),
    ("3fff::1", "documentation"),
    ("100::1", "discard"),
    ("5f00::1", "SRv6"),
    ("2001:10::1", "IETF"),  # ORCHID, inside 2001::/23
    ("4000::1", "2000::/3"),  # not allocated for global unicast
    # IPv6 forms that carry an IPv4 address: the IPv4 address inside is checked like a plain one
    ("::ffff:127.0.0.1", "IPv4-mapped"),
    ("::ffff:10.1.2.3", "private"),
    ("::ffff:169.254.169.254", "metadata"),
    ("::ffff:0:127.0.0.1", "IPv4-translated"),
    ("::127.0.0.1", "IPv4-compatible"),
    ("::8.8.8.8", "IPv4-compatible"),  # deprecated form, refused even around a public address
    ("64:ff9b::127.0.0.1", "NAT64"),
    ("64:ff9b::a9fe:a9fe", "metadata"),  # NAT64 of 169.254.169.254
    ("64:ff9b::192.168.0.1", "private"),
    ("64:ff9b:1::1.1.1.1", "local-use NAT64"),
    ("2002:7f00:1::1", "6to4"),  # 6to4 of 127.0.0.1
    ("2002:a9fe:a9fe::1", "metadata"),  # 6to4 of 169.254.169.254
    ("2002:c0a8:101::1", "private"),  # 6to4 of 192.168.1.1
    ("2001:0:7f00:1::1", "Teredo"),  # Teredo server 127.0.0.1
    ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo"),  # the RFC 4380 example: client 192.0.2.45
    ("2001:0:101:101::f5ff:fffe", "private"),  # Teredo client stored inverted: ~f5ff:fffe is 10.0.0.1
]

# Inputs refused for their shape, before any lookup: (URL, a word the reason must contain).
REFUSED_URL_SHAPES: list[tuple[str, str]] = [
    ("file:///etc/passwd", "scheme"),
    ("gopher://example.com:70/_x", "scheme"),
    ("ftp://example.com/x", "scheme"),
    ("dict://example.com:11211/", "scheme"),
    ("ws://example.com/", "scheme"),
    ("javascript:alert(1)", "scheme"),
    ("//example.com/x", "scheme"),
    ("example.com/x", "scheme"),
    ("https://user:secretpass@example.com/", "credentials"),
    ("https://user@example.com/", "credentials"),
    ("https://@example.com/", "credentials"),
    ("https://example.com@127.0.0.1/", "credentials"),
    ("http:///path", "no host"),
    ("http://0x7f.1/", "unusual form"),
    ("http://0x7f000001/", "unusual form"),
    ("http://2130706433/", "unusual form"),
    ("http://017700000001/", "unusual form"),
    ("http://127.1/", "unusual form"),
    ("http://127.0.1/", "unusual form"),
    ("http://0177.0.0.1/", "unusual form"),
    ("http://127.0.0.01/", "unusual form"),
    ("http://0x7f.0x0.0x0.0x1/", "unusual form"),
    ("http://1.2.3.4.5/", "unusual form"),
    ("http://256.1.1.1/", "unusual form"),
    ("http://example.0x10/", "unusual form"),
    ("http://127.0.0.1./", "trailing dot"),
    ("http://example.com./", "trailing dot"),
    ("http://%31%32%37.0.0.1/", "percent"),
    ("http://[fe80::1%25eth0]/", "zone id"),
    ("http://exa mple.com/", "whitespace"),
    ("http://example.com\t/", "whitespace"),
    ("http://example.com/\n", "whitespace"),
    ("http://exa\x00mple.com/", "control"),
    ("http://example.com\\@127.0.0.1/", "backslash"),
    ("http://localhost/", "localhost"),
    ("http://api.localhost/", "localhost"),
    ("http://example.com:0/", "port"),
    ("http://example.com:99999/", "not valid"),
    ("http://exa..mple.com/", "empty label"),
    ("http://exa$mple.com/", "letters, digits"),
    ("", "empty"),
    ("http://" + "a" * 64 + ".com/", "63"),
]


@pytest.mark.parametrize(("address", "why"), REFUSED_ADDRESSES)
def test_not_public_addresses_are_refused(address: str, why: str) -> None:
    reason = is_public(ip_address(address), ())
    assert reason is not None, f"{address} passed"
    assert why.lower() in reason.lower(), reason


@pytest.mark.parametrize(("address", "why"), REFUSED_ADDRESSES)
async def test_a_name_resolving_to_a_not_public_address_is_refused(address: str, why: str) -> None:
    resolver = StaticResolver({"evil.test": [address]})
    with pytest.raises(Refused) as refused:
        await check_destination_url("https://evil.test/hook", resolver, ())
    assert refused.value.reason.startswith("evil.test resolves to")
    assert why.lower() in refused.value.reason.lower()
    # The resolved address is not shown to the caller for a name: it would map the internal network.
    assert address not in refused.value.reason


@pytest.mark.parametrize(("address", "why"), REFUSED_ADDRESSES)
async def test_a_literal_not_public_address_is_refused(address: str, why: str) -> None:
    host = f"[{address}]" if ":" in address else address
    resolver = StaticResolver({})
    with pytest.raises(Refused) as refused:
        await check_destination_url(f"http://{host}:8080/", resolver, ())
    assert why.lower() in refused.value.reason.lower()
    assert resolver.calls == []  # literals need no lookup


@pytest.mark.parametrize(("url", "why"), REFUSED_URL_SHAPES)
def test_urls_of_a_refused_shape(url: str, why: str) -> None:
    with pytest.raises(Refused) as refused:
        parse_destination_url(url)
    assert why.lower() in refused.value.reason.lower(), refused.value.reason


@pytest.mark.parametrize(("url", "why"), REFUSED_URL_SHAPES)
async def test_refused_shapes_are_refused_before_any_lookup(url: str, why: str) -> None:
    resolver = StaticResolver({})
    with pytest.raises(Refused):
        await check_destination_url(url, resolver, LOOPBACK)
    assert resolver.calls == []


def test_the_reason_never_shows_credentials_or_the_query() -> None:
    with pytest.raises(Refused) as refused:
        parse_destination_url("https://admin:hunter2@example.com/?token=s3cr3t")
    assert "hunter2" not in str(refused.value) and "admin" not in str(refused.value)


async def test_a_refused_host_reason_leaves_the_query_out() -> None:
    resolver = StaticResolver({"internal.test": ["10.0.0.5"]})
    with pytest.raises(Refused) as refused:
        await check_destination_url("https://internal.test/x?token=s3cr3t", resolver, ())
    assert "s3cr3t" not in refused.value.reason and "10.0.0.5" not in refused.value.reason


@pytest.mark.parametrize(
    "answers",
    [
        [PUBLIC_V4, "127.0.0.1"],
        ["127.0.0.1", PUBLIC_V4],
        [PUBLIC_V4, PUBLIC_V6, "fd00:ec2::254"],
        [PUBLIC_V6, "::ffff:192.168.0.1"],
    ],
)
async def test_one_bad_answer_among_good_ones_refuses_the_name(answers: list[str]) -> None:
    with pytest.raises(Refused):
        await resolve_checked("mixed.test", 443, StaticResolver({"mixed.test": answers}), ())


async def test_a_name_without_addresses_is_refused() -> None:
    with pytest.raises(Refused, match="does not resolve"):
        await resolve_checked("nowhere.test", 443, StaticResolver({}), ())


@pytest.mark.parametrize(
    ("host", "port", "why"),
    [
        ("127.0.0.1", 6514, None),  # shape is fine; the address check comes with resolution
        ("syslog.example.com", 0, "port"),
        ("syslog.example.com", 65536, "port"),
        ("0x7f.1", 6514, "unusual form"),
        ("[fe80::1%eth0]", 6514, "zone id"),
        ("syslog.example.com.", 6514, "trailing dot"),
        ("syslog example.com", 6514, "whitespace"),
        ("", 6514, "empty"),
    ],
)
def test_check_host(host: str, port: int, why: str | None) -> None:
    if why is None:
        assert check_host(host, port) == Endpoint(host, port)
        return
    with pytest.raises(Refused) as refused:
        check_host(host, port)
    assert why in refused.value.reason


async def test_a_syslog_host_resolving_to_metadata_is_refused() -> None:
    resolver = StaticResolver({"logs.test": ["169.254.169.254"]})
    with pytest.raises(Refused, match="metadata"):
        await check_destination_host("logs.test", 6514, resolver, ())


# ---------------------------------------------------------------------------------------------------------------
# What passes
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "address",
    [
        PUBLIC_V4,
        "1.1.1.1",
        "8.8.8.8",
        PUBLIC_V6,
        "::ffff:93.184.215.14",  # IPv4-mapped public address
        "64:ff9b::5db8:d70e",  # NAT64 of 93.184.215.14: what DNS64 hands an IPv6-only host
        "2002:5db8:d70e::1",  # 6to4 of 93.184.215.14
    ],
)
def test_public_addresses_pass(address: str) -> None:
    assert is_public(ip_address(address), ()) is None


async def test_the_public_control_address_is_accepted() -> None:
    resolver = StaticResolver({"logs.example.com": [PUBLIC_V4, PUBLIC_V6]})
    target = await check_destination_url("https://logs.example.com/hook?x=1", resolver, ())
    assert target == Target("https", "logs.example.com", 443, "/hook", "x=1")
    assert await resolve_checked("logs.example.com", 443, resolver, ()) == [
        IPv4Address(PUBLIC_V4),
        IPv6Address(PUBLIC_V6),
    ]
    assert await check_destination_host("1.1.1.1", 6514, resolver, ()) == Endpoint("1.1.1.1", 6514)


def test_allowed_networks_let_loopback_through_and_nothing_else() -> None:
    assert is_public(ip_address("127.0.0.1"), LOOPBACK) is None
    assert is_public(ip_address("::1"), LOOPBACK) is None
    assert is_public(ip_address("::ffff:127.0.0.1"), LOOPBACK) is None  # the mapped form reaches the same host
    assert is_public(ip_address("10.0.0.1"), LOOPBACK) is not None
    assert is_public(ip_address("169.254.169.254"), LOOPBACK) is not None
    assert is_public(ip_address("::2"), LOOPBACK) is not None


def test_parse_allowed_networks() -> None:
    assert [str(n) for n in parse_allowed_networks(["127.0.0.0/8", " ::1/128 "])] == ["127.0.0.0/8", "::1/128"]
    with pytest.raises(ValueError, match=re.escape("127.0.0.1/8")):
        parse_allowed_networks(["127.0.0.1/8"])
    with pytest.raises(ValueError, match="not-a-network"):
        parse_allowed_networks(["not-a-network"])


@pytest.mark.parametrize(
    ("url", "expected", "display"),
    [
        ("https://Logs.Example.COM/a/b?k=v#frag", Target("https", "logs.example.com", 443, "/a/b", "k=v"), None),
        ("http://example.com", Target("http", "example.com", 80, "/", ""), "http://example.com/"),
        ("HTTPS://example.com:8443/x", Target("https", "example.com", 8443, "/x", ""), "https://example.com:8443/x"),
        ("http://[2606:4700:4700::1111]:8080/", Target("http", PUBLIC_V6, 8080, "/", ""), None),
        ("https://bücher.example/", Target("https", "xn--bcher-kva.example", 443, "/", ""), None),
        ("https://1.1.1.1/", Target("https", "1.1.1.1", 443, "/", ""), None),
    ],
)
def test_parse_destination_url(url: str, expected: Target, display: str | None) -> None:
    target = parse_destination_url(url)
    assert target == expected
    if display is not None:
        assert target.display == display
    assert parse_destination_url(target.url) == target


def test_display_leaves_out_the_query_and_url_keeps_it() -> None:
    target = parse_destination_url("https://example.com:8443/hook?token=abc")
    assert target.display == "https://example.com:8443/hook"
    assert target.url == "https://example.com:8443/hook?token=abc"
    assert parse_destination_url("http://[::1]:81/").display == "http://[::1]:81/"


# ---------------------------------------------------------------------------------------------------------------
# aiohttp: IP literals, rebinding, TLS, proxies
# ---------------------------------------------------------------------------------------------------------------


class Receiver:
    """An HTTP server on 127.0.0.1 that records what it was asked."""

    def __init__(self) -> None:
        self.hosts: list[str] = []
        self.port = 0
        self.redirect_to = ""

    async def handle(self, request: web.Request) -> web.Response:
        self.hosts.append(request.host)
        if request.path == "/redirect":
            raise web.HTTPFound(self.redirect_to)
        return web.Response(text="ok", headers={"Connection": "close"})


async def _serve(receiver: Receiver, ssl_context: ssl.SSLContext | None = None) -> web.AppRunner:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", receiver.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_context)
    await site.start()
    receiver.port = runner.addresses[0][1]
    return runner


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    rec = Receiver()
    runner = await _serve(rec)
    yield rec
    await runner.cleanup()


async def _get(session: aiohttp.ClientSession, url: str) -> str:
    async with session.get(url) as response:
        assert response.status == 200
        return await response.text()


async def test_ip_literal_url_is_refused_unless_the_operator_allows_loopback(receiver: Receiver) -> None:
    url = f"http://127.0.0.1:{receiver.port}/"
    async with guarded_session((), StaticResolver({}), timeout_seconds=5) as session:
        with pytest.raises(Refused, match="loopback"):
            await _get(session, url)
    assert receiver.hosts == []
    async with guarded_session(LOOPBACK, StaticResolver({}), timeout_seconds=5) as session:
        assert await _get(session, url) == "ok"
    assert receiver.hosts == [f"127.0.0.1:{receiver.port}"]


ODD_LOOPBACK_SPELLINGS = ["2130706433", "127.1", "0x7f.0.0.1", "0177.0.0.1", "127.0.0.1.", "localhost", "[::1]"]


@pytest.mark.parametrize("host", ODD_LOOPBACK_SPELLINGS)
async def test_odd_loopback_spellings_are_refused_even_with_loopback_allowed(receiver: Receiver, host: str) -> None:
    async with guarded_session(parse_allowed_networks(["127.0.0.0/8"]), StaticResolver({}), timeout_seconds=5) as s:
        with pytest.raises((Refused, aiohttp.InvalidURL)):
            await _get(s, f"http://{host}:{receiver.port}/")
    assert receiver.hosts == []


@pytest.mark.parametrize(
    "host", [*ODD_LOOPBACK_SPELLINGS, "[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[64:ff9b::7f00:1]"]
)
async def test_loopback_spellings_are_refused_by_the_session(receiver: Receiver, host: str) -> None:
    async with guarded_session((), StaticResolver({}), timeout_seconds=5) as session:
        with pytest.raises((Refused, aiohttp.InvalidURL)):
            await _get(session, f"http://{host}:{receiver.port}/")
    assert receiver.hosts == []


async def test_a_name_resolving_to_loopback_is_refused_by_the_session(receiver: Receiver) -> None:
    resolver = StaticResolver({"hook.test": ["127.0.0.1"]})
    async with guarded_session((), resolver, timeout_seconds=5) as session:
        with pytest.raises(Refused, match=re.escape("hook.test resolves to a loopback")):
            await _get(session, f"http://hook.test:{receiver.port}/")
    assert receiver.hosts == []


async def test_dns_rebinding_the_connection_goes_to_the_checked_address(
    receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    # First answer: 127.0.0.1 (allowed by the operator). Any later answer: a private address. If the client
    # looked the name up a second time to connect, it would get (and need) the second answer.
    resolver = StaticResolver({"rebind.test": StaticResolver.in_turn(["127.0.0.1"], ["10.0.0.1"])})

    def no_lookups(*args: object, **kwargs: object) -> None:
        raise AssertionError("a second, unguarded name lookup happened")

    monkeypatch.setattr(socket, "getaddrinfo", no_lookups)
    monkeypatch.setattr(asyncio.get_running_loop(), "getaddrinfo", no_lookups)
    async with guarded_session(LOOPBACK, resolver, timeout_seconds=5) as session:
        assert await _get(session, f"http://rebind.test:{receiver.port}/") == "ok"
        assert resolver.calls == ["rebind.test"]  # resolved once for the connection
        assert receiver.hosts == [f"rebind.test:{receiver.port}"]  # the name stays the Host
        # The receiver closed that connection, so the next request needs a new one: resolved and checked again,
        # and now refused.
        with pytest.raises(Refused, match="private"):
            await _get(session, f"http://rebind.test:{receiver.port}/")
    assert resolver.calls == ["rebind.test", "rebind.test"]
    assert len(receiver.hosts) == 1


async def test_a_redirect_to_a_refused_address_is_refused(receiver: Receiver) -> None:
    # Delivery never follows redirects, but if anything did, the target would still be guarded.
    receiver.redirect_to = "http://169.254.169.254/latest/meta-data/"
    async with guarded_session(LOOPBACK, StaticResolver({}), timeout_seconds=5) as session:
        with pytest.raises(Refused, match="metadata"):
            await _get(session, f"http://127.0.0.1:{receiver.port}/redirect")


async def test_proxies_from_the_environment_are_ignored(receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> None:
    # A proxy would do its own resolution and defeat the check; this one does not even exist.
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    async with guarded_session(LOOPBACK, StaticResolver({}), timeout_seconds=5) as session:
        assert session.trust_env is False
        assert await _get(session, f"http://127.0.0.1:{receiver.port}/") == "ok"


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def _server_context(ca: trustme.CA, seen_sni: list[str | None]) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("hook.test").configure_cert(context)

    def remember(sock: ssl.SSLObject, name: str | None, ctx: ssl.SSLContext) -> None:
        seen_sni.append(name)

    context.sni_callback = remember
    return context


def _client_context(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return context


async def test_tls_is_verified_against_the_host_name_and_sends_it_as_sni(ca: trustme.CA) -> None:
    seen_sni: list[str | None] = []
    rec = Receiver()
    runner = await _serve(rec, _server_context(ca, seen_sni))
    try:
        resolver = StaticResolver({"hook.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]})
        async with guarded_session(LOOPBACK, resolver, timeout_seconds=5, ssl_context=_client_context(ca)) as s:
            assert await _get(s, f"https://hook.test:{rec.port}/") == "ok"
            assert seen_sni == ["hook.test"]
            # Same address, but the certificate is not valid for this name: verification is on the name.
            with pytest.raises(aiohttp.ClientConnectorCertificateError):
                await _get(s, f"https://other.test:{rec.port}/")
    finally:
        await runner.cleanup()


def test_a_tls_context_without_verification_is_a_programming_error() -> None:
    context = ssl.create_default_context()
    context.check_hostname = False
    with pytest.raises(ValueError, match="verify"):
        guarded_session(LOOPBACK, StaticResolver({}), timeout_seconds=5, ssl_context=context)


# ---------------------------------------------------------------------------------------------------------------
# Streams (syslog over TLS)
# ---------------------------------------------------------------------------------------------------------------


async def _tls_echo_server(ca: trustme.CA, seen_sni: list[str | None]) -> tuple[asyncio.Server, int]:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.readexactly(5))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0, ssl=_server_context(ca, seen_sni))
    return server, server.sockets[0].getsockname()[1]


async def test_open_checked_connection_dials_the_checked_address_with_tls_on_the_name(ca: trustme.CA) -> None:
    seen_sni: list[str | None] = []
    server, port = await _tls_echo_server(ca, seen_sni)
    try:
        resolver = StaticResolver({"hook.test": StaticResolver.in_turn(["127.0.0.1"], ["192.168.0.1"])})
        reader, writer = await open_checked_connection("hook.test", port, resolver, LOOPBACK, _client_context(ca))
        writer.write(b"hello")
        assert await reader.readexactly(5) == b"hello"
        writer.close()
        assert seen_sni == ["hook.test"]
        assert resolver.calls == ["hook.test"]
        with pytest.raises(Refused, match="private"):
            await open_checked_connection("hook.test", port, resolver, LOOPBACK, _client_context(ca))
    finally:
        server.close()
        await server.wait_closed()


async def test_open_checked_connection_refuses_loopback_when_not_allowed(ca: trustme.CA) -> None:
    seen_sni: list[str | None] = []
    server, port = await _tls_echo_server(ca, seen_sni)
    try:
        for host in ("127.0.0.1", "hook.test", "::1", "0x7f.1"):
            with pytest.raises(Refused):
                await open_checked_connection(
                    host, port, StaticResolver({"hook.test": ["127.0.0.1"]}), (), _client_context(ca)
                )
        assert seen_sni == []
    finally:
        server.close()
        await server.wait_closed()


# ---------------------------------------------------------------------------------------------------------------
# DnsResolver against a DNS server on 127.0.0.1
# ---------------------------------------------------------------------------------------------------------------


class FakeDns(asyncio.DatagramProtocol):
    """Answers A/AAAA queries from a table; unknown names get NXDOMAIN, names listed as None never answer."""

    def __init__(self, records: dict[str, dict[str, list[str]] | None]) -> None:
        self.records = records
        self.queries: list[tuple[str, str]] = []
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Not always a DatagramTransport subclass (the selector loop's is not in 3.11), though it behaves as one.
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str | object, int]) -> None:
        query = dns.message.from_wire(data)
        question = query.question[0]
        name = question.name.to_text(omit_final_dot=True)
        rdtype = dns.rdatatype.to_text(question.rdtype)
        self.queries.append((name, rdtype))
        if name in self.records and self.records[name] is None:
            return  # silence: the client times out
        response = dns.message.make_response(query)
        table = self.records.get(name)
        if table is None:
            response.set_rcode(dns.rcode.NXDOMAIN)
        elif table.get(rdtype):
            response.answer.append(dns.rrset.from_text_list(question.name, 60, "IN", rdtype, table[rdtype]))
        assert self.transport is not None
        self.transport.sendto(response.to_wire(), addr)


DnsRecords = dict[str, dict[str, list[str]] | None]
StartDns = Callable[[DnsRecords], Awaitable[DnsResolver]]


@pytest.fixture
async def fake_dns() -> AsyncIterator[StartDns]:
    transports: list[asyncio.DatagramTransport] = []

    async def start(records: DnsRecords) -> DnsResolver:
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(lambda: FakeDns(records), local_addr=("127.0.0.1", 0))
        transports.append(transport)
        return DnsResolver(nameservers=["127.0.0.1"], port=transport.get_extra_info("sockname")[1], lifetime=1.0)

    yield start
    for transport in transports:
        transport.close()


async def test_dns_resolver_asks_for_a_and_aaaa(fake_dns: StartDns) -> None:
    resolver = await fake_dns(
        {
            "logs.example.com": {"A": [PUBLIC_V4], "AAAA": [PUBLIC_V6]},
            "v4only.example.com": {"A": [PUBLIC_V4]},
            "sneaky.example.com": {"A": [PUBLIC_V4], "AAAA": ["::1"]},
        }
    )
    assert await resolver.resolve("logs.example.com", 443) == [IPv4Address(PUBLIC_V4), IPv6Address(PUBLIC_V6)]
    assert await resolver.resolve("v4only.example.com", 443) == [IPv4Address(PUBLIC_V4)]
    assert await resolver.resolve("missing.example.com", 443) == []
    assert await resolve_checked("logs.example.com", 443, resolver, ()) == [
        IPv4Address(PUBLIC_V4),
        IPv6Address(PUBLIC_V6),
    ]
    with pytest.raises(Refused, match="loopback"):
        await resolve_checked("sneaky.example.com", 443, resolver, ())
    with pytest.raises(Refused, match="does not resolve"):
        await resolve_checked("missing.example.com", 443, resolver, ())


async def test_dns_resolver_returns_literals_without_asking(fake_dns: StartDns) -> None:
    resolver = await fake_dns({})
    assert await resolver.resolve("127.0.0.1", 80) == [IPv4Address("127.0.0.1")]
    assert await resolver.resolve("::1", 80) == [IPv6Address("::1")]


async def test_dns_resolver_reports_a_dead_server_as_a_dns_failure(fake_dns: StartDns) -> None:
    resolver = await fake_dns({"slow.example.com": None})
    with pytest.raises(DnsFailure, match="timed out"):
        await resolver.resolve("slow.example.com", 443)


# ---------------------------------------------------------------------------------------------------------------
# The hostile-address list: one table, each input refused when the destination is checked AND when a
# connection is made to it (nothing is ever dialled), and DNS rebinding at connection time
# ---------------------------------------------------------------------------------------------------------------

# Names the resolver of this table answers, as an attacker's DNS would.
HOSTILE_NAMES = {
    "metadata.google.internal": ["169.254.169.254"],
    "metadata.azure.internal": ["169.254.169.254"],
    "instance-data.ec2.internal": ["169.254.169.254"],
    "metadata.test": ["fd00:ec2::254"],
    "loopback.test": ["127.0.0.1"],
    "loopback6.test": ["::1"],
    "private.test": ["10.0.0.1"],
    "mixed.test": [PUBLIC_V4, "192.168.1.1"],  # one good answer does not save a bad one
    "mapped.test": ["::ffff:127.0.0.1"],
    "nat64.test": ["64:ff9b::a9fe:a9fe"],
    "zero.test": ["0.0.0.0"],
    "cgnat.test": ["100.64.0.1"],
    "ula.test": ["fc00::1"],
    "xn--bcher-kva.test": ["10.9.9.9"],  # IDN: bücher.test as it goes to DNS
}

HOSTILE_URLS: list[str] = [
    # odd IPv4 spellings of loopback and "this host"
    "http://0x7f.1/",
    "http://0x7f000001/",
    "http://017700000001/",
    "http://2130706433/",
    "http://127.1/",
    "http://127.0.1/",
    "http://0177.0.0.1/",
    "http://0x7F.0.0.1/",
    "http://127.000.000.001/",
    "http://0.0.0.0/",
    "http://0/",
    "http://127.0.0.1/",
    "http://127.0.0.1:6379/",
    "http://127.0.0.1:22/",
    "https://127.255.255.254:8443/x",
    # IPv6 loopback, unspecified and embeddings of private IPv4
    "http://[::1]/",
    "http://[::1]:9200/",
    "http://[::]/",
    "http://[0:0:0:0:0:0:0:1]/",
    "http://[::ffff:127.0.0.1]/",
    "http://[::ffff:7f00:1]/",
    "http://[::FFFF:7F00:1]/",
    "http://[::ffff:169.254.169.254]/",
    "http://[64:ff9b::7f00:1]/",
    "http://[64:ff9b::a9fe:a9fe]/",
    "http://[2002:7f00:1::]/",
    "http://[2002:a9fe:a9fe::1]/",
    "http://[::127.0.0.1]/",
    "http://[fe80::1]/",
    "http://[fe80::1%25eth0]/",
    "http://[fe80::1%eth0]/",
    "http://[fc00::1]/",
    "http://[fd00:ec2::254]/",
    "http://[fdff:ffff::1]/",
    # private and link-local IPv4, cloud metadata by address and by name
    "http://10.0.0.1/",
    "http://172.16.0.1/",
    "http://192.168.0.1:8080/",
    "http://100.64.0.1/",
    "http://169.254.169.254/latest/meta-data/",
    "http://169.254.170.2/v2/credentials",
    "http://100.100.100.200/",
    "http://metadata.google.internal/computeMetadata/v1/",
    "http://METADATA.GOOGLE.INTERNAL/",
    "http://metadata.azure.internal/",
    "http://instance-data.ec2.internal/",
    "http://metadata.test/",
    # names resolving to what is refused
    "http://loopback.test/",
    "http://LOOPBACK.TEST:8080/",
    "http://loopback6.test/",
    "http://private.test/",
    "http://mixed.test/",
    "http://mapped.test/",
    "http://nat64.test/",
    "http://zero.test/",
    "http://cgnat.test/",
    "http://ula.test/",
    "http://bücher.test/",
    # localhost, trailing dots, case, IDN and full-width forms
    "http://localhost/",
    "http://LOCALHOST/",
    "HTTP://LocalHost:8080/",
    "http://api.localhost/",
    "http://localhost./",
    "http://127.0.0.1./",
    "http://loopback.test./",
    "http://\u24dbocalhost/",  # circled l
    "http://\uff11\uff12\uff17.\uff10.\uff10.\uff11/",  # full-width digits
    "http://127\u30020\u30020\u30021/",  # ideographic full stops
    # user@host and other parser confusions
    "http://user@127.0.0.1/",
    "http://user:hunter2@public.example/",
    "http://public.example@127.0.0.1/",
    "http://127.0.0.1#@public.example/",
    "http://127.0.0.1\\@public.example/",
    "http://public.example\\@127.0.0.1/",
    "http://127.0.0.1 public.example/",
    "http://127.0.0.1%09/",
    "http://%6c%6f%63%61%6c%68%6f%73%74/",
    # schemes and ports
    "gopher://127.0.0.1:6379/_INFO",
    "file:///etc/passwd",
    "ftp://public.example/",
    "http://public.example:0/",
    "http://public.example:65536/",
]


def test_the_hostile_table_is_long_enough() -> None:
    assert len(HOSTILE_URLS) >= 60 and len(set(HOSTILE_URLS)) == len(HOSTILE_URLS)


@pytest.mark.parametrize("url", HOSTILE_URLS)
async def test_a_hostile_address_is_refused_when_checked(url: str) -> None:
    resolver = StaticResolver({"public.example": [PUBLIC_V4], **HOSTILE_NAMES})
    with pytest.raises(Refused) as refused:
        await check_destination_url(url, resolver, ())
    assert refused.value.reason and "hunter2" not in refused.value.reason  # never the URL's password


@pytest.mark.parametrize("url", HOSTILE_URLS)
async def test_a_hostile_address_is_never_dialled(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # At connection time the guard refuses every non-public address, whatever spelling aiohttp's own
    # parser accepts. Only a public address may be dialled (user:hunter2@public.example is refused when
    # the destination is checked, not here: it is no way to reach a private address).
    dialled: list[object] = []

    async def dial(*args: object, **kwargs: object) -> None:
        dialled.append(args)
        raise OSError("not in this test")

    loop = asyncio.get_running_loop()
    monkeypatch.setattr(loop, "create_connection", dial)
    monkeypatch.setattr(loop, "sock_connect", dial)
    resolver = StaticResolver({"public.example": [PUBLIC_V4], **HOSTILE_NAMES})
    async with guarded_session((), resolver, timeout_seconds=5) as session:
        with pytest.raises((Refused, aiohttp.ClientError, ValueError)):
            async with session.get(url, allow_redirects=False):
                pass
    assert all(PUBLIC_V4 in str(address) for address in dialled), dialled


async def test_dns_rebinding_public_at_the_check_then_private_at_the_connection_is_refused(
    receiver: Receiver,
) -> None:
    # The name passes the create-time check with a public answer; when the connection is made, the
    # attacker's DNS answers with the address of the service it wants reached (here: the receiver).
    resolver = StaticResolver({"rebind.test": StaticResolver.in_turn([PUBLIC_V4], ["127.0.0.1"])})
    url = f"http://rebind.test:{receiver.port}/"
    assert (await check_destination_url(url, resolver, ())).host == "rebind.test"
    async with guarded_session((), resolver, timeout_seconds=5) as session:
        with pytest.raises(Refused, match="loopback"):
            await _get(session, url)
    assert resolver.calls == ["rebind.test", "rebind.test"]  # looked up again for the connection, and checked
    assert receiver.hosts == []
