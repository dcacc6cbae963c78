"""Rendering a fix's SQL from its parts (placeholder until the fixes branch lands)."""

from __future__ import annotations

from collections.abc import Iterable

from forwarder.insights.model import SqlPart


def quote_identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def quote_literal(value: str) -> str:
    if "\\" in value:
        return "E'" + value.replace("\\", "\\\\").replace("'", "''") + "'"
    return "'" + value.replace("'", "''") + "'"


def render(parts: Iterable[SqlPart]) -> str:
    out = []
    for p in parts:
        if p.identifier is not None:
            out.append(quote_identifier(p.identifier))
        elif p.literal is not None:
            out.append(quote_literal(p.literal))
        else:
            out.append(p.text)
    return "".join(out)
