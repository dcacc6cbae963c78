"""Value removal: statement normalization, message templates, default deny, passwords; no secret survives."""

from __future__ import annotations

import json

import pytest
from pglog_helpers import T0, one, parse_text

from forwarder.model import spec_fields
from forwarder.pglog.normalize import fingerprint, normalize, normalize_statement, scrub
from forwarder.pglog.redact import TOKEN, redact_message, redact_text, scrub_passwords

NORMALIZE_CASES = [
    ("SELECT * FROM t WHERE a = 'x' AND b = 42", "SELECT * FROM t WHERE a = $1 AND b = $2"),
    ("SELECT 'it''s'", "SELECT $1"),
    ("SELECT E'a\\'b', e'c'", "SELECT $1, $2"),
    ("SELECT B'101', X'1F', N'nat', U&'d\\0061t\\+000061'", "SELECT $1, $2, N$3, $4"),  # libpg_query keeps N
    ("SELECT $$dollar ' quoted$$, $fn$ body $$ inside $fn$", "SELECT $1, $2"),
    ("SELECT 1.5, .5, 1e5, 2.5E-3, 0x1F, 0o17, 0b101, 1_000", "SELECT $1, $2, $3, $4, $5, $6, $7, $8"),
    ('SELECT t1.c2, "Col 3", "it\'s" FROM t1', 'SELECT t1.c2, "Col 3", "it\'s" FROM t1'),
    ("SELECT * FROM t WHERE id = $1 AND x = 5", "SELECT * FROM t WHERE id = $1 AND x = $2"),
    ("SELECT $2, 7", "SELECT $2, $3"),  # numbered after the highest existing parameter
    ("SELECT 1 -- secret comment\nFROM t /* another */", "SELECT $1 \nFROM t"),
    ("SELECT 'cut off by track_activity_query_size", "SELECT $1"),
    ("SELECT $q$ unterminated", "SELECT $1"),
    ("SELECT a-b, a/b, x::int4, arr[1]", "SELECT a-b, a/b, x::int4, arr[$1]"),
    ("SELECT interval '1 day', DATE '2026-01-01'", "SELECT interval $1, DATE $2"),
    ("ALTER ROLE bob PASSWORD 'hunter2'", "ALTER ROLE bob PASSWORD $1"),
    ("SELECT 1", "SELECT $1"),
    ("SELECT now()", "SELECT now()"),
]


@pytest.mark.parametrize(("sql", "expected"), NORMALIZE_CASES)
def test_normalize(sql: str, expected: str) -> None:
    out, changed = normalize(sql)
    assert out == expected
    assert changed == (out != sql)


# What libpg_query leaves raw and the scrub pass takes (utility statements, comments), and what
# does not parse (the scrubber alone).
LEFTOVER_CASES = [
    ("SELECT 1 -- 4111 1111 1111 1111", "SELECT $1"),
    ("SELECT /* 'secret' */ 1", "SELECT  $1"),
    ("PREPARE p AS SELECT * FROM c WHERE n = 4111 AND m = 'x'", "PREPARE p AS SELECT * FROM c WHERE n = $1 AND m = $2"),
    ("CREATE VIEW v AS SELECT * FROM c WHERE n = 4111", "CREATE VIEW v AS SELECT * FROM c WHERE n = $1"),
    ("CREATE TABLE t (a text DEFAULT 'secret')", "CREATE TABLE t (a text DEFAULT $1)"),
    ("ALTER SYSTEM SET work_mem = '1GB'", "ALTER SYSTEM SET work_mem = $1"),
    ("COPY t FROM '/home/bob/secret.csv'", "COPY t FROM $1"),
    ("SELECT * FROM t ORDER BY 2", "SELECT * FROM t ORDER BY 2"),  # a position, kept by libpg_query
    ("SELECT x::numeric(10,2) FROM t WHERE a = 5", "SELECT x::numeric(10,2) FROM t WHERE a = $1"),
    ("SELECT -5, N'x'", "SELECT $1, N$2"),
    ("SELEC 'typo'", "$1 $2"),  # a syntax error at SELEC: the strict scrubber (SELEC is no keyword)
    ("SELECT * FROM t WHERE a = 'cut by the cap", "SELECT * FROM t WHERE a = $1"),
    ("SELECT 'a\x00secret'", "SELECT $1"),  # a NUL: the scrubber, never C
    ("SELECT '\ud800'", "SELECT $1"),  # a lone surrogate (JSON can carry one): the scrubber
    # block comments nest (scan.l): one that opens another takes the rest of the statement
    ("SELECT 1 /* a /* b */ jane@example.com 4111-1111 */ AS x;", "SELECT $1"),
    ("SELECT 1 /* a */, 2 /* b * / c */ AS y", "SELECT $1 , $2  AS y"),
    # a bare word is a value after ALTER ... SET name = (gram.y var_value); DEFAULT stays
    ("ALTER ROLE alice SET myapp.token = tok_S3CR", "ALTER ROLE alice SET myapp.token = $1"),
    ("alter database shop set myapp.key to sk_S3CR;", "alter database shop set myapp.key to $1;"),
    ("ALTER SYSTEM SET myapp.apikey = S3CR", "ALTER SYSTEM SET myapp.apikey = $1"),
    ("ALTER ROLE a IN DATABASE d SET search_path = app, public", "ALTER ROLE a IN DATABASE d SET search_path = $1"),
    ('ALTER FUNCTION f(int) SET "my.x" = y', 'ALTER FUNCTION f(int) SET "my.x" = $1'),
    ("ALTER ROLE a SET x TO DEFAULT", "ALTER ROLE a SET x TO DEFAULT"),
    ("ALTER ROLE a SET x = 1, 'b'", "ALTER ROLE a SET x = $1, $2"),
    ("ALTER TABLE t ALTER COLUMN c SET NOT NULL", "ALTER TABLE t ALTER COLUMN c SET NOT NULL"),
    # standard_conforming_strings off: a backslash escapes the quote, and this is one string
    ("SELECT 'a\\', jane.doe@example.com, ' AS c;", "SELECT $1 AS c;"),
    ("SELECT 'C:\\path', x FROM t WHERE a = 'b'", "SELECT $1, x FROM t WHERE a = $2"),
]


@pytest.mark.parametrize(("sql", "expected"), LEFTOVER_CASES)
def test_normalize_leaves_no_literal(sql: str, expected: str) -> None:
    assert normalize(sql)[0] == expected


