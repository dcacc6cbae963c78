"""Fixtures for tests against a real PostgreSQL 15; every test in this directory is `integration`."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from contextlib import ExitStack
from pathlib import Path

import pytest

# tests/integration has no __init__.py, so pytest does not put the repository root on sys.path for
# it; do it here so `tests.pgcluster` imports the same way from conftest, tests and other helpers.
_REPO_ROOT = Path(__file__).resolve().parents[2]
if str(_REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(_REPO_ROOT))

from tests.pgcluster import PgCluster, PgClusterFactory, find_pg_bin, missing_requirement  # noqa: E402

_HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test collected from tests/integration with `integration`."""
    for item in items:
        if item.path.resolve().parent == _HERE or _HERE in item.path.resolve().parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def pg_bin() -> Path:
    """PostgreSQL 15's bin directory; skips the test when PostgreSQL 15 cannot be run here."""
    reason = missing_requirement()
    bin_dir = find_pg_bin()
    if reason is not None or bin_dir is None:
        pytest.skip(reason or "PostgreSQL 15 is not installed")
    return Path(bin_dir)


@pytest.fixture
def pg_cluster_factory(pg_bin: Path, tmp_path: Path) -> Iterator[PgClusterFactory]:
    """Make started PgCluster instances under tmp_path; all are closed when the test ends.

    Call as ``make(settings=None, *, start=True, hba=None, name=None)``.
    """
    clusters: list[PgCluster] = []
    stack = ExitStack()  # closes every cluster even when closing one of them fails

    def make(
        settings: Mapping[str, str | int] | None = None,
        *,
        start: bool = True,
        hba: str | None = None,
        name: str | None = None,
    ) -> PgCluster:
        cluster = PgCluster(tmp_path / (name or f"pg{len(clusters)}"), settings, hba=hba, pg_bin=pg_bin)
        clusters.append(cluster)
        stack.callback(cluster.close)
        if start:
            cluster.start()
        return cluster

    with stack:
        yield make


@pytest.fixture
def pg_cluster(pg_cluster_factory: PgClusterFactory) -> PgCluster:
    """One started cluster with the default settings."""
    return pg_cluster_factory()
