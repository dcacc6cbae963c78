"""Destination use cases: create, change and remove one, and sync those declared in the config file.

Every path that defines a destination (the API's POST, PATCH and DELETE; the config file at start
and on SIGHUP) goes through here, so one set of rules applies: `config` normalized by its kind's
model, the filter by `LineFilter.of`, the receiver's address checked by the network guard (API
only: the operator's file may name allowed networks), the secret generated or sealed, and the
audit record naming exactly the fields that changed.

Errors are `DestinationError`s with a message for the caller (never a secret); api/destinations.py
maps them to its statuses. The delivery loops themselves are the `Delivery` port's business.
"""

from __future__ import annotations

import enum
import logging
import secrets
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Final, Protocol

from pydantic import ValidationError

from forwarder.clock import Clock
from forwarder.config import DestinationConfig
from forwarder.model import KINDS, expand_kinds
from forwarder.sinks import SINK_TYPES, sink_address, validated_config
from forwarder.sinks.base import Address
from forwarder.sinks.credentials import unmasked_config
from forwarder.store.destinations import DeliveryState, Destination, LineFilter, ManagedBy
from forwarder.store.state import DEFAULT_ORG

if TYPE_CHECKING:
    from forwarder.store import Store

log = logging.getLogger(__name__)

ID_PREFIX: Final = "dst_"
SECRET_PREFIX: Final = "whsec_"  # noqa: S105 - a prefix, the secret is random
# A change to any of these is the operator fixing (or re-enabling) delivery: the backoff built up by
# the failures before it says nothing about the destination as it is now, so the batch waiting for
# its retry is sent at once (docs/destinations.md: "fixing the key ... resumes delivery"), not up to
# an hour later (SPEC 6.1's cap) or a day after a Retry-After. The name and the filter change nothing
# the receiver sees of a retry.
RETRY_NOW_FIELDS: Final = frozenset({"config", "secret", "enabled"})

# Settings of a kind that only the operator's config file may choose, as {kind: {key: (refused
# value, why)}}: they weaken how lines leave the host, and an API key (held by scripts, CI, other
# people) must not be enough to turn them on. Syslog goes over TLS with a certificate valid for its
# host name; clear text is for a relay on the operator's own network, which only the operator knows.
OPERATOR_ONLY: Final[Mapping[str, Mapping[str, tuple[object, str]]]] = {
    "syslog": {
        "tls": (
            False,
            "clear text cannot be chosen through the API: syslog goes over TLS with a certificate valid for "
            "`host`. A relay on your own network may be declared with `tls = false` in the daemon's config "
            "file ([[destinations]])",
        ),
    },
}


# --- errors --------------------------------------------------------------------------------------


class DestinationError(Exception):
    """A use case refused; `message` is for the caller and never holds a secret."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Invalid(DestinationError):
    """A given value is wrong; `field` names it as the caller wrote it (`type`, `filter.kinds`, `config.tls`)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class InvalidConfig(DestinationError):
    """`config` does not fit its kind's model; `error` names the key (pydantic's first problem)."""

    def __init__(self, error: ValidationError) -> None:
        super().__init__(str(error.errors(include_url=False, include_input=False)[0]["msg"]))
        self.error = error


class NotFound(DestinationError):
    """No destination has this id."""


class ManagedByConfig(DestinationError):
    """The destination is declared in the config file: only the file changes it."""


# --- ports and inputs ----------------------------------------------------------------------------


class Delivery(Protocol):
    """What the use cases need of the delivery layer (implemented by delivery.manager.DeliveryManager)."""

    async def apply(self, dest_id: str, *, retry_now: bool = False) -> None:
        """Take a created or changed destination: (re)start its loop from its stored state.

        `retry_now`: end the backoff first, so a batch waiting for its retry is sent at once.
        """

    async def remove(self, dest: Destination) -> None:
        """Stop the destination's loop and forget its metrics (before it leaves the store)."""

    async def check_address(self, address: Address) -> str | None:
        """Why the network guard refuses this address, or None."""

    def seal_secret(self, secret: str, dest_id: str) -> bytes:
        """The secret encrypted for storage, bound to the destination's id."""

    def open_secret(self, dest: Destination) -> str | None:
        """The destination's secret in clear (None when it has none)."""


@dataclass(frozen=True, slots=True)
class Ports:
    """What the use cases work with."""

    store: Store
    clock: Clock
    delivery: Delivery


@dataclass(frozen=True, slots=True)
class Actor:
    """Who asks, as the audit record names them."""

    org: str
    name: str


CONFIG_ACTOR: Final = Actor(DEFAULT_ORG, "config")


@dataclass(frozen=True, slots=True)
class FilterSpec:
    """A filter as given (kinds or aliases, database ids), before it is checked."""

    kinds: Sequence[str] = ()
    database_ids: Sequence[str] = ()


