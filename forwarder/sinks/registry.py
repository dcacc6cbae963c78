"""The table of destination kinds. Each kind's module registers its own `SinkType` when imported;
`forwarder.sinks` imports every kind module once, so the table is full once the package is."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from forwarder.sinks.base import Address, Sink, SinkEnv

C = TypeVar("C", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class SinkType(Generic[C]):
    """What the API and the delivery layer need to know about a kind."""

    kind: str  # the API's `type`, the sink's `kind`
    config: type[C]
    build: Callable[[C, str | None, SinkEnv], Sink]
    # Where the kind connects, for the network guard's check when the API takes a config.
    address: Callable[[C], Address | None]
    secret_required: bool
    secret_generated: bool  # made for the caller when not given, and shown once (the webhook's signing secret)


SINK_TYPES: dict[str, SinkType[Any]] = {}


def register(sink_type: SinkType[Any]) -> None:
    """Add a kind to SINK_TYPES; a kind registered twice is a programming error (ValueError)."""
    if sink_type.kind in SINK_TYPES:
        raise ValueError(f"destination kind {sink_type.kind!r} is registered twice")
    SINK_TYPES[sink_type.kind] = sink_type
