"""The CLI's client of the Logs API: `forwarder login` and `forwarder logs ...`.

The login is stored in `$XDG_CONFIG_HOME/forwarder/credentials.json` (mode 0600); `--url` /
`--key` or FORWARDER_URL / FORWARDER_KEY override it.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

EX_OK, EX_FAILED, EX_USAGE = 0, 1, 2
MULTILINE_FIELDS = ("detail", "hint", "context", "statement")


def credentials_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "forwarder" / "credentials.json"


class ClientError(Exception):
    """A request that did not succeed; the text is safe to print (never holds the key). `status`
    is the HTTP status of a refusal (None when no answer came)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def open_request(
    url: str,
    key: str,
    path: str,
    params: dict[str, Any] | None = None,
    timeout: float = 60,
    method: str = "GET",
    body: Any = None,
    accept: str = "application/json",
) -> Any:
    """The open response of a request (a context manager); ClientError with the API's error code
    and message when it is refused, or when the server cannot be reached. `body` is sent as JSON."""
    query = urllib.parse.urlencode([(k, v) for k, v in (params or {}).items() if v is not None], doseq=True)
    if not url.startswith(("http://", "https://")):
        raise ClientError(f"the server URL must start with http:// or https:// (got {url!r})")
    full = url.rstrip("/") + path + (f"?{query}" if query else "")
    # A key read from a file or a secret store often ends in a newline; anything else that is not
    # printable ASCII cannot be a key, and http.client's error about it would print the key.
    key = key.strip()
    if not key or not all("!" <= c <= "~" for c in key):
        raise ClientError("the API key holds a character no key has (a space or a line break inside it?)")
    headers = {"Authorization": f"Bearer {key}", "Accept": accept}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    try:
        req = urllib.request.Request(full, data=data, headers=headers, method=method)  # noqa: S310 - scheme checked
        return urllib.request.urlopen(req, timeout=timeout)  # noqa: S310 - scheme checked above
    except urllib.error.HTTPError as exc:
        retry = exc.headers.get("Retry-After") if exc.headers else None
        after = f" (try again in {retry} s)" if retry else ""
        try:
            err = json.loads(exc.read())["error"]
            raise ClientError(f"{exc.code} {err['code']}: {err['message']}{after}", exc.code) from None
        except (ValueError, KeyError, TypeError):
            raise ClientError(f"HTTP {exc.code} from {url}", exc.code) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ClientError(f"cannot reach {url}: {reason}") from None
    except (ValueError, http.client.InvalidURL) as exc:  # a bad port, urllib's "Invalid IPv6 URL"
        raise ClientError(f"the server URL {url!r} is not a valid URL: {exc}") from None


def request_json(
    url: str,
    key: str,
    path: str,
    params: dict[str, Any] | None = None,
    timeout: float = 60,
    method: str = "GET",
    body: Any = None,
) -> Any:
    """The answer's JSON (None for an empty answer, e.g. 204)."""
    with open_request(url, key, path, params, timeout, method, body) as resp:
        try:
            raw = resp.read()
        except OSError as exc:
            raise ClientError(f"cannot reach {url}: {exc}") from None
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            raise ClientError(f"{url} did not answer JSON: is it a forwarder's address?") from None


def login(url: str, key: str) -> int:
    """Check the key against the server, then store it (mode 0600)."""
    if not url.startswith(("http://", "https://")):
        print("forwarder login: --url must start with http:// or https://", file=sys.stderr)
        return EX_USAGE
    try:
        data = request_json(url, key, "/v1/databases")
    except ClientError as exc:
        _say(f"forwarder login: {exc}", file=sys.stderr)
        return EX_FAILED
    path = credentials_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        os.fchmod(fh.fileno(), 0o600)
        json.dump({"url": url.rstrip("/"), "key": key}, fh)
    names = ", ".join(d["name"] for d in data.get("databases", [])) or "none"
    _say(f"logged in to {url} (databases: {names}); saved to {path}")
    return EX_OK


def _config_url(path: str) -> str:
    """Where the daemon of this config file listens, as a URL this host can call."""
    from forwarder.cli import load_or_exit  # exits 78 naming the TOML path, like every command with --config

    server = load_or_exit(path, read_secrets=False).server
    # A daemon listening on every address is reached on loopback.
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(server.host, server.host)
    return f"http://[{host}]:{server.port}" if ":" in host else f"http://{host}:{server.port}"


