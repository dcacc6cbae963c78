"""Fixtures for tests against a real PostgreSQL 15; every test in this directory is `integration`."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.pgcluster import PgCluster, PgClusterFactory, find_pg_bin, missing_requirement

_HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test collected from tests/integration with `integration`, and those that start a
    PostgreSQL server with `postgres` too."""
    for item in items:
        if item.path.resolve().parent == _HERE or _HERE in item.path.resolve().parents:
            item.add_marker(pytest.mark.integration)
            if "pg_bin" in getattr(item, "fixturenames", ()):  # every way to a cluster asks for pg_bin
                item.add_marker(pytest.mark.postgres)


@pytest.fixture(scope="session")
def pg_bin() -> Path:
    """PostgreSQL 15's bin directory; skips the test when PostgreSQL 15 cannot be run here."""
    reason = missing_requirement()
    bin_dir = find_pg_bin()
    if reason is not None or bin_dir is None:
        if os.environ.get("CI"):
            # CI installs PostgreSQL through `make test`; a skip there would hide the tests that matter.
            pytest.fail(f"{reason or 'PostgreSQL 15 is not installed'} (CI must run these tests)")
        pytest.skip(reason or "PostgreSQL 15 is not installed")
    return Path(bin_dir)


@pytest.fixture
def pg_cluster_factory(pg_bin: Path, tmp_path: Path) -> Iterator[PgClusterFactory]:
    """Make started PgCluster instances under tmp_path; all are closed when the test ends.

    Call as ``make(settings=None, *, start=True, hba=None, name=None, locale_dir=None)``.
    """
    clusters: list[PgCluster] = []
    stack = ExitStack()  # closes every cluster even when closing one of them fails

    def make(
        settings: Mapping[str, str | int] | None = None,
        *,
        start: bool = True,
        hba: str | None = None,
        name: str | None = None,
        locale_dir: Path | None = None,
    ) -> PgCluster:
        cluster = PgCluster(
            tmp_path / (name or f"pg{len(clusters)}"), settings, hba=hba, pg_bin=pg_bin, locale_dir=locale_dir
        )
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
