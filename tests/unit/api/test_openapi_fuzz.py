"""Property-based: schemathesis drives every operation of /v1/openapi.json against a live daemon.

Beyond "no 5xx", every response must match the document (status, content type, body schema),
and data that the document says is invalid must be refused with a 4xx.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import positive_data_acceptance

from forwarder.api.openapi import openapi_document
from forwarder.app import Daemon
from forwarder.ask.providers.base import KeyCheck
from forwarder.config import config_from_dict
from forwarder.delivery.netguard import StaticResolver
from forwarder.model import KINDS, LogLine
from tests.harness import free_port


class LiveDaemon:
    """A daemon on its own event loop in a thread (schemathesis calls are synchronous)."""

    def __init__(self, tmp: Path) -> None:
        self.config = config_from_dict(
            {
                "server": {"host": "127.0.0.1", "port": 0},
                "store": {"path": str(tmp / "store.db")},
                "security": {
                    "secrets_key_file": str(tmp / "secrets.key"),
                    "allowed_destination_networks": ["127.0.0.0/8"],
                },
                "databases": [{"id": "main", "name": "main", "log": {"path": str(tmp / "*.log")}}],
            }
        )
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        # No real DNS in tests: one name resolves (to a closed loopback port), every other does not.
        self.daemon = Daemon(self.config, resolver=StaticResolver({"hook.test": ["127.0.0.1"]}))
        self.call(self.daemon.start())
        ident = self.daemon.registry.by_id["main"].identity
        lines = [
            LogLine(time_us=1_800_000_000_000_000 + i, severity="LOG", kind=KINDS[i % len(KINDS)], message=f"m {i}")
            for i in range(50)
        ]
        self.call(self.daemon.store.append(ident, lines, [], 0))
        # PUT /v1/ask/key asks the provider about the key: here every provider says yes (the adapters'
        # own tests talk to fake vendor servers), so the fuzz sees the API, not a missing network.
        ask = self.daemon._ctx.ask if self.daemon._ctx is not None else None
        assert ask is not None

        async def provider_accepts(provider: str, api_key: str, config: object) -> KeyCheck:
            return KeyCheck("ok")

        ask.check_key = provider_accepts
        self.key = self.call(self.daemon.store.create_key("fuzz", "read-write"))[1]
        self.base = f"http://127.0.0.1:{self.daemon.port}"
        created = requests.post(
            f"{self.base}/v1/log-destinations",
            json={"type": "webhook", "name": "fuzz", "config": {"url": f"http://hook.test:{free_port()}/"}},
            headers={"Authorization": f"Bearer {self.key}"},
            timeout=10,
        )
        assert created.status_code == 201, created.text
        self.destination_id = created.json()["id"]

    def call(self, coro):  # type: ignore[no-untyped-def]
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    def close(self) -> None:
        self.call(self.daemon.aclose())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveDaemon]:
    d = LiveDaemon(tmp_path_factory.mktemp("fuzz"))
    yield d
    d.close()


# Every documented operation (test_openapi.py checks they are exactly the application's routes) but the
# one serving the document: schemathesis leaves out the operation it loaded the schema from.
OPERATIONS = sorted(
    (method.upper(), path)
    for path, item in openapi_document()["paths"].items()
    for method in item
    if path != "/v1/openapi.json"
)


def test_the_document_lists_every_route(live: LiveDaemon) -> None:
    schema = schemathesis.openapi.from_url(f"{live.base}/v1/openapi.json")
    found = {(r.ok().method.upper(), r.ok().path) for r in schema.get_all_operations()}
    assert found == set(OPERATIONS)


# The pytest plugin of schemathesis 4 does not load under pytest 9, so each operation's
# strategy is run through hypothesis here; the checks are schemathesis' own.
# Negative cases only where there is something to make invalid: a query or a body (a path
# parameter is any string; the key is always sent, see below).
def _has_input(method: str, path: str) -> bool:
    operation = openapi_document()["paths"][path][method.lower()]
    return "requestBody" in operation or any(p["in"] == "query" for p in operation.get("parameters", []))


CASES = [
    (method, path, mode)
    for method, path in OPERATIONS
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    if mode == GenerationMode.POSITIVE or _has_input(method, path)
]


@pytest.mark.parametrize(("method", "path", "mode"), CASES)
def test_every_operation_conforms_and_never_fails(
    live: LiveDaemon, method: str, path: str, mode: GenerationMode
) -> None:
    schema = schemathesis.openapi.from_url(f"{live.base}/v1/openapi.json")
    # The key is sent by this test on every call: a case "made invalid" by leaving it out would
    # still carry it, and a 200 would read as an invalid request accepted.
    schema.config.generation.update(with_security_parameters=False)
    # A body over the server's limit (1 MiB; the generator can make one) is refused with 413, which
    # the negative check does not count among the refusals it expects.
    rejection = schema.config.checks.negative_data_rejection
    schema.config.checks.negative_data_rejection = type(rejection)(
        expected_statuses=[*rejection.expected_statuses, "413"]
    )
    operation = schema[path][method]
    headers = {"Authorization": f"Bearer {live.key}"}

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def run(case: schemathesis.Case) -> None:
        if mode == GenerationMode.POSITIVE and case.path_parameters and "ref" in case.path_parameters:
            case.path_parameters["ref"] = "main"  # a random ref is a 404 before any handler runs
        positive_id = mode == GenerationMode.POSITIVE and case.path_parameters and "id" in case.path_parameters
        if positive_id and method != "DELETE":  # keep the one destination for the other operations
            case.path_parameters["id"] = live.destination_id
        if case.query and "wait_seconds" in case.query and mode == GenerationMode.POSITIVE:
            case.query["wait_seconds"] = 0  # long polls are covered by test_live_tail; here they only cost time
        # A destination's address must resolve to a public address, a PATCH's config must fit the
        # destination's own kind, and some config checks (a host name's shape, a PEM certificate) are
        # beyond JSON Schema: schema-valid bodies may rightly be refused with a 400.
        excluded = [positive_data_acceptance] if path.startswith("/v1/log-destinations") else []
        case.call_and_validate(base_url=live.base, headers=headers, excluded_checks=excluded)

    run()
