"""The embedded SQLite store: lines, their file offsets, settings, keys and audit."""

from forwarder.store.lines import Group, Identity, LineQuery, Page
from forwarder.store.state import ApiKey, DatabaseSettings, Role, SourceFile
from forwarder.store.store import Store, open_sync

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
