"""The destination use cases on a real store with a recording delivery layer: what is stored,
what the audit record names, which loops restart, and what only the config file may choose."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from forwarder.clock import FakeClock
from forwarder.config import DestinationConfig, StoreConfig
from forwarder.secrets import SecretBox
from forwarder.sinks.base import Address
from forwarder.store import Store
from forwarder.store.destinations import Destination
from forwarder.usecases import destinations as cases

API = cases.Actor("default", "key:test")
FIRST_SECRET = "s3cret-one"
HOOK_CONFIG = {"url": "https://hook.example.com/in"}


@dataclass
class RecordingDelivery:
    """The delivery layer's port: seals for real, records which loops (re)start or stop, and which
    restarts end the backoff."""

    box: SecretBox = field(default_factory=lambda: SecretBox(os.urandom(32)))
    applied: list[str] = field(default_factory=list)
    retried_now: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    async def apply(self, dest_id: str, *, retry_now: bool = False) -> None:
        self.applied.append(dest_id)
        if retry_now:
            self.retried_now.append(dest_id)

    async def remove(self, dest: Destination) -> None:
        self.removed.append(dest.id)

    async def check_address(self, address: Address) -> str | None:
        return None

    def seal_secret(self, secret: str, dest_id: str) -> bytes:
        return self.box.seal(secret, dest_id)

    def open_secret(self, dest: Destination) -> str | None:
        return self.box.open(dest.sealed_secret, dest.id) if dest.sealed_secret else None


@dataclass
class World:
    ports: cases.Ports
    delivery: RecordingDelivery
    clock: FakeClock
    tmp_path: Path

    async def changes(self) -> list[Any]:
        """The `details` of every `destinations.changed` audit record, oldest first."""
        records = await self.ports.store.audit_records()
        return [r["details"] for r in reversed(records) if r["action"] == "destinations.changed"]

    def declared(self, secret: str = FIRST_SECRET, **fields: Any) -> DestinationConfig:
        """A webhook declared in the config file, its secret in a file."""
        path = self.tmp_path / "hook.secret"
        path.write_text(secret + "\n")
        base: dict[str, Any] = {"id": "hook", "type": "webhook", "secret_file": str(path), "config": HOOK_CONFIG}
        return DestinationConfig.model_validate(base | fields)


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    clock = FakeClock(start=1_800_000_000)
    store = Store(StoreConfig(path=tmp_path / "s.db"), clock)
    await store.start()
    delivery = RecordingDelivery()
    yield World(cases.Ports(store, clock, delivery), delivery, clock, tmp_path)
    await store.aclose()


async def stored(world: World, dest_id: str = "hook") -> Destination:
    dest, _ = await cases.found(world.ports.store, dest_id)
    return dest


# --- the config file -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "fields"),
    [
        ({"name": "Team hook"}, ["name"]),
        ({"enabled": False}, ["enabled"]),
        ({"config": {"url": "https://other.example.com/in"}}, ["config"]),
        ({"filter": {"kinds": ["errors"]}}, ["filter"]),
        ({"secret": "s3cret-two"}, ["secret"]),
        ({"name": "Team hook", "secret": "s3cret-two"}, ["name", "secret"]),
    ],
)
async def test_a_reload_audits_exactly_the_fields_the_file_changed(
    world: World, change: dict[str, Any], fields: list[str]
) -> None:
    await cases.sync_declared(world.ports, [world.declared()])
    world.delivery.applied.clear()
    world.clock.advance(60)
    await cases.sync_declared(world.ports, [world.declared(**change)])
    assert await world.changes() == [{"fields": fields}]
    assert world.delivery.applied == ["hook"]  # its loop restarts (at its cursor)
    dest = await stored(world)
    assert dest.updated_at == world.clock.now() and dest.created_at == world.clock.now() - 60
    assert world.delivery.open_secret(dest) == change.get("secret", FIRST_SECRET)


async def test_a_reload_that_changes_nothing_records_nothing_and_restarts_nothing(world: World) -> None:
    await cases.sync_declared(world.ports, [world.declared(name="hook", filter={"kinds": ["errors", "errors"]})])
    world.delivery.applied.clear()
    before = await stored(world)
    await cases.sync_declared(world.ports, [world.declared(filter={"kinds": ["errors"]})])
    assert await world.changes() == [] and world.delivery.applied == []
    assert await stored(world) == before


async def test_the_config_file_may_send_syslog_in_clear_text(world: World) -> None:
    relay = DestinationConfig.model_validate(
        {"id": "relay", "type": "syslog", "config": {"host": "relay.internal", "tls": False}}
    )
    await cases.sync_declared(world.ports, [relay])
    dest = await stored(world, "relay")
    assert dest.managed_by == "config" and dest.config["tls"] is False
    assert world.delivery.applied == ["relay"]


# --- the API -------------------------------------------------------------------------------------


async def created(world: World, **draft: Any) -> Destination:
    out = await cases.create(world.ports, cases.Draft(**({"type": "webhook", "name": "n"} | draft)), API, {"main"})
    return out.dest


async def test_a_change_through_the_api_audits_only_what_differs(world: World) -> None:
    dest = await created(world, config=HOOK_CONFIG, filter=cases.FilterSpec(["errors"]))
    # The same name and filter are given again: only `enabled` is a change.
    changes = cases.Changes(name="n", enabled=False, filter=cases.FilterSpec(["errors"]))
    new = await cases.change(world.ports, dest, changes, API, {"main"})
    assert await world.changes() == [{"fields": ["enabled"]}]
    assert new.enabled is False and (await stored(world, dest.id)).enabled is False


async def test_a_change_through_the_api_that_changes_nothing_is_not_stored(world: World) -> None:
    dest = await created(world, config=HOOK_CONFIG)
    world.delivery.applied.clear()
    world.clock.advance(60)
    same = await cases.change(world.ports, dest, cases.Changes(name="n", config=HOOK_CONFIG), API, {"main"})
    assert same == dest == await stored(world, dest.id)
    assert await world.changes() == [] and world.delivery.applied == []


async def test_a_secret_given_through_the_api_is_a_change_even_if_it_is_the_same(world: World) -> None:
    dest = await created(world, config=HOOK_CONFIG, secret="whsec_given")
    await cases.change(world.ports, dest, cases.Changes(secret="whsec_given"), API, {"main"})
    assert await world.changes() == [{"fields": ["secret"]}]


@pytest.mark.parametrize(
    ("changes", "retry_now"),
    [
        (cases.Changes(secret="whsec_fixed"), True),
        (cases.Changes(config={"url": "https://fixed.example.com/in"}), True),
        (cases.Changes(enabled=False), True),
        (cases.Changes(name="renamed"), False),
        (cases.Changes(filter=cases.FilterSpec(["errors"])), False),
        (cases.Changes(name="renamed", secret="whsec_fixed"), True),
    ],
)
async def test_a_changed_config_secret_or_enabled_ends_the_backoff(
    world: World, changes: cases.Changes, retry_now: bool
) -> None:
    # The operator fixing a destination must not wait out the backoff its failures built up.
    dest = await created(world, config=HOOK_CONFIG)
    world.delivery.applied.clear()
    await cases.change(world.ports, dest, changes, API, {"main"})
    assert world.delivery.applied == [dest.id]
    assert world.delivery.retried_now == ([dest.id] if retry_now else [])


async def test_a_reload_that_changes_the_secret_ends_the_backoff(world: World) -> None:
    await cases.sync_declared(world.ports, [world.declared()])
    await cases.sync_declared(world.ports, [world.declared(name="renamed")])
    assert world.delivery.retried_now == []
    await cases.sync_declared(world.ports, [world.declared(secret="s3cret-two")])
    assert world.delivery.retried_now == ["hook"]


async def test_the_api_cannot_send_syslog_in_clear_text(world: World) -> None:
    config = {"host": "relay.example.com", "tls": False}
    with pytest.raises(cases.Invalid) as refused:
        await created(world, type="syslog", config=config)
    assert refused.value.field == "config.tls" and "config file" in refused.value.message
    dest = await created(world, type="syslog", config={"host": "relay.example.com"})
    assert dest.config["tls"] is True
    with pytest.raises(cases.Invalid):
        await cases.change(world.ports, dest, cases.Changes(config=config), API, {"main"})
    assert (await stored(world, dest.id)).config["tls"] is True


async def test_the_api_cannot_change_or_remove_what_the_file_declares(world: World) -> None:
    await cases.sync_declared(world.ports, [world.declared()])
    with pytest.raises(cases.ManagedByConfig):
        await cases.changeable(world.ports.store, "hook")
    with pytest.raises(cases.ManagedByConfig):
        await cases.change(world.ports, await stored(world), cases.Changes(name="x"), API, {"main"})
    with pytest.raises(cases.ManagedByConfig):
        await cases.remove(world.ports, "hook", API)
    with pytest.raises(cases.NotFound):
        await cases.remove(world.ports, "dst_none", API)
    assert world.delivery.removed == [] and (await stored(world)).name == "hook"