def _credentials(args: argparse.Namespace) -> tuple[str, str]:
    url = args.url or (_config_url(args.config) if getattr(args, "config", None) else None)
    url = url or os.environ.get("FORWARDER_URL")
    key = args.key or os.environ.get("FORWARDER_KEY")
    if not (url and key):
        try:
            saved = json.loads(credentials_path().read_text())
            url, key = url or saved["url"], key or saved["key"]
        except (OSError, ValueError, KeyError):
            pass
    if key and not url:  # a key given (--key, FORWARDER_KEY) without where to use it
        raise ClientError(
            "no URL of the daemon to use the key with: pass --url URL (or set FORWARDER_URL, or run"
            " `forwarder login --url URL --key KEY` once)"
        )
    if not (url and key):
        raise ClientError(
            "not logged in: run `forwarder login --url URL --key KEY` (or pass --url and --key); make a key"
            " with `forwarder keys create --role read-only --config PATH`"
        )
    return url, key


# --- output -----------------------------------------------------------------------------------

# Control characters (C0, DEL, C1) as repr writes them: a log line's text is whatever a database
# client sent, and ESC, BEL or CR printed raw would let it retitle, clear or rewrite the terminal.
_ESCAPES: dict[int, str] = {
    c: {"\t": "\\t", "\n": "\\n", "\r": "\\r"}.get(chr(c), f"\\x{c:02x}") for c in (*range(0x20), *range(0x7F, 0xA0))
}
_ESCAPES_KEEPING_LAYOUT: dict[int, str] = {c: e for c, e in _ESCAPES.items() if chr(c) not in "\n\t"}


def printable(value: object, *, keep_newlines: bool = False) -> str:
    """`value` as text safe to print on a terminal: control characters written as escapes (`\\x1b`),
    newlines and tabs kept when `keep_newlines` (the caller lays the lines out)."""
    return str(value).translate(_ESCAPES_KEEPING_LAYOUT if keep_newlines else _ESCAPES)


def _say(text: str, **kwargs: Any) -> None:
    """Print one line built from the server's answers, escaped."""
    print(printable(text), **kwargs)


def format_line(line: dict[str, Any]) -> str:
    """One log line for a terminal: time, severity, kind, message, then indented details. Every
    field's control characters are escaped; the details keep their newlines (indented)."""
    line = {k: printable(v) if isinstance(v, str) and k not in MULTILINE_FIELDS else v for k, v in line.items()}
    who = "@".join(x for x in (line.get("user"), line.get("database")) if x)
    bits = [f"pid={line['pid']}" if line.get("pid") is not None else "", who]
    if line.get("duration_ms") is not None:
        bits.append(f"{line['duration_ms']:.1f}ms")
    if line.get("sqlstate"):
        bits.append(line["sqlstate"])
    meta = " ".join(b for b in bits if b)
    out = [
        f"{line['time']} {line['severity']:<7} {line['kind']:<20} {line['message']}" + (f"  ({meta})" if meta else "")
    ]
    for field in MULTILINE_FIELDS:
        if line.get(field):
            text = printable(line[field], keep_newlines=True).replace("\n", "\n" + " " * 14)
            out.append(f"    {field.upper():<9} {text}")
    return "\n".join(out)


def _print_lines(lines: list[dict[str, Any]], as_json: bool) -> None:
    for line in lines:
        print(json.dumps(line) if as_json else format_line(line), flush=True)


def _line_params(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "kind": ",".join(args.kind) if args.kind else None,
        "q": args.q,
        "group": args.group,
        "from": args.from_,
        "to": args.to,
        "before": args.before,
        "after": args.after,
        "limit": args.limit,
    }


def logs_command(args: argparse.Namespace) -> int:
    try:
        url, key = _credentials(args)
        ref = urllib.parse.quote(args.database, safe="")
        base = f"/v1/databases/{ref}/logs"
        if args.logs_command == "list":
            page = request_json(url, key, base, _line_params(args))
            _print_lines(page["lines"], args.json)
            if page["has_more"] and not args.json and page["lines"]:
                _say(f"-- more: --before {page['lines'][-1]['id']}", file=sys.stderr)
        elif args.logs_command == "tail":
            return _tail(url, key, base, args)
        elif args.logs_command == "groups":
            data = request_json(url, key, base + "/groups", {"from": args.from_, "limit": args.limit})
            if args.json:
                print(json.dumps(data))
            else:
                for g in data["groups"]:
                    _say(f"{g['count']:>8}  {g['kind']:<20} {g['last_time']}  {g['line']['message']}  [{g['group']}]")
        elif args.logs_command == "overview":
            data = request_json(url, key, base + "/overview")
            if args.json:
                print(json.dumps(data))
            else:
                _print_overview(data)
    except ClientError as exc:
        _say(f"forwarder logs: {exc}", file=sys.stderr)
        return EX_FAILED
    return EX_OK