# A statement that libpg_query refuses: from the error token on (and the bare words right before
# it), every word that is not an SQL keyword and every quoted identifier goes too; what the parser
# had accepted before it keeps its names. With no position (a lone surrogate), the whole statement.
UNPARSEABLE_CASES = [
    # the client forgot to quote a value: the parser stops at "Smith", "John" is right before it
    ("SELECT * FROM t WHERE name = John Smith", "SELECT * FROM t WHERE name = $1 $2"),
    ("INSERT INTO people VALUES (7, Mary Ann Smith)", "INSERT INTO people VALUES ($1, $2 $3 $4)"),
    (
        "UPDATE users SET note = Hello World WHERE id = 5",
        "UPDATE users SET note = $1 $2 WHERE $3 = $4",  # keywords stay, later names go
    ),
    ('SELECT "a" FROM t WHERE n = Bob Jones AND "b" = 1', 'SELECT "a" FROM t WHERE n = $1 $2 AND $3 = $4'),
    ("SELECT * FORM t WHERE a = 'x'", "SELECT * $1 $2 WHERE $3 = $4"),  # a typo: the error is at FORM
    ("SELECT $1, x FROM t WHERE q = Bob Jones ,", "SELECT $1, x FROM t WHERE q = $2 $3 ,"),  # after $1
    ("SELECT * FROM t WHERE a = 'cut by the cap", "SELECT * FROM t WHERE a = $1"),  # names before stay
    ("SELECT a FROM t WHERE x IN (1, 2", "SELECT a FROM t WHERE x IN ($1, $2"),  # error at the end
    ("SELECT '\ud800' FROM users WHERE x = y", "SELECT $1 FROM $2 WHERE $3 = $4"),  # no position
    ("SELECT Émile FROM t WHERE Ωmega = Zoë Ça", "SELECT Émile FROM t WHERE Ωmega = $1 $2"),
]


@pytest.mark.parametrize(("sql", "expected"), UNPARSEABLE_CASES)
def test_statement_that_does_not_parse_is_reduced_strictly(sql: str, expected: str) -> None:
    out, changed, fp = normalize_statement(sql)
    assert (out, changed, fp) == (expected, True, fingerprint(expected))


def test_statement_that_parses_keeps_its_names() -> None:
    # The same words in a statement that parses are names: normalization alone.
    assert normalize("SELECT * FROM t WHERE name = John") == ("SELECT * FROM t WHERE name = John", False)


def test_fingerprint_ignores_values_and_in_list_lengths() -> None:
    a = normalize_statement("SELECT * FROM t WHERE id IN (1, 2, 3) AND s = 'x'")
    b = normalize_statement("SELECT * FROM t WHERE id IN (7, 8) AND s = 'y'")
    c = normalize_statement("SELECT * FROM u WHERE id IN (7, 8) AND s = 'y'")
    d = normalize_statement("SELECT * FROM t WHERE id IN (9) AND s = 'z'")  # a list of one is a list too
    assert a[2] == b[2] == d[2] != c[2]
    assert len(a[2]) == 16 and int(a[2], 16) >= 0
    assert fingerprint(a[0]) == a[2]


def test_fingerprint_ignores_layout_but_not_quoted_names() -> None:
    # psql users type the same query many ways; pg_stat_statements (the parse tree) and pgBadger
    # (the text lower-cased, whitespace collapsed) count them as one.
    same = [
        "SELECT name FROM qt WHERE id = 1;",
        "SELECT name FROM qt WHERE id = 2",
        "select name from QT where ID = 3 ;",
        "SELECT  name\n  FROM qt\tWHERE id = 4",
        "SELECT name FROM qt /* c1 */ WHERE id = 5",
        "SELECT name FROM qt -- c2\nWHERE id = 6;;",
    ]
    assert len({normalize_statement(sql)[2] for sql in same}) == 1
    # a quoted name keeps its case and its spaces; a letter that is not A-Z keeps its case too
    # (PostgreSQL folds only A-Z of an unquoted name)
    quoted = ['SELECT * FROM "QT"', 'SELECT * FROM "qt"', 'SELECT * FROM "q  t"', 'SELECT * FROM "q t"']
    assert len({normalize_statement(sql)[2] for sql in quoted}) == 4
    assert normalize_statement("SELECT * FROM Größe")[2] != normalize_statement("SELECT * FROM GRÖSSE")[2]
    assert normalize_statement("SELECT * FROM Größe")[2] == normalize_statement("SELECT * FROM größe")[2]


def test_fingerprint_of_a_statement_that_does_not_parse() -> None:
    text, changed, fp = normalize_statement("SELECT * FROM t WHERE a = 'cut")
    assert (text, changed, fp) == ("SELECT * FROM t WHERE a = $1", True, fingerprint(text))


def test_scrubber_alone() -> None:
    assert scrub("SELECT 'x', 5 -- c") == ("SELECT $1, $2", True)