@dataclass(frozen=True, slots=True)
class Draft:
    """A new destination as the API caller describes it."""

    type: str
    name: str
    enabled: bool = True
    config: Mapping[str, Any] = field(default_factory=dict)
    filter: FilterSpec = FilterSpec()
    secret: str | None = None  # None: generated for kinds that make one, else required or absent


@dataclass(frozen=True, slots=True)
class Changes:
    """A change through the API: None keeps a field; `config` and `filter` are replaced whole."""

    name: str | None = None
    enabled: bool | None = None
    config: Mapping[str, Any] | None = None
    filter: FilterSpec | None = None
    secret: str | None = None  # a new credential; it cannot be removed


class _Keep(enum.Enum):
    """The sealed secret stays as it is."""

    KEEP = enum.auto()


@dataclass(frozen=True, slots=True)
class Created:
    """A stored, started destination; `shown_secret` is the generated secret, to be shown this once."""

    dest: Destination
    state: DeliveryState
    shown_secret: str | None


# --- the use cases -------------------------------------------------------------------------------


async def found(store: Store, dest_id: str) -> tuple[Destination, DeliveryState]:
    """The destination and its stored state; NotFound if there is none."""
    got = await store.destination(dest_id)
    if got is None:
        raise NotFound(f"no destination {dest_id!r}")
    return got


async def changeable(store: Store, dest_id: str) -> Destination:
    """A destination the API may change or remove; NotFound, or ManagedByConfig for the file's."""
    dest, _ = await found(store, dest_id)
    _check_changeable(dest)
    return dest


async def create(ports: Ports, draft: Draft, actor: Actor, known_databases: Collection[str]) -> Created:
    """Check, store (audited) and start a new destination through the API; it starts at the newest line."""
    kind = SINK_TYPES.get(draft.type)
    if kind is None:
        raise Invalid("type", f"must be one of {', '.join(sorted(SINK_TYPES))}")
    config = _config(draft.type, draft.config, "api")
    line_filter = _filter(draft.filter, known_databases)
    await _check_address(ports.delivery, draft.type, config)
    secret = draft.secret
    if secret is None and kind.secret_generated:
        secret = SECRET_PREFIX + secrets.token_urlsafe(32)  # 32 random bytes
    if secret is None and kind.secret_required:
        raise Invalid("secret", f"a {draft.type} destination needs its credential in `secret`")
    dest_id = ID_PREFIX + secrets.token_hex(8)
    dest = _definition(dest_id, draft.type, draft.name, draft.enabled, config, line_filter, "api")
    dest, state = await _add(ports, dest, secret, actor)
    return Created(dest, state, secret if kind.secret_generated else None)


async def change(
    ports: Ports, dest: Destination, changes: Changes, actor: Actor, known_databases: Collection[str]
) -> Destination:
    """Apply an API change to `dest` (as `changeable` returned it) and restart its loop at its cursor.

    A change that changes nothing is not stored, audited or restarted. A given secret counts as
    changed (it is not compared with the sealed one). A changed config, secret or enabled ends the
    backoff (RETRY_NOW_FIELDS).
    """
    _check_changeable(dest)
    config = dest.config
    if changes.config is not None:
        config = _config(dest.type, unmasked_config(changes.config, dest.config), "api")
        await _check_address(ports.delivery, dest.type, config)
    line_filter = _filter(changes.filter, known_databases) if changes.filter is not None else dest.filter
    new = replace(
        dest,
        name=dest.name if changes.name is None else changes.name,
        enabled=dest.enabled if changes.enabled is None else changes.enabled,
        config=config,
        filter=line_filter,
    )
    secret: str | _Keep | None = _Keep.KEEP if changes.secret is None else changes.secret
    return await _change(ports, dest, new, secret, actor)


async def remove(ports: Ports, dest_id: str, actor: Actor) -> None:
    """Stop and delete a destination created through the API (audited)."""
    await _remove(ports, await changeable(ports.store, dest_id), actor)


