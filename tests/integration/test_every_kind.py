"""Every kind of SPEC 2.1 from a real PostgreSQL 15, the same in stderr, csvlog and jsonlog, no secret out.

One cluster (module scope) runs `workload.run_workload` (see its docstring for what each part
logs), is stopped, and its three log files are parsed with `make_reader(..., full_text=False)`,
one reader per file, as the daemon does. The tests then check, per format:

1. `test_formats_give_the_same_entries`: csvlog and jsonlog give the entries stderr gives: same
   count, and pairwise every LogLine field equal. Entries are compared in (time, pid) order with
   ties in file order: the logging collector may interleave two processes' entries differently
   in the three files, but one process's entries keep their order. What stderr cannot know:
   the prefix `%m [%p] %q%u@%d/%a %r %e ` stops at `%q` for processes without a client session
   (postmaster, checkpointer, autovacuum), so for those entries stderr has no sqlstate (csv/json
   do: 00000 for LOG, which the reader reports as None anyway); that one field is compared only
   for session entries (stderr knows the client). Everything else (time to the millisecond, pid,
   user, database, application, client host, message, detail, hint, context, statement,
   duration_ms, redacted, fingerprint) must be equal. Fields only csv/json have (backend_type,
   query_id, leader_pid, session id, internal position) are not part of LogLine.
2. `test_every_kind_appears`: all 13 kinds, `duration_ms` on every slow_query and lock_wait.
3. `test_no_secret_leaks`: no field of any entry contains `s3cr3t` or a secret number
   (`test_workload_wrote_its_secrets` first proves PostgreSQL did log them).
4. `test_counts_per_kind`: the counts the workload controls, exactly; background noise
   (checkpoints, autovacuum, connections) at least what the workload caused.
5. `test_forwarder_parse_cli`: `forwarder parse --format F` (issue 3's "done when") on the
   concatenated files prints exactly those entries, and no secret.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from forwarder.model import KINDS, LogLine, spec_fields
from forwarder.pglog import Format, make_reader, parse_stream
from tests.integration import workload as wl
from tests.pgcluster import PgCluster

FORMATS: dict[Format, str] = {"stderr": "log", "csvlog": "csv", "jsonlog": "json"}
TEXT_FIELDS = [name for name, t in LogLine.__annotations__.items() if t in ("str | None", "str")]
CHUNK = 64 * 1024


@dataclass
class Result:
    """The workload's logs: raw text and parsed lines (or why parsing failed) per format."""

    raw: dict[Format, bytes]  # the files of each format, concatenated in name (= time) order
    lines: dict[Format, list[LogLine]]
    failures: dict[Format, str]
    seconds: float


def parse_files(paths: list[Path], fmt: Format) -> list[LogLine]:
    out: list[LogLine] = []
    for path in paths:
        reader = make_reader(fmt, line_prefix=wl.PREFIX, timezone="UTC", full_text=False)
        data = path.read_bytes()
        out.extend(parse_stream(reader, (data[i : i + CHUNK] for i in range(0, len(data), CHUNK))))
    # Stable: one process's entries keep their order; see the module docstring.
    return sorted(out, key=lambda line: (line.time_us, line.pid or 0))


@pytest.fixture(scope="module")
def result(pg_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Result]:
    base = tmp_path_factory.mktemp("every_kind")
    cluster = PgCluster(base / "pg", wl.SETTINGS, pg_bin=pg_bin)
    try:
        cluster.start()
        run = wl.run_workload(cluster, base)
        raw: dict[Format, bytes] = {}
        lines: dict[Format, list[LogLine]] = {}
        failures: dict[Format, str] = {}
        for fmt, ext in FORMATS.items():
            raw[fmt] = b"".join(p.read_bytes() for p in cluster.log_files(ext))
            try:
                lines[fmt] = parse_files(cluster.log_files(ext), fmt)
            except Exception as exc:  # reported by every test of that format
                failures[fmt] = f"parsing the {fmt} files raised {exc!r}"
        yield Result(raw, lines, failures, run.seconds)
    finally:
        cluster.close()


