"""The connection_limit rule: connections refused because the server (or a role or database) was full.

PostgreSQL (postinit.c, 53300) refuses a connection with one of:

    FATAL:  sorry, too many clients already
    FATAL:  remaining connection slots are reserved for non-replication superuser connections
    FATAL:  too many connections for role "app"
    FATAL:  too many connections for database "shop"

The subject is "" (the server): every form means clients were turned away.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Final

from forwarder.insights.model import FindingDraft, Fix, Observation, SqlPart, SubjectHistory
from forwarder.insights.rules import common as C
from forwarder.insights.rules import register
from forwarder.model import Kind

LOOKBACK_SECONDS: Final = 3600
# A refused connection is an outage for that client: open on the first, critical when it keeps
# happening (ten an hour is a pool or a crowd hitting the ceiling, not a one-off).
CRITICAL_COUNT: Final = 10
# The max_connections fix suggests this (the log does not say the current value): PostgreSQL's
# default is 100; more than a few hundred backends cost memory and lock contention, which is why
# the pooler comes first.
SUGGESTED_MAX_CONNECTIONS: Final = 200

_PREFIXES: Final = (
    "sorry, too many clients already",
    "remaining connection slots are reserved",
    "too many connections for role ",
    "too many connections for database ",
)

POOLER: Final = Fix(
    fix_id="pooler",
    label=(
        "Put a connection pooler (PgBouncer in transaction mode) in front of the server so that many"
        " client connections share a few server connections"
    ),
    statement=(),
    risk="medium",
    applies_to="server",
    manual=True,
)
MAX_CONNECTIONS: Final = Fix(
    fix_id="max-connections",
    label=f"Raise max_connections to {SUGGESTED_MAX_CONNECTIONS} (takes a server restart)",
    statement=(
        SqlPart(text="ALTER SYSTEM SET max_connections = "),
        SqlPart(literal=str(SUGGESTED_MAX_CONNECTIONS)),
    ),
    risk="medium",
    applies_to="server",
    needs="restart",
    setting="max_connections",
)


class ConnectionLimit:
    """Connections refused for want of a slot."""

    name: ClassVar[str] = "connection_limit"
    topic: ClassVar[str] = "The connection limit reached"
    kinds: ClassVar[frozenset[Kind]] = frozenset({"too_many_connections"})
    lookback_seconds: ClassVar[int] = LOOKBACK_SECONDS

    def observe(self, line_id: int, doc: Mapping[str, Any]) -> Iterable[Observation]:
        message = C.text(doc, "message")
        if not message.startswith(_PREFIXES):
            return ()
        sample: dict[str, str | int | float] = {
            "message": C.clip(message),
            "user": C.text(doc, "user"),
            "client": C.text(doc, "client"),
        }
        return (Observation(self.name, "", line_id, C.time_us(doc), 0.0, sample),)

    def evaluate(self, history: SubjectHistory) -> FindingDraft | None:
        from_us, count, _, _ = C.window(history, LOOKBACK_SECONDS)
        if count == 0:
            return None
        messages = C.sample_texts(history, "message")
        users = C.sample_texts(history, "user")
        lines = [
            f"**{C.plural(count, 'connection')}** refused in the last hour because no connection slot was free:",
            "",
            *(f"- {C.code(m)}" for m in messages[:4]),
        ]
        if users:
            lines += ["", "Refused users: " + ", ".join(C.code(u) for u in users[:5]) + "."]
        lines += [
            "",
            "A pooler serves many clients with few server connections; raising max_connections"
            " needs a restart and memory for every extra backend.",
        ]
        return FindingDraft(
            severity="critical" if count >= CRITICAL_COUNT else "warning",
            title="Connection limit reached",
            summary="\n".join(lines),
            evidence=C.evidence(
                history,
                from_us,
                count,
                facts={"refused": count, "messages": messages, "users": users},
            ),
            fixes=(POOLER, MAX_CONNECTIONS),
        )


RULE: Final = register(ConnectionLimit())
