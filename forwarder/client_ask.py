"""The CLI's client of the Ask API: `forwarder ask`, `ask-settings`, `ask-key`, `ask-suggestions`
and `conversations` (docs/ask.md).

Everything the server sends is printed through `printable`: answers are made from log text, which
any database client can write, so no control character reaches the terminal. The organization's
own provider key is read from FORWARDER_ASK_KEY or stdin, never from the command line, where
every user of the host can read it (`ps`).
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import shlex
import sys
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final, TextIO

from forwarder.client import (
    EX_FAILED,
    EX_OK,
    EX_USAGE,
    ClientError,
    _client_args,
    _credentials,
    open_request,
    printable,
    request_json,
)

ASK_KEY_ENV: Final = "FORWARDER_ASK_KEY"
ABOUT_KINDS: Final = ("finding", "alert", "query", "database")
NEEDS_DATABASE: Final = ("finding", "query")  # their ids are per database
PROVIDERS: Final = ("openai", "anthropic", "openrouter")
# Longer than the server's keep-alive interval (15 s): a silent stream that long is a lost server.
STREAM_READ_TIMEOUT_SECONDS: Final = 60.0


class UsageError(Exception):
    """A command line that cannot be sent (exit 2)."""


def _out(text: str, *, end: str = "\n", keep_newlines: bool = False) -> None:
    """Print server text escaped; only Markdown (`keep_newlines`) keeps its line breaks."""
    print(printable(text, keep_newlines=keep_newlines), end=end, flush=True)


def _err(command: str, text: str) -> None:
    print(printable(f"forwarder {command}: {text}"), file=sys.stderr, flush=True)


def full_url(base: str, href: str) -> str:
    """A daemon page's path as a URL to open; an absolute URL as it is."""
    return base.rstrip("/") + href if href.startswith("/") else href


# --- the question -----------------------------------------------------------------------------------


def question_body(args: argparse.Namespace) -> dict[str, Any]:
    """The POST /v1/ask body of the command line; UsageError for one the server would refuse."""
    body: dict[str, Any] = {"question": args.question}
    if args.database:
        body["database"] = args.database
    if args.conversation:
        body["conversation_id"] = args.conversation
    if args.deep:
        body["deep"] = True
    if args.about:
        kind, sep, ident = args.about.partition(":")
        if not sep or kind not in ABOUT_KINDS or not ident:
            raise UsageError(f"--about takes KIND:ID, KIND one of {', '.join(ABOUT_KINDS)} (got {args.about!r})")
        about: dict[str, Any] = {"kind": kind, "id": ident}
        if kind in NEEDS_DATABASE:
            if not args.database:
                raise UsageError(f"--about {kind}:ID needs --database (a {kind}'s id is per database)")
            about["database"] = args.database
        body["about"] = about
    return body