REDACT_CASES = [
    ("Key (email)=(bob@example.com) already exists.", "Key (email)=(...) already exists."),
    ('Key (a, b)=(1, (x)) is not present in table "t".', 'Key (a, b)=(...) is not present in table "t".'),
    (
        'Key (id)=(7) is still referenced from table "orders".',
        'Key (id)=(...) is still referenced from table "orders".',
    ),
    (
        "Key (r)=([1,5)) conflicts with existing key (r)=([2,6)).",
        "Key (r)=(...) conflicts with existing key (r)=(...).",
    ),
    ("Failing row contains (1, null, 'paid', (2)).", "Failing row contains (...)."),
    ("parameters: $1 = 'se''cret', $2 = NULL, $3 = '42...'", "parameters: $1 = '...', $2 = NULL, $3 = '...'"),
    ("unnamed portal with parameters: $1 = 'secret'", "unnamed portal with parameters: $1 = '...'"),
    ('invalid input syntax for type integer: "abc"', 'invalid input syntax for type integer: "..."'),
    ('invalid input syntax for type timestamp: "yesterday-ish"', 'invalid input syntax for type timestamp: "..."'),
    ('invalid input value for enum mood: "elated"', 'invalid input value for enum mood: "..."'),
    ('malformed array literal: "{1,2"', 'malformed array literal: "..."'),
    ('value "99999999999" is out of range for type integer', 'value "..." is out of range for type integer'),
    ('date/time field value out of range: "2026-13-45"', 'date/time field value out of range: "..."'),
    ('invalid value "xx" for "MM"', 'invalid value "..." for "..."'),
    ('Token "secret" is invalid.', 'Token "..." is invalid.'),
    ("syntax error at or near \"'secret'\" at character 12", 'syntax error at or near "..." at character 12'),
    ('syntax error at or near "FORM" at character 12', 'syntax error at or near "..." at character 12'),
    ('syntax error at or near "Smith" at character 35', 'syntax error at or near "..." at character 35'),
    # dynamic SQL (EXECUTE) that does not parse is reduced strictly; a PL/pgSQL expression or
    # assignment is a fragment of the function's code (never a statement): literals only
    (
        'SQL statement "SELECT * FROM t WHERE n = John Smith"',
        'SQL statement "SELECT * FROM t WHERE n = $1 $2"',
    ),
    ('PL/pgSQL assignment "total := price * 1.2"', 'PL/pgSQL assignment "total := price * $1"'),
    ("SQL expression \"status = 'paid'\"", 'SQL expression "status = $1"'),
    (
        'relation "orders_archive" does not exist at character 15',
        'relation "orders_archive" does not exist at character 15',
    ),
    (
        "Process 1 waits for ShareLock on transaction 9; blocked by process 2.\n"
        "Process 2 waits for ShareLock on transaction 8; blocked by process 1.\n"
        "Process 1: UPDATE a SET x = 5 WHERE id = 'q'\nProcess 2: UPDATE a SET x = 6 WHERE id = 'r'",
        "Process 1 waits for ShareLock on transaction 9; blocked by process 2.\n"
        "Process 2 waits for ShareLock on transaction 8; blocked by process 1.\n"
        "Process 1: UPDATE a SET x = $1 WHERE id = $2\nProcess 2: UPDATE a SET x = $1 WHERE id = $2",
    ),
    (
        "SQL statement \"INSERT INTO t VALUES ('x', 5)\"\nPL/pgSQL function f(integer) line 3 at SQL statement",
        'SQL statement "INSERT INTO t VALUES ($1, $2)"\nPL/pgSQL function f(integer) line 3 at SQL statement',
    ),
    ('COPY t, line 2, column c: "secret"', "COPY t, line 2, column c: ..."),
    ('COPY t, line 2: "1\tsecret"', "COPY t, line 2: ..."),
    ('JSON data, line 1: {"a": secret', "JSON data, line 1: ..."),
    (
        'Connection matched pg_hba.conf line 95: "host all all 0.0.0.0/0 md5"',
        'Connection matched pg_hba.conf line 95: "..."',
    ),
    (
        'Connection matched file "/etc/postgresql/16/main/pg_hba.conf" line 95: "host all bob 10.0.0.0/8 md5"',
        'Connection matched file "/etc/postgresql/16/main/pg_hba.conf" line 95: "..."',
    ),
    ('while updating tuple (0,5) in relation "t"', 'while updating tuple (0,5) in relation "t"'),
    ("value too long for type character varying(10)", "value too long for type character varying(10)"),
    (
        "Process holding the lock: 4085. Wait queue: 4086, 4087.",
        "Process holding the lock: 4085. Wait queue: 4086, 4087.",
    ),
    # default deny: a text that matches no template (RAISE, extensions) is replaced whole
    ("customer 'bob@example.com' owes 1234.50 on t1", "..."),
    ('table "Orders 2" is full', "..."),
    ("...", "..."),
    ("", ""),
    # multi-line: each line by its template; unknown lines become one TOKEN
    (
        "SQL statement \"UPDATE t SET a = 1\n  WHERE b = 'x'\"\nPL/pgSQL function f() line 3 at SQL statement",
        'SQL statement "UPDATE t SET a = $1\n  WHERE b = $2"\nPL/pgSQL function f() line 3 at SQL statement',
    ),
    # from the first unknown line on, the field goes: what follows is likely more of the same text
    ("secret one\nsecret two\nPL/pgSQL function f() line 3 at RAISE", "..."),
    ("PL/pgSQL function f() line 3 at RAISE\nsecret S3CR", "PL/pgSQL function f() line 3 at RAISE\n..."),
    ("permission denied for table orders", "permission denied for table orders"),
    ("permission denied for my S3CR code", "..."),
    ("Failed process was running: SELECT 'x'\nFROM t", "Failed process was running: SELECT $1\nFROM t"),
    ("parameters: $1 = 'a', $2 = garbage", "parameters: ..."),
    ("parameters: $1 = 'cut by the entry cap", "parameters: $1 = '...'"),
    ('parameter "work_mem" changed to "64MB"', 'parameter "work_mem" changed to "64MB"'),
    (
        'parameter "primary_conninfo" changed to "host=x password=secret"',
        'parameter "primary_conninfo" changed to "..."',
    ),
    (
        "process 7 still waiting for ExclusiveLock on advisory lock [16384,0,4242,1] after 1000.1 ms",
        "process 7 still waiting for ExclusiveLock on advisory lock [...] after 1000.1 ms",
    ),
    # PostgreSQL 16-18 texts, value-free: kept whole
    ("client backend (PID 4838) was terminated by signal 9: Killed",) * 2,  # PG18 names the process type
    ("checkpointer (PID 71) was terminated by signal 6: Aborted",) * 2,
    ("walwriter (PID 74) exited with exit code 2",) * 2,
    ("process 4711 could not obtain ShareLock on transaction 700737",) * 2,  # PG18 log_lock_failures
    ("Process holding the lock: 4085, Wait queue: .",) * 2,
    (
        "process 4711 could not obtain ExclusiveLock on advisory lock [5,1,2,1]",
        "process 4711 could not obtain ExclusiveLock on advisory lock [...]",
    ),
    ('OAuth bearer authentication failed for user "bob"',) * 2,  # PG18
    ('"trust" authentication failed for user "bob"',) * 2,
    ('authentication failed for user "bob": invalid authentication method',) * 2,
    ('invalidating slot "standby1" because its restart_lsn 0/A0543F0 exceeds max_slot_wal_keep_size',) * 2,
    ('invalidating obsolete replication slot "standby1"',) * 2,
    ('terminating process 4800 to release replication slot "standby1"',) * 2,
    ("The slot's restart_lsn 0/A0543F0 exceeds the limit by 419085328 bytes.",) * 2,
    ('You might need to increase "max_slot_wal_keep_size".',) * 2,
    ('The slot\'s idle time of 5min 03s exceeds the configured "idle_replication_slot_timeout" duration of 5min.',) * 2,
    ('parameter "log_connections" changed to "receipt,authentication,authorization"',) * 2,
    ("starting backup recovery with redo LSN 0/5000028, checkpoint LSN 0/5000080, on timeline ID 1",) * 2,
    ("completed backup recovery with redo LSN 0/5000028 and end LSN 0/5000100",) * 2,
    # a logical replication apply worker's CONTEXT (PG15+)
    (
        'processing remote data for replication origin "pg_16389" during message type "INSERT" for replication'
        ' target relation "public.outbox" in transaction 12345, finished at 0/4EBF9D8',
    )
    * 2,
    ('processing remote data for replication origin "pg_16416" during message type "INSERT" in transaction 763',) * 2,
    ('conflict detected on relation "public.test": conflict=insert_exists',) * 2,
    # IF [NOT] EXISTS notices (pg_repack and migrations write them on every run)
    ('view "v" does not exist, skipping',) * 2,
    ("function f(integer) does not exist, skipping",) * 2,
    ('trigger "t" for relation "users" does not exist, skipping',) * 2,
    ('column "c" of relation "t" already exists, skipping',) * 2,
    ('schema "public" already exists, skipping',) * 2,
    ('could not connect to server "fdw_orders"',) * 2,
    ('acquired logical replication slot "sub1"',) * 2,
    ("setting an MD5-encrypted password",) * 2,
    (
        "prepare: PREPARE p(text) AS SELECT * FROM t WHERE a <> 'x'",
        "prepare: PREPARE p(text) AS SELECT * FROM t WHERE a <> $1",
    ),
]


