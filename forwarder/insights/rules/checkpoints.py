"""The checkpoints rule: checkpoints requested by WAL volume more often than checkpoint_timeout.

PostgreSQL (xlog.c) starts a checkpoint when checkpoint_timeout passed ("time") or when the WAL
written since the last one nears max_wal_size ("wal"). With log_checkpoints on (the default since
PostgreSQL 15):

    LOG:  checkpoint starting: wal
    LOG:  checkpoint complete: wrote 1023 buffers (50.0%); ...; distance=16730 kB, estimate=16730 kB

and, whether log_checkpoints is on or not, when a WAL checkpoint follows the previous one within
checkpoint_warning (30 s):

    LOG:  checkpoints are occurring too frequently (9 seconds apart)
    HINT:  Consider increasing the configuration parameter "max_wal_size".

One subject ("", the server). The three lines are observed with different values: a "starting"
line with `wal` among its flags counts 1 (so a window's total is its WAL checkpoints), the others 0;
"complete" lines keep their distance and estimate in the sample, "too frequently" lines the seconds
apart and their time.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Final

from forwarder.insights.model import FindingDraft, Fix, Observation, SqlPart, SubjectHistory
from forwarder.insights.rules import common as C
from forwarder.insights.rules import register
from forwarder.model import Kind

# checkpoint_timeout's default. The log does not say the server's setting; a server with a longer
# timeout and WAL checkpoints every 5 minutes still checkpoints more often than it was told to.
CHECKPOINT_TIMEOUT_SECONDS: Final = 300
LOOKBACK_SECONDS: Final = 3600
# More WAL checkpoints in the hour than timed ones would be: WAL, not the clock, sets the pace.
OPEN_PER_HOUR: Final = LOOKBACK_SECONDS // CHECKPOINT_TIMEOUT_SECONDS
# Two within one checkpoint_timeout: the same, seen before an hour has passed.
OPEN_PER_TIMEOUT: Final = 2
CRITICAL_PER_HOUR: Final = 60  # one a minute: the server writes most pages again and again
# xlog.c CalculateCheckpointSegments: a WAL checkpoint starts when the WAL since the last one
# reaches max_wal_size / (1 + checkpoint_completion_target); the default target is 0.9.
COMPLETION_TARGET: Final = 0.9
MIN_MAX_WAL_MB: Final = 1024  # PostgreSQL's own default; never suggest less
MAX_MAX_WAL_MB: Final = 65536  # a burst must not make it suggest a size no disk was planned for

_STARTING: Final = re.compile(r"(?:checkpoint|restartpoint) starting:([\w ]*)")
_COMPLETE: Final = re.compile(r"(?:checkpoint|restartpoint) complete: .*?distance=(\d+) kB, estimate=(\d+) kB")
_TOO_FREQUENT: Final = re.compile(r"checkpoints are occurring too frequently \((\d+) seconds? apart\)")


def suggested_max_wal_mb(estimate_kb: float, wal_checkpoints: int, span_seconds: float) -> int:
    """max_wal_size (MB) that lets checkpoint_timeout, not WAL, start checkpoints.

    WAL per checkpoint_timeout = the distance per checkpoint (PostgreSQL's own moving `estimate`)
    times the WAL checkpoints per checkpoint_timeout seen (over at least one timeout); times
    1 + checkpoint_completion_target (see COMPLETION_TARGET); rounded up to a power of two MB,
    within [MIN_MAX_WAL_MB, MAX_MAX_WAL_MB].
    """
    per_timeout = wal_checkpoints * CHECKPOINT_TIMEOUT_SECONDS / max(span_seconds, CHECKPOINT_TIMEOUT_SECONDS)
    needed_mb = estimate_kb / 1024 * max(per_timeout, 1.0) * (1 + COMPLETION_TARGET)
    mb = 1 << max(0, math.ceil(math.log2(max(needed_mb, 1.0))))
    return min(max(mb, MIN_MAX_WAL_MB), MAX_MAX_WAL_MB)


class Checkpoints:
    """WAL-requested checkpoints more often than checkpoint_timeout."""

    name: ClassVar[str] = "checkpoints"
    topic: ClassVar[str] = "Checkpoints that occur too frequently"
    kinds: ClassVar[frozenset[Kind]] = frozenset({"checkpoint"})
    lookback_seconds: ClassVar[int] = LOOKBACK_SECONDS

    def observe(self, line_id: int, doc: Mapping[str, Any]) -> Iterable[Observation]:
        message = C.text(doc, "message")
        if (m := _STARTING.match(message)) is not None:
            if "wal" not in m.group(1).split():
                return ()
            return (Observation(self.name, "", line_id, C.time_us(doc), 1.0, {"event": "wal"}),)
        if (m := _COMPLETE.match(message)) is not None:
            sample: dict[str, str | int | float] = {
                "event": "complete",
                "distance_kb": int(m.group(1)),
                "estimate_kb": int(m.group(2)),
            }
            return (Observation(self.name, "", line_id, C.time_us(doc), 0.0, sample),)
        if (m := _TOO_FREQUENT.match(message)) is not None:
            t = C.time_us(doc)
            sample = {"event": "too_frequent", "seconds_apart": int(m.group(1)), "time_us": t}
            return (Observation(self.name, "", line_id, t, 0.0, sample),)
        return ()

    def evaluate(self, history: SubjectHistory) -> FindingDraft | None:
        from_us, lines_seen, wal, _ = C.window(history, LOOKBACK_SECONDS)
        # Whole minutes that started within the last checkpoint_timeout: two WAL checkpoints there
        # were at most that far apart (never more; a pair a little closer may be missed).
        wal_recent = history.since(history.now_us - CHECKPOINT_TIMEOUT_SECONDS * C.SECOND_US)[1]
        warnings = [
            s
            for s in history.samples
            if s.get("event") == "too_frequent" and isinstance(t := s.get("time_us"), int) and t >= from_us
        ]
        wal_n = int(wal)
        if wal_n < OPEN_PER_HOUR and int(wal_recent) < OPEN_PER_TIMEOUT and not warnings:
            return None
        first_wal = next(
            (b.start_us for b in history.buckets if b.start_us >= from_us and (b.total if wal_n else b.count)),
            history.now_us,
        )
        span_s = (history.now_us - first_wal) / C.SECOND_US
        estimates = C.sample_numbers(history, "estimate_kb")
        # The largest of the newest estimates: a shutdown checkpoint reports 0 after a restart.
        estimate_kb = max(estimates, default=0.0)
        apart = [int(s["seconds_apart"]) for s in warnings]
        if wal_n:
            checkpoints = wal_n
            lines = [
                f"**{C.plural(wal_n, 'checkpoint')}** in the last hour were started by WAL volume (`wal`),"
                f" not by checkpoint_timeout (assumed {CHECKPOINT_TIMEOUT_SECONDS} s, the default).",
            ]
            if apart:
                lines.append(
                    "PostgreSQL warned that checkpoints are occurring too frequently,"
                    f" the closest {min(apart)} s apart."
                )
        else:
            # log_checkpoints is off (no "starting" lines): every line seen is a "too frequently"
            # warning, one per WAL checkpoint that came within checkpoint_warning of the last.
            checkpoints = lines_seen
            lines = [
                f"PostgreSQL warned **{C.plural(lines_seen, 'time')}** in the last hour that checkpoints are"
                f" occurring too frequently, the closest {min(apart)} s apart. Turn log_checkpoints on for"
                " the WAL written per checkpoint.",
            ]
        mb = suggested_max_wal_mb(estimate_kb, checkpoints, span_s)
        if estimates:
            lines.append(f"WAL written per checkpoint: about **{estimate_kb / 1024:.0f} MB** (PostgreSQL's estimate).")
        lines += [
            "",
            f"Frequent checkpoints write the same pages again and again and bloat WAL with full-page"
            f" images. Raising max_wal_size to {mb}MB lets checkpoint_timeout set the pace.",
        ]
        fix = Fix(
            fix_id="max-wal-size",
            label=f"Raise max_wal_size to {mb}MB",
            statement=(SqlPart(text="ALTER SYSTEM SET max_wal_size = "), SqlPart(literal=f"{mb}MB")),
            risk="low",
            applies_to="server",
            needs="reload",
            setting="max_wal_size",
        )
        facts: dict[str, float | int | str | list[str]] = {
            "wal_checkpoints": checkpoints,
            "suggested_max_wal_size_mb": mb,
        }
        if estimates:
            facts["estimate_kb"] = int(estimate_kb)
        if apart:
            facts["min_seconds_apart"] = min(apart)
        return FindingDraft(
            severity="critical" if checkpoints >= CRITICAL_PER_HOUR else "warning",
            title="Checkpoints occur too frequently",
            summary="\n".join(lines),
            evidence=C.evidence(
                history,
                from_us,
                checkpoints,
                facts=facts,
            ),
            fixes=(fix,),
        )


RULE: Final = register(Checkpoints())
