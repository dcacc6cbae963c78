"""Fixtures every test gets."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.processes import kill, leftovers


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