# The messages of to_date/to_timestamp/to_char/to_number (and jsonpath's .datetime()), as
# src/backend/utils/adt/formatting.c writes them (PostgreSQL 13-18), with the values a query gives:
# every quoted part is the user's (the input string, or a field of the format string).
FORMATTING_CASES = [
    ('invalid value "2024-13-45" for "YYYY"', 'invalid value "..." for "..."'),
    ('invalid value "secret" for "Month"', 'invalid value "..." for "..."'),
    ('source string too short for "DD" formatting field', 'source string too short for "..." formatting field'),
    ('value for "MM" in source string is out of range', 'value for "..." in source string is out of range'),
    (
        'conflicting values for "Mon" field in formatting string',
        'conflicting values for "..." field in formatting string',
    ),
    ('formatting field "TZH" is only supported in to_char', 'formatting field "..." is only supported in to_char'),
    ('invalid input string for "Y,YYY"', 'invalid input string for "..."'),
    ('"12x" is not a number', '"..." is not a number'),
    ('invalid datetime format separator: "@"', 'invalid datetime format separator: "..."'),
    ('unmatched format separator "/"', 'unmatched format separator "..."'),
    ('unmatched format character "Q"', 'unmatched format character "..."'),
    ('hour "13" is invalid for the 12-hour clock', 'hour "..." is invalid for the 12-hour clock'),
    ('datetime format is not recognized: "2024/x"', 'datetime format is not recognized: "..."'),
    # DETAIL and HINT lines, and the messages without a value: kept as they are
    ("Value must be in the range 1 to 12.", None),
    ("Value must be in the range -2147483648 to 2147483647.", None),
    ("Field requires 2 characters, but only 1 remain.", None),
    ("Field requires 4 characters, but only 2 could be parsed.", None),
    ('If your source string is not fixed-width, try using the "FM" modifier.', None),
    ("The given value did not match any of the allowed values for this field.", None),
    ("This value contradicts a previous setting for the same field type.", None),
    ("Value must be an integer.", None),
    ("Time zone abbreviation is not recognized.", None),
    ("Use the 24-hour clock, or give an hour between 1 and 12.", None),
    ("invalid combination of date conventions", None),
    ("Do not mix Gregorian and ISO week date conventions in a formatting template.", None),
    ("cannot calculate day of year without year information", None),
    ("input string is too short for datetime format", None),
    ("trailing characters remain in input string after datetime format", None),
    ("invalid format specification for an interval value", None),
    ("Intervals are not tied to specific calendar dates.", None),
    ("missing time zone in input string for type timestamptz", None),
    ('cannot use "S" and "PL"/"MI"/"SG"/"PR" together', None),
    ('"EEEE" may only be used together with digit and decimal point patterns.', None),
    ("could not determine which collation to use for lower() function", None),
]


@pytest.mark.parametrize(("text", "expected"), FORMATTING_CASES)
def test_formatting_messages(text: str, expected: str | None) -> None:
    assert redact_text(text) == ((expected, True) if expected is not None else (text, False))


@pytest.mark.parametrize(("text", "expected"), REDACT_CASES)
def test_redact_message(text: str, expected: str) -> None:
    out, changed = redact_message(text)
    assert out == expected
    assert changed == (out != text)


def test_at_character_is_part_of_the_message_only() -> None:
    assert (
        redact_message('relation "t" does not exist at character 15')[0]
        == 'relation "t" does not exist at character 15'
    )
    assert redact_text('relation "t" does not exist at character 15')[0] == "..."


def test_redaction_is_idempotent() -> None:
    for text, _ in REDACT_CASES:
        once, _ = redact_message(text)
        assert redact_message(once) == (once, False), text


