"""Alert rules ([[alerts]]) fire and resolve on the daemon's clock, and show in the API and /metrics.

A real daemon (in process, loopback API, temporary store) with a fake clock: each step moves the
clock by the evaluation interval and waits for the evaluation it causes.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from forwarder.app import Daemon
from forwarder.clock import FakeClock
from forwarder.config import ConfigError, config_from_dict, load_config
from forwarder.insights.alerts import EVALUATE_EVERY_SECONDS, AlertEvaluator
from forwarder.model import Kind, LogLine, format_time
from tests.harness import wait_until

T0_S = 1_800_000_000

RULES: list[dict[str, Any]] = [
    # `locks` is an alias: lock waits and deadlocks.
    {
        "id": "locks-main",
        "kinds": ["locks"],
        "database_ids": ["main"],
        "threshold": 2,
        "window_seconds": 300,
        "severity": "critical",
    },
    {"id": "dup-key", "kinds": ["errors"], "text": "DUPLICATE key", "threshold": 1, "window_seconds": 60},
]


def _toml(rules: list[dict[str, Any]], tmp: Path) -> str:
    out = [
        f'[server]\nhost = "127.0.0.1"\nport = 0\n[store]\npath = "{tmp / "store.db"}"\n',
        f'[security]\nsecrets_key_file = "{tmp / "secrets.key"}"\n',
    ]
    for db_id in ("main", "other"):
        out.append(f'[[databases]]\nid = "{db_id}"\nname = "{db_id}"\n[databases.log]\npath = "{tmp / db_id}/*.log"\n')
    for rule in rules:
        out.append("[[alerts]]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in rule.items()))
    return "\n".join(out)


@dataclass
class World:
    tmp: Path
    clock: FakeClock
    daemon: Daemon
    session: aiohttp.ClientSession
    key: str

    @property
    def alerts(self) -> AlertEvaluator:
        assert self.daemon.alerts is not None
        return self.daemon.alerts

    async def start(self) -> None:
        self.daemon = Daemon(
            load_config(self.tmp / "forwarder.toml"), clock=self.clock, config_path=self.tmp / "forwarder.toml"
        )
        await self.daemon.start()
        _, self.key = await self.daemon.store.create_key("ro", "read-only")
        await self.evaluated(1)

    async def evaluated(self, count: int) -> None:
        """Until the evaluator has finished `count` evaluations."""
        await wait_until(self.alerts.evaluated, lambda: self.alerts.evaluations >= count, 10)

    async def tick(self, times: int = 1) -> None:
        """Move the clock one evaluation interval at a time, waiting for each evaluation."""
        for _ in range(times):
            done = self.alerts.evaluations
            self.clock.advance(EVALUATE_EVERY_SECONDS)
            await self.evaluated(done + 1)

    async def store(self, db_id: str, kind: Kind, ago_s: float, message: str = "m", **fields: Any) -> None:
        identity = self.daemon.registry.by_id[db_id].identity
        line = LogLine(int((self.clock.now() - ago_s) * 1_000_000), "LOG", kind, message, **fields)
        await self.daemon.store.append(identity, [line], [], 0)

    async def get(self, path: str, status: int = 200) -> Any:
        headers = {"Authorization": f"Bearer {self.key}"}
        async with self.session.get(f"http://127.0.0.1:{self.daemon.port}{path}", headers=headers) as resp:
            assert resp.status == status, await resp.text()
            return await resp.json() if resp.content_type == "application/json" else await resp.text()

    async def alerts_of(self, rule: str, state: str | None = None) -> list[dict[str, Any]]:
        query = f"?state={state}" if state else ""
        return [a for a in (await self.get(f"/v1/alerts{query}"))["alerts"] if a["rule"] == rule]

    async def gauge(self) -> dict[tuple[str, str], float]:
        text = await self.get("/metrics")
        return {
            (s.labels["rule"], s.labels["state"]): s.value
            for family in text_string_to_metric_families(text)
            if family.name == "forwarder_alerts"
            for s in family.samples
        }


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    (tmp_path / "forwarder.toml").write_text(_toml(RULES, tmp_path))
    async with aiohttp.ClientSession() as session:
        w = World(tmp_path, FakeClock(start=T0_S), None, session, "")  # type: ignore[arg-type]
        await w.start()
        yield w
        await w.daemon.aclose()


def _at(seconds_after_start: float) -> str:
    return format_time(int((T0_S + seconds_after_start) * 1_000_000))


async def test_a_rule_fires_at_its_threshold_and_resolves_when_the_lines_leave_the_window(world: World) -> None:
    await world.store("main", "lock_wait", ago_s=10, duration_ms=1000.0)  # written at -10
    await world.tick()  # at +30: one line of two
    assert await world.alerts_of("locks-main") == []
    assert (await world.gauge())[("locks-main", "firing")] == 0

    await world.store("main", "deadlock", ago_s=5)  # at +25: written before this evaluation
    await world.tick()  # at +60
    [alert] = await world.alerts_of("locks-main", "firing")
    assert alert["state"] == "firing" and alert["value"] == 2 and alert["started_at"] == _at(60)
    assert (await world.gauge()).items() >= {("locks-main", "firing"): 1, ("locks-main", "resolved"): 0}.items()

    # The window of 300 s, (now - 300, now], holds the line of -10 until +290: the evaluation at
    # +270 still counts it, the one at +300 no longer does.
    await world.tick(7)  # at +270
    assert [a["value"] for a in await world.alerts_of("locks-main", "firing")] == [2]
    await world.tick()  # at +300
    [alert] = await world.alerts_of("locks-main")
    assert alert["state"] == "resolved" and alert["resolved_at"] == _at(300) and alert["value"] == 1
    assert alert["started_at"] == _at(60)
    assert (await world.gauge()).items() >= {("locks-main", "firing"): 0, ("locks-main", "resolved"): 1}.items()
    assert await world.alerts_of("locks-main", "firing") == []


async def test_the_window_holds_the_evaluation_time_but_not_its_start(world: World) -> None:
    # The evaluation at +30 counts lines written in (-270, +30].
    await world.store("main", "deadlock", ago_s=270)  # at -270: out
    await world.store("main", "deadlock", ago_s=269.999)  # in
    await world.store("main", "deadlock", ago_s=-30)  # at +30: in
    await world.tick()
    [alert] = await world.alerts_of("locks-main")
    assert alert["value"] == 2 and alert["started_at"] == _at(30)


async def test_a_rule_with_database_ids_ignores_the_other_databases(world: World) -> None:
    for ago in (1, 2, 3):
        await world.store("other", "deadlock", ago_s=ago)
    await world.tick()
    assert await world.alerts_of("locks-main") == []


async def test_rules_without_database_ids_fire_per_database(world: World) -> None:
    await world.store("main", "error", ago_s=1, message="duplicate key value violates unique constraint")
    await world.store("other", "error", ago_s=1, message="duplicate key value violates unique constraint")
    await world.tick()
    found = await world.alerts_of("dup-key", "firing")
    assert sorted(a["database_id"] for a in found) == ["main", "other"]
    assert (await world.gauge())[("dup-key", "firing")] == 2


async def test_the_text_is_matched_case_insensitively_in_message_detail_or_statement(world: World) -> None:
    # In the hint, or in a kind the rule does not count: not matched.
    await world.store("main", "error", ago_s=1, message="other", hint="a duplicate key")
    await world.store("main", "connection", ago_s=1, message="Duplicate Key here")
    await world.tick()
    assert await world.alerts_of("dup-key") == []
    await world.store("other", "error", ago_s=1, message="failed", detail="Key (id)=(1): Duplicate KEY value")
    await world.store("main", "error", ago_s=1, message="failed", statement="select 'duplicate key'")
    await world.tick()
    found = await world.alerts_of("dup-key", "firing")
    assert sorted((a["database_id"], a["value"]) for a in found) == [("main", 1), ("other", 1)]


async def test_the_api_shows_an_alert_by_id_and_answers_404_for_an_unknown_one(world: World) -> None:
    await world.store("main", "deadlock", ago_s=1)
    await world.store("main", "deadlock", ago_s=2)
    await world.tick()
    [listed] = await world.alerts_of("locks-main")
    assert listed == {
        "id": listed["id"],
        "rule": "locks-main",
        "database_id": "main",
        "state": "firing",
        "started_at": _at(30),
        "resolved_at": None,
        "value": 2,
        "threshold": 2,
        "window_seconds": 300,
        "severity": "critical",
        "href": f"/ui/alerts/{listed['id']}",
    }
    assert await world.get(f"/v1/alerts/{listed['id']}") == listed
    assert (await world.get("/v1/alerts?state=resolved"))["alerts"] == []
    missing = await world.get("/v1/alerts/0123456789abcdef", 404)
    assert missing["error"]["code"] == "not_found"
    assert (await world.get("/v1/alerts/nope", 404))["error"]["code"] == "not_found"
    bad = await world.get("/v1/alerts?state=pending", 400)
    assert bad["error"]["field"] == "state" and "firing, resolved" in bad["error"]["message"]


async def test_a_firing_alert_continues_after_a_restart(world: World) -> None:
    await world.store("main", "deadlock", ago_s=1)
    await world.store("main", "deadlock", ago_s=2)
    await world.tick()
    [before] = await world.alerts_of("locks-main", "firing")
    await world.daemon.aclose()
    world.clock.advance(60)
    await world.start()  # the store and config of before; evaluates at once
    [after] = await world.alerts_of("locks-main")
    assert after == before | {"state": "firing"}  # same id, same start, still firing
    assert await world.get(f"/v1/alerts/{before['id']}") == after


async def test_a_rule_removed_by_a_reload_resolves_its_firing_alerts(world: World) -> None:
    await world.store("main", "deadlock", ago_s=1)
    await world.store("main", "deadlock", ago_s=2)
    await world.tick()
    assert await world.alerts_of("locks-main", "firing")
    (world.tmp / "forwarder.toml").write_text(_toml(RULES[1:], world.tmp))
    done = world.alerts.evaluations
    assert await world.daemon.reload()
    await world.evaluated(done + 1)  # at once, not at the next interval
    [alert] = await world.alerts_of("locks-main")
    assert alert["state"] == "resolved" and alert["resolved_at"] == _at(30)
    assert ("locks-main", "firing") not in await world.gauge()


async def test_an_alert_that_fires_again_at_the_same_instant_is_a_new_one(world: World) -> None:
    # A reload raises the threshold (resolved), another lowers it back, both before the clock
    # moves: "if the rule fires again later, that is a new alert with a new id".
    for ago in (1, 2, 3):
        await world.store("main", "deadlock", ago_s=ago)
    await world.tick()
    for threshold in (4, 2):
        rules = [{**RULES[0], "threshold": threshold}, *RULES[1:]]
        (world.tmp / "forwarder.toml").write_text(_toml(rules, world.tmp))
        done = world.alerts.evaluations
        assert await world.daemon.reload()
        await world.evaluated(done + 1)
    alerts = await world.alerts_of("locks-main")
    assert sorted(a["state"] for a in alerts) == ["firing", "resolved"]
    assert len({a["id"] for a in alerts}) == 2


async def test_a_database_removed_by_a_reload_resolves_its_firing_alerts(world: World) -> None:
    for db_id in ("main", "other"):
        await world.store(db_id, "error", ago_s=1, message="duplicate key value")
    await world.tick()
    assert len(await world.alerts_of("dup-key", "firing")) == 2
    toml = _toml(RULES, world.tmp)
    (world.tmp / "forwarder.toml").write_text(
        toml[: toml.index('[[databases]]\nid = "other"')] + toml[toml.index("[[alerts]]") :]
    )
    done = world.alerts.evaluations
    assert await world.daemon.reload()
    await world.evaluated(done + 1)
    alerts = {a["database_id"]: a["state"] for a in await world.alerts_of("dup-key")}
    assert alerts == {"main": "firing", "other": "resolved"}
    assert (await world.gauge()).items() >= {("dup-key", "firing"): 1, ("dup-key", "resolved"): 1}.items()


@pytest.mark.parametrize(
    ("rule", "problem"),
    [
        ({"id": "a", "threshold": 0}, "alerts[0].threshold: Input should be greater than or equal to 1"),
        ({"id": "a", "threshold": 1, "window_seconds": 30}, "alerts[0].window_seconds: Input should be greater"),
        ({"id": "a", "threshold": 1, "kinds": ["lock"]}, "alerts[0].kinds: unknown kind 'lock'"),
        ({"id": "a", "threshold": 1, "database_ids": ["x"]}, "alerts[0].database_ids[0]: unknown database id 'x'"),
        ({"id": "a", "threshold": 1, "severity": "page"}, "alerts[0].severity: Input should be 'info'"),
    ],
)
def test_a_bad_rule_is_reported_with_its_path(rule: dict[str, Any], problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        config_from_dict({"databases": [{"id": "main", "name": "m", "log": {"path": "/x/*.log"}}], "alerts": [rule]})
    assert any(p.startswith(problem) for p in caught.value.problems), caught.value.problems


def test_alert_ids_are_unique() -> None:
    with pytest.raises(ConfigError) as caught:
        config_from_dict({"alerts": [{"id": "a", "threshold": 1}, {"id": "a", "threshold": 2}]})
    assert caught.value.problems == ["alerts[1].id: duplicate alert id 'a'"]
