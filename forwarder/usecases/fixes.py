"""Apply a finding's fix to the monitored server: `apply_fix`.

Only SQL rendered from the fix's own definition runs (forwarder/insights/fixsql.py), through the
connection the operator declared in the config file (`[databases.connection]`, with
`allow_fixes = true`); the API only names a finding and one of its fixes. A fix that names its
database (`Fix.database`: a table's, from an autovacuum line) runs connected to that database, the
connection's other parameters unchanged, and fails if the server has no such database; one that
does not (ALTER SYSTEM, ALTER ROLE) runs in the connection's own. The setting's value is read
before and after, the latter on a new connection: ALTER SYSTEM followed by `pg_reload_conf()`
changes what new sessions see. A fix that needs a server restart is never applied, and neither is
one without SQL (done by hand): both say so with the SQL to run.

The password is read from its source at each use and handed to the driver only: it is never in a
message, an audit record or the log. Errors name no DSN either.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol

from forwarder.config import DatabaseConfig, DatabaseConnectionConfig
from forwarder.insights.fixsql import render
from forwarder.insights.model import Finding
from forwarder.usecases.destinations import Actor

log = logging.getLogger(__name__)

APPLIED: Final = "fixes.applied"
FAILED: Final = "fixes.failed"
RELOAD_SQL: Final = "SELECT pg_reload_conf()"
APPLICATION_NAME: Final = "forwarder-fixes"
# pg_reload_conf() only signals the postmaster; a session started a moment later may still be
# forked with the old value. The value after is read again this often, this far apart, before it
# is reported unchanged.
AFTER_READS: Final = 10
AFTER_READ_INTERVAL: Final = 0.1

NotAppliedReason = Literal["no_connection", "fixes_not_allowed", "needs_restart", "manual"]


# --- errors --------------------------------------------------------------------------------------


class FixError(Exception):
    """The fix was not applied; `message` is for the caller and never holds a secret."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotFound(FixError):
    """No such finding on the database, or no such fix on the finding."""


