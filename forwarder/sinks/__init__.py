"""Destination kinds: one module each, registered by their API `type` (see registry.py)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

# Imported for their registration: each kind's module registers its SinkType at its end.
from forwarder.sinks import better_stack, datadog, elasticsearch, loki, syslog, webhook  # noqa: F401
from forwarder.sinks.base import Address, Sink, SinkEnv
from forwarder.sinks.registry import SINK_TYPES, SinkType, register

__all__ = ["SINK_TYPES", "SinkType", "build_sink", "register", "sink_address", "validated_config"]


def validated_config(kind: str, config: dict[str, Any]) -> dict[str, Any]:
    """`config` checked against its kind's model and normalized as it is stored; raises ValidationError."""
    model: BaseModel = SINK_TYPES[kind].config.model_validate(config)
    return model.model_dump(mode="json", exclude_none=True)


def build_sink(kind: str, config: dict[str, Any], secret: str | None, env: SinkEnv) -> Sink:
    """A ready sink of `kind` from a stored (already validated) config."""
    t = SINK_TYPES[kind]
    return t.build(t.config.model_validate(config), secret, env)


def sink_address(kind: str, config: BaseModel) -> Address | None:
    """Where a destination of `kind` with this (validated) config connects."""
    return SINK_TYPES[kind].address(config)
