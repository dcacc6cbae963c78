"""pgaudit's records, as a real PostgreSQL 15 with the extension writes them in all three formats.

An `AUDIT: SESSION,...` line is a `statement` line: its statement column (CSV-quoted when it
holds a comma, a quote or a line break) moves to `statement`, normalized like log_statement's;
the message keeps the other columns, and the parameters pgaudit.log_parameter adds are values.
Before the reader knew it, the record came out as kind `other` with `AUDIT` as its SQLSTATE and
the message removed whole. Each secret below is planted once: present with full text on, gone
with it off.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from forwarder.model import spec_fields
from tests.integration.parsed import agreeing_lines
from tests.pgcluster import PgClusterFactory

PREFIX = "%m [%p] %q%u@%d/%a %r "
SECRETS = ("Zirconia-4711", "Quokkaberry", "Obsidane", "Marmalux")
WORKLOAD = """
CREATE EXTENSION pgaudit;
CREATE TABLE patients (name text, diagnosis text);
INSERT INTO patients VALUES ('Zirconia-4711', 'flu, "mild"');
SELECT * FROM patients WHERE name = 'Quokkaberry';
PREPARE find(text) AS SELECT * FROM patients WHERE name = $1;
EXECUTE find('Obsidane, the "second"');
SELECT 'Marmalux
on two lines', 1;
"""


def test_pgaudit_records_are_statements_without_values(pg_cluster_factory: PgClusterFactory, pg_bin: Path) -> None:
    if not (pg_bin.parent / "lib" / "pgaudit.so").exists():
        reason = "pgaudit for PostgreSQL 15 is not installed (scripts/install-test-deps.sh installs it)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    cluster = pg_cluster_factory(
        {
            "log_line_prefix": PREFIX,
            "shared_preload_libraries": "pgaudit",
            "pgaudit.log": "read, write, ddl",
            "pgaudit.log_parameter": "on",
            "pgaudit.log_relation": "on",
        }
    )
    cluster.psql(WORKLOAD, app_name="audited")
    cluster.stop()

    kept = agreeing_lines(cluster, prefix=PREFIX, full_text=True)
    assert all(secret in json.dumps([spec_fields(line) for line in kept]) for secret in SECRETS)

    lines = agreeing_lines(cluster, prefix=PREFIX, full_text=False)
    for line in lines:
        assert not [secret for secret in SECRETS if secret in json.dumps(spec_fields(line))], line
    audit = [line for line in lines if line.message.startswith("AUDIT: ")]
    assert [(line.kind, line.sqlstate) for line in audit] == [("statement", None)] * len(audit) != []
    by_command = {(line.message.split(",")[4], line.statement) for line in audit}
    assert ("CREATE TABLE", "CREATE TABLE patients (name text, diagnosis text);") in by_command
    assert ("INSERT", "INSERT INTO patients VALUES ($1, $2);") in by_command
    assert ("SELECT", "SELECT $1, $2;") in by_command  # the statement with a line break, whole
    insert = next(line for line in audit if line.statement and line.statement.startswith("INSERT"))
    assert insert.message == "AUDIT: SESSION,3,1,WRITE,INSERT,TABLE,public.patients,<none>"
    assert insert.redacted
    # EXECUTE's parameters (pgaudit.log_parameter) are values: removed, the columns before them kept
    executed = next(line for line in audit if ",READ,SELECT," in line.message and "PREPARE" in str(line.statement))
    assert executed.message == "AUDIT: SESSION,6,1,READ,SELECT,TABLE,public.patients,..."
    assert executed.statement == "PREPARE find(text) AS SELECT * FROM patients WHERE name = $1;"
