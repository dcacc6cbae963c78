"""One adapter per source of answers; each turns its vendor's stream into `base.Delta`s.

- `openai.py`: OpenAI's chat-completions API through the official SDK; also OpenRouter (the same
  API at its base URL) and the operator's own OpenAI-compatible server (Ollama, vLLM, llama.cpp).
- `anthropic.py`: Anthropic's messages API through the official SDK.
- `analyst.py`: the built-in analyst, deterministic, inside the daemon.
"""

from __future__ import annotations

from typing import Final

from forwarder.ask.providers.base import KeyCheck, Provider, ProviderName
from forwarder.config import AskConfig

# Used when an own key is stored without models (docs/ask.md lists them): (fast, deep).
DEFAULT_MODELS: Final[dict[ProviderName, tuple[str, str]]] = {
    "openai": ("gpt-4.1-mini", "gpt-4.1"),
    "anthropic": ("claude-haiku-4-5", "claude-sonnet-4-5"),
    "openrouter": ("openai/gpt-4.1-mini", "anthropic/claude-sonnet-4.5"),
}
ANALYST_MODEL: Final = "forwarder-analyst"
KEY_CHECK_TIMEOUT_SECONDS: Final = 15.0


def models_of(provider: ProviderName, fast_model: str, deep_model: str) -> tuple[str, str]:
    """The (fast, deep) models of an own key: the stored ones, else the provider's defaults."""
    fast, deep = DEFAULT_MODELS[provider]
    return fast_model or fast, deep_model or deep


def own_key_provider(name: ProviderName, api_key: str, config: AskConfig) -> Provider:
    """The provider for an organization's own key, at the base URL the config names."""
    base_url = getattr(config.provider_urls, name)
    if name == "anthropic":
        from forwarder.ask.providers.anthropic import AnthropicProvider

        return AnthropicProvider(api_key=api_key, base_url=base_url, timeout_seconds=config.answer_timeout_seconds)
    from forwarder.ask.providers.openai import OpenAIChatProvider

    return OpenAIChatProvider(
        api_key=api_key, base_url=base_url, timeout_seconds=config.answer_timeout_seconds, vendor=name
    )


def builtin_provider(config: AskConfig) -> tuple[Provider, str, str]:
    """The provider of built-in questions and its (fast, deep) models: the operator's server when
    `[ask.builtin]` names one, else the built-in analyst."""
    if config.builtin is None:
        from forwarder.ask.providers.analyst import Analyst

        return Analyst(), ANALYST_MODEL, ANALYST_MODEL
    from forwarder.ask.providers.openai import OpenAIChatProvider

    server = config.builtin
    provider = OpenAIChatProvider(
        api_key=server.read_api_key() or "none",  # the SDK wants one; local servers ignore it
        base_url=server.base_url,
        timeout_seconds=config.answer_timeout_seconds,
        vendor="builtin",
    )
    return provider, server.fast_model, server.deep_model or server.fast_model


async def check_key(name: ProviderName, api_key: str, config: AskConfig) -> KeyCheck:
    """Ask the provider whether it accepts `api_key` (at no cost: a listing, or the key's own record)."""
    base_url = getattr(config.provider_urls, name)
    if name == "anthropic":
        from forwarder.ask.providers import anthropic

        return await anthropic.check_key(api_key=api_key, base_url=base_url, timeout_seconds=KEY_CHECK_TIMEOUT_SECONDS)
    from forwarder.ask.providers import openai

    return await openai.check_key(
        api_key=api_key, base_url=base_url, timeout_seconds=KEY_CHECK_TIMEOUT_SECONDS, vendor=name
    )
