"""The network guard: every outbound connection to a destination is resolved once, checked, and dialled as checked.

Destination addresses come from API callers, so they are untrusted. Without this guard a caller could make the
daemon talk to its own loopback services, the private network or a cloud metadata endpoint (server-side request
forgery), either directly or through a name whose DNS answer changes between the check and the connection (DNS
rebinding). Rules (SPEC 6.2, DESIGN.md section 5):

- resolve once per connection, refuse if ANY answer is not public, and connect to exactly the checked addresses;
- keep TLS verification and SNI on the host name (the IP address is only where the socket goes);
- never take proxies from the environment, and speak only http/https for URLs;
- operators may allow networks in the TOML config (`security.allowed_destination_networks`); API callers cannot.

Pure checks (`parse_destination_url`, `check_host`, `is_public`) come first, I/O (resolvers, aiohttp, streams) last.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
import string
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias
from urllib.parse import urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.tracing import Trace
from yarl import URL

from forwarder.sinks.base import AddressRefused

if TYPE_CHECKING:
    import dns.asyncresolver

IPAddress: TypeAlias = IPv4Address | IPv6Address
IPNetwork: TypeAlias = IPv4Network | IPv6Network

__all__ = [
    "DnsFailure",
    "DnsResolver",
    "Endpoint",
    "GuardedConnector",
    "GuardedResolver",
    "IPAddress",
    "IPNetwork",
    "Refused",
    "Resolver",
    "StaticResolver",
    "Target",
    "check_destination_host",
    "check_destination_url",
    "check_host",
    "guarded_session",
    "is_public",
    "open_checked_connection",
    "parse_allowed_networks",
    "parse_destination_url",
    "resolve_checked",
]


class Refused(AddressRefused):
    """The guard will not connect there; `reason` is safe to show to an API caller (no credentials, no query)."""


class DnsFailure(Refused):
    """The name could not be looked up right now (timeout, no server answered): worth trying again later."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A host in checked form (lower case ASCII, IPv6 without brackets) and a port."""

    host: str
    port: int