def _tail(url: str, key: str, base: str, args: argparse.Namespace) -> int:
    """Print the newest lines, then follow with `after` (long polls; no line is skipped)."""
    params = _line_params(args)
    params["limit"] = args.limit or 20
    params["after"] = None
    page = request_json(url, key, base, params)
    lines = list(reversed(page["lines"]))
    _print_lines(lines, args.json)
    after = int(lines[-1]["id"]) if lines else (int(args.after) if args.after else 0)
    polls = 0
    while args.max_polls is None or polls < args.max_polls:
        polls += 1
        params.update(after=after, limit=500, wait_seconds=args.wait_seconds)
        try:
            page = request_json(url, key, base, params, timeout=args.wait_seconds + 30)
        except ClientError as exc:
            if exc.status is not None and 400 <= exc.status < 500 and exc.status not in (408, 429):
                # Refused for what was asked (a parameter, the key, the database): asking again
                # gets the same answer.
                _say(f"forwarder logs tail: {exc}", file=sys.stderr)
                return EX_FAILED
            _say(f"forwarder logs tail: {exc}; retrying", file=sys.stderr)
            time.sleep(2)
            continue
        new = list(reversed(page["lines"]))
        _print_lines(new, args.json)
        # The server says how far it looked: lines the filter skipped are not asked about again.
        if "next_after" in page:
            after = int(page["next_after"])
        elif new:
            after = int(new[-1]["id"])
    return EX_OK


def _print_overview(data: dict[str, Any]) -> None:
    db, s, src = data["database"], data["settings"], data["source"]
    _say(f"{db['name']} ({db['id']}) on {db['host']}")
    _say(f"  settings   enabled={s['enabled']} full_text={s['full_text']}")
    where = src["file"] or src["path"]
    _say(f"  reading    {src['state']}: {where}" + (f" ({src['reason']})" if src["reason"] else ""))
    counts = {k: v for k, v in data["counts_24h"].items() if v}
    _say("  last 24h   " + (", ".join(f"{k}={v}" for k, v in counts.items()) or "no lines"))
    r, u = data["retention"], data["usage_today"]
    oldest = r["oldest_time"] or "none (no lines stored)"
    _say(f"  retention  {r['days']} days, {r['store_bytes']}/{r['max_bytes']} bytes, oldest {oldest}")
    _say(f"  today      {u['lines']} lines, {u['bytes']} bytes read")


# --- operators: status and destinations ------------------------------------------------------


def status_command(args: argparse.Namespace) -> int:
    """Each database's reader and each destination's delivery, from the running daemon."""
    try:
        url, key = _credentials(args)
        databases = request_json(url, key, "/v1/databases")["databases"]
        overviews = [
            request_json(url, key, f"/v1/databases/{urllib.parse.quote(d['id'], safe='')}/logs/overview")
            for d in databases
        ]
        destinations = request_json(url, key, "/v1/log-destinations")["destinations"]
    except ClientError as exc:
        _say(f"forwarder status: {exc}", file=sys.stderr)
        return EX_FAILED
    if args.json:
        print(json.dumps({"databases": overviews, "destinations": destinations}))
        return EX_OK
    _say(f"forwarder at {url}")
    _say("databases:" if overviews else "databases: none configured")
    for o in overviews:
        src = o["source"]
        where = src["file"] or src["path"]
        reason = f" ({src['reason']})" if src["reason"] else ""
        _say(f"  {o['database']['id']:<20} {src['state']:<17} {where}{reason}")
    _say("destinations:" if destinations else "destinations: none")
    for d in destinations:
        _say(f"  {d['id']:<20} {d['type']:<13} {_delivery_state(d)}")
        if d["delivery"]["last_error"]:
            _say(f"  {'':<20} last error {d['delivery']['last_error_at']}: {d['delivery']['last_error']}")
    return EX_OK


def _delivery_state(d: dict[str, Any]) -> str:
    s = d["delivery"]
    if not d["enabled"]:
        state = "disabled"
    elif s["attempts"]:
        state = f"failing ({s['attempts']} attempts, next {s['next_attempt_at']})"
    else:
        state = "ok"
    age = s["oldest_undelivered_age_seconds"]
    return f"{state}; lag {s['lag_lines']} lines" + (f", oldest {age} s" if age is not None else "")


