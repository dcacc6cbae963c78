"""auto_explain's plans, as a real PostgreSQL 15 writes them in each `auto_explain.log_format`.

A plan entry is a `slow_query` line with its duration; its query text, found in every plan
format (text, JSON, YAML, XML), is its statement, normalized like any other, so auto_explain's
slow statements are grouped by statement as log_min_duration_statement's are. The plan itself,
whose filters hold the query's values, keeps only its first line unless full text is on. Before,
the statement was empty and every plan of every statement was one group.
"""

from __future__ import annotations

import json

import pytest

from forwarder.model import spec_fields
from tests.integration.parsed import agreeing_lines
from tests.pgcluster import PgClusterFactory

PREFIX = "%m [%p] %q%u@%d/%a %r "
SECRET = "alice-7791@example.com"
QUERY = f"SELECT id FROM users WHERE email = '{SECRET}'\n  AND id > 5 AND note <> '<&>';"


@pytest.mark.parametrize("plan_format", ["text", "json", "yaml", "xml"])
def test_a_plans_query_text_is_its_statement(pg_cluster_factory: PgClusterFactory, plan_format: str) -> None:
    cluster = pg_cluster_factory(
        {
            "log_line_prefix": PREFIX,
            "shared_preload_libraries": "auto_explain",
            "auto_explain.log_min_duration": 0,
            "auto_explain.log_analyze": "on",
            "auto_explain.log_format": plan_format,
        }
    )
    cluster.psql(f"CREATE TABLE users (id int, email text, note text);\n{QUERY}\n", app_name="explained")
    cluster.stop()

    full = agreeing_lines(cluster, prefix=PREFIX, full_text=True)
    (plan,) = [line for line in full if line.message.startswith("duration: ") and "users WHERE" in str(line.statement)]
    assert plan.statement == QUERY and plan.kind == "slow_query" and plan.duration_ms is not None

    lines = agreeing_lines(cluster, prefix=PREFIX, full_text=False)
    assert SECRET not in json.dumps([spec_fields(line) for line in lines])
    (plan,) = [line for line in lines if line.message.startswith("duration: ") and line.statement]
    assert plan.statement == "SELECT id FROM users WHERE email = $1\n  AND id > $2 AND note <> $3;"
    assert plan.message.endswith("  plan:\n...") and plan.redacted
