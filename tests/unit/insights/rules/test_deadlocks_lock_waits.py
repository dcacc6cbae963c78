"""deadlocks and lock_waits: what PostgreSQL 15 logs of a deadlock and of a lock wait."""

from __future__ import annotations

import pytest

from forwarder.insights.rules import common as C
from forwarder.insights.rules.deadlocks import CRITICAL_COUNT, Deadlocks
from forwarder.insights.rules.lock_waits import LONG_WAIT_MS, MANY_WAITS, LockWaits
from tests.unit.insights.rules import pg15_lines as PG
from tests.unit.insights.rules.rulekit import at, docs, evaluate, observe, time_of

HOUR_US = 3600 * 1_000_000


def test_a_deadlock_is_observed_with_both_statements_and_its_relation() -> None:
    observed = observe(Deadlocks(), docs(PG.DEADLOCK))
    assert len(observed) == 1  # the deadlock ERROR; its lock_wait lines are another rule's
    (obs,) = observed
    assert obs.subject == "accounts"
    assert obs.sample == {
        "statement_1": "UPDATE accounts SET note = $1 WHERE id = $2;",
        # PostgreSQL cut the second statement inside its literal; redaction keeps what is left
        "statement_2": "UPDATE accounts SET note = $1",
        "relations": "accounts",
    }


def test_other_lines_are_not_deadlocks() -> None:
    assert observe(Deadlocks(), docs(PG.LOCK_WAIT + PG.TEMP_FILE + PG.CANCELS)) == []


def test_one_deadlock_opens_a_finding_with_both_statements() -> None:
    observed = observe(Deadlocks(), docs(PG.DEADLOCK), first_id=100)
    draft = evaluate(Deadlocks(), observed, "accounts")
    assert draft is not None
    assert draft.severity == "warning"
    assert draft.title == "1 deadlock on accounts"
    assert "**1 deadlock**" in draft.summary
    assert "`UPDATE accounts SET note = $1 WHERE id = $2;`" in draft.summary
    assert "`UPDATE accounts SET note = $1`" in draft.summary
    assert "s3cr3t" not in draft.summary
    assert draft.evidence.count == 1
    assert draft.evidence.line_ids == (102,)  # the third entry of the capture is the ERROR
    assert draft.evidence.facts["relations"] == ["accounts"]
    assert draft.evidence.facts["statements"] == [
        "UPDATE accounts SET note = $1 WHERE id = $2;",
        "UPDATE accounts SET note = $1",
    ]


def test_deadlocks_resolve_after_an_hour_and_turn_critical_when_many() -> None:
    (error,) = [d for d in docs(PG.DEADLOCK) if d["kind"] == "deadlock"]
    t0 = time_of(error)
    observed = observe(Deadlocks(), [at(error, t0 + i * 1_000_000) for i in range(CRITICAL_COUNT)])
    many = evaluate(Deadlocks(), observed, "accounts")
    assert many is not None and many.severity == "critical" and many.evidence.count == CRITICAL_COUNT
    assert evaluate(Deadlocks(), observed, "accounts", now_us=t0 + 2 * HOUR_US) is None


def test_a_lock_wait_is_observed_once_with_its_blocker_and_relation() -> None:
    observed = observe(LockWaits(), docs(PG.LOCK_WAIT + PG.DEADLOCK))
    # "still waiting" lines only: "acquired" and "detected deadlock" end waits already counted
    assert [(o.subject, o.value) for o in observed] == [("accounts", 200.149), ("accounts", 200.143)]
    assert observed[0].sample == {
        "relation": "accounts",
        "statement": "UPDATE accounts SET balance = balance + $1, note = $2 WHERE id = $3;",
        "blocking": "26309",
        "wait_ms": 200.149,
    }


def _waits(ms: str, n: int = 1) -> list[dict[str, object]]:
    (wait,) = [d for d in docs(PG.LOCK_WAIT.replace("after 200.149 ms", f"after {ms} ms")) if "still" in d["message"]]
    return [at(wait, time_of(wait) + i * 1_000_000) for i in range(n)]