class NotApplied(FixError):
    """The daemon may not (or cannot) apply this fix; `sql` is what to run by hand (None for a
    fix done by hand, whose `label` says what to do)."""

    def __init__(self, reason: NotAppliedReason, message: str, sql: str | None, label: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.sql = sql
        self.label = label


class Failed(FixError):
    """The server could not be reached or refused a statement; `sql` lists the statements that ran."""

    def __init__(self, message: str, sql: tuple[str, ...]) -> None:
        super().__init__(message)
        self.sql = sql


class ServerError(Exception):
    """What a `Session` raises: the server's or the network's message, without DSN or password."""


# --- ports ---------------------------------------------------------------------------------------


class Findings(Protocol):
    """The findings as insights keep them."""

    async def finding(self, database_id: str, finding_id: str) -> Finding | None:
        """The finding with this id on this database (open or resolved), or None."""


class Audit(Protocol):
    """Where audit records go (the store)."""

    async def audit(
        self, *, org: str, actor: str, action: str, target: str | None, details: dict[str, object] | None
    ) -> None:
        """Record an operation; `details` never holds a secret."""


class Session(Protocol):
    """One connection to the monitored server."""

    async def execute(self, sql: str) -> None:
        """Run one statement (simple protocol: ALTER SYSTEM cannot run in a transaction); ServerError."""

    async def setting(self, name: str) -> tuple[str, bool]:
        """The setting's value as SHOW gives it, and whether it waits for a restart; ServerError."""


class Connect(Protocol):
    """Opens a session; ServerError when it cannot."""

    def __call__(
        self, connection: DatabaseConnectionConfig, password: str | None, *, database: str | None = None
    ) -> AbstractAsyncContextManager[Session]:
        """A session closed when the block ends, connected to `database` instead of the connection's
        own when given (the server refuses an unknown one: never another database instead)."""


@dataclass(frozen=True, slots=True)
class Ports:
    """What `apply_fix` works with."""

    findings: Findings
    audit: Audit
    connect: Connect


@dataclass(frozen=True, slots=True)
class Applied:
    """A fix that ran: its statements, the setting before and after, whether the configuration was reloaded."""

    finding_id: str
    fix_id: str
    sql: tuple[str, ...]
    setting: str | None
    before: str | None
    after: str | None
    reloaded: bool
    pending_restart: bool


# --- the use case --------------------------------------------------------------------------------


async def apply_fix(ports: Ports, database: DatabaseConfig, finding_id: str, fix_id: str, actor: Actor) -> Applied:
    """Run the fix `fix_id` of finding `finding_id` on `database`'s server, audited as `fixes.applied`.

    Raises NotFound, NotApplied (with the SQL to run by hand) or Failed (after what ran, if
    anything, was audited as `fixes.failed`).
    """
    finding = await ports.findings.finding(database.id, finding_id)
    if finding is None:
        raise NotFound(f"no finding {finding_id!r} on database {database.id!r}")
    fix = finding.fix(fix_id)
    if fix is None:
        known = ", ".join(f.fix_id for f in finding.fixes) or "none"
        raise NotFound(f"finding {finding_id!r} has no fix {fix_id!r} (its fixes: {known})")
    if fix.manual or not fix.statement:
        raise NotApplied("manual", f"this fix is done by hand: {fix.label}", None, fix.label)
    sql = render(fix.statement)
    if fix.needs == "restart":
        raise NotApplied(
            "needs_restart",
            "this fix takes effect only after a server restart, so it was not applied: run the SQL, then restart "
            "the server",
            sql,
            fix.label,
        )
    connection = database.connection
    if connection is None:
        raise NotApplied(
            "no_connection",
            "the database has no connection for fixes: run the SQL by hand, or add [databases.connection] with a "
            "dsn and allow_fixes = true to the daemon's config file",
            sql,
            fix.label,
        )
    if not connection.allow_fixes:
        raise NotApplied(
            "fixes_not_allowed",
            "applying fixes is off for this database: run the SQL by hand, or set allow_fixes = true in its "
            "[databases.connection] in the daemon's config file",
            sql,
            fix.label,
        )
    try:
        password = connection.read_password()
    except ValueError as exc:
        raise Failed(f"the connection's password cannot be read: {exc}", ()) from None

    # The audit names the database a fix ran in when it is not the connection's own.
    where = {"database": fix.database} if fix.database is not None else {}
    ran: list[str] = []
    before = after = None
    pending = False
    reload = fix.needs == "reload"
    try:
        async with ports.connect(connection, password, database=fix.database) as session:
            if fix.setting is not None:
                before, _ = await session.setting(fix.setting)
            await session.execute(sql)
            ran.append(sql)
            if reload:
                await session.execute(RELOAD_SQL)
                ran.append(RELOAD_SQL)
        if fix.setting is not None:
            after, pending = await _after(
                ports.connect, connection, password, fix.database, fix.setting, before, reload
            )
    except ServerError as exc:
        message = _scrub(str(exc), password)
        if fix.database is not None:
            message = f"{message} (connected to database {fix.database!r}, the one the fix applies to)"
        if ran:
            await ports.audit.audit(
                org=actor.org,
                actor=actor.name,
                action=FAILED,
                target=database.id,
                details={"finding_id": finding_id, "fix_id": fix_id, **where, "sql": ran, "error": message},
            )
        raise Failed(message, tuple(ran)) from None
    await ports.audit.audit(
        org=actor.org,
        actor=actor.name,
        action=APPLIED,
        target=database.id,
        details={"finding_id": finding_id, "fix_id": fix_id, **where, "sql": ran, "before": before, "after": after},
    )
    log.info(
        "fix applied",
        extra={"database_id": database.id, "finding_id": finding_id, "fix_id": fix_id, "actor": actor.name},
    )
    return Applied(finding_id, fix_id, tuple(ran), fix.setting, before, after, reload, pending)


async def _after(
    connect: Connect,
    connection: DatabaseConnectionConfig,
    password: str | None,
    database: str | None,
    setting: str,
    before: str | None,
    reloaded: bool,
) -> tuple[str, bool]:
    """The setting as a new session sees it (read again for a moment after a reload that the new
    session may not have seen yet)."""
    for attempt in range(AFTER_READS if reloaded else 1):
        if attempt:
            await asyncio.sleep(AFTER_READ_INTERVAL)
        async with connect(connection, password, database=database) as session:
            value, pending = await session.setting(setting)
        if value != before or pending:
            break
    return value, pending


def _scrub(message: str, password: str | None) -> str:
    # A driver may one day repeat what it was given; the password never leaves, whatever it says.
    return message.replace(password, "***") if password else message


# --- the driver: asyncpg (Apache-2.0) -----------------------------------------------------------


class _AsyncpgSession:
    """A Session over an asyncpg connection."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    async def execute(self, sql: str) -> None:
        async with _server_errors():
            await self._conn.execute(sql)

    async def setting(self, name: str) -> tuple[str, bool]:
        async with _server_errors():
            # current_setting() is SHOW as a function: the value as SHOW prints it, bound as a parameter.
            row = await self._conn.fetchrow(
                "SELECT current_setting($1::text), "
                "coalesce((SELECT pending_restart FROM pg_settings WHERE name = $1::text), false)",
                name,
            )
        return str(row[0]), bool(row[1])


@asynccontextmanager
async def _server_errors() -> AsyncIterator[None]:
    """asyncpg's and the network's exceptions as ServerError, with words that hold no DSN."""
    import asyncpg

    try:
        yield
    except asyncpg.PostgresError as exc:
        code = getattr(exc, "sqlstate", None)
        text = getattr(exc, "message", None) or type(exc).__name__
        raise ServerError(f"PostgreSQL: {text}" + (f" ({code})" if code else "")) from None
    except TimeoutError:
        raise ServerError("the server did not answer in time") from None
    except OSError as exc:
        # The errno's own words: asyncpg's text of it names the address dialled.
        reason = os.strerror(exc.errno) if exc.errno else type(exc).__name__
        raise ServerError(f"cannot connect to the server: {reason}") from None
    except asyncpg.InterfaceError as exc:
        raise ServerError(f"the connection failed: {type(exc).__name__}") from None


@asynccontextmanager
async def asyncpg_connect(
    connection: DatabaseConnectionConfig, password: str | None, *, database: str | None = None
) -> AsyncIterator[Session]:
    """A Connect over asyncpg: every statement under the configured statement_timeout. asyncpg's
    own `database` argument overrides the DSN's (its path, `?dbname=`, a service's), nothing else."""
    import asyncpg  # only the fixes need a driver: the daemon starts without loading it

    async with _server_errors():
        conn = await asyncpg.connect(
            connection.dsn,
            password=password,
            database=database,
            timeout=connection.connect_timeout_seconds,
            command_timeout=connection.statement_timeout_seconds + connection.connect_timeout_seconds,
            server_settings={
                "application_name": APPLICATION_NAME,
                "statement_timeout": str(int(connection.statement_timeout_seconds * 1000)),
            },
        )
    try:
        yield _AsyncpgSession(conn)
    finally:
        try:
            await conn.close(timeout=connection.connect_timeout_seconds)
        except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError):
            conn.terminate()  # what ran has run: a failed goodbye changes nothing of it
