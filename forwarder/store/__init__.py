"""The embedded SQLite store: lines, their file offsets, settings, keys and audit.

`Store` (the async store with its threads) loads on first use: a parse worker process imports
only `store.lines` to encode rows, and should not pay for what the daemon needs (pydantic,
prometheus-client).
"""

from typing import TYPE_CHECKING, Any

from forwarder.store.lines import Group, Identity, LineQuery, Page

if TYPE_CHECKING:
    from forwarder.store.state import ApiKey, DatabaseSettings, Role, SourceFile
    from forwarder.store.store import Store, StoreLocked, open_sync

# Loaded on first use, like `Store`: `state` imports hashlib, hmac and secrets (OpenSSL's libcrypto,
# ~3.4 MB) for API keys, which a parse worker never handles.
_LAZY = {
    "Store": "store",
    "StoreLocked": "store",
    "open_sync": "store",
    "ApiKey": "state",
    "DatabaseSettings": "state",
    "Role": "state",
    "SourceFile": "state",
}


def __getattr__(name: str) -> Any:
    if module := _LAZY.get(name):
        import importlib

        return getattr(importlib.import_module(f"forwarder.store.{module}"), name)
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
    "StoreLocked",
    "open_sync",
]
