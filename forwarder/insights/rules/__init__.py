"""Finding rules: each turns stored lines into observations and observations into findings.

A rule is two pure functions (table-tested without a store or a clock):

    observe(line_id, doc) -> observations     doc is the stored SPEC 2.1 document (a dict)
    evaluate(history)     -> FindingDraft | None

The engine (`insights/engine.py`) calls `observe` for every stored line of the rule's `kinds`,
counts the observations per (database, rule, subject, minute) in its own tables, and calls
`evaluate` for each subject that got new observations and, every sweep, for each open finding:
`None` resolves an open finding. `lookback_seconds` is how much history `evaluate` is given.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Protocol

from forwarder.insights.model import FindingDraft, Observation, SubjectHistory
from forwarder.model import Kind


class Rule(Protocol):
    """A finding rule (see the module docstring)."""

    name: ClassVar[str]  # stable: part of every finding id; e.g. "deadlocks"
    # What the rule finds, in plain words and with nothing from a log line (a finding's title
    # holds log text: user and relation names); what Ask puts in a question; e.g. "Deadlocks"
    topic: ClassVar[str]
    kinds: ClassVar[frozenset[Kind]]  # the line kinds `observe` wants to see
    lookback_seconds: ClassVar[int]

    def observe(self, line_id: int, doc: Mapping[str, Any]) -> Iterable[Observation]: ...
    def evaluate(self, history: SubjectHistory) -> FindingDraft | None: ...


RULES: dict[str, Rule] = {}


def register(rule: Rule) -> Rule:
    """Add a rule (each rule module registers itself on import); a name used twice is an error."""
    if rule.name in RULES:
        raise ValueError(f"rule {rule.name!r} is registered twice")
    RULES[rule.name] = rule
    return rule


# Every rule module registers itself on import; the engine sees them all through RULES.
from forwarder.insights.rules import (  # noqa: E402,F401
    auth_failures,
    autovacuum,
    checkpoints,
    connection_limit,
    crashes,
    deadlocks,
    lock_waits,
    statement_timeouts,
    temp_files,
    wraparound,
)
