"""Command line: the daemon (`run`), operator commands and a client of the Logs API.

Exit codes: 0 ok, 1 a request failed, 2 usage error, 3 startup failure, 70 a part of the running
daemon failed, 78 bad config (EX_CONFIG from sysexits.h, which systemd's RestartPreventExitStatus=78
relies on), 130/143 a stop forced by a second SIGINT/SIGTERM during the drain (128 + the signal).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import re
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import get_args

import orjson

from forwarder.client import printable
from forwarder.config import Config, ConfigError, LogFormat, load_config

EX_OK = 0
EX_FAILED = 1
EX_USAGE = 2
EX_STARTUP = 3
EX_SOFTWARE = 70  # sysexits.h: a part of the running daemon failed (logged); systemd restarts it
EX_CONFIG = 78

DEFAULT_CONFIG = os.environ.get("FORWARDER_CONFIG", "/etc/forwarder/forwarder.toml")
LOG_LEVELS = ("debug", "info", "warning", "error")


def print_problems(path: str, problems: Sequence[str]) -> None:
    """Each mistake on a line of its own, after the file's path (for a person reading them)."""
    for problem in problems:
        print(f"{path}: {problem}" if not problem.startswith(str(path)) else problem, file=sys.stderr)


def load_or_exit(path: str, *, read_secrets: bool = True) -> Config:
    """The config at `path`; on a mistake, print each with its TOML path and exit 78."""
    try:
        return load_config(path, read_secrets=read_secrets)
    except ConfigError as exc:
        print_problems(path, exc.problems)
        raise SystemExit(EX_CONFIG) from None


# --- daemon and operator commands -----------------------------------------------------------


def run_log_level(args: argparse.Namespace) -> str | None:
    """--log-level, else $FORWARDER_LOG_LEVEL (any case; empty is unset), else info; None when
    the variable holds no level (argparse checks the flag's choices, never an env default's)."""
    if args.log_level is not None:
        return str(args.log_level)
    raw = os.environ.get("FORWARDER_LOG_LEVEL", "")
    level = raw.strip().lower() or "info"
    if level not in LOG_LEVELS:
        print(
            f"forwarder run: FORWARDER_LOG_LEVEL={raw!r} is not a log level; use one of {', '.join(LOG_LEVELS)}",
            file=sys.stderr,
        )
        return None
    return level


def report_config_error(path: str, problems: Sequence[str], level: str) -> None:
    """The mistakes that keep the daemon from starting: plain lines on a terminal; otherwise one
    JSON log record, like every other line of the daemon's log there (journald, a container's log
    pipeline), with the file's path and every mistake at its TOML path."""
    if sys.stderr.isatty():
        print_problems(path, problems)
        return
    from forwarder.logsetup import setup_logging

    setup_logging(level)
    logging.getLogger(__name__).error(
        "config invalid; the daemon does not start", extra={"path": str(path), "problems": list(problems)}
    )


def cmd_run(args: argparse.Namespace) -> int:
    # SIGHUP's default action ends the process, and logrotate's postrotate or `systemctl reload`
    # may send it while the daemon starts (migrations can take a while). The entry point ignores
    # it before the first heavy import (forwarder/entry.py); this is for a caller of main() itself.
    # Daemon.run() replaces it with its reload handler; until then a SIGHUP is ignored.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    level = run_log_level(args)
    if level is None:
        return EX_USAGE
    # Importing the daemon makes ~130,000 objects that live as long as it does: the cyclic
    # collector walking them again and again while they are made was ~10% of start to ready, and
    # frozen (gc.freeze) they are left out of every later full collection too.
    gc.disable()
    try:
        try:
            config = load_config(args.config)
        except ConfigError as exc:
            report_config_error(args.config, exc.problems, level)
            return EX_CONFIG
        from forwarder.app import Daemon, PartFailed, StartupFailed, StopForced
        from forwarder.logsetup import setup_logging
    finally:
        gc.freeze()
        gc.enable()

    setup_logging(level)
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover - uvloop is a dependency on every supported platform
        pass
    try:
        asyncio.run(Daemon(config, config_path=args.config).run())
    except StartupFailed:
        return EX_STARTUP  # logged by the daemon
    except PartFailed:
        return EX_SOFTWARE  # logged by the daemon as it failed
    except StopForced as forced:
        return forced.exit_code  # 130 or 143: a second SIGINT/SIGTERM cut the drain short (logged)
    return EX_OK


def cmd_check_config(args: argparse.Namespace) -> int:
    from forwarder.sources.check import log_notes

    config = load_or_exit(args.path)
    # What the daemon's overview would say once it runs, said now: notes, the config is still valid.
    for i, db in enumerate(config.databases):
        for note in log_notes(db):
            print(f"{args.path}: databases[{i}].{note}", file=sys.stderr)
    print(f"{args.path}: ok ({len(config.databases)} database(s))")
    return EX_OK


