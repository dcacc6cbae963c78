"""The crashes rule: PANIC, a server process that died, and the crash recovery that follows.

    PANIC:  could not write to file "pg_wal/xlogtemp.123": No space left on device
    LOG:  server process (PID 26476) was terminated by signal 9: Killed
    DETAIL:  Failed process was running: SELECT pg_sleep($1);
    LOG:  terminating any other active server processes
    LOG:  database system was interrupted; last known up at 2026-11-23 21:15:16 UTC
    LOG:  database system was not properly shut down; automatic recovery in progress

(postmaster.c, xlog.c). One subject, "" (the server); every form is critical, and the finding
stays open for a day after the last one so that it is seen.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Final

from forwarder.insights.model import FindingDraft, Observation, SubjectHistory
from forwarder.insights.rules import common as C
from forwarder.insights.rules import register
from forwarder.model import Kind

LOOKBACK_SECONDS: Final = 86_400

# postmaster.c LogChildExit: "%s (PID %d) was terminated by signal %d: %s" / "... exited with exit
# code %d" (exit code 0 and 1 of a backend are ordinary and never logged this way by the postmaster
# for backends; a background worker's are, hence only the server process and signals).
_EVENTS: Final = re.compile(
    r"(?P<died>server process \(PID \d+\) (?:was terminated by signal (?P<signal>\d+)|exited with exit code \d+))"
    r"|(?P<reset>terminating any other active server processes)"
    r"|(?P<recovery>database system was not properly shut down; automatic recovery in progress"
    r"|database system was interrupted)"
)


class Crashes:
    """PANICs, crashed server processes and crash recovery."""

    name: ClassVar[str] = "crashes"
    topic: ClassVar[str] = "Server crashes"
    kinds: ClassVar[frozenset[Kind]] = frozenset({"server", "error"})
    lookback_seconds: ClassVar[int] = LOOKBACK_SECONDS

    def observe(self, line_id: int, doc: Mapping[str, Any]) -> Iterable[Observation]:
        message = C.text(doc, "message")
        if doc.get("severity") == "PANIC":
            event = "panic"
        elif (m := _EVENTS.match(message)) is not None:
            event = "died" if m.group("died") else "reset" if m.group("reset") else "recovery"
        else:
            return ()
        sample: dict[str, str | int | float] = {"event": event, "message": C.clip(message)}
        if event == "died":
            sample["running"] = C.clip(C.text(doc, "detail").removeprefix("Failed process was running: "))
        return (Observation(self.name, "", line_id, C.time_us(doc), 0.0, sample),)

    def evaluate(self, history: SubjectHistory) -> FindingDraft | None:
        from_us, count, _, _ = C.window(history, LOOKBACK_SECONDS)
        if count == 0:
            return None
        events = C.sample_texts(history, "event")
        messages = C.sample_texts(history, "message")
        running = C.sample_texts(history, "running")
        lines = [
            f"**{C.plural(count, 'crash report')}** in the last day: a PANIC, a server process that died,"
            " or the crash recovery that follows. Every session was disconnected while the server"
            " recovered.",
            "",
            *(f"- {C.code(m)}" for m in messages[:4]),
        ]
        if running:
            lines += ["", "The process that died was running " + ", ".join(C.code(r) for r in running[:2]) + "."]
        lines += [
            "",
            "Signal 9 (Killed) is usually the kernel's out-of-memory killer: check the system log and"
            " memory settings (work_mem, shared_buffers, max_connections).",
        ]
        return FindingDraft(
            severity="critical",
            title="The server crashed" if "panic" not in events else "The server PANICked",
            summary="\n".join(lines),
            evidence=C.evidence(
                history,
                from_us,
                count,
                facts={"reports": count, "events": events, "messages": messages},
            ),
        )


RULE: Final = register(Crashes())