@pytest.mark.parametrize(
    ("ms", "n", "opens"),
    [
        ("200.149", 1, False),  # one short wait: ordinary
        ("999.999", 1, False),
        (f"{LONG_WAIT_MS:.3f}", 1, True),  # the threshold itself
        ("200.149", MANY_WAITS - 1, False),
        ("200.149", MANY_WAITS, True),  # short but many
    ],
)
def test_lock_waits_open_at_the_threshold_not_below(ms: str, n: int, opens: bool) -> None:
    observed = observe(LockWaits(), _waits(ms, n))
    assert (evaluate(LockWaits(), observed, "accounts") is not None) is opens


def test_a_long_lock_wait_names_its_numbers_blocker_and_statement() -> None:
    draft = evaluate(LockWaits(), observe(LockWaits(), _waits("2500.000")), "accounts")
    assert draft is not None
    assert draft.title == "Lock waits on accounts (up to 2.5 s)"
    assert "**2500 ms**" in draft.summary
    assert "`26309`" in draft.summary
    assert "`UPDATE accounts SET balance = balance + $1, note = $2 WHERE id = $3;`" in draft.summary
    facts = draft.evidence.facts
    assert facts["max_wait_ms"] == 2500.0
    assert facts["blocking_pids"] == ["26309"]
    assert facts["relation"] == "accounts"


def test_a_long_statement_is_kept_cut_in_the_sample() -> None:
    long_where = " OR ".join(f"note = 'n{i}'" for i in range(400))
    text = PG.LOCK_WAIT.replace("WHERE id = 1;", f"WHERE {long_where};")
    (obs,) = observe(LockWaits(), docs(text))
    statement = str((obs.sample or {})["statement"])
    assert len(statement) == 1000 and statement.endswith("...")
    assert statement.startswith("UPDATE accounts SET balance = balance + $1, note = $2 WHERE note = $3 OR")


# PostgreSQL 15 prints a relation's name as it is (lmgr.c `in relation "%s"`): the name of
# `CREATE TABLE "Tab""le; --"` is everything up to the quote that ends the line, not `Tab`; and
# value removal keeps that CONTEXT line whole (redact.py's %I), so the finding names it either way.


@pytest.mark.parametrize("full_text", [True, False])
def test_a_deadlock_on_a_relation_with_a_double_quote_in_its_name_is_about_that_relation(full_text: bool) -> None:
    (obs,) = observe(Deadlocks(), docs(PG.DEADLOCK_QUOTED, full_text=full_text))
    assert obs.subject == 'Tab"le; --'
    assert (obs.sample or {})["relations"] == 'Tab"le; --'


@pytest.mark.parametrize("full_text", [True, False])
def test_a_lock_wait_on_a_relation_with_a_double_quote_in_its_name_is_about_that_relation(full_text: bool) -> None:
    (obs,) = observe(LockWaits(), docs(PG.LOCK_WAIT_QUOTED, full_text=full_text))
    assert (obs.subject, (obs.sample or {})["relation"], (obs.sample or {})["blocking"]) == (
        'Tab"le; --',
        'Tab"le; --',
        "5458",
    )


@pytest.mark.parametrize(
    ("context", "relations"),
    [
        ('while updating tuple (0,1) in relation "x" in relation "y"', ['x" in relation "y']),
        ('while locking updated version (0,3) of tuple in relation "t"', ["t"]),
        # a function's deadlock: its SQL statement's text names no relation, whatever it holds
        (
            'while inserting index tuple (0,1) in relation "t_pkey"\n'
            'SQL statement "UPDATE t SET note = \'in relation "secret"\' WHERE id = 1"\n'
            "PL/pgSQL function f() line 3 at SQL statement",
            ["t_pkey"],
        ),
        ("...", []),
    ],
)
def test_a_context_names_the_relations_of_its_lock_lines_only(context: str, relations: list[str]) -> None:
    assert C.relations(context) == relations