def sse_events(lines: Iterator[bytes]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(event name, data) of a server-sent-event stream; comment lines (keep-alives) are skipped."""
    name, data = "", ""
    for raw in lines:
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if not line:
            if data:
                yield name or "message", json.loads(data)
            name, data = "", ""
        elif line.startswith(":"):
            continue
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data += line[5:].removeprefix(" ")
    if data:
        yield name or "message", json.loads(data)


@dataclass
class AnswerPrinter:
    """Prints one streamed answer: tool steps as they run, the text as it comes, then the
    sources, the actions and the model."""

    base: str
    key_hint: str = "$FORWARDER_KEY"
    at_line_start: bool = True
    open_tool: str | None = None  # the running step whose line is still open (its mark goes there)
    sources: list[dict[str, Any]] = field(default_factory=list)
    actions: list[dict[str, Any]] = field(default_factory=list)

    def _newline(self) -> None:
        if not self.at_line_start:
            _out("")
            self.at_line_start = True
        self.open_tool = None

    def event(self, name: str, data: dict[str, Any]) -> None:
        if name == "tool":
            tool = data["tool"]
            mark = "✓" if tool["status"] == "done" else "✗"
            if tool["status"] == "running":
                self._newline()
                _out(f"… {tool['label']}", end="")
                self.at_line_start, self.open_tool = False, tool["id"]
            elif self.open_tool == tool["id"]:
                _out(f" {mark}")
                self.at_line_start, self.open_tool = True, None
            else:
                self._newline()
                _out(f"{mark} {tool['label']}")
        elif name == "text":
            text = data["text"]
            if self.open_tool is not None:
                self._newline()
            _out(text, end="", keep_newlines=True)
            if text:
                self.at_line_start = text.endswith("\n")
        elif name == "source":
            self.sources.append(data["source"])
        elif name == "action":
            self.actions.append(data["action"])
        elif name == "done":
            self.finish()
            done = data["done"]
            left = "own key" if done["remaining"] < 0 else f"{done['remaining']} built-in questions left"
            _out("")
            _out(f"({done['model']}, {left})")
        elif name == "error":
            self.finish()

    def finish(self) -> None:
        self._newline()
        if self.sources:
            _out("")
            _out("Sources:")
            for s in self.sources:
                _out(f"  {s['label']}: {full_url(self.base, s['href'])}")
        if self.actions:
            _out("")
            _out("Actions:")
            for a in self.actions:
                for line in action_lines(self.base, a, self.key_hint):
                    _out(line)
        self.sources, self.actions = [], []


def action_lines(base: str, action: dict[str, Any], key_hint: str = "$FORWARDER_KEY") -> list[str]:
    """An action as the terminal shows it. A fix is only suggested: it shows the exact call that
    applies it (POST /v1/databases/{ref}/fixes) and the finding's page to review it first."""
    if action.get("kind") != "fix":
        return [f"  link: {action.get('label', '')}: {full_url(base, str(action.get('href', '')))}"]
    database = str(action["database"])
    endpoint = f"{base.rstrip('/')}/v1/databases/{urllib.parse.quote(database, safe='')}/fixes"
    body = json.dumps({"finding_id": action["finding_id"], "fix_id": action["fix_id"]})
    lines = [
        f"  fix: {action['label']}",
        f"    database {database}, finding {action['finding_id']}, fix {action['fix_id']}",
        f"    apply: POST {endpoint} {body}",
        "      curl -X POST -H 'Content-Type: application/json' -H \"Authorization: Bearer "
        f'{key_hint}" -d {shlex.quote(body)} {shlex.quote(endpoint)}',
    ]
    if action.get("href"):
        lines.append(f"    review: {full_url(base, str(action['href']))}")
    return lines


def ask_command(args: argparse.Namespace) -> int:
    """`forwarder ask QUESTION`: stream the answer; exit 1 on a refusal or an error event."""
    try:
        body = question_body(args)
    except UsageError as exc:
        _err("ask", str(exc))
        return EX_USAGE
    try:
        url, key = _credentials(args)
        with open_request(
            url, key, "/v1/ask", method="POST", body=body, timeout=STREAM_READ_TIMEOUT_SECONDS,
            accept="text/event-stream",
        ) as resp:  # fmt: skip
            printer = AnswerPrinter(url)
            for name, data in sse_events(iter(resp.readline, b"")):
                if args.json:
                    print(json.dumps(data), flush=True)
                else:
                    printer.event(name, data)
                if name == "error":
                    err = data["error"]
                    _err("ask", f"{err['code']}: {err['message']}")
                    return EX_FAILED
                if name == "done":
                    return EX_OK
    except ClientError as exc:
        _err("ask", str(exc))
        return EX_FAILED
    except (OSError, ValueError) as exc:
        _err("ask", f"the answer's stream broke off: {exc}")
        return EX_FAILED
    _err("ask", "the answer's stream ended without `done`")
    return EX_FAILED


# --- settings, the own key, suggestions -------------------------------------------------------------


def print_settings(s: dict[str, Any]) -> None:
    _out(f"Ask:          {'on' if s['enabled'] else 'off'}")
    _out(f"answers from: {s['source']} ({s['handled_by']['text']})")
    if s["fast_model"] or s["deep_model"]:
        _out(f"models:       fast {s['fast_model']}, deep {s['deep_model']}")
    if s["provider"]:
        state = "usable" if s["key_usable"] else "refused by the provider: set a key again"
        _out(f"own key:      {s['provider']} ({state})")
    u = s["usage"]
    _out(
        f"this month:   {u['month']}: {u['builtin_used']} of {u['builtin_allowance']} built-in questions used,"
        f" {u['builtin_remaining']} left"
    )


def settings_command(args: argparse.Namespace) -> int:
    """`forwarder ask-settings [--enable|--disable]`."""
    try:
        url, key = _credentials(args)
        if args.enabled is None:
            data = request_json(url, key, "/v1/ask/settings")
        else:
            data = request_json(url, key, "/v1/ask/settings", method="PUT", body={"enabled": args.enabled})
    except ClientError as exc:
        _err("ask-settings", str(exc))
        return EX_FAILED
    if args.json:
        print(json.dumps(data))
    else:
        print_settings(data)
    return EX_OK


def read_provider_key(stdin: TextIO) -> str:
    """The provider's key: FORWARDER_ASK_KEY, else stdin (asked for without echo on a terminal)."""
    from_env = os.environ.get(ASK_KEY_ENV, "").strip()
    if from_env:
        return from_env
    if stdin.isatty():
        return getpass.getpass("The provider's API key (not shown): ").strip()
    return stdin.readline().strip()


def key_command(args: argparse.Namespace) -> int:
    """`forwarder ask-key set|remove`."""
    try:
        url, key = _credentials(args)
        if args.key_command == "remove":
            request_json(url, key, "/v1/ask/key", method="DELETE")
            _out("the own key is removed")
            return EX_OK
        api_key = read_provider_key(sys.stdin)
        if not api_key:
            _err("ask-key set", f"no key: pipe it to stdin or set {ASK_KEY_ENV} (never on the command line)")
            return EX_USAGE
        body = {
            "provider": args.provider,
            "api_key": api_key,
            "fast_model": args.fast_model,
            "deep_model": args.deep_model,
        }
        data = request_json(url, key, "/v1/ask/key", method="PUT", body=body, timeout=30)
    except ClientError as exc:
        _err(f"ask-key {args.key_command}", str(exc))
        return EX_FAILED
    if args.json:
        print(json.dumps(data))
    else:
        _out(f"the key is checked with {args.provider} and stored encrypted")
        print_settings(data)
    return EX_OK


def suggestions_command(args: argparse.Namespace) -> int:
    """`forwarder ask-suggestions [--database D]`."""
    try:
        url, key = _credentials(args)
        data = request_json(url, key, "/v1/ask/suggestions", {"database": args.database})
    except ClientError as exc:
        _err("ask-suggestions", str(exc))
        return EX_FAILED
    if args.json:
        print(json.dumps(data))
        return EX_OK
    if not data["suggestions"]:
        _out("no suggestions: no open findings and no firing alerts")
    for s in data["suggestions"]:
        about = s["about"]
        flags = ""
        if about:
            flags = f" --about {about['kind']}:{about['id']}"
        if s["database"]:
            flags = f" --database {s['database']}" + flags
        _out(s["question"])
        _out(f"    forwarder ask {shlex.quote(s['question'])}{flags}")
    return EX_OK


# --- conversations ----------------------------------------------------------------------------------


def print_message(base: str, m: dict[str, Any]) -> None:
    if m["role"] == "user":
        _out("")
        _out(f"> {m['text']}  [{m['created_at']}]")
        return
    _out(m["text"], keep_newlines=True)
    printer = AnswerPrinter(base)
    printer.sources, printer.actions = list(m["sources"]), list(m["actions"])
    printer.finish()
    notes = [f"message {m['id']}", m["status"]]
    if m["model"]:
        notes.append(m["model"])
    if m["error"]:
        notes.append(f"error {m['error'].get('code')}: {m['error'].get('message')}")
    if m["rating"]:
        notes.append(f"rated {m['rating']}")
    _out(f"({', '.join(notes)})")


def conversations_command(args: argparse.Namespace) -> int:
    """`forwarder conversations list|show|delete|delete-all|rate`."""
    command = f"conversations {args.conversations_command}"
    try:
        url, key = _credentials(args)
        sub = args.conversations_command
        if sub == "list":
            data = request_json(url, key, "/v1/ask/conversations")
            if args.json:
                print(json.dumps(data))
            elif not data["conversations"]:
                _out("no conversations")
            else:
                for c in data["conversations"]:
                    where = c["database"] or "-"
                    _out(f"{c['id']}  {c['updated_at']}  {c['message_count']:>3} messages  {where}  {c['title']}")
        elif sub == "show":
            ref = urllib.parse.quote(args.id, safe="")
            data = request_json(url, key, f"/v1/ask/conversations/{ref}")
            if args.json:
                print(json.dumps(data))
            else:
                _out(f"{data['id']}: {data['title']} (database {data['database'] or '-'}, last {data['updated_at']})")
                for m in data["messages"]:
                    print_message(url, m)
        elif sub == "delete":
            ref = urllib.parse.quote(args.id, safe="")
            request_json(url, key, f"/v1/ask/conversations/{ref}", method="DELETE")
            _out(f"conversation {args.id} deleted")
        elif sub == "delete-all":
            if not args.yes:
                _err(command, "deletes every conversation of your organization: add --yes to do it")
                return EX_USAGE
            data = request_json(url, key, "/v1/ask/conversations", method="DELETE")
            _out(f"{data['deleted']} conversation(s) deleted")
        elif sub == "rate":
            ref = urllib.parse.quote(args.message_id, safe="")
            rating = "" if args.rating == "clear" else args.rating
            request_json(url, key, f"/v1/ask/messages/{ref}/feedback", method="POST", body={"rating": rating})
            _out(f"message {args.message_id}: " + (f"rated {rating}" if rating else "rating cleared"))
    except ClientError as exc:
        _err(command, str(exc))
        return EX_FAILED
    return EX_OK


# --- the parsers ------------------------------------------------------------------------------------


def add_ask_parsers(sub: Any) -> None:
    p = sub.add_parser("ask", help="ask a question about the databases; the answer streams in")
    p.add_argument("question", help="the question, 1 to 2,000 characters")
    p.add_argument("--database", "-d", help="the database (id or name) it is about")
    p.add_argument("--deep", action="store_true", help="use the stronger (deep) model")
    p.add_argument(
        "--about",
        metavar="KIND:ID",
        help="finding:ID, query:ID (both with --database), alert:ID or database:ID",
    )
    p.add_argument("--conversation", metavar="ID", help="continue this conversation (it keeps its database)")
    _client_args(p)
    p.set_defaults(func=ask_command)

    p = sub.add_parser("ask-settings", help="show Ask's settings and this month's usage; turn Ask on or off")
    onoff = p.add_mutually_exclusive_group()
    onoff.add_argument("--enable", dest="enabled", action="store_const", const=True, help="turn Ask on")
    onoff.add_argument("--disable", dest="enabled", action="store_const", const=False, help="turn Ask off")
    _client_args(p)
    p.set_defaults(func=settings_command, enabled=None)

    p = sub.add_parser("ask-key", help="set or remove the organization's own model provider key")
    ksub = p.add_subparsers(dest="key_command", required=True)
    k = ksub.add_parser(
        "set",
        help=f"check a provider key, then store it encrypted; the key is read from {ASK_KEY_ENV} or stdin",
    )
    k.add_argument("--provider", required=True, choices=PROVIDERS)
    k.add_argument("--fast-model", default="", help="model for questions (default: the provider's default)")
    k.add_argument("--deep-model", default="", help="model for --deep questions (default: the provider's default)")
    _client_args(k)
    k.set_defaults(func=key_command)
    k = ksub.add_parser("remove", help="remove the stored key")
    _client_args(k)
    k.set_defaults(func=key_command)

    p = sub.add_parser("ask-suggestions", help="up to four questions from open findings and firing alerts")
    p.add_argument("--database", "-d", help="only this database's (id or name)")
    _client_args(p)
    p.set_defaults(func=suggestions_command)

    p = sub.add_parser("conversations", help="list, show, delete or rate Ask's conversations")
    csub = p.add_subparsers(dest="conversations_command", required=True)
    c = csub.add_parser("list", help="the organization's conversations, newest first")
    _client_args(c)
    c = csub.add_parser("show", help="one conversation with its messages, sources and actions")
    c.add_argument("id")
    _client_args(c)
    c = csub.add_parser("delete", help="delete one conversation")
    c.add_argument("id")
    _client_args(c)
    c = csub.add_parser("delete-all", help="delete every conversation of the organization (needs --yes)")
    c.add_argument("--yes", action="store_true", help="yes, delete them all")
    _client_args(c)
    c = csub.add_parser("rate", help="rate an answer: up, down, or clear")
    c.add_argument("message_id", help="the answer's message id (`conversations show` lists them)")
    c.add_argument("rating", choices=["up", "down", "clear"])
    _client_args(c)
    for parser in csub.choices.values():
        parser.set_defaults(func=conversations_command)