def lines_of(result: Result, fmt: Format) -> list[LogLine]:
    if fmt in result.failures:
        pytest.fail(result.failures[fmt])
    return result.lines[fmt]


def show(line: LogLine) -> str:
    return repr({k: v for k, v in line._asdict().items() if v not in (None, False)})


# ----------------------------------------------------------------- 0. the workload did its job


def test_workload_wrote_its_secrets(result: Result) -> None:
    """PostgreSQL itself logged every secret the leak test looks for (else that test proves nothing)."""
    for fmt, data in result.raw.items():
        text = data.decode("utf-8", "replace")
        missing = [s for s in wl.SECRETS_IN_RAW_LOG if s not in text]
        assert not missing, f"the {fmt} log lacks {missing}: the workload did not do what it should"
    assert result.seconds < 60, f"the workload took {result.seconds:.1f}s"


# ----------------------------------------------------------------- 1. same entries in every format


def _differences(a: LogLine, b: LogLine) -> dict[str, tuple[object, object]]:
    out: dict[str, tuple[object, object]] = {}
    for name in LogLine._fields:
        va, vb = getattr(a, name), getattr(b, name)
        if name == "sqlstate" and a.client is None and va is None:
            continue  # stderr's prefix stops at %q outside a session: it cannot know the sqlstate
        if va != vb:
            out[name] = (va, vb)
    return out


@pytest.mark.parametrize("fmt", ["csvlog", "jsonlog"])
def test_formats_give_the_same_entries(result: Result, fmt: Format) -> None:
    stderr = lines_of(result, "stderr")
    other = lines_of(result, fmt)
    summary = Counter((x.kind, x.pid) for x in stderr) - Counter((x.kind, x.pid) for x in other)
    extra = Counter((x.kind, x.pid) for x in other) - Counter((x.kind, x.pid) for x in stderr)
    assert len(other) == len(stderr), (
        f"stderr has {len(stderr)} entries, {fmt} {len(other)}; "
        f"(kind, pid) only in stderr: {dict(summary)}, only in {fmt}: {dict(extra)}"
    )
    problems = []
    for i, (a, b) in enumerate(zip(stderr, other, strict=True)):
        diff = _differences(a, b)
        if diff:
            problems.append(
                f"#{i} {a.kind}/{b.kind}: " + "; ".join(f"{k}: {x!r} != {y!r}" for k, (x, y) in diff.items())
            )
    assert not problems, f"{len(problems)} of {len(stderr)} entries differ (stderr != {fmt}):\n" + "\n".join(
        problems[:40]
    )


# ----------------------------------------------------------------- 2. every kind


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_every_kind_appears(result: Result, fmt: Format) -> None:
    lines = lines_of(result, fmt)
    kinds = Counter(x.kind for x in lines)
    assert set(KINDS) <= set(kinds), f"missing kinds: {sorted(set(KINDS) - set(kinds))}; found {dict(kinds)}"
    no_duration = [show(x) for x in lines if x.kind in ("slow_query", "lock_wait") and x.duration_ms is None]
    assert not no_duration, "slow_query/lock_wait without duration_ms:\n" + "\n".join(no_duration)
    stray = [show(x) for x in lines if x.kind not in ("slow_query", "lock_wait") and x.duration_ms is not None]
    assert not stray, "duration_ms on other kinds:\n" + "\n".join(stray)


# ----------------------------------------------------------------- 3. no secret leaves


def leaks(line: LogLine) -> list[str]:
    found = []
    for name in TEXT_FIELDS:
        value = getattr(line, name)
        if not isinstance(value, str):
            continue
        if wl.SECRET_MARK in value.lower() or any(n in value for n in wl.SECRET_NUMBERS):
            found.append(name)
    return found


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_no_secret_leaks(result: Result, fmt: Format) -> None:
    bad = [f"{leaks(x)} in {show(x)}" for x in lines_of(result, fmt) if leaks(x)]
    assert not bad, f"{len(bad)} entries leak a secret (fields, then the entry):\n" + "\n".join(bad)