def destinations_command(args: argparse.Namespace) -> int:
    try:
        url, key = _credentials(args)
        if args.destinations_command == "list":
            data = request_json(url, key, "/v1/log-destinations")
            if args.json:
                print(json.dumps(data))
            else:
                if not data["destinations"]:
                    _say("no destinations")  # as `status` says it: not an empty screen to wonder about
                for d in data["destinations"]:
                    _say(f"{d['id']:<20} {d['type']:<13} {d['name']:<20} {_delivery_state(d)}")
            return EX_OK
        ref = urllib.parse.quote(args.id, safe="")
        result = request_json(url, key, f"/v1/log-destinations/{ref}/test", method="POST", timeout=30)
    except ClientError as exc:
        _say(f"forwarder destinations: {exc}", file=sys.stderr)
        return EX_FAILED
    if args.json:
        print(json.dumps(result))
    elif result["ok"]:
        print(f"{args.id}: the test line was accepted")
    else:
        _say(f"{args.id}: the test line failed: {result.get('error')}")
    return EX_OK if result["ok"] else EX_FAILED


def audit_command(args: argparse.Namespace) -> int:
    """`forwarder audit`: the organization's audit records, newest first (a read-write key)."""
    try:
        url, key = _credentials(args)
        data = request_json(url, key, "/v1/audit", {"limit": args.limit})
    except ClientError as exc:
        _say(f"forwarder audit: {exc}", file=sys.stderr)
        return EX_FAILED
    if args.json:
        print(json.dumps(data))
        return EX_OK
    if not data["records"]:
        print("no audit records")
    for r in data["records"]:
        details = f"  {json.dumps(r['details'], ensure_ascii=False)}" if r["details"] else ""
        _say(f"{r['time']}  {r['actor']:<18} {r['action']:<26} {r['target'] or '-'}{details}")
    return EX_OK


def _client_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", "-c", help="the daemon's TOML config file: ask the server it sets up ([server])")
    p.add_argument("--url", help="server URL (default: from --config, else from `forwarder login`)")
    p.add_argument("--key", help="API key (default: from `forwarder login`)")
    p.add_argument("--json", action="store_true", help="print the API's JSON")


def add_operator_parsers(sub: Any) -> None:
    p = sub.add_parser("status", help="each database's reader and each destination's delivery (running daemon)")
    _client_args(p)
    p.set_defaults(func=status_command)
    p = sub.add_parser("audit", help="the organization's audit records, newest first (a read-write key)")
    p.add_argument("--limit", type=int, help="at most this many (1 to 500; default 100)")
    _client_args(p)
    p.set_defaults(func=audit_command)
    p = sub.add_parser("destinations", help="list or test the running daemon's destinations")
    dsub = p.add_subparsers(dest="destinations_command", required=True)
    c = dsub.add_parser("list", help="destinations with their delivery state")
    _client_args(c)
    c.set_defaults(func=destinations_command)
    c = dsub.add_parser("test", help="send one test line; exit 1 if it is not accepted")
    c.add_argument("id", help="destination id")
    _client_args(c)
    c.set_defaults(func=destinations_command)


def add_logs_parser(sub: Any, func: Callable[[argparse.Namespace], int]) -> None:
    p = sub.add_parser("logs", help="read a database's log lines from a running forwarder")
    lsub = p.add_subparsers(dest="logs_command", required=True)
    for name, text in (
        ("list", "list lines, newest first"),
        ("tail", "follow new lines"),
        ("groups", "repeated messages"),
        ("overview", "settings, reading state, counts"),
    ):
        c = lsub.add_parser(name, help=text)
        c.add_argument("database", help="database id or name")
        c.add_argument("--url", help="server URL (default: from `forwarder login`)")
        c.add_argument("--key", help="API key (default: from `forwarder login`)")
        c.add_argument("--json", action="store_true", help="one JSON object per line")
        if name in ("list", "tail"):
            c.add_argument("--kind", action="append", help="kind or alias (errors, locks, maintenance)")
            c.add_argument("--q", help="search words")
            c.add_argument("--group", help="group id")
            c.add_argument("--to", help="RFC 3339 time")
            c.add_argument("--before", help="line id")
            c.add_argument("--after", help="line id")
        if name in ("list", "tail", "groups"):
            c.add_argument("--from", dest="from_", help="RFC 3339 time")
            c.add_argument("--limit", type=int)
        if name == "tail":
            c.add_argument("--wait-seconds", type=int, default=25, help="long-poll length, 0 to 30 seconds")
            c.add_argument("--max-polls", type=int, help="stop after this many polls (scripts, tests)")
        c.set_defaults(func=func)
