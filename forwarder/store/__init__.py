"""The embedded SQLite store: lines, their file offsets, settings, keys and audit.

`Store` (the async store with its threads) loads on first use: a parse worker process imports
only `store.lines` to encode rows, and should not pay for what the daemon needs (pydantic,
prometheus-client).
"""

from typing import TYPE_CHECKING, Any

from forwarder.store.lines import Group, Identity, LineQuery, Page
from forwarder.store.state import ApiKey, DatabaseSettings, Role, SourceFile

if TYPE_CHECKING:
    from forwarder.store.store import Store, open_sync


def __getattr__(name: str) -> Any:
    if name in ("Store", "open_sync"):
        from forwarder.store import store

        return getattr(store, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ApiKey",
    "DatabaseSettings",
    "Group",
    "Identity",
    "LineQuery",
    "Page",
    "Role",
    "SourceFile",
    "Store",
    "open_sync",
]