@dataclass(frozen=True, slots=True)
class Target:
    """An http(s) destination URL split into the parts the guard checked."""

    scheme: str
    host: str
    port: int
    path: str
    query: str = ""

    @property
    def endpoint(self) -> Endpoint:
        """Where connections for this URL go (before resolution)."""
        return Endpoint(self.host, self.port)

    @property
    def display(self) -> str:
        """The URL without its query string: safe to show and to log."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = (self.scheme == "http" and self.port == 80) or (self.scheme == "https" and self.port == 443)
        authority = host if default else f"{host}:{self.port}"
        return f"{self.scheme}://{authority}{self.path}"

    @property
    def url(self) -> str:
        """The URL to request. It carries the query string, which may hold a token: do not show or log it."""
        return f"{self.display}?{self.query}" if self.query else self.display


# ---------------------------------------------------------------------------------------------------------------
# Pure checks: URL and host shape
# ---------------------------------------------------------------------------------------------------------------

_MAX_URL_LENGTH = 2048
_HOST_CHARS = frozenset(string.ascii_lowercase + string.digits + "-_.")
_HEX_DIGITS = frozenset(string.hexdigits)
_UNUSUAL_LITERAL = (
    "the host looks like an IP address in an unusual form (hexadecimal, octal, integer or shortened); "
    "write IPv4 addresses as four decimal numbers such as 192.0.2.1"
)


def _has_forbidden_char(text: str) -> bool:
    # Whitespace and control characters are where URL parsers disagree with each other (and glibc's inet_aton
    # accepts "127.0.0.1 anything"), so a URL that holds any of them is refused rather than cleaned.
    return any(ch.isspace() or ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F for ch in text)


def _is_numeric_label(label: str) -> bool:
    # The WHATWG URL standard ("ends in a number") and inet_aton read a last label that is a decimal, octal or
    # 0x-hex number as (part of) an IPv4 address, so "foo.0x7f" or "1.2.3.0177" is never a DNS name to them.
    if label.isdigit():
        return True
    return label.startswith("0x") and all(ch in _HEX_DIGITS for ch in label[2:])


def _inet_aton_accepts(host: str) -> bool:
    try:
        socket.inet_aton(host)
    except OSError:
        return False
    return True


def _canonical_ipv4(host: str) -> IPv4Address | None:
    # ipaddress only accepts four decimal parts without leading zeros (since Python 3.9.5), and comparing the
    # round trip refuses anything it might still normalise.
    try:
        ip = IPv4Address(host)
    except ValueError:
        return None
    return ip if str(ip) == host else None


def _normalize_host(host: str) -> str:
    """The host in checked form, or Refused. Shared by URLs, syslog hosts and every connection aiohttp makes."""
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host:
        raise Refused("the host is empty")
    if _has_forbidden_char(host):
        raise Refused("the host contains whitespace or control characters")
    if "%" in host:
        # Percent-encoded hosts decode differently in different parsers, and IPv6 zone ids ("fe80::1%eth0")
        # name a local interface: neither belongs in a destination.
        raise Refused("percent signs and IPv6 zone ids are not allowed in the host")
    if not host.isascii():
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError:
            raise Refused("the host is not a valid internationalized domain name") from None
    host = host.lower()
    if ":" in host:
        try:
            return IPv6Address(host).compressed
        except ValueError:
            raise Refused("the host is not a valid IPv6 address") from None
    if len(host) > 253:
        raise Refused("the host name is longer than 253 characters")
    if not set(host) <= _HOST_CHARS:
        raise Refused("the host name may only contain letters, digits, '-', '_' and '.'")
    if host.endswith("."):
        # "127.0.0.1." is a name to some parsers and an address to others; a destination never needs the dot.
        raise Refused("a trailing dot is not allowed in the host")
    labels = host.split(".")
    if any(not label for label in labels):
        raise Refused("the host name has an empty label")
    if any(len(label) > 63 for label in labels):
        raise Refused("a label of the host name is longer than 63 characters")
    if _canonical_ipv4(host) is not None:
        return host
    if _is_numeric_label(labels[-1]) or _inet_aton_accepts(host):
        raise Refused(_UNUSUAL_LITERAL)
    if host == "localhost" or host.endswith(".localhost"):
        raise Refused("localhost names are not allowed (RFC 6761)")
    return host


def _ip_literal(host: str) -> IPAddress | None:
    """The address if the (normalized) host is an IP literal."""
    if ":" in host:
        return IPv6Address(host)
    return _canonical_ipv4(host)


def _check_port(port: int) -> int:
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise Refused("the port must be between 1 and 65535")
    return port


def check_host(host: str, port: int) -> Endpoint:
    """A destination given as host and port (syslog), in checked form; Refused if its shape is not allowed."""
    return Endpoint(_normalize_host(host), _check_port(port))


def refused_before_lookup(host: str, port: int, allowed: Sequence[IPNetwork]) -> str | None:
    """Why the guard refuses `host`:`port` whatever DNS would answer (the host's shape, as
    `check_host` judges it, or an IP literal that is neither public nor allowed), else None: a
    name is judged when it is looked up, at each connection. Pure: for a config file's check."""
    try:
        endpoint = check_host(host, port)
    except Refused as exc:
        return exc.reason
    ip = _ip_literal(endpoint.host)
    return is_public(ip, allowed) if ip is not None else None


