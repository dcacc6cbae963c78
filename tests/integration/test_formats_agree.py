"""stderr, csvlog and jsonlog written by a real PostgreSQL 15 for the same events give the same lines.

The cluster logs to all three at once (tests/pgcluster.py). The stderr prefix carries every field
the other two formats have (`%e` for the SQLSTATE, `%r` for the client), so all three can be
compared field by field, with no exception for this workload:

- `sqlstate`: a prefix without `%e` could not know it; this one has `%e` (before `%q`, so that
  processes without a session, e.g. the checkpointer, write theirs too).
- `client`: `%r` gives `host(port)`, csvlog `host:port`, jsonlog `remote_host`: all become the host.
- Message positions: stderr appends ` at character N` to the message; csvlog and jsonlog give N in
  a column of its own, which the readers append the same way.

Known differences that this workload avoids on purpose (documented in docs/parsing.md):
csvlog/jsonlog know a statement's cursor position only when they also log the statement; an
empty string and NULL are the same in csvlog; a background worker that sets `application_name`
has it in csvlog/jsonlog but not after `%q` in stderr.
"""

from __future__ import annotations

from tests.integration.parsed import FORMATS, agreeing_lines, parsed_logs
from tests.pgcluster import PgClusterFactory

PREFIX = "%m [%p] %e %q%u@%d/%a %r "
SECRET = "s3cret-literal-4711"

# One psql session; every statement is logged with its duration (log_min_duration_statement = 0
# for this session only, set first).
WORKLOAD = f'''
SET log_min_duration_statement = 0;
CREATE TABLE accounts (id int PRIMARY KEY, email text UNIQUE, note text);
INSERT INTO accounts VALUES (1, 'alice@example.com', '{SECRET}');
INSERT INTO accounts VALUES (2, 'alice@example.com', 'dup');
SELECT id,
       email,
       'multi-line {SECRET}' AS "quoted ""name"""
  FROM accounts
 WHERE note = '{SECRET}';
DO $$ BEGIN
  RAISE EXCEPTION 'custom failure %', 42
    USING DETAIL = 'detail with {SECRET}', HINT = 'try "again" later';
END $$;
CREATE FUNCTION lookup(x int) RETURNS int LANGUAGE plpgsql AS $$
DECLARE r int;
BEGIN
  SELECT nope INTO r FROM accounts WHERE id = x AND note = '{SECRET}';
  RETURN r;
END $$;
SELECT lookup(7);
SELECT 1 FROM accounts WHERE email = '{SECRET} ;
'''


def test_stderr_csvlog_and_jsonlog_give_the_same_lines(pg_cluster_factory: PgClusterFactory) -> None:
    cluster = pg_cluster_factory({"log_line_prefix": PREFIX})
    cluster.psql(WORKLOAD, app_name="formats")
    # A TCP session, so that `client` is an address and not [local].
    cluster.query("CREATE ROLE bob LOGIN PASSWORD 'bob-pw'")
    cluster.psql("SELECT 1/0;", user="bob", password="bob-pw", host_tcp=True, app_name="tcp")
    cluster.psql("SELECT 1", user="bob", password="wrong", host_tcp=True, check=False)
    for ext in ("log", "csv", "json"):
        cluster.wait_for_log(r"password authentication failed", ext)
    cluster.stop()  # every message written, in all three files: the lists are complete

    for full_text in (False, True):
        agreeing_lines(cluster, prefix=PREFIX, full_text=full_text)

    lines = parsed_logs(cluster, "csvlog", "csv", prefix=PREFIX, full_text=True)
    assert not [line for line in lines if line.kind == "other" and line.pid is None]  # no malformed record

    # The workload's events are there, with the fields that make the comparison meaningful (values
    # kept: what value removal leaves is redact.py's business, tested on its own).
    raised = next(line for line in lines if line.sqlstate == "P0001")
    assert (raised.message, raised.detail, raised.hint) == (
        "custom failure 42",
        f"detail with {SECRET}",
        'try "again" later',
    )
    assert raised.context == "PL/pgSQL function inline_code_block line 2 at RAISE"
    dup = next(line for line in lines if line.sqlstate == "23505")
    assert dup.detail == "Key (email)=(alice@example.com) already exists."
    assert dup.statement == "INSERT INTO accounts VALUES (2, 'alice@example.com', 'dup');"
    plpgsql = next(line for line in lines if line.sqlstate == "42703")
    assert plpgsql.message == 'column "nope" does not exist at character 8'
    assert plpgsql.context == (
        f"internal query: SELECT nope        FROM accounts WHERE id = x AND note = '{SECRET}'\n"
        "PL/pgSQL function lookup(integer) line 4 at SQL statement"
    )
    slow = [line for line in lines if line.kind == "slow_query" and line.application == "formats"]
    assert len(slow) == 5  # the statements that did not fail
    assert all(line.duration_ms is not None for line in slow)
    multi = next(line for line in slow if line.statement and line.statement.startswith("SELECT id,\n"))
    assert multi.statement == (
        f'SELECT id,\n       email,\n       \'multi-line {SECRET}\' AS "quoted ""name"""\n  FROM accounts\n'
        f" WHERE note = '{SECRET}';"
    )
    syntax = next(line for line in lines if line.sqlstate == "42601")
    assert syntax.message.endswith("at character 38")
    tcp = next(line for line in lines if line.sqlstate == "22012")
    assert (tcp.client, tcp.user, tcp.application) == ("127.0.0.1", "bob", "tcp")
    auth = next(line for line in lines if line.kind == "auth_failure")
    assert (auth.sqlstate, auth.client, auth.user) == ("28P01", "127.0.0.1", "bob")
    assert any(line.kind == "checkpoint" for line in lines)
    assert any(line.kind == "connection" and line.client == "[local]" for line in lines)

    # With values removed, no format lets the workload's literal through.
    for fmt, ext in FORMATS:
        for line in parsed_logs(cluster, fmt, ext, prefix=PREFIX, full_text=False):
            assert SECRET not in repr(line), (fmt, line)


