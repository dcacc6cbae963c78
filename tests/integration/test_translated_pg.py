"""Logs of real PostgreSQL 15 servers that speak German, French, Korean and Russian (`lc_messages`).

The three formats of one server give the same lines (as in test_formats_agree.py): stderr writes
the translated severities, labels, `[unknown]` and cursor positions, csvlog the translated
severity, jsonlog the English one. Every stderr line is read in the format (none is kept as
unparsed text), entries get their English severity, and no value of the workload survives
value removal. The server's processes without a database (postmaster, checkpointer) run with
LC_CTYPE C here, so their translated words come out as glibc's C locale writes them: Cyrillic
transliterated, other letters ASCII lacks as question marks, as on a server started without a
locale in its environment (translated.TRANSLITERATED, ascii_degraded).

The locales are compiled for the test with glibc's `localedef` into a directory of its own
(LOCPATH), so the machine's locales are left alone; the `locales` package has their sources.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from forwarder.pglog.translated import CATALOGS
from tests.integration.parsed import agreeing_lines, parsed_logs
from tests.pgcluster import PgClusterFactory

PREFIX = "%m [%p] %e %q%u@%d/%a %r "
SECRET = "s3cret-literal-4711"
LOCALES = ("de_DE", "fr_FR", "ko_KR", "ru_RU")  # ru: the postmaster transliterates (LC_CTYPE C)

WORKLOAD = f"""
SET log_min_duration_statement = 0;
CREATE TABLE accounts (id int PRIMARY KEY, email text UNIQUE, note text);
INSERT INTO accounts VALUES (1, 'alice@example.com', '{SECRET}');
INSERT INTO accounts VALUES (2, 'alice@example.com', 'dup');
SELECT nosuchfunc('{SECRET}');
DO $$ BEGIN RAISE WARNING 'relation "%" does not exist', '{SECRET}'; END $$;
CREATE FUNCTION lookup(x int) RETURNS int LANGUAGE plpgsql AS $$
DECLARE r int;
BEGIN
  SELECT nope INTO r FROM accounts WHERE id = x AND note = '{SECRET}';
  RETURN r;
END $$;
SELECT lookup(7);
SELECT 1 FROM accounts WHERE email = '{SECRET} ;
"""


@pytest.fixture(scope="module")
def locale_dir() -> Iterator[Path]:
    localedef = shutil.which("localedef")
    if localedef is None or not Path("/usr/share/i18n/locales/de_DE").exists():
        pytest.skip("glibc's localedef and the locales package are needed (scripts/install-test-deps.sh)")
    # Outside pytest's own tmp directory, which the server's OS user may not be able to enter.
    path = Path(tempfile.mkdtemp(prefix="pglocales-", dir="/tmp"))
    try:
        for name in LOCALES:
            subprocess.run(
                [localedef, "-i", name, "-f", "UTF-8", str(path / f"{name}.UTF-8")],
                check=True,
                capture_output=True,
                timeout=120,
            )
        for p in (path, *path.rglob("*")):
            p.chmod(0o755 if p.is_dir() else 0o644)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("locale", LOCALES)
def test_a_translated_server_reads_as_in_english(
    pg_cluster_factory: PgClusterFactory, locale_dir: Path, locale: str
) -> None:
    cluster = pg_cluster_factory({"log_line_prefix": PREFIX, "lc_messages": f"{locale}.UTF-8"}, locale_dir=locale_dir)
    cluster.psql(WORKLOAD, app_name="translated", check=False)
    cluster.query("CHECKPOINT")
    cluster.stop()  # every message written, in all three files: the lists are complete
    stderr_text = "".join(p.read_text(errors="replace") for p in cluster.log_files("log"))
    assert f" {CATALOGS[locale[:2]].severities['ERROR']}:  " in stderr_text  # the server did translate
    assert " ERROR:  " not in stderr_text

    for full_text in (False, True):
        stderr = agreeing_lines(cluster, prefix=PREFIX, full_text=full_text)
        if not full_text:
            assert not [line for line in stderr if SECRET in repr(line) or "alice@" in repr(line)]

    lines = parsed_logs(cluster, "stderr", "log", prefix=PREFIX, full_text=True)
    session = [line for line in lines if line.application == "translated"]
    errors = {line.sqlstate: line for line in session if line.severity == "ERROR"}
    assert set(errors) == {"23505", "42883", "42703", "42601"}
    assert errors["23505"].detail and "(alice@example.com)" in errors["23505"].detail
    assert errors["23505"].statement == "INSERT INTO accounts VALUES (2, 'alice@example.com', 'dup');"
    assert errors["42883"].hint  # the translated HINT line went to `hint`
    assert errors["42703"].context and errors["42703"].context.startswith("internal query: SELECT nope")
    assert errors["42601"].message.endswith(" at character 38")  # the translated position, in English
    assert {line.kind for line in errors.values()} == {"error"}
    warning = next(line for line in session if line.severity == "WARNING")
    assert warning.message == f'relation "{SECRET}" does not exist' and warning.context
    assert all(line.user == "postgres" and line.database == "postgres" for line in session)
    assert not [line for line in lines if line.user is not None and "[" in line.user]  # [unknown] in any form
