"""Fixtures of the Ask tests; the fakes themselves live in tests/fakes/."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.fakes.model_providers import VENDORS, Rig, rig_for


@pytest.fixture(params=VENDORS)
async def rig(request: pytest.FixtureRequest) -> AsyncIterator[Rig]:
    """Each adapter (OpenAI, OpenRouter, the operator's server, Anthropic) against its fake."""
    async with rig_for(request.param) as rig:
        yield rig