def parse_destination_url(url: str) -> Target:
    """An http(s) destination URL split into checked parts; Refused if it is not one we will connect to."""
    if not url:
        raise Refused("the URL is empty")
    if len(url) > _MAX_URL_LENGTH:
        raise Refused(f"the URL is longer than {_MAX_URL_LENGTH} characters")
    if _has_forbidden_char(url):
        raise Refused("the URL contains whitespace or control characters")
    if "\\" in url:
        # Browsers read "\" as "/" in http URLs, RFC 3986 parsers do not: one URL, two hosts.
        raise Refused("backslashes are not allowed in the URL")
    try:
        parsed = URL(url)
        netloc = urlsplit(url).netloc
    except (ValueError, TypeError):
        raise Refused("the URL is not valid") from None
    scheme = parsed.scheme.lower()
    if not scheme:
        raise Refused("the URL needs a scheme: http or https")
    if scheme not in ("http", "https"):
        shown = f" {scheme!r}" if scheme.isalnum() and len(scheme) <= 20 else ""
        raise Refused(f"the URL scheme{shown} is not allowed; use http or https")
    # yarl drops an empty userinfo ("http://@host/"), so the raw authority is looked at too.
    if parsed.raw_user is not None or parsed.raw_password is not None or "@" in netloc:
        raise Refused("credentials in the URL (user:password@) are not allowed; put them in the destination's secret")
    if not parsed.raw_host:
        raise Refused("the URL has no host")
    host = _normalize_host(parsed.raw_host)
    if parsed.explicit_port == 0:
        raise Refused("the port must be between 1 and 65535")
    port = parsed.port
    if port is None:
        raise Refused("the URL has no port and its scheme has no default port")
    # The fragment is never sent, so it is dropped rather than refused.
    return Target(scheme, host, _check_port(port), parsed.raw_path or "/", parsed.raw_query_string)


def parse_allowed_networks(values: Iterable[str]) -> tuple[IPNetwork, ...]:
    """The operator's `security.allowed_destination_networks` as networks; ValueError names a bad entry."""
    networks: list[IPNetwork] = []
    for value in values:
        try:
            networks.append(ipaddress.ip_network(value.strip(), strict=True))
        except ValueError as exc:
            raise ValueError(f"{value!r} is not a network in CIDR notation ({exc})") from None
    return tuple(networks)


# ---------------------------------------------------------------------------------------------------------------
# Pure checks: is an address public?
# ---------------------------------------------------------------------------------------------------------------
# Every case is listed explicitly. The ipaddress properties (is_private, is_global...) are only a last net: their
# tables changed between Python versions (3.11.10/3.12.4/3.13 rewrote them), and they do not look inside the IPv6
# forms that carry an IPv4 address.

_METADATA = "a cloud metadata address"
_METADATA_ADDRESSES: frozenset[IPAddress] = frozenset(
    {
        IPv4Address("169.254.169.254"),  # AWS, GCP, Azure, OpenStack, DigitalOcean...
        IPv4Address("169.254.170.2"),  # AWS ECS task metadata and credentials
        IPv4Address("100.100.100.200"),  # Alibaba Cloud
        IPv4Address("192.0.0.192"),  # Oracle Cloud
        IPv6Address("fd00:ec2::254"),  # AWS instance metadata over IPv6
    }
)

_PRIVATE = "a private address (RFC 1918)"
_DOCUMENTATION_V4 = "a documentation address (RFC 5737)"

# IPv4 special-purpose blocks (RFC 6890 and the IANA registry it set up). Order matters: the first match names
# the reason, so 255.255.255.255 says "broadcast" before 240.0.0.0/4 says "reserved".
_IPV4_REFUSED: tuple[tuple[IPv4Network, str], ...] = tuple(
    (IPv4Network(cidr), reason)
    for cidr, reason in (
        # Connecting to 0.0.0.0 reaches the local host on Linux.
        ("0.0.0.0/8", "a 'this network' address (RFC 6890)"),
        ("10.0.0.0/8", _PRIVATE),
        ("100.64.0.0/10", "a shared carrier-grade NAT address (RFC 6598)"),
        ("127.0.0.0/8", "a loopback address (RFC 1122)"),
        ("169.254.0.0/16", "a link-local address (RFC 3927)"),
        ("172.16.0.0/12", _PRIVATE),
        ("192.0.0.0/24", "an IETF protocol assignment (RFC 6890)"),
        ("192.0.2.0/24", _DOCUMENTATION_V4),
        ("192.88.99.0/24", "a deprecated 6to4 relay anycast address (RFC 7526)"),
        ("192.168.0.0/16", _PRIVATE),
        ("198.18.0.0/15", "a benchmarking address (RFC 2544)"),
        ("198.51.100.0/24", _DOCUMENTATION_V4),
        ("203.0.113.0/24", _DOCUMENTATION_V4),
        ("224.0.0.0/4", "a multicast address (RFC 5771)"),
        ("255.255.255.255/32", "the limited broadcast address (RFC 919)"),
        ("240.0.0.0/4", "a reserved address (RFC 1112)"),
    )
)