def test_token_is_documented_value() -> None:
    assert TOKEN == "..."


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ALTER ROLE x PASSWORD 'sec''ret'", "ALTER ROLE x PASSWORD '...'"),
        (
            "CREATE ROLE x LOGIN ENCRYPTED PASSWORD $$secret$$ VALID UNTIL 'infinity'",
            "CREATE ROLE x LOGIN ENCRYPTED PASSWORD '...' VALID UNTIL 'infinity'",
        ),
        (
            "SELECT dblink_connect('host=a password=secret dbname=b')",
            "SELECT dblink_connect('host=a password=... dbname=b')",
        ),
        (
            "CREATE SUBSCRIPTION s CONNECTION 'password=''a b'' host=x' PUBLICATION p",
            "CREATE SUBSCRIPTION s CONNECTION 'password=... host=x' PUBLICATION p",
        ),
        (
            "CREATE USER MAPPING FOR bob SERVER s OPTIONS (user 'bob', password 'secret')",
            "CREATE USER MAPPING FOR bob SERVER s OPTIONS (user 'bob', password '...')",
        ),
        (
            "SELECT dblink('postgresql://bob:secret@db/shop', 'SELECT 1')",
            "SELECT dblink('postgresql://bob:...@db/shop', 'SELECT 1')",
        ),
        ('password authentication failed for user "bob"', 'password authentication failed for user "bob"'),
        # every way the lexer (scan.l) lets a client write the literal
        ("ALTER ROLE bob PASSWORD U&'uni\\0063odeS3CR'", "ALTER ROLE bob PASSWORD '...'"),
        ("ALTER ROLE bob PASSWORD E'esc\\'S3CR'", "ALTER ROLE bob PASSWORD '...'"),
        ("ALTER ROLE bob PASSWORD /* pw */ 'S3CR'", "ALTER ROLE bob PASSWORD /* pw */ '...'"),
        ("ALTER ROLE bob PASSWORD -- pw\n 'S3CR'", "ALTER ROLE bob PASSWORD -- pw\n '...'"),
        ("ALTER ROLE bob PASSWORD 'a'\n'S3CR'", "ALTER ROLE bob PASSWORD '...'"),
        ("CREATE ROLE dave PASSWORD 'a' 'S3CR'", "CREATE ROLE dave PASSWORD '...'"),
        (
            "ALTER USER MAPPING FOR bob SERVER s OPTIONS (SET \"password\" 'S3CR')",
            "ALTER USER MAPPING FOR bob SERVER s OPTIONS (SET \"password\" '...')",
        ),
        ("ALTER ROLE bob PASSWORD NULL", "ALTER ROLE bob PASSWORD NULL"),
        ("ALTER ROLE bob password'S3CR';", "ALTER ROLE bob password'...';"),  # no space: scan.l allows it
        # standard_conforming_strings off: the backslash escapes the quote
        ("ALTER ROLE bob PASSWORD 'abc\\' S3CR xyz'", "ALTER ROLE bob PASSWORD '...'"),
        ("ALTER ROLE bob PASSWORD 'S3CR\\", "ALTER ROLE bob PASSWORD '...'"),  # cut after a backslash
        # block comments nest: one opening another before it closes, or never closing
        ("ALTER ROLE bob PASSWORD /* a /* b */ c */ 'S3CR'", "ALTER ROLE bob PASSWORD /* a /* b */ c */ '...'"),
        ("ALTER ROLE bob PASSWORD /* a /* b */ 'S3CR'", "ALTER ROLE bob PASSWORD /* a /* b */ '...'"),
    ],
)
def test_scrub_passwords(text: str, expected: str) -> None:
    assert scrub_passwords(text) == (expected, expected != text)


def test_passwords_go_even_with_full_text() -> None:
    line = one(f"{T0} [1] a@b/c LOG:  statement: ALTER ROLE bob PASSWORD 'hunter2'\n", full_text=True)
    assert line.statement == "ALTER ROLE bob PASSWORD '...'"
    assert line.redacted
    assert "hunter2" not in json.dumps(spec_fields(line))


def test_full_text_keeps_values() -> None:
    line = one(
        f'{T0} [1] a@b/c ERROR:  duplicate key value violates unique constraint "k"\n'
        f"{T0} [1] a@b/c DETAIL:  Key (email)=(bob@example.com) already exists.\n"
        f"{T0} [1] a@b/c STATEMENT:  INSERT INTO u VALUES ('bob@example.com')\n",
        full_text=True,
    )
    assert line.detail == "Key (email)=(bob@example.com) already exists."
    assert line.statement == "INSERT INTO u VALUES ('bob@example.com')"
    assert not line.redacted


def test_redacted_flag_only_when_something_was_removed() -> None:
    clean = one(f"{T0} [1] LOG:  checkpoint starting: time\n")  # the checkpointer: no session
    assert not clean.redacted
    dirty = one(f"{T0} [1] a@b/c LOG:  statement: SELECT 'x'\n")
    assert dirty.redacted


SECRET = "Sup3rS3cret"
SECRET_LOG = f"""\
{T0} [1] a@b/c ERROR:  duplicate key value violates unique constraint "users_email_key"
{T0} [1] a@b/c DETAIL:  Key (email)=({SECRET}@example.com) already exists.
{T0} [1] a@b/c STATEMENT:  INSERT INTO users (email) VALUES ('{SECRET}@example.com')
{T0} [1] a@b/c ERROR:  null value in column "name" of relation "users" violates not-null constraint
{T0} [1] a@b/c DETAIL:  Failing row contains (5, null, {SECRET}).
{T0} [1] a@b/c LOG:  duration: 5.1 ms  execute <unnamed>: SELECT * FROM users WHERE email = $1
{T0} [1] a@b/c DETAIL:  parameters: $1 = '{SECRET}'
{T0} [1] a@b/c ERROR:  invalid input syntax for type integer: "{SECRET}"
{T0} [1] a@b/c CONTEXT:  unnamed portal with parameters: $1 = '{SECRET}'
{T0} [1] a@b/c ERROR:  deadlock detected
{T0} [1] a@b/c DETAIL:  Process 1 waits for ShareLock on transaction 9; blocked by process 2.
\tProcess 2 waits for ShareLock on transaction 8; blocked by process 1.
\tProcess 1: UPDATE accounts SET note = '{SECRET}' WHERE id = 1
\tProcess 2: UPDATE accounts SET note = E'{SECRET}\\'' WHERE id = 2
{T0} [1] a@b/c HINT:  See server log for query details.
{T0} [1] a@b/c ERROR:  division by zero
{T0} [1] a@b/c CONTEXT:  SQL statement "SELECT 1/0 WHERE '{SECRET}' = $$x$$"
\tPL/pgSQL function f() line 3 at PERFORM
{T0} [1] a@b/c ERROR:  column "nope" does not exist
{T0} [1] a@b/c QUERY:  SELECT nope FROM t WHERE x = $tag${SECRET}$tag$
{T0} [1] a@b/c LOG:  statement: ALTER ROLE bob PASSWORD '{SECRET}'
{T0} [1] a@b/c LOG:  statement: SELECT dblink_connect('host=x password={SECRET}') -- {SECRET}
{T0} [1] a@b/c ERROR:  value "{SECRET}" is out of range for type integer
{T0} [1] a@b/c ERROR:  syntax error at or near "'{SECRET}'" at character 20
{T0} [1] a@b/c STATEMENT:  SELECT 1 '{SECRET}'
{T0} [1] a@b/c WARNING:  user message with '{SECRET}' quoted
{T0} [1] a@b/c ERROR:  COPY failed
{T0} [1] a@b/c CONTEXT:  COPY t, line 2, column c: "{SECRET}"
{T0} [1] a@b/c ERROR:  invalid value "{SECRET}" for "Month"
{T0} [1] a@b/c DETAIL:  The given value did not match any of the allowed values for this field.
{T0} [1] a@b/c STATEMENT:  SELECT to_timestamp('{SECRET}', 'FMMonth')
{T0} [1] a@b/c ERROR:  syntax error at or near "{SECRET}" at character 32
{T0} [1] a@b/c STATEMENT:  SELECT * FROM t WHERE name = Bob {SECRET}
{T0} [1] a@b/c FATAL:  password authentication failed for user "bob"
{T0} [1] a@b/c DETAIL:  Connection matched pg_hba.conf line 95: "host all {SECRET} 0.0.0.0/0 md5"
"""


