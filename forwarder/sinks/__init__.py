"""Destination kinds: one module each, registered here by their API `type`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from forwarder.sinks.base import Address, Sink, SinkEnv, url_address
from forwarder.sinks.better_stack import BetterStackConfig, BetterStackSink
from forwarder.sinks.datadog import DatadogConfig, DatadogSink
from forwarder.sinks.elasticsearch import ElasticsearchConfig, ElasticsearchSink
from forwarder.sinks.loki import LokiConfig, LokiSink
from forwarder.sinks.syslog import SyslogConfig, SyslogSink
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


def _datadog(config: DatadogConfig, secret: str | None, env: SinkEnv) -> Sink:
    if not secret:
        raise ValueError("a datadog destination needs its API key")
    return DatadogSink(config, secret, env.http)


def _better_stack(config: BetterStackConfig, secret: str | None, env: SinkEnv) -> Sink:
    if not secret:
        raise ValueError("a better_stack destination needs its source token")
    return BetterStackSink(config, secret, env.http)


def _elasticsearch(config: ElasticsearchConfig, secret: str | None, env: SinkEnv) -> Sink:
    if not secret:
        raise ValueError("an elasticsearch destination needs its API key or password")
    return ElasticsearchSink(config, secret, env.http, env.store_id)


def _loki(config: LokiConfig, secret: str | None, env: SinkEnv) -> Sink:
    # A Loki on a private network often has no auth: then there is no secret and no Authorization.
    return LokiSink(config, secret, env.http)


def _syslog(config: SyslogConfig, secret: str | None, env: SinkEnv) -> Sink:
    # The secret is the client certificate's private key, needed only with client_certificate_pem.
    return SyslogSink(config, secret, env.open_connection)


SINK_TYPES: dict[str, SinkType] = {
    "webhook": SinkType(
        WebhookConfig,
        _webhook,
        lambda c: url_address("url", c.url),
        secret_required=True,
        secret_generated=True,
    ),
    "datadog": SinkType(
        DatadogConfig,
        _datadog,
        lambda c: url_address("url" if c.url else "site", c.intake_url),
        secret_required=True,
        secret_generated=False,
    ),
    "better_stack": SinkType(
        BetterStackConfig,
        _better_stack,
        lambda c: url_address("url" if c.url else "host", c.endpoint),
        secret_required=True,
        secret_generated=False,
    ),
    "elasticsearch": SinkType(
        ElasticsearchConfig,
        _elasticsearch,
        lambda c: url_address("url", c.url),
        secret_required=True,
        secret_generated=False,
    ),
    "loki": SinkType(
        LokiConfig,
        _loki,
        lambda c: url_address("url", c.url),
        secret_required=False,
        secret_generated=False,
    ),
    "syslog": SinkType(
        SyslogConfig,
        _syslog,
        lambda c: Address("host", host=c.host, port=c.port),
        secret_required=False,
        secret_generated=False,
    ),
}


def validated_config(kind: str, config: dict[str, Any]) -> dict[str, Any]:
    """`config` checked against its kind's model and normalized as it is stored; raises ValidationError."""
    return SINK_TYPES[kind].config.model_validate(config).model_dump(mode="json", exclude_none=True)


def build_sink(kind: str, config: dict[str, Any], secret: str | None, env: SinkEnv) -> Sink:
    """A ready sink of `kind` from a stored (already validated) config."""
    t = SINK_TYPES[kind]
    return t.build(t.config.model_validate(config), secret, env)


def sink_address(kind: str, config: BaseModel) -> Address | None:
    """Where a destination of `kind` with this (validated) config connects."""
    return SINK_TYPES[kind].address(config)
