"""The OpenAPI document: derived from the models, covering every route, committed as openapi.yaml."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, cast

import yaml

from forwarder.api import openapi
from forwarder.api.context import ApiContext
from forwarder.api.server import build_app
from forwarder.model import SPEC_FIELDS
from forwarder.sinks import SINK_TYPES

DOC = openapi.openapi_document()
SCHEMAS = DOC["components"]["schemas"]
COMMITTED = Path(openapi.__file__).with_name("openapi.yaml")


def component(ref: dict[str, str]) -> dict[str, Any]:
    result: dict[str, Any] = SCHEMAS[ref["$ref"].rsplit("/", 1)[1]]
    return result


def texts(node: object) -> list[str]:
    """Every description and summary in the document."""
    if isinstance(node, dict):
        own = [v for k, v in node.items() if k in ("description", "summary") and isinstance(v, str)]
        return own + [t for v in node.values() for t in texts(v)]
    if isinstance(node, list):
        return [t for v in node for t in texts(v)]
    return []


def test_every_route_of_the_app_is_documented_with_its_method() -> None:
    app = build_app(cast(ApiContext, None), pages=False)
    # aiohttp adds HEAD beside every GET on its own; it answers like the GET without a body.
    routes = {(r.method.lower(), r.resource.canonical) for r in app.router.routes() if r.method != "HEAD"}
    documented = {(method, path) for path, item in DOC["paths"].items() for method in item}
    assert routes == documented
    # The pages add only paths of their own (/ and /ui/...), none of the API's.
    with_pages = build_app(cast(ApiContext, None), pages=True)
    added = {r.resource.canonical for r in with_pages.router.routes()} - {path for _, path in routes}
    assert added and all(p == "/" or p == "/ui" or p.startswith("/ui/") for p in added), added


def test_the_committed_yaml_is_the_generated_document() -> None:
    assert COMMITTED.read_text() == openapi.openapi_yaml(), "run: python -m forwarder.api.openapi > " + str(COMMITTED)
    assert yaml.safe_load(COMMITTED.read_text()) == DOC


def test_each_destination_kind_has_its_config_with_described_fields() -> None:
    for body in ("DestinationCreate", "Destination", "DestinationCreated"):
        mapping = SCHEMAS[body]["discriminator"]["mapping"]
        assert set(mapping) == set(SINK_TYPES)
        for kind, sink_type in SINK_TYPES.items():
            variant = component({"$ref": mapping[kind]})
            assert variant["properties"]["type"]["const"] == kind
            config = component(variant["properties"]["config"])
            names = {f.alias or name for name, f in sink_type.config.model_fields.items()}
            assert set(config["properties"]) == names, kind
            for name, prop in config["properties"].items():
                assert prop.get("description", "").strip(), f"{kind}: config.{name} has no description"
    patch_configs = SCHEMAS["DestinationPatch"]["properties"]["config"]["anyOf"]
    assert {component(c)["title"] for c in patch_configs if "$ref" in c} == {
        t.config.__name__ for t in SINK_TYPES.values()
    }


def test_the_log_line_has_the_twenty_fields_in_order_all_required() -> None:
    line = SCHEMAS["LogLine"]
    assert list(line["properties"]) == list(SPEC_FIELDS) == line["required"]
    assert line["properties"]["kind"]["enum"] and line["properties"]["id"]["type"] == "string"
    undescribed = [name for name, schema in line["properties"].items() if not schema.get("description")]
    assert undescribed == []


def test_query_parameters_come_from_the_query_models() -> None:
    params = {p["name"]: p for p in DOC["paths"]["/v1/databases/{ref}/logs"]["get"]["parameters"]}
    assert set(params) == {"ref", "kind", "q", "group", "from", "to", "before", "after", "limit", "wait_seconds"}
    assert params["limit"]["schema"] == {"type": "integer", "minimum": 1, "maximum": 500, "default": 100}
    assert params["kind"]["schema"]["type"] == "array" and "errors" in params["kind"]["schema"]["items"]["enum"]
    assert all(p["description"] for p in params.values()) and not any(
        p["required"] for n, p in params.items() if n != "ref"
    )
    answer = DOC["paths"]["/v1/databases/{ref}/logs"]["get"]["responses"]["200"]["content"]["application/json"]
    page = component(answer["schema"])
    assert "next_after" in page["properties"] and "next_after" not in page["required"]


def test_no_text_of_the_document_points_at_the_specification_or_an_issue() -> None:
    found = [t for t in texts(DOC) if re.search(r"\bSPEC\b|\bissue \d+", t, re.IGNORECASE)]
    assert found == []


def test_a_cursor_pattern_admits_every_line_id_the_server_does() -> None:
    # The server takes ids up to 2**63 - 1 (19 digits) and answers `next_after` with them.
    largest = str((1 << 63) - 1)
    for path in DOC["paths"].values():
        for op in path.values():
            for p in op.get("parameters", []):
                if p["name"] in ("before", "after"):
                    assert re.fullmatch(p["schema"]["pattern"], largest), (p, largest)
