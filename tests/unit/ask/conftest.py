"""The Ask tests run against the in-process daemon of the API tests and its signed-in pages."""

from __future__ import annotations

from tests.unit.web.conftest import api, api_overrides, ui  # noqa: F401 - fixtures used by this package
