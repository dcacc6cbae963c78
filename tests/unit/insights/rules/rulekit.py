"""Helpers of the rule tests: documents from log text through the project's parser, and the
history the engine would give a rule (minute buckets, first and newest line ids, newest samples)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from forwarder.insights.model import Bucket, FindingDraft, Observation, SubjectHistory
from forwarder.insights.rules import Rule
from forwarder.model import format_time, line_document, parse_time
from forwarder.pglog import make_reader, parse_stream
from tests.unit.insights.rules.pg15_lines import PREFIX

DATABASE_ID = "shop-db"
MINUTE_US = 60_000_000
SAMPLES = 5  # what the engine keeps of a subject


def docs(text: str, *, full_text: bool = False) -> list[dict[str, Any]]:
    """The stored documents of every entry of `text` (a stderr log with PREFIX), as the engine reads them."""
    reader = make_reader("stderr", line_prefix=PREFIX, timezone="UTC", full_text=full_text)
    lines = list(parse_stream(reader, [text.encode()]))
    # An entry not in PREFIX's format would get no time of its own (and so the test's clock's).
    assert not any(line.unparsed for line in lines), [line.message for line in lines if line.unparsed]
    return [line_document(line, "db.example", DATABASE_ID, "shop") for line in lines]


def at(doc: Mapping[str, Any], time_us: int) -> dict[str, Any]:
    """`doc` as if written at `time_us`."""
    return {**doc, "time": format_time(time_us)}


def time_of(doc: Mapping[str, Any]) -> int:
    return parse_time(doc["time"])


def observe(rule: Rule, documents: Iterable[Mapping[str, Any]], first_id: int = 1) -> list[Observation]:
    """What `rule` observes of the documents (ids from `first_id` on) that are of its kinds."""
    out: list[Observation] = []
    for line_id, doc in enumerate(documents, start=first_id):
        if doc["kind"] in rule.kinds:
            out.extend(rule.observe(line_id, doc))
    return out


def history(rule: Rule, observations: Sequence[Observation], subject: str, now_us: int) -> SubjectHistory:
    """The engine's view of `subject` at `now_us`: its minutes in the rule's lookback."""
    mine = sorted((o for o in observations if o.subject == subject), key=lambda o: (o.time_us, o.line_id))
    minutes: dict[int, list[Observation]] = {}
    for o in mine:
        minutes.setdefault(o.time_us - o.time_us % MINUTE_US, []).append(o)
    lo = now_us - rule.lookback_seconds * 1_000_000
    buckets = tuple(
        Bucket(start, len(obs), sum(o.value for o in obs), max(o.value for o in obs))
        for start, obs in sorted(minutes.items())
        if start >= lo - lo % MINUTE_US
    )
    ids = tuple(dict.fromkeys([o.line_id for o in mine[:1]] + [o.line_id for o in mine[-1:]]))
    samples = tuple(o.sample for o in mine if o.sample is not None)[-SAMPLES:]
    return SubjectHistory(DATABASE_ID, rule.name, subject, buckets, ids, samples, now_us)


def evaluate(
    rule: Rule, observations: Sequence[Observation], subject: str, now_us: int | None = None
) -> FindingDraft | None:
    """The rule's draft for `subject`, at its newest observation unless `now_us` is given."""
    newest = max(o.time_us for o in observations if o.subject == subject)
    return rule.evaluate(history(rule, observations, subject, newest if now_us is None else now_us))


def sql_shape(draft: FindingDraft, fix_id: str) -> list[tuple[str, str]]:
    """The parts of a fix's statement as (role, text): ("text", ...), ("identifier", ...), ("literal", ...)."""
    fix = next(f for f in draft.fixes if f.fix_id == fix_id)
    out: list[tuple[str, str]] = []
    for part in fix.statement:
        if part.identifier is not None:
            out.append(("identifier", part.identifier))
        elif part.literal is not None:
            out.append(("literal", part.literal))
        else:
            out.append(("text", part.text))
    return out
