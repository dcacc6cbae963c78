"""A function's RAISE that copies the server's wording, and a value with newlines, leave nothing
of the user's behind, in any format a real PostgreSQL 15 writes.

The server's reports (connections, checkpoints, autovacuum, temp files) are kept whole when their
shape proves them value-free; RAISE LOG can write the same first words with anything after them,
and RAISE EXCEPTION can start like any message of the template table. A value with newlines (a
COPY field here; bind parameters alike) must not have its later lines read as messages. Each
secret below is planted once and checked: present with full text on, gone with it off. The
server's own reports of the same kinds, written in the same run, stay whole.
"""

from __future__ import annotations

import json

from forwarder.model import spec_fields
from tests.integration.parsed import FORMATS, parsed_logs
from tests.pgcluster import PgClusterFactory

PREFIX = "%m [%p] %q%u@%d/%a "
SECRETS = ("Zalgoria", "Quenbyte", "Velvetine", "Harborix", "crimsoneer", "Tangerix", "Marzipol")
SECRETS += ("Ostravix", "Quibblex", "Wombatrix", "Frobnitz", "Glimmerol")
WORKLOAD = """
DO $$ BEGIN
  RAISE LOG 'checkpoint starting: Zalgoria Quenbyte';
  RAISE LOG 'checkpoint complete: wrote 1 buffers (0.0%%); Velvetine';
  RAISE LOG 'connection authorized: user=x Harborix';
  RAISE LOG 'connection received: host=crimsoneer-7';
  RAISE LOG 'disconnection: session time: 0:00:00.000 user=patient Tangerix';
  RAISE LOG 'temporary file: path "Marzipol", size 1';
  RAISE LOG E'automatic analyze of table "x"\\nOstravix';
END $$;
DO $$ BEGIN
  RAISE EXCEPTION 'permission denied to Quibblex' USING DETAIL = 'Reason code: Wombatrix.';
END $$;
CREATE TABLE notes (note varchar(3));
COPY notes FROM STDIN WITH (FORMAT csv);
"Dear support,
execute Frobnitz
Available values: Glimmerol."
\\.
CHECKPOINT;
"""


def test_raise_and_multi_line_values_leave_nothing(pg_cluster_factory: PgClusterFactory) -> None:
    cluster = pg_cluster_factory({"log_line_prefix": PREFIX, "log_connections": "on", "log_checkpoints": "on"})
    cluster.psql(WORKLOAD, app_name="values")
    for ext in ("log", "csv", "json"):
        cluster.wait_for_log("checkpoint complete: wrote", ext)
    cluster.stop()

    for fmt, ext in FORMATS:
        planted = json.dumps(
            [spec_fields(line) for line in parsed_logs(cluster, fmt, ext, prefix=PREFIX, full_text=True)]
        )
        assert all(secret in planted for secret in SECRETS), fmt

        lines = parsed_logs(cluster, fmt, ext, prefix=PREFIX, full_text=False)
        for line in lines:
            text = json.dumps(spec_fields(line))
            assert not [secret for secret in SECRETS if secret in text], (fmt, line)
        ours = [line for line in lines if line.application == "values"]
        raised = [line for line in ours if line.context and "at RAISE" in line.context]
        assert len(raised) == 8 and {line.message for line in raised} == {"..."}, fmt
        assert next(line for line in raised if line.severity == "ERROR").detail == "...", fmt
        # The server's own reports of those kinds, from the same run, are whole.
        server = [line for line in lines if line.application != "values"]
        starting = next(line for line in server if line.message.startswith("checkpoint starting: "))
        assert starting.message == "checkpoint starting: immediate force wait" and not starting.redacted, fmt
        complete = next(line for line in server if line.message.startswith("checkpoint complete: wrote "))
        assert not complete.redacted, fmt
        authorized = "connection authorized: user=postgres database=postgres application_name=values"
        assert [line.redacted for line in server if line.message == authorized] == [False], fmt
