"""What the rule modules share: a line's time, windows of a subject's history, Markdown bits.

Nothing here knows a rule; each rule module (deadlocks.py, ...) reads the log's own texts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from forwarder.insights.model import Evidence, SubjectHistory
from forwarder.model import parse_time

SECOND_US: Final = 1_000_000
MINUTE_US: Final = 60 * SECOND_US
HOUR_US: Final = 60 * MINUTE_US

# A relation named by a CONTEXT line: `while updating tuple (0,1) in relation "accounts"` and the
# other forms of heapam.c/nbtinsert.c (XactLockTableWaitErrorCb's XLTW_Oper texts in lmgr.c:
# "while <fixed words> (%u,%u)[ of tuple] in relation \"%s\""). The name is printed as it is,
# neither escaped nor quoted again (`in relation "Tab"le; --"`), and ends the line: it is all between
# the line's first double quote (the words before it have none) and its last. A line of another
# shape (a function's SQL statement in a longer CONTEXT) names nothing here.
_RELATION: Final = re.compile(r'^[ \t]*while [\w (),]{1,120} in relation "([^\n]{1,300})"$', re.MULTILINE)
# The blocking process of a lock wait's DETAIL (proc.c): "Process holding the lock: 123. Wait queue: ..."
# or "Processes holding the lock: 123, 456. Wait queue: ...".
_HOLDERS: Final = re.compile(r"Process(?:es)? holding the lock: ([\d, ]+)\.")


def time_us(doc: Mapping[str, Any]) -> int:
    """The line's time (the stored document's RFC 3339 `time`) in microseconds since the epoch."""
    return parse_time(str(doc["time"]))


def text(doc: Mapping[str, Any], field: str) -> str:
    """A text field of the document, "" when absent or null."""
    value = doc.get(field)
    return value if isinstance(value, str) else ""


# A sample keeps this much of a statement or message: enough to recognize it on a finding's page;
# the engine stores a few samples per subject, and a statement may be megabytes long.
SAMPLE_CHARS: Final = 1000


def clip(value: str, limit: int = SAMPLE_CHARS) -> str:
    """`value` cut to `limit` characters (with "..." when cut)."""
    return value if len(value) <= limit else value[: limit - 3] + "..."


def relations(context: str) -> list[str]:
    """The relations a CONTEXT names, in order, each once."""
    return list(dict.fromkeys(_RELATION.findall(context)))


def holders(detail: str) -> str:
    """The pid(s) holding the lock a wait's DETAIL names ("" when it names none)."""
    m = _HOLDERS.search(detail)
    return m.group(1).strip() if m is not None else ""


def window(history: SubjectHistory, seconds: int) -> tuple[int, int, float, float]:
    """(from_us, count, total, max) of the history's minutes in the last `seconds` up to `now_us`.

    Minutes are whole: the one holding `now_us - seconds` counts, so a window never misses the
    line that opened it because of where a minute starts.
    """
    start = history.now_us - seconds * SECOND_US
    from_us = start - start % MINUTE_US
    count, total, peak = history.since(from_us)
    return from_us, count, total, peak


def first_seen_us(history: SubjectHistory, from_us: int) -> int:
    """The start of the first minute at or after `from_us` holding observations (or `from_us`)."""
    return next((b.start_us for b in history.buckets if b.start_us >= from_us and b.count), from_us)


def evidence(
    history: SubjectHistory, from_us: int, count: int, facts: dict[str, float | int | str | list[str]]
) -> Evidence:
    """The evidence of a finding over the window from `from_us` up to the newest observation: its
    count, the subject's kept line ids and the rule's named facts."""
    return Evidence(
        window_from_us=first_seen_us(history, from_us),
        window_to_us=history.now_us,
        count=count,
        line_ids=history.line_ids,
        facts=facts,
    )


def code(value: str, limit: int = 200) -> str:
    """Log text as Markdown inline code: cut to `limit` characters, backticks and newlines replaced
    (a backtick would end the code span; the pages escape the rest)."""
    one_line = " ".join(value.split())
    if len(one_line) > limit:
        one_line = one_line[: limit - 3] + "..."
    return "`" + one_line.replace("`", "'") + "`"


def plural(n: int | float, word: str, words: str | None = None) -> str:
    """`1 deadlock`, `3 deadlocks` (or the given plural)."""
    many = words if words is not None else word + "s"
    return f"{n:g} {word if n == 1 else many}" if isinstance(n, float) else f"{n} {word if n == 1 else many}"


def sample_texts(history: SubjectHistory, key: str) -> list[str]:
    """The distinct non-empty texts under `key` in the history's samples, newest first."""
    out: list[str] = []
    for sample in reversed(history.samples):
        value = sample.get(key)
        if isinstance(value, str) and value and value not in out:
            out.append(value)
    return out


def sample_numbers(history: SubjectHistory, key: str) -> list[float]:
    """The numbers under `key` in the history's samples, newest first."""
    out: list[float] = []
    for sample in reversed(history.samples):
        value = sample.get(key)
        if isinstance(value, int | float):
            out.append(float(value))
    return out