def test_no_secret_survives_in_any_field() -> None:
    lines = parse_text(SECRET_LOG)
    assert len(lines) == 16
    for line in lines:
        assert SECRET not in json.dumps(spec_fields(line)), line
        assert line.redacted, line


def test_no_password_survives_with_full_text() -> None:
    statements = [x.statement for x in parse_text(SECRET_LOG, full_text=True)]
    assert "ALTER ROLE bob PASSWORD '...'" in statements
    assert f"SELECT dblink_connect('host=x password=...') -- {SECRET}" in statements  # only the password goes


M = 1 << 20
# Crafted texts (a client can make PostgreSQL log any of them): value removal stays fast, and
# libpg_query is never given what crashes it (a 30,000-deep `1+1+...` overflows its C stack:
# SIGSEGV, which would end this test run) or what it is quadratic in (nested comment openers).
CRAFTED = [
    ("Key (" + ")=(" * (M // 3), "message"),
    ("Key (" + ")=(" * 20000, "message"),
    ("Key (a)=(" + "x" * M, "message"),
    ('SQL statement "' + '"\n' * 30000, "message"),
    ('syntax error at or near "' + 'a"' * 30000, "message"),
    ("\n".join(["division by zero"] * 3000), "message"),
    ("\n".join(["Process 1: SELECT 1"] * 3000), "message"),
    ("parameters: " + "$1 = 'x', " * 6000, "message"),
    ("process 1 still waiting for " + "x " * (M // 2), "message"),
    ("invalid input syntax for type " + "integer " * 8000 + ': "x', "message"),
    ("permission denied for " + "x" * 60000 + "'", "message"),
    ("SELECT 1" + "+1" * 30000, "sql"),
    ("SELECT 1" + " + 1" * 3000, "sql"),
    ("SELECT " + "/*" * (M // 2), "sql"),
    ("SELECT /*" + "*/" * 30000, "sql"),
    ("SELECT " + "$a$" * (M // 3), "sql"),
    ("SELECT " + "E'\\" * (M // 3), "sql"),
    ("SELECT " + "'a'," * 100000 + "1", "sql"),
]


@pytest.mark.parametrize(("text", "field"), CRAFTED, ids=[f"{i}" for i in range(len(CRAFTED))])
def test_crafted_texts_are_handled_fast(text: str, field: str) -> None:
    import time

    start = time.perf_counter()
    if field == "sql":
        out, _, _ = normalize_statement(text)
        assert "'" not in out and "/*" not in out
    else:
        redact_message(text)
    assert time.perf_counter() - start < 1.0


def test_a_long_statement_the_server_refused_is_reduced_from_the_error_position() -> None:
    # Over 8 KiB, a statement is never given to libpg_query (normalize._MAX_PARSE); the server's
    # own syntax error says where it stopped, and the unquoted value there goes all the same.
    sql = "SELECT * FROM customers WHERE name = Zalgoria Quenbyte /* " + "x" * 9000 + " */"
    position = sql.index("Quenbyte") + 1
    line = one(
        f'{T0} [7] app@shop/psql ERROR:  syntax error at or near "Quenbyte" at character {position}\n'
        f"{T0} [7] app@shop/psql STATEMENT:  {sql}\n"
    )
    assert line.message == f'syntax error at or near "..." at character {position}'
    assert line.statement == "SELECT * FROM customers WHERE name = $1 $2"
    assert line.redacted
    # The same statement without the error keeps its names: only a refused one is read strictly.
    slow = one(
        f"{T0} [7] app@shop/psql LOG:  duration: 1.000 ms  statement: SELECT * FROM customers WHERE name = Zalgoria\n"
    )
    assert slow.statement == "SELECT * FROM customers WHERE name = Zalgoria"
    # A syntax error in a function's internal query: its position is the QUERY's, and the
    # statement, which parsed, is normalized as usual (its names kept).
    internal = one(
        f'{T0} [7] app@shop/psql ERROR:  syntax error at or near "FORM" at character 10\n'
        f"{T0} [7] app@shop/psql QUERY:  SELECT 1 FORM t\n"
        f"{T0} [7] app@shop/psql CONTEXT:  PL/pgSQL function run_it(text) line 3 at EXECUTE\n"
        f"{T0} [7] app@shop/psql STATEMENT:  SELECT run_it('x') FROM customers\n"
    )
    assert internal.statement == "SELECT run_it($1) FROM customers"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # A bind parameter or a COPY field with newlines: PostgreSQL writes them as they are, so
        # the lines after are the value's, even when one reads like a message of the table.
        ("parameters: $1 = 'Dear support,\nexecute the refund S3CR\nThanks'", "parameters: $1 = '...'\n..."),
        (
            "unnamed portal with parameters: $1 = 'Hi\nAvailable values: S3CR.\nbye'",
            "unnamed portal with parameters: $1 = '...'\n...",
        ),
        ('COPY notes, line 1, column note: "Dear,\nexecute S3CR\nbye"', "COPY notes, line 1, column note: ...\n..."),
        # an unescaped quote ends the quoted value early: its next line is still the value's
        (
            'invalid input syntax for type integer: "x"\nexecute the refund S3CR',
            'invalid input syntax for type integer: "..."\n...',
        ),
        # parameters whose quotes all close end on their line: the next frames stay
        (
            "unnamed portal with parameters: $1 = 'a''b', $2 = NULL\nPL/pgSQL function f() line 3 at SQL statement",
            "unnamed portal with parameters: $1 = '...', $2 = NULL\nPL/pgSQL function f() line 3 at SQL statement",
        ),
    ],
)
def test_a_value_over_several_lines_takes_them_all(text: str, expected: str) -> None:
    assert redact_text(text) == (expected, True)


@pytest.mark.parametrize(
    "lines",
    [
        # RAISE LOG in a function (default verbosity: its CONTEXT says so)
        ["LOG:  checkpoint complete: wrote 1 buffers (0.0%); S3CR", "CONTEXT:  PL/pgSQL function f() line 2 at RAISE"],
        [
            "LOG:  connection authorized: user=a database=b application_name=S3CR",
            "CONTEXT:  PL/pgSQL function f() line 2 at RAISE",
        ],
        # RAISE EXCEPTION starting like a message of the table, with its DETAIL and HINT
        [
            "ERROR:  permission denied to S3CR",
            "DETAIL:  Reason code: S3CR.",
            "HINT:  S3CR",
            "CONTEXT:  PL/pgSQL function f() line 2 at RAISE",
        ],
        # a checkpoint report from a session (the checkpointer has no user or database): a RAISE
        ["LOG:  checkpoint complete: wrote 1 buffers (0.0%); S3CR"],
        # RAISE LOG in the words of a slow query: its "statement" is the function's text (a
        # double-quoted value is a name to the normalizer, a bare word a column)
        [
            'LOG:  duration: 0.5 ms  statement: SELECT "4111 1111 S3CR@example.com"',
            "CONTEXT:  PL/pgSQL function inline_code_block line 1 at RAISE",
        ],
        ["ERROR:  P0001: duration: 1.000 ms  execute s1: SELECT S3CR"],
    ],
)
def test_a_raise_keeps_none_of_its_words(lines: list[str]) -> None:
    head, *rest = lines
    line = one(f"{T0} [1] a@b/c {head}\n" + "".join(f"{T0} [1] a@b/c {more}\n" for more in rest))
    assert "S3CR" not in json.dumps(spec_fields(line)) and line.redacted


def test_a_raise_in_the_words_of_a_slow_query_is_neither_slow_nor_its_statement() -> None:
    lines = parse_text(
        f"{T0} [1] a@b/c LOG:  duration: 0.5 ms  statement: SELECT S3CR\n"
        f"{T0} [1] a@b/c CONTEXT:  PL/pgSQL function inline_code_block line 1 at RAISE\n"
        f"{T0} [1] a@b/c STATEMENT:  DO $$ BEGIN RAISE LOG 'x'; END $$;\n",
        full_text=True,
    )
    assert [(line.kind, line.duration_ms) for line in lines] == [("other", None)]
    assert lines[0].message == "duration: 0.5 ms  statement: SELECT S3CR"  # full text: as written
    assert lines[0].statement == "DO $$ BEGIN RAISE LOG 'x'; END $$;"  # the entry's own


def test_a_raise_identified_by_its_sqlstate_alone() -> None:
    # no CONTEXT line, but the SQLSTATE (verbose mode here; %e, csvlog, jsonlog alike) is RAISE
    # EXCEPTION's default, P0001
    line = one(f"{T0} [1] a@b/c ERROR:  P0001: permission denied to S3CR\n")
    assert line.message == "..." and line.sqlstate == "P0001"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('parameter "myapp.api_key" changed to "sk_live_hunter2"', 'parameter "myapp.api_key" changed to "..."'),
        (
            'parameter "pg_stat_statements.track" changed to "all"',
            'parameter "pg_stat_statements.track" changed to "..."',
        ),
        ('parameter "auto_explain.log_min_duration" changed to "250"', None),
        ('parameter "wal_level" changed to "replica"', None),  # a core setting keeps its word
    ],
)
def test_a_custom_settings_value_goes_unless_it_is_a_number(text: str, expected: str | None) -> None:
    assert redact_text(text) == ((expected, True) if expected is not None else (text, False))


def _entry(*lines: str) -> str:
    """An entry as the server writes it: each line with the prefix, its newlines TAB-led."""
    out = []
    for line in lines:
        label, _, text = line.partition(":  ")
        first, *rest = text.split("\n")
        out.append(f"{T0} [7] app@shop/psql {label}:  {first}\n" + "".join(f"\t{r}\n" for r in rest))
    return "".join(out)


# A third trial's findings on a real PostgreSQL 15: each planted value (MARK1...) must go.
LEAK_CASES = [
    pytest.param(  # dynamic SQL whose literal holds a quote at a line end, then lines shaped like messages
        _entry(
            'ERROR:  duplicate key value violates unique constraint "u_pkey"',
            "DETAIL:  Key (id)=(1) already exists.",
            'CONTEXT:  SQL statement "INSERT INTO u(id,email) VALUES (1, \'He said "hi"\n'
            'relation "MARK1" does not exist\npermission denied to my pin is 1234 MARK2\nbye\')"\n'
            "PL/pgSQL function f_dyn(text) line 3 at EXECUTE",
        ),
        id="sql-in-context-cut-at-a-literal's-quote",
    ),
    pytest.param(  # a key value carrying the template's own end, then a line shaped like a message
        _entry(
            'ERROR:  duplicate key value violates unique constraint "inj_e_key"',
            "DETAIL:  Key (e)=(k@A) already exists.\noperator does not exist: my card number is 4111 MARK3"
            "\n) already exists.",
        ),
        id="multi-line-key-value",
    ),
    pytest.param(  # a literal holding "Process N: " in a deadlock report
        _entry(
            "ERROR:  deadlock detected",
            "DETAIL:  Process 1 waits for ShareLock on transaction 5; blocked by process 2.\n"
            "Process 2 waits for ShareLock on transaction 6; blocked by process 1.\n"
            "Process 1: UPDATE dl SET v = 'note:\nProcess 1: SELECT \"MARK4 card 4111\" FROM MARK5' WHERE id = 2\n"
            "Process 2: UPDATE dl SET v = 1 WHERE id = 1",
        ),
        id="deadlock-sql-with-a-fake-process-line",
    ),
    pytest.param(  # a word glued to an unterminated quote
        _entry(
            'ERROR:  unterminated quoted string at or near "\'Connor;" at character 46',
            "STATEMENT:  SELECT * FROM t WHERE name = 'x' AND s = MARK6O'Connor;",
        ),
        id="word-glued-to-an-unterminated-quote",
    ),
    pytest.param(
        _entry("LOG:  duration: 1.000 ms  statement: SELECT * FROM t WHERE a = 192.168.3133710001.77"), id="ip"
    ),
    pytest.param(
        _entry("LOG:  statement: BEGIN; ALTER ROLE victim SET myapp.api_key = MARK7; COMMIT;"), id="alter-not-first"
    ),
    pytest.param(
        _entry(
            'ERROR:  relation "MARK8" does not exist',
            "CONTEXT:  PL/pgSQL function inline_code_block line 1 at ASSERT",
        ),
        id="assert",
    ),
    pytest.param(
        _entry('ERROR:  time zone "Zz/MARK9" not recognized', "STATEMENT:  SELECT now() AT TIME ZONE 'Zz/MARK9'"),
        id="time-zone",
    ),
    pytest.param(  # stderr without %e: the lexer's wording says where the parser stopped
        _entry(
            'ERROR:  trailing junk after numeric literal at or near "0x1F" at character 28',
            "STATEMENT:  SELECT * FROM t WHERE n = 0x1F AND email = MARK10;",
        ),
        id="trailing-junk",
    ),
    pytest.param(
        _entry(
            'ERROR:  could not open file "/etc/MARK11/secret" for reading: No such file or directory',
            "STATEMENT:  SELECT pg_read_file($1)",
        ),
        id="client-path",
    ),
    # Real drivers' traffic (psycopg, asyncpg): a parameter concatenated into dynamic SQL, or a
    # value a client forgot to quote, parses as a column reference; the server names it.
    pytest.param(
        _entry(
            'ERROR:  column "mark13" does not exist at character 42',
            "QUERY:  SELECT count(*) FROM users WHERE email = MARK13",
            "CONTEXT:  PL/pgSQL function dyn2(text) line 1 at EXECUTE",
            "STATEMENT:  SELECT dyn2($1)",
        ),
        id="dynamic-sql-column",
    ),
    pytest.param(
        _entry(
            'ERROR:  column "mark14" does not exist at character 35',
            "STATEMENT:  SELECT * FROM users WHERE email = MARK14@example.com",
        ),
        id="unquoted-value-column",
    ),
    pytest.param(
        _entry("ERROR:  column u.mark15 does not exist at character 8", "STATEMENT:  SELECT u.MARK15 FROM users u"),
        id="unquoted-qualified-column",
    ),
    pytest.param(  # the end of the input: a trailing keyword is no place to stop looking back
        _entry(
            "ERROR:  syntax error at end of input at character 49",
            "STATEMENT:  SELECT * FROM users WHERE email = MARK16 AND",
        ),
        id="end-of-input",
    ),
    pytest.param(
        _entry(
            "ERROR:  syntax error at end of input at character 24",
            "QUERY:  SELECT MARK17 FROM",
            "STATEMENT:  SELECT query_to_xml($1, true, true, $2)",
        ),
        id="end-of-input-internal-query",
    ),
]


@pytest.mark.parametrize("text", LEAK_CASES)
def test_a_planted_value_never_survives(text: str) -> None:
    lines = parse_text(text)
    kept = json.dumps([spec_fields(line) for line in lines])
    assert "MARK" not in kept.upper() and "3133710001" not in kept and "4111" not in kept, kept
    assert (
        "MARK" in json.dumps([spec_fields(line) for line in parse_text(text, full_text=True)]) or "3133710001" in text
    )


def test_an_assert_is_a_functions_words_by_its_sqlstate_too() -> None:
    line = one(f'{T0} [1] a@b/c ERROR:  P0004: relation "MARK12" does not exist\n')
    assert line.message == "..." and line.sqlstate == "P0004"


def test_a_translated_unknown_column_is_reduced_by_its_sqlstate() -> None:
    # lc_messages = 'de_DE': the words are German, the SQLSTATE and the position tell it
    line = one(
        _entry(
            "FEHLER:  42703: Spalte »mark18« existiert nicht bei Zeichen 35",
            "ANWEISUNG:  SELECT * FROM users WHERE email = MARK18",
        )
    )
    assert "MARK18" not in line.statement.upper() and line.statement == "SELECT * FROM users WHERE email = $1"


def test_a_column_list_names_its_unknown_column_as_it_is() -> None:
    # INSERT's column list holds names only: `column "x" of relation "t"` is kept whole
    line = one(
        _entry(
            'ERROR:  42703: column "usr_id" of relation "users" does not exist at character 20',
            "STATEMENT:  INSERT INTO users (usr_id) VALUES (1)",
        )
    )
    assert line.message == 'column "usr_id" of relation "users" does not exist at character 20'
    assert line.statement == "INSERT INTO users (usr_id) VALUES ($1)"


def test_a_fastpath_call_is_a_statement_with_its_function_and_its_duration() -> None:
    # libpq's large-object API (psycopg2's lobject, pg_dump of large objects) calls functions by
    # the fast path: postgres.c logs their name and OID
    timed, logged = parse_text(
        f'{T0} [7] app@shop/psql LOG:  duration: 0.178 ms  fastpath function call: "lo_creat" (OID 957)\n'
        f'{T0} [7] app@shop/psql LOG:  fastpath function call: "lo_open" (OID 952)\n'
    )
    assert (timed.kind, timed.duration_ms, timed.message) == (
        "slow_query",
        0.178,
        'duration: 0.178 ms  fastpath function call: "lo_creat" (OID 957)',
    )
    assert (logged.kind, logged.message) == ("statement", 'fastpath function call: "lo_open" (OID 952)')


def test_a_datatypes_own_syntax_error_leaves_the_statement_read_as_usual() -> None:
    # "syntax error in tsvector" is 42601 too, but the statement parsed: csvlog (with the
    # SQLSTATE) and stderr (without) give the same statement
    text = (
        f'{T0} [1] a@b/c ERROR:  42601: syntax error in tsvector: "a:" at character 8\n'
        f"{T0} [1] a@b/c STATEMENT:  SELECT 'a:'::tsvector;\n"
    )
    assert one(text).statement == "SELECT $1::tsvector;"


def test_an_advisory_deadlock_keeps_its_report() -> None:
    """An advisory lock's key is numbers PostgreSQL writes (removed, but never more than its
    line): the deadlock report's other lines stay, unlike after a value that may go on."""
    line = one(
        _entry(
            "ERROR:  deadlock detected",
            "DETAIL:  Process 12 waits for ExclusiveLock on advisory lock [16384,0,1,1]; blocked by process 13.\n"
            "Process 13 waits for ExclusiveLock on advisory lock [16384,0,2,1]; blocked by process 12.\n"
            "Process 12: SELECT pg_advisory_lock(2)\nProcess 13: SELECT pg_advisory_lock(1)",
        )
    )
    assert line.detail == (
        "Process 12 waits for ExclusiveLock on advisory lock [...]; blocked by process 13.\n"
        "Process 13 waits for ExclusiveLock on advisory lock [...]; blocked by process 12.\n"
        "Process 12: SELECT pg_advisory_lock($1)\nProcess 13: SELECT pg_advisory_lock($1)"
    )
