"""The daemon's own logs: one JSON object per event when not on a terminal, readable text on one."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Mapping
from typing import Final

import orjson

from forwarder.clock import Clock

_STANDARD: Final = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """`{"time", "level", "logger", "msg", ...extra}`; extras must never carry secrets."""

    converter = time.gmtime  # type: ignore[assignment]  # typeshed narrows it; gmtime is what logging documents

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(out, default=str).decode()


class TextFormatter(logging.Formatter):
    """`time level logger: msg key=value ...` for people at a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        extras = " ".join(f"{k}={v}" for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_"))
        base = f"{self.formatTime(record, '%H:%M:%S')} {record.levelname:<7} {record.name}: {record.getMessage()}"
        text = f"{base} {extras}" if extras else base
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


def setup_logging(level: str = "info") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(TextFormatter() if sys.stderr.isatty() else JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    # The model providers' SDKs and their HTTP clients log requests (bodies hold log text and, at
    # debug level, options); the Ask adapters log what matters in their own words.
    for name in ("openai", "anthropic", "httpx", "httpx2", "httpcore"):
        logging.getLogger(name).setLevel(logging.WARNING)


class RepeatedFailureLog:
    """Logs a failure that repeats (a full disk fails every write) once, then at a bounded rate.

    The first failure is logged with its traceback; repeats are counted and summed up at most once
    per `interval_seconds` (on the clock given), without a traceback; `ok()` logs the recovery once.
    """

    def __init__(self, logger: logging.Logger, clock: Clock, interval_seconds: float = 60.0) -> None:
        self._log = logger
        self._clock = clock
        self._interval = interval_seconds
        self._failing = False
        self._last_logged = 0.0
        self._repeats = 0  # failures not logged since the last line
        self._total = 0  # failures since the last success

    @property
    def failing(self) -> bool:
        return self._failing

    def failure(self, msg: str, exc: BaseException, extra: Mapping[str, object] | None = None) -> None:
        """One more failure: logged if it is the first, or the first after `interval_seconds`."""
        now = self._clock.monotonic()
        self._total += 1
        fields = dict(extra or {})
        if not self._failing:
            self._failing = True
            self._last_logged = now
            self._log.error(msg, exc_info=exc, extra=fields)
            return
        self._repeats += 1
        if now - self._last_logged >= self._interval:
            fields.update(error=f"{type(exc).__name__}: {exc}", repeats=self._repeats)
            # The message stays the same (a log pipeline groups by it); the count is a field.
            self._log.error(msg, extra=fields)
            self._last_logged = now
            self._repeats = 0

    def ok(self, msg: str, extra: Mapping[str, object] | None = None) -> None:
        """A success: after failures, say once that it works again."""
        if self._failing:
            self._log.info(msg, extra={**(extra or {}), "failures": self._total})
        self._failing = False
        self._repeats = self._total = 0


class ThrottledFailureLog:
    """Logs a failure that repeats, and may come and go, at most once per `interval_seconds` on
    the clock given, however often it stops and starts again (operations.md: "says it once, with
    the details, then at most once a minute with the number of repeats").

    Unlike RepeatedFailureLog, the interval is not started over by a success: a nearly
    full disk lets one write through and fails the next, and each such flap logged a failure, a
    recovery and a traceback. A line names the error (`error`); a traceback only when asked (a
    failure whose cause is not known in advance). A recovery is logged when the failure it ends
    was (so the last line logged does not say the store is failing while it works); recoveries
    not logged are counted in the next line.
    """

    def __init__(self, logger: logging.Logger, clock: Clock, interval_seconds: float = 60.0) -> None:
        self._log = logger
        self._clock = clock
        self._interval = interval_seconds
        self._failing = False
        self._reported = False  # a line of the current failure was logged: its end is logged too
        self._last_logged: float | None = None  # clock.monotonic() of the last failure line
        self._repeats = 0  # failures not logged since the last line
        self._recoveries = 0  # recoveries not logged since the last line
        self._total = 0  # failures since the last success

    @property
    def failing(self) -> bool:
        return self._failing

    def failure(
        self,
        msg: str,
        exc: BaseException,
        extra: Mapping[str, object] | None = None,
        *,
        traceback: bool = False,
    ) -> None:
        now = self._clock.monotonic()
        if not self._failing:
            self._failing = True
            self._reported = False
            self._total = 0
        self._total += 1
        if self._last_logged is not None and now - self._last_logged < self._interval:
            self._repeats += 1
            return
        fields = {**(extra or {}), "error": f"{type(exc).__name__}: {exc}"}
        if self._repeats or self._recoveries:  # counted as RepeatedFailureLog does: this one too
            fields.update(repeats=self._repeats + 1, recoveries=self._recoveries)
        self._log.error(msg, exc_info=exc if traceback else None, extra=fields)
        self._last_logged = now
        self._reported = True
        self._repeats = self._recoveries = 0

    def ok(self, msg: str, extra: Mapping[str, object] | None = None) -> None:
        """A success: after failures, say that it works again (see the class)."""
        if not self._failing:
            return
        self._failing = False
        if self._reported:
            self._log.info(msg, extra={**(extra or {}), "failures": self._total})
        else:
            self._recoveries += 1
