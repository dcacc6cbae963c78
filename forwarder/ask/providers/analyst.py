"""The built-in analyst: deterministic answers planned from the question and rendered from tool results.

Placeholder: being written.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from forwarder.ask.providers.base import Delta, Finished, ModelRequest, TextDelta


class Analyst:
    async def stream(self, request: ModelRequest) -> AsyncIterator[Delta]:
        yield TextDelta("The built-in analyst is not available yet.")
        yield Finished(request.model)

    async def aclose(self) -> None:
        return None
