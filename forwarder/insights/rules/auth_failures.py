"""The auth_failures rule: bursts of failed logins, by client address and user.

PostgreSQL (auth.c, 28P01/28000) refuses a login with, among others:

    FATAL:  password authentication failed for user "app"
    FATAL:  no pg_hba.conf entry for host "10.0.0.5", user "app", database "shop", no encryption
    FATAL:  pg_hba.conf rejects connection for host "10.0.0.5", user "app", database "shop", ...
    FATAL:  role "ghost" does not exist

The line's own `client` and `user` fields (log_line_prefix %r/%h and %u) make the subject
"<client>|<user>" ("unknown" for a part the line does not carry): one client guessing passwords,
or one application with a stale password, is one finding.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Final

from forwarder.insights.model import FindingDraft, Fix, Observation, SubjectHistory
from forwarder.insights.rules import common as C
from forwarder.insights.rules import register
from forwarder.model import Kind

UNKNOWN: Final = "unknown"
# A person mistyping a password fails once or twice; five in five minutes is a script (a stale
# password in a pool that retries, or someone guessing). Fifty is an attack or an outage.
BURST_COUNT: Final = 5
BURST_SECONDS: Final = 300
CRITICAL_COUNT: Final = 50
# A burst anywhere in the last hour keeps the finding open (with its numbers for whoever looks);
# an hour after the last burst it resolves.
LOOKBACK_SECONDS: Final = 3600

FIX: Final = Fix(
    fix_id="check-credentials",
    label=(
        "Check the credentials the client uses (a rotated password not updated in its configuration), or"
        " block the address in pg_hba.conf or the firewall if nobody there should connect"
    ),
    statement=(),
    risk="low",
    applies_to="client",
    manual=True,
)


def _peak(history: SubjectHistory, from_us: int) -> int:
    """The most failures in any BURST_SECONDS of whole minutes since `from_us`."""
    minutes = [b for b in history.buckets if b.start_us >= from_us]
    span = BURST_SECONDS * C.SECOND_US
    return max(
        (sum(m.count for m in minutes[i:] if m.start_us < b.start_us + span) for i, b in enumerate(minutes)),
        default=0,
    )


class AuthFailures:
    """Bursts of failed logins, by client and user."""

    name: ClassVar[str] = "auth_failures"
    topic: ClassVar[str] = "Failed logins"
    kinds: ClassVar[frozenset[Kind]] = frozenset({"auth_failure"})
    lookback_seconds: ClassVar[int] = LOOKBACK_SECONDS

    def observe(self, line_id: int, doc: Mapping[str, Any]) -> Iterable[Observation]:
        client, user = C.text(doc, "client") or UNKNOWN, C.text(doc, "user") or UNKNOWN
        sample: dict[str, str | int | float] = {
            "client": client,
            "user": user,
            "message": C.clip(C.text(doc, "message")),
            "database": C.text(doc, "database"),
        }
        return (Observation(self.name, f"{client}|{user}", line_id, C.time_us(doc), 0.0, sample),)

    def evaluate(self, history: SubjectHistory) -> FindingDraft | None:
        from_us, count, _, _ = C.window(history, LOOKBACK_SECONDS)
        peak = _peak(history, from_us)
        if peak < BURST_COUNT:
            return None
        clients, users = C.sample_texts(history, "client"), C.sample_texts(history, "user")
        client = clients[0] if clients else UNKNOWN
        user = users[0] if users else UNKNOWN
        messages = C.sample_texts(history, "message")
        databases = C.sample_texts(history, "database")
        lines = [
            f"**{C.plural(count, 'failed login')}** in the last hour from {C.code(client)} as"
            f" {C.code(user)}, up to **{peak}** within {BURST_SECONDS // 60} minutes.",
            "",
            *(f"- {C.code(m)}" for m in messages[:3]),
        ]
        if databases:
            lines += ["", "Databases asked for: " + ", ".join(C.code(d) for d in databases[:5]) + "."]
        return FindingDraft(
            severity="critical" if count >= CRITICAL_COUNT else "warning",
            title=f"Failed logins from {client} as {user}",
            summary="\n".join(lines),
            evidence=C.evidence(
                history,
                from_us,
                count,
                facts={
                    "failures": count,
                    "peak_in_5_minutes": peak,
                    "client": client,
                    "user": user,
                    "messages": messages,
                },
            ),
            fixes=(FIX,),
        )


RULE: Final = register(AuthFailures())