def test_a_database_name_holding_a_newline_keeps_its_sessions_lines(pg_cluster_factory: PgClusterFactory) -> None:
    """PostgreSQL writes %d raw: a database named with a newline cuts the prefix of every line of
    its sessions in two (a user with CREATEDB can choose such a name). stderr must still give
    what csvlog and jsonlog give: each entry apart, with its database, its values removed."""
    cluster = pg_cluster_factory({"log_line_prefix": PREFIX})
    name = "nl\ndb"
    cluster.query(f'CREATE DATABASE "{name}"')
    cluster.psql(f"SELECT '{SECRET}'::int;", db=name, app_name="newline", check=False)
    cluster.stop()

    for full_text in (False, True):
        stderr = agreeing_lines(cluster, prefix=PREFIX, full_text=full_text)
        error = next(line for line in stderr if line.sqlstate == "22P02")
        assert (error.database, error.application) == (name, "newline")
        assert (SECRET in repr(error)) is full_text


def test_a_user_named_like_an_email_address_is_read_whole(pg_cluster_factory: PgClusterFactory) -> None:
    """`%u@%d` with a role named `alice@example.com` (IAM and Entra ID logins are named so): stderr
    gives the user and database csvlog and jsonlog give, not `alice` and `example.com@shop`; an
    application name holding "@" and "/" stays whole too."""
    cluster = pg_cluster_factory({"log_line_prefix": PREFIX})
    cluster.query('CREATE ROLE "alice@example.com" LOGIN SUPERUSER')
    cluster.query("CREATE DATABASE shop")
    cluster.psql("SELECT 1/0;", db="shop", user="alice@example.com", app_name="my app/v2 @x", check=False)
    cluster.stop()

    stderr = agreeing_lines(cluster, prefix=PREFIX, full_text=False)
    error = next(line for line in stderr if line.sqlstate == "22012")
    assert (error.user, error.database, error.application) == ("alice@example.com", "shop", "my app/v2 @x")


def test_a_latin1_databases_text_is_read_as_written(pg_cluster_factory: PgClusterFactory) -> None:
    """PostgreSQL writes a statement and a message's values to the server log in the database's
    encoding: a LATIN1 database's "café" is the byte 0xE9 there. Each format reads it as "é", not a
    replacement character (which would lose it)."""
    cluster = pg_cluster_factory({"log_line_prefix": PREFIX})
    cluster.query("CREATE DATABASE lat ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0")
    # (the client speaks UTF-8: the server converts its text to LATIN1, and logs it so)
    cluster.psql(
        "SET client_encoding = 'UTF8';\nSELECT 'café'::int AS \"naïve\";", db="lat", app_name="latin1", check=False
    )
    cluster.stop()

    stderr = agreeing_lines(cluster, prefix=PREFIX, full_text=True)
    error = next(line for line in stderr if line.sqlstate == "22P02")
    assert error.message == 'invalid input syntax for type integer: "café" at character 8'
    assert error.statement == "SELECT 'café'::int AS \"naïve\";"
