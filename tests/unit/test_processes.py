"""A test run that leaves a process running fails, names it, and does not leave it running."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.harness import poll_until

ROOT = Path(__file__).resolve().parents[2]

INNER_TEST = """
import subprocess
from pathlib import Path


def test_waits_for_its_process():
    subprocess.run(["sleep", "0"], check=True)


def test_leaves_one_running(tmp_path_factory):
    proc = subprocess.Popen(["sleep", "3600"])
    Path({pid_file!r}).write_text(str(proc.pid))
"""


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] in ("Z", "X")


def test_a_process_left_running_fails_the_run_and_is_killed(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    (tmp_path / "conftest.py").write_text("from tests.conftest import no_processes_left_behind  # noqa: F401\n")
    (tmp_path / "test_inner.py").write_text(INNER_TEST.format(pid_file=str(pid_file)))
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        # Without the installed plugins (schemathesis, hypothesis, ...) pytest starts in a fraction of the time.
        env={**os.environ, "PYTHONPATH": str(ROOT), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    pid = int(pid_file.read_text())
    assert run.returncode == 1, run.stdout + run.stderr
    assert "2 passed, 1 error" in run.stdout
    assert f"the tests left processes running (now killed):\n  pid {pid}: sleep 3600" in run.stdout
    poll_until(lambda: gone(pid), 10, "the left process to end")
