"""docs/kinds.md is the catalogue of kinds: every message it lists classifies to the kind it is listed under.

The page's tables are read here, so the page and `classify` cannot drift apart silently: a row
added to the page is a test case, a prefix dropped from classify.py fails a row. The message
texts are PostgreSQL 13-17's (the page names the source file of each).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

import pytest
from pglog_helpers import T0, one

from forwarder.insights.rules.wraparound import Wraparound
from forwarder.model import KINDS
from forwarder.pglog.classify import classify

KINDS_MD: Final = Path(__file__).resolve().parents[3] / "docs" / "kinds.md"
_HEADING: Final = re.compile(r"^## (?:`(\w+)`|(.+))$")
_MESSAGE_ROW: Final = re.compile(r"^\| (\w+) \| ?(\w*) ?\| `(.+)` \| (.+) \|$")
_FALLBACK_ROW: Final = re.compile(r"^\| (\w+) \| ?(\w*) ?\| `(\w+)` \|$")
FALLBACK_SECTION: Final = "Messages this page does not list"


def _tables() -> tuple[list[tuple[str, str, str | None, str]], list[tuple[str, str | None, str]]]:
    """(kind, severity, sqlstate, message) of every listed message; (severity, sqlstate, kind) of the fallback."""
    listed: list[tuple[str, str, str | None, str]] = []
    fallback: list[tuple[str, str | None, str]] = []
    section = ""
    for line in KINDS_MD.read_text(encoding="utf-8").splitlines():
        if (h := _HEADING.match(line)) is not None:
            section = h.group(1) or h.group(2)
        elif section == FALLBACK_SECTION and (f := _FALLBACK_ROW.match(line)) is not None:
            fallback.append((f.group(1), f.group(2) or None, f.group(3)))
        elif section in KINDS and (m := _MESSAGE_ROW.match(line)) is not None:
            listed.append((section, m.group(1), m.group(2) or None, m.group(3)))
    return listed, fallback


LISTED, FALLBACK = _tables()


def test_the_page_lists_messages_of_every_kind_and_the_fallback() -> None:
    assert {kind for kind, *_ in LISTED} == set(KINDS)
    assert len(LISTED) > 150
    assert {kind for *_, kind in FALLBACK} >= {"error", "other", "server", "deadlock", "auth_failure"}


@pytest.mark.parametrize(
    ("kind", "severity", "sqlstate", "message"), LISTED, ids=[f"{k}:{s}:{m[:50]}" for k, s, _, m in LISTED]
)
def test_every_listed_message_has_its_kind(kind: str, severity: str, sqlstate: str | None, message: str) -> None:
    assert classify(severity, message, sqlstate).kind == kind


@pytest.mark.parametrize(
    ("kind", "severity", "message"),
    [(k, s, m) for k, s, _, m in LISTED],
    ids=[f"{k}:{s}:{m[:50]}" for k, s, _, m in LISTED],
)
def test_every_listed_message_is_known_to_value_removal(kind: str, severity: str, message: str) -> None:
    # Value removal replaces a message no template knows whole, by "...": a listed message of
    # the server's own wording must come out readable, not as a "..." line of its kind.
    line = one(f"{T0} [100] {severity}:  {message}\n")
    assert line.kind == kind
    assert line.message != "..."


@pytest.mark.parametrize(("severity", "sqlstate", "kind"), FALLBACK)
def test_an_unknown_message_is_classified_by_severity_and_sqlstate(
    severity: str, sqlstate: str | None, kind: str
) -> None:
    # words no table knows, as a translated server writes them
    assert classify(severity, "la base de données est arrêtée", sqlstate).kind == kind


# The server's words in a session's own error stay an error (docs/kinds.md, "How a message gets
# its kind", 3): guc.c answers a SET with them, the reload logs them at LOG.
@pytest.mark.parametrize(
    "message",
    [
        'parameter "shared_buffers" cannot be changed without restarting the server',
        'invalid value for parameter "work_mem": "lots"',
        'unrecognized configuration parameter "wrok_mem" in file "/etc/pg.conf" line 3',
        "redo starts at 0/1",
        "database system is ready to accept connections",
        'background worker "x" (PID 5) exited with exit code 1',
    ],
)
def test_server_words_at_error_are_an_error(message: str) -> None:
    assert classify("ERROR", message, None).kind == "error"
    assert classify("LOG", message, None).kind == "server"


# varsup.c, multixact.c, vacuum.c (PG13-15 and PG16+ wordings), and vacuumlazy.c's failsafe
WRAPAROUND: Final = [
    ("WARNING", 'database "shop" must be vacuumed within 9999999 transactions', "shop"),
    ("WARNING", "database with OID 16384 must be vacuumed within 1000 transactions", ""),
    ("WARNING", 'database "shop" must be vacuumed before 1 more MultiXactId is used', "shop"),
    ("WARNING", 'database "shop" must be vacuumed before 999999 more MultiXactIds are used', "shop"),
    ("WARNING", "database with OID 5 must be vacuumed before 5000 more multixact members are used", ""),
    ("WARNING", "oldest xmin is far in the past", ""),
    ("WARNING", "oldest multixact is far in the past", ""),
    ("WARNING", "cutoff for removing and freezing tuples is far in the past", ""),
    ("WARNING", "cutoff for freezing multixacts is far in the past", ""),
    ("ERROR", 'database is not accepting commands to avoid wraparound data loss in database "shop"', "shop"),
    (
        "ERROR",
        "database is not accepting commands that generate new MultiXactIds to avoid wraparound data loss"
        ' in database "shop"',
        "shop",
    ),
    (
        "ERROR",
        "database is not accepting commands that assign new transaction IDs to avoid wraparound data loss"
        ' in database "shop"',
        "shop",
    ),
    (
        "ERROR",
        "database is not accepting commands that assign new MultiXactIds to avoid wraparound data loss"
        " in database with OID 5",
        "",
    ),
]


@pytest.mark.parametrize(("severity", "message", "subject"), WRAPAROUND)
def test_wraparound_lines_reach_the_wraparound_insight_whole(severity: str, message: str, subject: str) -> None:
    line = one(f"{T0} [1] app@shop/psql {severity}:  {message}\n")  # values removed, as stored
    assert line.kind == ("error" if severity == "ERROR" else "autovacuum")
    assert line.kind in Wraparound.kinds
    assert line.message == message  # the counters and the database name are kept
    (seen,) = Wraparound().observe(1, {"message": line.message, "time": "2026-11-22T02:18:58.123Z"})
    assert seen.subject == subject


def test_wraparound_warnings_are_kept_whole_only_in_their_exact_wording() -> None:
    c = classify("WARNING", 'database "it\'s" must be vacuumed within 5 transactions', None)
    assert (c.kind, c.safe) == ("autovacuum", True)  # a database name is an identifier, kept as any
    c = classify("WARNING", 'database "shop" must be vacuumed within 5 transactions or else', None)
    assert (c.kind, c.safe) == ("autovacuum", False)
