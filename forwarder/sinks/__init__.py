"""Destination kinds: one module each, registered here by their API `type`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from forwarder.sinks._http import HttpSender
from forwarder.sinks.base import Sink
from forwarder.sinks.webhook import WebhookConfig, WebhookSink


@dataclass(frozen=True, slots=True)
class SinkType:
    """What the API and the delivery layer need to know about a kind."""

    config: type[BaseModel]
    build: Callable[[Any, str | None, HttpSender], Sink]
    url_field: str | None  # the config key holding the receiver's URL (checked by the network guard)
    secret_required: bool
    secret_generated: bool  # made for the caller when not given, and shown once (the webhook's signing secret)


def _webhook(config: WebhookConfig, secret: str | None, http: HttpSender) -> Sink:
    if not secret:
        raise ValueError("a webhook needs its signing secret")
    return WebhookSink(config, secret, http)


SINK_TYPES: dict[str, SinkType] = {
    "webhook": SinkType(WebhookConfig, _webhook, "url", secret_required=True, secret_generated=True),
}


def build_sink(kind: str, config: dict[str, Any], secret: str | None, http: HttpSender) -> Sink:
    """A ready sink of `kind` from a stored (already validated) config."""
    t = SINK_TYPES[kind]
    return t.build(t.config.model_validate(config), secret, http)
