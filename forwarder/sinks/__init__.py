"""Destination kinds: one module each, registered here by their API `type`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from forwarder.sinks.base import Address, Sink, SinkEnv, url_address
from forwarder.sinks.webhook import WebhookConfig, WebhookSink


@dataclass(frozen=True, slots=True)
class SinkType:
    """What the API and the delivery layer need to know about a kind."""

    config: type[BaseModel]
    build: Callable[[Any, str | None, SinkEnv], Sink]
    # Where the kind connects, for the network guard's check when the API takes a config.
    address: Callable[[Any], Address | None]
    secret_required: bool
    secret_generated: bool  # made for the caller when not given, and shown once (the webhook's signing secret)


def _webhook(config: WebhookConfig, secret: str | None, env: SinkEnv) -> Sink:
    if not secret:
        raise ValueError("a webhook needs its signing secret")
    return WebhookSink(config, secret, env.http)


SINK_TYPES: dict[str, SinkType] = {
    "webhook": SinkType(
        WebhookConfig,
        _webhook,
        lambda c: url_address("url", c.url),
        secret_required=True,
        secret_generated=True,
    ),
}


def build_sink(kind: str, config: dict[str, Any], secret: str | None, env: SinkEnv) -> Sink:
    """A ready sink of `kind` from a stored (already validated) config."""
    t = SINK_TYPES[kind]
    return t.build(t.config.model_validate(config), secret, env)


def sink_address(kind: str, config: BaseModel) -> Address | None:
    """Where a destination of `kind` with this (validated) config connects."""
    return SINK_TYPES[kind].address(config)