async def sync_declared(ports: Ports, declared: Sequence[DestinationConfig]) -> None:
    """Make the config-managed destinations match `declared`: create, change or remove them.

    Only what changed restarts; a changed destination keeps its cursor (nothing is skipped or
    sent twice), a new one starts at the head like one created through the API. The file is the
    operator's: it may choose what the API may not (`OPERATOR_ONLY`), and its addresses are left
    to the network guard at delivery time (which honours the allowed networks).
    """
    stored = {d.id: d for d, _ in await ports.store.destinations()}
    for dc in declared:
        old = stored.get(dc.id)
        if old is not None and old.managed_by != "config":
            log.error(
                "a destination created through the API already has this id; the config's is ignored",
                extra={"destination_id": dc.id},
            )
            continue
        secret = dc.read_secret()
        config = _config(dc.type, dc.config, "config")
        line_filter = _filter(FilterSpec(dc.filter.kinds, dc.filter.database_ids), None)
        if old is not None and old.type != dc.type:  # another kind under the same id: a new destination
            await _remove(ports, old, CONFIG_ACTOR)
            old = None
        if old is None:
            new = _definition(dc.id, dc.type, dc.display_name(), dc.enabled, config, line_filter, "config")
            await _add(ports, new, secret, CONFIG_ACTOR)
            log.info("destination added from the config", extra={"destination_id": dc.id, "type": dc.type})
            continue
        changed = replace(old, name=dc.display_name(), enabled=dc.enabled, config=config, filter=line_filter)
        # The file gives the secret every time: only a different one is a change.
        kept: str | _Keep | None = _Keep.KEEP if ports.delivery.open_secret(old) == secret else secret
        if await _change(ports, old, changed, kept, CONFIG_ACTOR) is not old:
            log.info("destination changed in the config; restarting it", extra={"destination_id": dc.id})
    keep = {dc.id for dc in declared}
    for dest in stored.values():
        if dest.managed_by == "config" and dest.id not in keep:  # (a replaced kind was removed above)
            await _remove(ports, dest, CONFIG_ACTOR)
            log.info("destination removed from the config", extra={"destination_id": dest.id})


# --- shared steps --------------------------------------------------------------------------------


def _check_changeable(dest: Destination) -> None:
    if dest.managed_by == "config":
        raise ManagedByConfig(
            f"destination {dest.id!r} is declared in the config file; change it there and reload (SIGHUP)"
        )


def _config(kind: str, config: Mapping[str, Any], origin: ManagedBy) -> dict[str, Any]:
    """`config` as stored (normalized by the kind's model); the API may not choose `OPERATOR_ONLY` values."""
    try:
        out = validated_config(kind, dict(config))
    except ValidationError as exc:
        raise InvalidConfig(exc) from None
    if origin == "api":
        for key, (refused, why) in OPERATOR_ONLY.get(kind, {}).items():
            if key in out and out[key] == refused:
                raise Invalid(f"config.{key}", why)
    return out


def _filter(spec: FilterSpec, known_databases: Collection[str] | None) -> LineFilter:
    """The filter as stored; `known_databases` None: the ids were checked already (the config file)."""
    try:
        expand_kinds(list(spec.kinds))
    except ValueError as exc:
        raise Invalid("filter.kinds", f"{exc}; use {', '.join(KINDS)}, errors, locks or maintenance") from None
    if known_databases is not None:
        for db_id in spec.database_ids:
            if db_id not in known_databases:
                raise Invalid("filter.database_ids", f"no database with id {db_id!r}")
    return LineFilter.of(spec.kinds, spec.database_ids)


async def _check_address(delivery: Delivery, kind: str, config: dict[str, Any]) -> None:
    address = sink_address(kind, SINK_TYPES[kind].config.model_validate(config))
    if address is not None:
        problem = await delivery.check_address(address)
        if problem:
            raise Invalid(f"config.{address.field}", problem)


def _definition(
    dest_id: str,
    kind: str,
    name: str,
    enabled: bool,
    config: dict[str, Any],
    line_filter: LineFilter,
    managed_by: ManagedBy,
) -> Destination:
    """A destination's definition; its secret and times are set when it is stored."""
    return Destination(dest_id, kind, name, enabled, config, line_filter, None, 0.0, 0.0, managed_by)


async def _add(ports: Ports, dest: Destination, secret: str | None, actor: Actor) -> tuple[Destination, DeliveryState]:
    now = ports.clock.now()
    sealed = ports.delivery.seal_secret(secret, dest.id) if secret is not None else None
    dest = replace(dest, sealed_secret=sealed, created_at=now, updated_at=now)
    state = await ports.store.add_destination(dest, org=actor.org, actor=actor.name)
    await ports.delivery.apply(dest.id)
    return dest, state


async def _change(
    ports: Ports, old: Destination, new: Destination, secret: str | _Keep | None, actor: Actor
) -> Destination:
    """Store `new` (with `secret` sealed unless kept) and restart its loop; `old` itself if nothing changed."""
    fields = [f for f in ("name", "enabled", "config", "filter") if getattr(old, f) != getattr(new, f)]
    sealed = old.sealed_secret
    if not isinstance(secret, _Keep):
        fields.append("secret")
        sealed = ports.delivery.seal_secret(secret, old.id) if secret is not None else None
    if not fields:
        return old
    changed = replace(new, sealed_secret=sealed, updated_at=ports.clock.now())
    await ports.store.change_destination(changed, org=actor.org, actor=actor.name, fields=fields)
    # The batch in flight and its delivery id stay: the retry resends the same lines (at-least-once).
    await ports.delivery.apply(old.id, retry_now=not RETRY_NOW_FIELDS.isdisjoint(fields))
    return changed


async def _remove(ports: Ports, dest: Destination, actor: Actor) -> None:
    await ports.delivery.remove(dest)
    await ports.store.remove_destination(dest.id, org=actor.org, actor=actor.name)
