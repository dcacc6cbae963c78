"""Ask's tests run against the in-process daemon of tests/unit/api (fake clock, loopback port)."""

from tests.unit.api.conftest import Api, api, api_overrides  # noqa: F401 - fixtures used by this package