# IPv6 blocks refused whatever they contain (RFC 6890 and the IANA IPv6 special-purpose registry).
_IPV6_REFUSED: tuple[tuple[IPv6Network, str], ...] = tuple(
    (IPv6Network(cidr), reason)
    for cidr, reason in (
        ("::/128", "the unspecified address (RFC 4291)"),
        ("::1/128", "a loopback address (RFC 4291)"),
        # Local-use NAT64 translates into the operator's own network, so what it reaches cannot be told.
        ("64:ff9b:1::/48", "a local-use NAT64 address (RFC 8215)"),
        ("100::/64", "a discard-only address (RFC 6666)"),
        ("2001:db8::/32", "a documentation address (RFC 3849)"),
        ("3fff::/20", "a documentation address (RFC 9637)"),
        ("5f00::/16", "an SRv6 segment identifier (RFC 9602)"),
        ("fc00::/7", "a unique local address (RFC 4193)"),
        ("fe80::/10", "a link-local address (RFC 4291)"),
        ("fec0::/10", "a deprecated site-local address (RFC 3879)"),
        ("ff00::/8", "a multicast address (RFC 4291)"),
    )
)

_IPV4_MAPPED = IPv6Network("::ffff:0:0/96")  # RFC 4291 2.5.5.2: a dual-stack socket dials the IPv4 address
_IPV4_TRANSLATED = IPv6Network("::ffff:0:0:0/96")  # RFC 2765 (SIIT), obsolete
_IPV4_COMPATIBLE = IPv6Network("::/96")  # RFC 4291 2.5.5.1, deprecated
_NAT64_WELL_KNOWN = IPv6Network("64:ff9b::/96")  # RFC 6052: DNS64 synthesises these on IPv6-only hosts
_SIX_TO_FOUR = IPv6Network("2002::/16")  # RFC 3056: bits 16-47 are the IPv4 address
_TEREDO = IPv6Network("2001::/32")  # RFC 4380: server IPv4 in bits 32-63, client IPv4 inverted in the last 32
_IETF_PROTOCOL_V6 = IPv6Network("2001::/23")  # RFC 2928 / RFC 6890
_GLOBAL_UNICAST_V6 = IPv6Network("2000::/3")  # RFC 4291: the only block allocated for global unicast
_LOW32 = 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class _Embedding:
    form: str
    addresses: tuple[IPv4Address, ...]
    # True for forms nobody uses for a real destination any more: refused even around a public IPv4 address.
    always_refused: bool


def _embedded_ipv4(ip: IPv6Address) -> _Embedding | None:
    # Computed from the bits rather than with ipv4_mapped/sixtofour/teredo, which some Python versions lack for
    # some forms (the IPv4-compatible and SIIT forms have no property at all).
    bits = int(ip)
    if ip in _IPV4_MAPPED:
        return _Embedding("an IPv4-mapped address (RFC 4291)", (IPv4Address(bits & _LOW32),), False)
    if ip in _IPV4_TRANSLATED:
        return _Embedding("an IPv4-translated address (RFC 2765)", (IPv4Address(bits & _LOW32),), True)
    if ip in _NAT64_WELL_KNOWN:
        # Public ones must pass: an IPv6-only host reaches every IPv4-only destination through these.
        return _Embedding("a NAT64 address (RFC 6052)", (IPv4Address(bits & _LOW32),), False)
    if ip in _IPV4_COMPATIBLE:
        return _Embedding("an IPv4-compatible address (RFC 4291, deprecated)", (IPv4Address(bits & _LOW32),), True)
    if ip in _SIX_TO_FOUR:
        return _Embedding("a 6to4 address (RFC 3056)", (IPv4Address((bits >> 80) & _LOW32),), False)
    if ip in _TEREDO:
        server = IPv4Address((bits >> 64) & _LOW32)
        client = IPv4Address(~bits & _LOW32)
        # Teredo sits inside 2001::/23, which RFC 6890 lists as not globally reachable.
        return _Embedding("a Teredo address (RFC 4380)", (server, client), True)
    return None


