"""Anthropic messages through the `anthropic` SDK.

Placeholder: the adapter is being written (see docs/ask.md when it lands).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from forwarder.ask.providers.base import Delta, Failed, KeyCheck, ModelRequest


class AnthropicProvider:
    def __init__(self, *, api_key: str, base_url: str, timeout_seconds: float) -> None:
        self._vendor = "anthropic"

    async def stream(self, request: ModelRequest) -> AsyncIterator[Delta]:
        yield Failed("provider_error", f"the {self._vendor} adapter is not available")

    async def aclose(self) -> None:
        return None


async def check_key(*, api_key: str, base_url: str, timeout_seconds: float) -> KeyCheck:
    return KeyCheck("unreachable", "the adapter is not available")