# An organization's name has the form of a database's id: it appears in audit records and logs.
ORG_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")


def cmd_keys(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime

    from forwarder.store import open_sync
    from forwarder.store import state as S

    org = S.DEFAULT_ORG if getattr(args, "org", None) is None else args.org
    if args.keys_command == "create" and not ORG_RE.fullmatch(org):
        print(
            f"forwarder keys create: --org {org!r}: 1 to 63 of a-z, 0-9, _ and -, starting with a letter or digit",
            file=sys.stderr,
        )
        return EX_USAGE
    config = load_or_exit(args.config, read_secrets=False)  # only the store's path is needed
    if args.keys_command != "create" and not Path(config.store.path).exists():
        # Listing or revoking keys of a store that does not exist is a mistyped path (or config):
        # say so rather than create an empty store there. `create` may come before the first start.
        print(
            f"forwarder keys {args.keys_command}: no store at {config.store.path} (store.path in {args.config})",
            file=sys.stderr,
        )
        return EX_FAILED
    conn = open_sync(config.store.path)
    now_us = int(datetime.now(tz=UTC).timestamp() * 1_000_000)
    try:
        if args.keys_command == "create":
            conn.execute("BEGIN IMMEDIATE")
            key, full = S.create_key(conn, args.name, args.role, now_us, org)
            S.audit(
                conn,
                now_us,
                org=key.org,
                actor="cli",
                action="keys.created",
                target=key.id,
                details={"role": key.role, "name": key.name, "org": key.org},
            )
            conn.execute("COMMIT")
            print(full)
            print(
                f"key {key.id} ({key.role}, organization {key.org}) created; this is the only time it is shown",
                file=sys.stderr,
            )
        elif args.keys_command == "list":
            rows = S.list_keys(conn)
            if args.json:
                print(
                    orjson.dumps(
                        [
                            {
                                "id": k.id,
                                "name": k.name,
                                "role": k.role,
                                "org": k.org,
                                "revoked": k.revoked_at is not None,
                            }
                            for k in rows
                        ]
                    ).decode()
                )
            else:
                for k in rows:
                    state = "revoked" if k.revoked_at else "active"
                    print(f"{k.id}  {k.role:<10}  {state:<7}  {k.org:<16}  {printable(k.name)}")
        elif args.keys_command == "revoke":
            conn.execute("BEGIN IMMEDIATE")
            org = next((k.org for k in S.list_keys(conn) if k.id == args.id), S.DEFAULT_ORG)
            done = S.revoke_key(conn, args.id, now_us)
            if done:
                S.audit(conn, now_us, org=org, actor="cli", action="keys.revoked", target=args.id)
            conn.execute("COMMIT")
            if not done:
                print(f"no active key {args.id}", file=sys.stderr)
                return EX_FAILED
            print(f"key {args.id} revoked")
    finally:
        conn.close()
    return EX_OK


def cmd_parse(args: argparse.Namespace) -> int:
    from forwarder.model import spec_fields
    from forwarder.pglog import entries_carry_time, make_reader, parse_stream, uses_line_prefix
    from forwarder.pglog.prefix import unknown_escapes

    prefixed = uses_line_prefix(args.format)  # the format carries PostgreSQL's stderr text
    if prefixed and (unknown := unknown_escapes(args.prefix)):
        print(f"forwarder parse: PostgreSQL's log_line_prefix has no escape {', '.join(unknown)}", file=sys.stderr)
        return EX_USAGE
    if not args.timezone:  # (the readers take "" for UTC; a flag given empty is a mistake)
        print("forwarder parse: --timezone is empty: give log_timezone's IANA name, such as UTC", file=sys.stderr)
        return EX_USAGE
    try:
        reader = make_reader(
            args.format,
            line_prefix=args.prefix,
            timezone=args.timezone,
            full_text=args.full_text,
            syslog_ident=args.syslog_ident,
        )
    except (ValueError, NotImplementedError) as exc:
        print(f"forwarder parse: {exc}", file=sys.stderr)
        return EX_USAGE
    stdin = sys.stdin.buffer
    chunks = iter(lambda: stdin.read(1 << 16), b"")
    out = sys.stdout.buffer
    entries = unparsed = 0
    for line in parse_stream(reader, chunks):
        entries += 1
        unparsed += line.unparsed
        out.write(orjson.dumps(spec_fields(line)) + b"\n")
    out.flush()
    other = reader.lines_other  # syslog: lines of other programs, skipped
    if other:
        print(
            f"forwarder parse: skipped {other} lines of other programs (not {args.syslog_ident or 'postgres'!r})",
            file=sys.stderr,
        )
    # Times in a zone --timezone does not use are read right but say the setting is wrong.
    has_time = entries_carry_time(args.format, args.prefix)
    note = reader.time_counts.note(args.timezone, setting="--timezone", prefix_has_time=has_time)
    if note is not None:
        print(f"forwarder parse: {note}", file=sys.stderr)
    if not unparsed:
        return EX_OK
    # The point of this command is checking a prefix before deploying: a prefix that matches
    # nothing turns every line into kind `other` with its text removed, which looks like output.
    expected = f"the {args.format} format" if args.format != "stderr" else ""
    if prefixed:
        expected += (" with " if expected else "") + f"the prefix {args.prefix!r}"
    print(
        f"forwarder parse: {unparsed} of {entries} entries did not match {expected}; they are kept whole as"
        " kind other (with values removed unless --full-text)",
        file=sys.stderr,
    )
    if reader.lines_matched == 0:
        hint = " (run SHOW log_line_prefix; on the server)" if prefixed else ""
        print(f"forwarder parse: no line matched: check {expected}{hint}", file=sys.stderr)
        return EX_FAILED
    return EX_OK


# --- client commands --------------------------------------------------------------------------


def cmd_login(args: argparse.Namespace) -> int:
    from forwarder import client

    return client.login(args.url, args.key)


def cmd_logs(args: argparse.Namespace) -> int:
    from forwarder import client

    return client.logs_command(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="forwarder", description="PostgreSQL log forwarder")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("run", help="run the daemon")
    p.add_argument(
        "--config",
        "-c",
        default=DEFAULT_CONFIG,
        help="TOML config file (default: $FORWARDER_CONFIG, else /etc/forwarder/forwarder.toml)",
    )
    p.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        help="the daemon's log level (default: $FORWARDER_LOG_LEVEL, else info)",
    )
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("check-config", help="validate a config file; exit 78 listing every mistake")
    p.add_argument("path", help="the TOML file; prints PATH: ok (N database(s)) and exits 0 when it is valid")
    p.set_defaults(func=cmd_check_config)

    p = sub.add_parser("keys", help="manage API keys (on this host's store)")
    ksub = p.add_subparsers(dest="keys_command", required=True)
    config_arg = argparse.ArgumentParser(add_help=False)
    config_arg.add_argument(
        "--config",
        "-c",
        default=DEFAULT_CONFIG,
        help="TOML config file, for the store path (default: $FORWARDER_CONFIG, else /etc/forwarder/forwarder.toml)",
    )
    k = ksub.add_parser("create", help="create a key and print it once", parents=[config_arg])
    k.add_argument(
        "--role", required=True, choices=["read-only", "read-write"], help="read-only keys cannot change anything"
    )
    k.add_argument("--name", default="", help="a label to tell keys apart in `keys list` and the audit")
    k.add_argument(
        "--org",
        help="the organization the key belongs to (default: default); Ask's settings, key and conversations are"
        " per organization",
    )
    k = ksub.add_parser("list", help="list keys (never their secret)", parents=[config_arg])
    k.add_argument("--json", action="store_true")
    k = ksub.add_parser("revoke", help="revoke a key by its id", parents=[config_arg])
    k.add_argument("id")
    p.set_defaults(func=cmd_keys)

    p = sub.add_parser("parse", help="parse PostgreSQL log text from stdin, print one JSON line per entry")
    p.add_argument("--format", default="stderr", choices=get_args(LogFormat))
    p.add_argument("--prefix", default="%m [%p] ", help="log_line_prefix (stderr, syslog, cri)")
    p.add_argument(
        "--syslog-ident",
        help="the server's syslog_ident: syslog, the tag of its lines (default postgres); journal, read only the"
        " records of this SYSLOG_IDENTIFIER (default all)",
    )
    p.add_argument("--timezone", default="UTC", help="log_timezone, an IANA name")
    p.add_argument("--full-text", action="store_true", help="keep values (no redaction)")
    p.set_defaults(func=cmd_parse)

    p = sub.add_parser("login", help="check an API key against a server and store it for the CLI")
    p.add_argument("--url", required=True, help="the daemon's address, e.g. http://127.0.0.1:8780")
    p.add_argument(
        "--key", required=True, help="an API key; saved with the URL in ~/.config/forwarder/credentials.json (0600)"
    )
    p.set_defaults(func=cmd_login)

    from forwarder.client import add_logs_parser, add_operator_parsers
    from forwarder.client_ask import add_ask_parsers

    add_logs_parser(sub, cmd_logs)
    add_operator_parsers(sub)
    add_ask_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return EX_OK
    return code


if __name__ == "__main__":
    raise SystemExit(main())