def is_public(ip: IPAddress, allowed: Sequence[IPNetwork]) -> str | None:
    """None if the guard may connect to `ip` (public, or in an operator-allowed network), else why not."""
    # Operator-allowed networks win over every rule below: the operator owns the network the daemon runs in.
    # (`in` between different IP versions is simply False.)
    if any(ip in network for network in allowed):
        return None
    if ip in _METADATA_ADDRESSES:
        return _METADATA
    if isinstance(ip, IPv4Address):
        return _ipv4_reason(ip)
    return _ipv6_reason(ip, allowed)


def _ipv4_reason(ip: IPv4Address) -> str | None:
    for network, reason in _IPV4_REFUSED:
        if ip in network:
            return reason
    # Last net for blocks added to the registry after this table was written.
    if not ip.is_global or ip.is_private or ip.is_reserved or ip.is_multicast or ip.is_link_local:
        return "not a globally reachable address (RFC 6890)"
    return None


def _ipv6_reason(ip: IPv6Address, allowed: Sequence[IPNetwork]) -> str | None:
    if ip.scope_id:
        return "an address with a zone id"
    for network, reason in _IPV6_REFUSED:
        if ip in network:
            return reason
    embedding = _embedded_ipv4(ip)
    if embedding is not None:
        # The IPv4 address inside is what the packets finally reach, so it is checked exactly like a plain one.
        for inner in embedding.addresses:
            inner_reason = is_public(inner, allowed)
            if inner_reason is not None:
                return f"{embedding.form} of {inner} which is {inner_reason}"
        if embedding.always_refused:
            return f"{embedding.form}, which destinations do not use"
        # The ipaddress properties are skipped here on purpose: Python 3.11 calls every IPv4-mapped address
        # private whatever it maps, and the embedded address has just been checked.
        return None
    if ip in _IETF_PROTOCOL_V6:
        return "an IETF protocol assignment (RFC 2928)"
    if ip not in _GLOBAL_UNICAST_V6:
        return "outside the global unicast block 2000::/3 (RFC 4291)"
    if not ip.is_global or ip.is_private or ip.is_reserved or ip.is_multicast or ip.is_link_local:
        return "not a globally reachable address (RFC 6890)"
    return None


# ---------------------------------------------------------------------------------------------------------------
# Resolution
# ---------------------------------------------------------------------------------------------------------------


class Resolver(Protocol):
    """Looks host names up. The guard calls it once per connection and checks every answer it returns."""

    async def resolve(self, host: str, port: int) -> list[IPAddress]:
        """Every address `host` has now (A and AAAA), [] if it has none; an IP literal comes back as itself.

        Raises DnsFailure when the lookup itself failed (timeout, no server answered).
        """
        ...


class DnsResolver:
    """Resolver using dnspython (A and AAAA) with the system's configuration, or the given name servers.

    dnspython (~35 ms and ~3 MB to import) is loaded by the first host name looked up: a daemon is
    ready sooner, and one whose destinations are all IP addresses never loads it.
    """

    def __init__(self, *, nameservers: Sequence[str] | None = None, port: int = 53, lifetime: float = 5.0) -> None:
        self._nameservers = list(nameservers) if nameservers is not None else None
        self._port = port
        self._lifetime = lifetime
        self._resolver: dns.asyncresolver.Resolver | None = None

    def _dns(self) -> dns.asyncresolver.Resolver:
        # Built on first use: reading /etc/resolv.conf fails on hosts without one, which must not stop startup.
        if self._resolver is None:
            import dns.asyncresolver
            import dns.exception

            try:
                if self._nameservers is None:
                    resolver = dns.asyncresolver.Resolver()
                else:
                    resolver = dns.asyncresolver.Resolver(configure=False)
                    resolver.nameservers = list(self._nameservers)
                    resolver.port = self._port
            except dns.exception.DNSException:
                raise DnsFailure("no DNS resolver is configured on this host") from None
            self._resolver = resolver
        return self._resolver

    async def resolve(self, host: str, port: int) -> list[IPAddress]:
        """See `Resolver.resolve`."""
        literal = _literal_or_none(host)
        if literal is not None:
            return [literal]
        resolver = self._dns()
        outcomes = await asyncio.gather(
            self._query(resolver, host, "A"), self._query(resolver, host, "AAAA"), return_exceptions=True
        )
        addresses: list[IPAddress] = []
        failures: list[BaseException] = []
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                failures.append(outcome)
            else:
                addresses.extend(outcome)
        # A server that cannot answer AAAA must not stop delivery over IPv4: only the addresses we got are ever
        # dialled, so a partial answer is as safe as a full one.
        if failures and not addresses:
            raise failures[0]
        return addresses

    async def _query(self, resolver: dns.asyncresolver.Resolver, host: str, rdtype: str) -> list[IPAddress]:
        import dns.exception
        import dns.resolver
        from dns.rdtypes.IN.A import A
        from dns.rdtypes.IN.AAAA import AAAA

        try:
            answer = await resolver.resolve(host, rdtype, lifetime=self._lifetime, search=False)
        except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
            return []
        except dns.resolver.LifetimeTimeout:
            raise DnsFailure(f"looking up {host} timed out") from None
        except dns.exception.DNSException:
            raise DnsFailure(f"looking up {host} failed") from None
        return [ipaddress.ip_address(rdata.address) for rdata in answer if isinstance(rdata, A | AAAA)]


