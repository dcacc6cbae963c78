"""Ask's tests run against the in-process daemon of tests/unit/api (fake clock, loopback port), its
pages signed in (tests/unit/web), and the fake model providers of tests/fakes/."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.fakes.model_providers import VENDORS, Rig, rig_for
from tests.unit.api.conftest import Api, api, api_overrides  # noqa: F401 - fixtures used by this package
from tests.unit.web.conftest import ui  # noqa: F401 - fixtures used by this package


@pytest.fixture(params=VENDORS)
async def rig(request: pytest.FixtureRequest) -> AsyncIterator[Rig]:
    """Each adapter (OpenAI, OpenRouter, the operator's server, Anthropic) against its fake."""
    async with rig_for(request.param) as rig:
        yield rig
