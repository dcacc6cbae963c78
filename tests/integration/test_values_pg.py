"""Values a real PostgreSQL 15 echoes in its messages never leave it, in any log format.

The workload plants a distinct secret in each place PostgreSQL echoes a value that is the user's:
the input string and the format string of to_date/to_timestamp/to_number (formatting.c's
`invalid value "..." for "..."` family and its DETAIL lines), a value a client forgot to quote
(`WHERE name = John Smith`: `syntax error at or near "Smith"` and a STATEMENT that does not
parse), and the same in dynamic SQL (EXECUTE: the QUERY line). The cluster writes stderr, csvlog
and jsonlog at once; every line of every format is checked with value removal on, and with it off
the secrets must be there (the workload did plant them).
"""

from __future__ import annotations

import json

from forwarder.model import spec_fields
from forwarder.pglog.normalize import SQL_KEYWORDS
from tests.integration.parsed import FORMATS, parsed_logs
from tests.pgcluster import PgClusterFactory

PREFIX = "%m [%p] %e %q%u@%d/%a "

# One secret a statement; none is an SQL keyword, and each is unlike anything PostgreSQL writes.
SECRETS = {
    "date": "7777",
    "month": "Zorbamonth",
    "mon": "Qx9",
    "hour": "13",  # too common to look for on its own: checked in its message only
    "first": "Zalgoria",
    "last": "Quenbyte",
    "note1": "Velvetine",
    "note2": "Harborix",
    "dyn1": "Crimsoneer",
    "dyn2": "Tangerix",
}
WORKLOAD = f"""
CREATE TABLE people (id int, name text, note text);
SELECT to_date('{SECRETS["date"]}-13-45', 'YYYY-MM-DD');
SELECT to_timestamp('{SECRETS["month"]}', 'FMMonth');
SELECT to_timestamp('97/{SECRETS["mon"]}/16', 'YYMonDD');
SELECT to_timestamp('{SECRETS["hour"]}:00 PM', 'HH12:MI PM');
SELECT to_date('20240', 'YYYYMMDD');
SELECT to_date('99999999999', 'FMYYYY');
SELECT to_date('01 02 2024 03', 'MM DD YYYY MM');
SELECT * FROM people WHERE name = {SECRETS["first"]} {SECRETS["last"]};
UPDATE people SET note = {SECRETS["note1"]} {SECRETS["note2"]} WHERE id = 1;
DO $$ BEGIN
  EXECUTE 'SELECT * FROM people WHERE name = ' || '{SECRETS["dyn1"]} {SECRETS["dyn2"]}';
END $$;
"""
LOOKED_FOR = [v for k, v in SECRETS.items() if k != "hour"]


def test_no_echoed_value_survives_in_any_format(pg_cluster_factory: PgClusterFactory) -> None:
    cluster = pg_cluster_factory({"log_line_prefix": PREFIX})
    cluster.psql(WORKLOAD, app_name="values")
    for ext in ("log", "csv", "json"):
        cluster.wait_for_log(SECRETS["dyn2"], ext)
    cluster.stop()  # every message written, in all three files

    for fmt, ext in FORMATS:
        raw = [
            line
            for line in parsed_logs(cluster, fmt, ext, prefix=PREFIX, full_text=True)
            if line.application == "values"
        ]
        planted = json.dumps([spec_fields(line) for line in raw])
        assert all(secret in planted for secret in LOOKED_FOR), fmt

        lines = [
            line
            for line in parsed_logs(cluster, fmt, ext, prefix=PREFIX, full_text=False)
            if line.application == "values"
        ]
        assert len(lines) == len(raw)
        for line in lines:
            text = json.dumps(spec_fields(line))
            assert not [secret for secret in LOOKED_FOR if secret in text], (fmt, line)
        by_message = {line.message.rsplit(" at character ", 1)[0]: line for line in lines}
        # What PostgreSQL 15 wrote, with its values gone and its words kept (formatting.c, scan.l).
        assert by_message['invalid value "..." for "..."'].detail == (
            "The given value did not match any of the allowed values for this field."
        )
        assert 'hour "..." is invalid for the 12-hour clock' in by_message
        assert by_message['source string too short for "..." formatting field'].detail == (
            "Field requires 2 characters, but only 1 remain."
        )
        assert by_message['value for "..." in source string is out of range'].detail == (
            "Value must be in the range -2147483648 to 2147483647."
        )
        assert 'conflicting values for "..." field in formatting string' in by_message
        assert by_message['date/time field value out of range: "..."'].statement == "SELECT to_date($1, $2);"
        syntax = [line for line in lines if line.message.startswith('syntax error at or near "..."')]
        assert {line.statement for line in syntax} == {
            "SELECT * FROM people WHERE name = $1 $2;",
            "UPDATE people SET note = $1 $2 WHERE $3 = $4;",
            "DO $1;",  # the EXECUTE: its SQL is the internal query, in context
        }
        dynamic = next(line for line in syntax if line.statement == "DO $1;")
        assert dynamic.context is not None
        assert dynamic.context.startswith("internal query: SELECT * FROM people WHERE name = $1 $2\n")


def test_keyword_list_holds_every_keyword_of_the_server(pg_cluster_factory: PgClusterFactory) -> None:
    # The strict reduction keeps SQL keywords; a keyword missing from its list would only be
    # removed, but the list is meant to be PostgreSQL's own.
    cluster = pg_cluster_factory()
    words = set(cluster.query("SELECT string_agg(word, ' ') FROM pg_get_keywords()").split())
    assert len(words) > 400
    assert words <= SQL_KEYWORDS
