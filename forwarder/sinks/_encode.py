"""Encoding helpers shared by the kinds: the line as text, UTF-8-safe cuts and packing into requests.

Pure functions; each kind's `encode` composes them with its own body shape.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeVar

import orjson

T = TypeVar("T")

# The SPEC 2.1 fields that hold free text: what is cut when a line must fit a vendor's size limit.
TEXT_KEYS: Final = ("message", "detail", "hint", "context", "statement")
_MARKER = "..."

# PostgreSQL's own labels for the parts of an entry (elog.c), so the text reads like its log.
_TEXT_PARTS = (("detail", "DETAIL"), ("hint", "HINT"), ("context", "CONTEXT"), ("statement", "STATEMENT"))

# PostgreSQL severity -> syslog-style level (RFC 5424 section 6.2.1 names), the mapping
# PostgreSQL itself uses for syslog output (elog.c, write_syslog): DEBUG -> debug, LOG/INFO ->
# info, NOTICE -> notice, WARNING -> warning, ERROR -> error (PostgreSQL says "warning" for
# ERROR; we keep the stronger level so error facets work), FATAL -> critical, PANIC -> critical.
LEVELS: Mapping[str, str] = {
    "DEBUG": "debug",
    "DEBUG1": "debug",
    "DEBUG2": "debug",
    "DEBUG3": "debug",
    "DEBUG4": "debug",
    "DEBUG5": "debug",
    "LOG": "info",
    "INFO": "info",
    "STATEMENT": "info",
    "NOTICE": "notice",
    "WARNING": "warning",
    "ERROR": "error",
    "FATAL": "critical",
    "PANIC": "critical",
}


def level(severity: str | None) -> str:
    """critical, error, warning, notice, info or debug for a PostgreSQL severity (unknown -> info)."""
    return LEVELS.get((severity or "").upper(), "info")


def line_text(fields: Mapping[str, Any]) -> str:
    """The line as text, the way PostgreSQL writes an entry: `SEVERITY:  message`, then one line per part.

    Values are already removed from every part (the store keeps no other text).
    """
    head = f"{fields.get('severity') or 'LOG'}:  {fields.get('message') or ''}"
    parts = [f"{label}:  {fields[key]}" for key, label in _TEXT_PARTS if fields.get(key)]
    return "\n".join((head, *parts)) if parts else head


def cut_utf8(data: bytes, max_bytes: int) -> bytes:
    """`data` cut to at most `max_bytes`, never inside a UTF-8 sequence."""
    if len(data) <= max_bytes:
        return data
    end = max_bytes
    # Step back over continuation bytes (10xxxxxx) to the start of the sequence that crosses the cut.
    while end > 0 and (data[end] & 0xC0) == 0x80:
        end -= 1
    return data[:end]


def cut_text(text: str, max_bytes: int, marker: str = "...") -> str:
    """`text` whose UTF-8 form fits `max_bytes`, ending in `marker` when it was cut (and there is
    room for it)."""
    data = text.encode()
    if len(data) <= max_bytes:
        return text
    room = max_bytes - len(marker.encode())
    if room < 0:
        return cut_utf8(data, max(0, max_bytes)).decode()
    return cut_utf8(data, room).decode() + marker


def pack(items: Sequence[tuple[T, int]], max_items: int, max_bytes: int, per_item: int = 0) -> list[list[T]]:
    """Group `(item, size)` pairs in order: each group has at most `max_items` items and at most
    `max_bytes` in sizes plus `per_item` for each (separators). An item larger than `max_bytes` on
    its own still gets a group of its own: the caller cuts items to fit before packing.
    """
    groups: list[list[T]] = []
    current: list[T] = []
    used = 0
    for item, size in items:
        cost = size + per_item
        if current and (len(current) >= max_items or used + cost > max_bytes):
            groups.append(current)
            current, used = [], 0
        current.append(item)
        used += cost
    if current:
        groups.append(current)
    return groups


def water_level(sizes: Sequence[int], need: int, floor: int = 0) -> int:
    """The largest cap (at least `floor`) such that cutting every size above it down to it frees
    `need`: the largest shrink first and alike, the small ones stay whole."""
    ordered = sorted(sizes, reverse=True)
    total = 0
    for j, size in enumerate(ordered, start=1):
        total += size
        cap = (total - need) // j
        if cap >= (ordered[j] if j < len(ordered) else 0):
            return max(floor, cap)
    return floor


Share = Literal["json", "bytes"]


@dataclass(frozen=True, slots=True)
class Fitted:
    """What `fit_json` made: the rendered bytes and the fields they were rendered from (texts cut)."""

    data: bytes
    fields: Mapping[str, Any]
    cut: bool  # some text was cut


def fit_json(
    fields: Mapping[str, Any],
    max_bytes: int,
    render: Callable[[Mapping[str, Any]], bytes] = orjson.dumps,
    keys: Sequence[str] = TEXT_KEYS,
    *,
    share: Share = "json",
    floor: int = len(_MARKER),
) -> Fitted:
    """`render(fields)` in at most `max_bytes`, its longest texts among `keys` cut (each ending in
    "...") to one common size until it fits. A line is sent cut rather than dropped; the start of
    each text, the part that says what happened, stays.

    `share` is what the cut texts are made equal in: their size in JSON (escapes counted) or their
    UTF-8 bytes; either way they are cut only as far as needed to fill `max_bytes` closely. No text
    is cut below `floor` in that measure: past it the result may stay over `max_bytes` (never for a
    stored line, whose other fields are small); the caller decides.
    """
    cut = dict(fields)
    data = render(cut)
    changed = False
    while len(data) > max_bytes:
        texts = {k: v for k in keys if isinstance(v := cut.get(k), str) and v}
        sizes = {k: len(t.encode()) for k, t in texts.items()}
        measure = {k: len(orjson.dumps(t)) - 2 if share == "json" else sizes[k] for k, t in texts.items()}
        # A unit of the measure may cost more in the render: a byte JSON escapes (`"` and control
        # characters take 2-6), escaped again (JSON inside a JSON string), or a text the render
        # repeats (Datadog's `message`). Measured against the same render without the texts, then
        # assumed alike for every text; a text that costs more than that takes another round.
        bare = len(render({**cut, **{k: "" for k in texts}}))
        total = sum(measure.values())
        per_unit = (len(data) - bare) / total if total and len(data) > bare else 1.0
        cap = water_level(list(measure.values()), math.ceil((len(data) - max_bytes) / per_unit), floor)
        progress = False
        for key, text in texts.items():
            size, room = sizes[key], measure[key]
            if room <= cap or size <= len(_MARKER):
                continue
            # Keep a prefix whose measure and the marker's make `cap`; escapes scale with the text.
            keep = (cap - len(_MARKER)) * size // room + len(_MARKER)
            cut[key] = cut_text(text, max(len(_MARKER), min(size - 1, keep)))
            progress = True
        if not progress:
            break
        changed = True
        data = render(cut)
    return Fitted(data, cut, changed)


def json_array(items: Sequence[bytes]) -> bytes:
    """Encoded JSON values as one JSON array."""
    return b"[" + b",".join(items) + b"]"


def json_arrays(
    encoded: Sequence[tuple[int, bytes]], max_items: int, max_bytes: int
) -> list[tuple[tuple[int, ...], bytes]]:
    """(line id, encoded item) pairs packed into JSON array bodies of at most `max_items` items and
    `max_bytes` bytes (brackets and commas counted); each body with the ids it carries, in order."""
    # Each item costs its bytes and a separator; "[" and "]" come out of the limit.
    groups = pack([(pair, len(pair[1])) for pair in encoded], max_items, max_bytes - 1, per_item=1)
    return [(tuple(line_id for line_id, _ in group), json_array([data for _, data in group])) for group in groups]
