"""loki and elasticsearch name the basic-auth user `username`; `user`, the key they took first, stays accepted."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from forwarder.sinks import SINK_TYPES, validated_config

KINDS = ["loki", "elasticsearch"]
URL = "https://logs.example.com"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("key", ["username", "user"])
def test_either_key_sets_the_username(kind: str, key: str) -> None:
    model: type[BaseModel] = SINK_TYPES[kind].config
    assert model.model_validate({"url": URL, key: "fwd"}).username == "fwd"  # type: ignore[attr-defined]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("key", ["username", "user"])
def test_it_is_stored_as_username(kind: str, key: str) -> None:
    stored = validated_config(kind, {"url": URL, key: "fwd"})
    assert stored["username"] == "fwd" and "user" not in stored
    assert validated_config(kind, stored) == stored  # a stored config validates to itself


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"username": "a:b"}, "username"),  # RFC 7617: no colon in a basic-auth user-id
        ({"user": "a:b"}, "user"),
        ({"username": "a", "user": "b"}, "user"),  # one key, not both
    ],
)
def test_bad_users_are_refused_naming_the_key_given(kind: str, config: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as err:
        validated_config(kind, {"url": URL, **config})
    assert err.value.errors()[0]["loc"] == (field,)


@pytest.mark.parametrize("kind", KINDS)
def test_the_schema_documents_username(kind: str) -> None:
    properties = SINK_TYPES[kind].config.model_json_schema()["properties"]
    assert "username" in properties and "user" not in properties
