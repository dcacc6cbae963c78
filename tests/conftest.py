"""Fixtures every test gets."""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Iterator

import pytest

from tests.processes import kill, leftovers

# The test run adopts what its processes leave behind (Linux's child subreaper, prctl(2)): a
# process whose parent dies (a daemon a test SIGKILLs, and its parse worker) is re-parented to
# pytest rather than to PID 1, so the check below still sees it when it outlives the test.
PR_SET_CHILD_SUBREAPER = 36
if sys.platform == "linux":
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


@pytest.fixture(scope="session", autouse=True)
def no_processes_left_behind() -> Iterator[None]:
    """Fail the run when a process it started is still alive at its end (then kill it)."""
    yield
    alive = leftovers()
    if alive:
        kill(alive)
        pytest.fail(
            "the tests left processes running (now killed):\n" + "\n".join(f"  {p}" for p in alive), pytrace=False
        )