def _literal_or_none(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


Answer: TypeAlias = Sequence[str] | Callable[[], Sequence[str]]


class StaticResolver:
    """Resolver with fixed answers, for tests. An answer may be a function, so it can change between calls."""

    def __init__(self, answers: Mapping[str, Answer]) -> None:
        self._answers = {host.lower(): answer for host, answer in answers.items()}
        self.calls: list[str] = []

    @staticmethod
    def in_turn(*answers: Sequence[str]) -> Callable[[], Sequence[str]]:
        """An answer that is each of `answers` in turn, then the last one again and again."""
        remaining = list(answers)

        def next_answer() -> Sequence[str]:
            return remaining.pop(0) if len(remaining) > 1 else remaining[0]

        return next_answer

    async def resolve(self, host: str, port: int) -> list[IPAddress]:
        """See `Resolver.resolve`; unknown hosts have no addresses."""
        self.calls.append(host)
        literal = _literal_or_none(host)
        if literal is not None:
            return [literal]
        answer = self._answers.get(host.lower(), ())
        if callable(answer):
            answer = answer()
        return [ipaddress.ip_address(address) for address in answer]


async def resolve_checked(host: str, port: int, resolver: Resolver, allowed: Sequence[IPNetwork]) -> list[IPAddress]:
    """The addresses to dial for `host`: all of its answers, each one public or allowed; else Refused.

    An IP literal is checked without a lookup. The resolver is called once; the caller must dial only what this
    returns, never look the name up again (that second answer is what DNS rebinding controls).
    """
    name = _normalize_host(host)
    literal = _ip_literal(name)
    if literal is not None:
        reason = is_public(literal, allowed)
        if reason is not None:
            raise Refused(f"{name} is {reason}")
        return [literal]
    answers = await resolver.resolve(name, port)
    if not answers:
        raise Refused(f"{name} does not resolve")
    for address in answers:
        reason = is_public(address, allowed)
        if reason is not None:
            # The address itself is left out: for a name only the operator should learn the internal layout.
            raise Refused(f"{name} resolves to {reason}")
    return list(dict.fromkeys(answers))


async def check_destination_url(url: str, resolver: Resolver, allowed: Sequence[IPNetwork]) -> Target:
    """Create/change-time check of a URL destination: its shape and its current DNS answers."""
    target = parse_destination_url(url)
    await resolve_checked(target.host, target.port, resolver, allowed)
    return target


async def check_destination_host(host: str, port: int, resolver: Resolver, allowed: Sequence[IPNetwork]) -> Endpoint:
    """Create/change-time check of a host-and-port destination: its shape and its current DNS answers."""
    endpoint = check_host(host, port)
    await resolve_checked(endpoint.host, endpoint.port, resolver, allowed)
    return endpoint


# ---------------------------------------------------------------------------------------------------------------
# Connections
# ---------------------------------------------------------------------------------------------------------------


def _require_verification(ssl_context: ssl.SSLContext | None) -> None:
    # A context without verification would make "the certificate must be valid for its host name" (SPEC 6.2)
    # silently false; that is a programming error, not a destination problem.
    if ssl_context is not None and (not ssl_context.check_hostname or ssl_context.verify_mode != ssl.CERT_REQUIRED):
        raise ValueError("the TLS context must verify the certificate and the host name")


class GuardedResolver(AbstractResolver):
    """aiohttp resolver answering only with checked addresses; the host name stays the TLS and SNI name."""

    def __init__(self, resolver: Resolver, allowed: Sequence[IPNetwork]) -> None:
        self._resolver = resolver
        self._allowed = tuple(allowed)

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        """The checked addresses of `host` as aiohttp connection targets; Refused if any answer is not public."""
        addresses = await resolve_checked(host, port, self._resolver, self._allowed)
        results: list[ResolveResult] = []
        for address in addresses:
            address_family = socket.AF_INET if address.version == 4 else socket.AF_INET6
            if family in (socket.AF_INET, socket.AF_INET6) and family != address_family:
                continue
            results.append(
                ResolveResult(
                    hostname=host,
                    host=str(address),
                    port=port,
                    family=address_family,
                    proto=0,
                    flags=socket.AI_NUMERICHOST | socket.AI_NUMERICSERV,
                )
            )
        if not results:
            raise Refused(f"{host} has no address of the requested family")
        return results

    async def close(self) -> None:
        """Nothing to release."""


class GuardedConnector(aiohttp.TCPConnector):
    """TCPConnector whose every host, name or IP literal, goes through the guard exactly once per connection."""

    def __init__(self, *, guard: GuardedResolver, **kwargs: Any) -> None:
        # The DNS cache is off: a cached answer would outlive the check it passed and could be shared.
        super().__init__(resolver=guard, use_dns_cache=False, **kwargs)
        self._guard = guard

    async def _resolve_host(self, host: str, port: int, traces: Sequence[Trace] | None = None) -> list[ResolveResult]:
        # aiohttp answers IP-literal hosts itself and never asks its resolver, so `http://127.0.0.1/` would pass
        # unchecked. Here every host goes to the guard. Should a future aiohttp rename this private method, names
        # are still guarded through `resolver=guard` above, and the IP-literal tests fail loudly.
        return await self._guard.resolve(host, port, family=self._family)


def guarded_session(
    allowed: Sequence[IPNetwork],
    resolver: Resolver,
    *,
    timeout_seconds: float | None,
    ssl_context: ssl.SSLContext | None = None,
) -> aiohttp.ClientSession:
    """An aiohttp session whose connections all go through the guard. Call it inside the running event loop.

    Requests raise Refused (not an aiohttp error) when the guard refuses. TLS is verified against the URL's host
    name, with `ssl_context` (default: the system's trust store). `timeout_seconds` bounds each request as a whole
    (None: no bound here, the caller bounds each request). Proxies from the environment are ignored, no cookies are
    kept, and a redirect target is guarded like any other URL (delivery does not follow them anyway).
    """
    _require_verification(ssl_context)
    connector = GuardedConnector(
        guard=GuardedResolver(resolver, allowed), ssl=ssl_context if ssl_context is not None else True
    )
    return aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=timeout_seconds),
        trust_env=False,
        cookie_jar=aiohttp.DummyCookieJar(),
    )


async def open_checked_connection(
    host: str,
    port: int,
    resolver: Resolver,
    allowed: Sequence[IPNetwork],
    ssl_context: ssl.SSLContext | None,
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A stream to `host`:`port` (syslog over TLS) dialled at a checked address; TLS verifies and sends `host`.

    The caller bounds the time (asyncio.timeout). Addresses are tried in the resolver's order.
    """
    _require_verification(ssl_context)
    endpoint = check_host(host, port)
    addresses = await resolve_checked(endpoint.host, endpoint.port, resolver, allowed)
    last_error: OSError | None = None
    for address in addresses:
        try:
            return await asyncio.open_connection(
                str(address),
                endpoint.port,
                ssl=ssl_context,
                server_hostname=endpoint.host if ssl_context is not None else None,
            )
        except OSError as exc:
            last_error = exc
    assert last_error is not None  # resolve_checked never returns an empty list
    raise last_error