# ----------------------------------------------------------------- 4. counts


Pred = Callable[[LogLine], bool]


def app(name: str, kind: str | None = None) -> Pred:
    return lambda x: x.application == name and (kind is None or x.kind == kind)


def kind_with(kind: str, text: str = "", sqlstate: str | None = None) -> Pred:
    return lambda x: x.kind == kind and text in x.message and (sqlstate is None or x.sqlstate == sqlstate)


def session_errors(x: LogLine) -> bool:
    return x.kind == "error" and x.application is not None


# (what, which entries, expected count, exact?) — exact where the workload alone causes them.
EXPECTED: list[tuple[str, Pred, int, bool]] = [
    ("errors of the errors session", app(wl.APP_ERRORS, "error"), wl.ERRORS, True),
    ("others of the errors session (COMMIT warning, RAISE WARNING/LOG)", app(wl.APP_ERRORS, "other"), wl.OTHERS, True),
    ("every other entry", kind_with("other"), wl.OTHERS, True),
    ("unique violation on email", kind_with("error", 'unique constraint "customers_email_key"', "23505"), 1, True),
    ("unique violation in plpgsql", kind_with("error", 'unique constraint "customers_pkey"', "23505"), 1, True),
    ("not-null violation", kind_with("error", "not-null constraint", "23502"), 1, True),
    ("check violation", kind_with("error", 'check constraint "customers_age_check"', "23514"), 1, True),
    (
        "foreign key violation",
        kind_with("error", 'foreign key constraint "orders_customer_email_fkey"', "23503"),
        1,
        True,
    ),
    ("COPY with an extra column 22P04", kind_with("error", "extra data after last expected column", "22P04"), 1, True),
    ("invalid text representation 22P02 (cast, json, COPY, pgbench bind)", kind_with("error", "", "22P02"), 4, True),
    ("syntax errors 42601", kind_with("error", "syntax error at or near", "42601"), 3, True),
    ("RAISE EXCEPTION P0001", kind_with("error", "", "P0001"), 1, True),
    ("division by zero", kind_with("error", "division by zero", "22012"), 1, True),
    ("out of range 22003", kind_with("error", "", "22003"), 1, True),
    (
        "invalid json 22P02 from the errors session",
        lambda x: x.application == wl.APP_ERRORS and "json" in x.message,
        1,
        True,
    ),
    (
        "errors of all sessions",
        session_errors,
        wl.ERRORS + wl.LOGSTMT_ERRORS + wl.PGBENCH_ERRORS + 1,  # + the end marker
        True,
    ),
    ("slow statements of role slow in psql", app(wl.APP_SLOW, "slow_query"), wl.SLOW_PSQL, True),
    ("slow parse/bind/execute of pgbench", app(wl.APP_PGBENCH, "slow_query"), wl.PGBENCH_SLOW, True),
    ("every slow_query", kind_with("slow_query"), wl.SLOW_PSQL + wl.PGBENCH_SLOW, True),
    ("pgbench's failing bind", app(wl.APP_PGBENCH, "error"), wl.PGBENCH_ERRORS, True),
    ("log_statement lines", kind_with("statement"), wl.LOGSTMT_STATEMENTS, True),
    ("log_statement lines of the session", app(wl.APP_LOGSTMT, "statement"), wl.LOGSTMT_STATEMENTS, True),
    ("errors of the log_statement session", app(wl.APP_LOGSTMT, "error"), wl.LOGSTMT_ERRORS, True),
    ("auth failures", kind_with("auth_failure"), wl.AUTH_FAILURES, True),
    (
        "auth failures 28P01 (wrong password, unknown role over TCP, dblink)",
        kind_with("auth_failure", "", "28P01"),
        3,
        True,
    ),
    (
        "auth failures 28000 (role does not exist, reject, no pg_hba line)",
        kind_with("auth_failure", "", "28000"),
        3,
        True,
    ),
    ("too many connections", kind_with("too_many_connections", "", "53300"), 2, True),
    ("reserved slots", kind_with("too_many_connections", "remaining connection slots are reserved"), 1, True),
    ("sorry, too many clients", kind_with("too_many_connections", "sorry, too many clients already"), 1, True),
    ("deadlock", kind_with("deadlock", "deadlock detected", "40P01"), 1, True),
    ("deadlock victim", app(wl.APP_DEADLOCK_B, "deadlock"), 1, True),
    ("lock waits", kind_with("lock_wait"), wl.LOCK_WAITS_LOCK + wl.LOCK_WAITS_DEADLOCK, True),
    ("lock waits of the waiter", app(wl.APP_LOCK_WAITER, "lock_wait"), wl.LOCK_WAITS_LOCK, True),
    ("lock waits of deadlock session A (still waiting, acquired)", app(wl.APP_DEADLOCK_A, "lock_wait"), 2, True),
    ("lock waits of deadlock session B (detected deadlock)", app(wl.APP_DEADLOCK_B, "lock_wait"), 1, True),
    ("temp file of the sort", app(wl.APP_TEMP, "temp_file"), 1, True),
    ("every temp file", kind_with("temp_file"), 1, True),
    ("checkpoint starts", kind_with("checkpoint", "checkpoint starting:"), 3, False),
    ("shutdown checkpoints (restart, stop)", kind_with("checkpoint", "shutdown"), 2, True),
    ("checkpoint completes", kind_with("checkpoint", "checkpoint complete:"), 3, False),
    ("autovacuum of shop.public.vac", kind_with("autovacuum", "shop.public.vac"), 1, False),
    ("SIGHUP", kind_with("server", "received SIGHUP"), 1, True),
    ("parameter changed", kind_with("server", '"deadlock_timeout" changed'), 1, True),
    ("fast shutdown requests (restart, stop)", kind_with("server", "received fast shutdown request"), 2, True),
    ("ready to accept connections (start, restart)", kind_with("server", "ready to accept connections"), 2, True),
    ("shut down (restart, stop)", kind_with("server", "database system is shut down"), 2, True),
    ("connection received", kind_with("connection", "connection received:"), 20, False),
    ("connection authorized", kind_with("connection", "connection authorized:"), 20, False),
    ("connection authenticated (the good TCP login)", kind_with("connection", "connection authenticated:"), 1, True),
    (
        "disconnection of the errors session",
        lambda x: x.application == wl.APP_ERRORS and x.message.startswith("disconnection"),
        1,
        True,
    ),
    ("end marker", app(wl.APP_MARKER, "error"), 1, True),
]


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_counts_per_kind(result: Result, fmt: Format) -> None:
    lines = lines_of(result, fmt)
    problems = []
    for what, pred, expected, exact in EXPECTED:
        hits = [x for x in lines if pred(x)]
        if (len(hits) != expected) if exact else (len(hits) < expected):
            shown = "\n    ".join(show(x) for x in hits[:8])
            problems.append(f"{what}: {len(hits)}, expected {'' if exact else '>= '}{expected}\n    {shown}")
    assert not problems, f"{len(problems)} counts wrong in {fmt}:\n" + "\n".join(problems)


# ----------------------------------------------------------------- 5. the CLI


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_forwarder_parse_cli(result: Result, fmt: Format) -> None:
    expected = lines_of(result, fmt)
    argv = [sys.executable, "-m", "forwarder", "parse", "--format", fmt, "--prefix", wl.PREFIX, "--timezone", "UTC"]
    proc = subprocess.run(argv, input=result.raw[fmt], capture_output=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    printed = [json.loads(x) for x in proc.stdout.splitlines()]
    assert len(printed) == len(expected), (
        f"forwarder parse printed {len(printed)} entries, the readers gave {len(expected)}"
    )

    def key(d: dict[str, object]) -> str:
        return json.dumps(d, sort_keys=True)

    want = sorted((spec_fields(x) for x in expected), key=key)
    assert sorted(printed, key=key) == want
    leaked = [line for line in proc.stdout.decode(errors="replace").splitlines() if wl.SECRET_MARK in line.lower()]
    assert not leaked, "secrets in `forwarder parse` output:\n" + "\n".join(leaked)
