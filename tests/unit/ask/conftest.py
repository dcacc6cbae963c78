"""Ask's tests run against the in-process daemon of tests/unit/api (fake clock, loopback port), and
its pages signed in (tests/unit/web)."""

from tests.unit.api.conftest import Api, api, api_overrides  # noqa: F401 - fixtures used by this package
from tests.unit.web.conftest import ui  # noqa: F401 - fixtures used by this package
