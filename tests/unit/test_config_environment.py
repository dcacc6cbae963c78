"""FORWARDER_<SECTION>__<KEY> variables override the file; a mistake in one is named, never a traceback."""

from __future__ import annotations

from typing import Any

import pytest

from forwarder.config import Config, ConfigError, config_from_dict, environment_overrides

FILE: dict[str, Any] = {
    "server": {"host": "127.0.0.1", "port": 8000},
    "databases": [{"id": "main", "name": "main", "log": {"path": "/var/log/postgresql/*.log"}}],
}


def loaded(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> Config:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return config_from_dict({**FILE}, read_secrets=False)


def refused(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        loaded(monkeypatch, env)
    return caught.value.problems


@pytest.mark.parametrize(
    ("env", "port", "host"),
    [
        ({}, 8000, "127.0.0.1"),
        ({"FORWARDER_SERVER__PORT": "9001"}, 9001, "127.0.0.1"),  # the file's other keys stay
        ({"forwarder_server__port": "9002"}, 9002, "127.0.0.1"),  # names match without regard to case
        ({"FORWARDER_SERVER": '{"port": 9003}'}, 9003, "127.0.0.1"),  # a section as JSON, merged too
        ({"FORWARDER_SERVER": '{"port": 9004}', "FORWARDER_SERVER__HOST": "127.0.0.2"}, 9004, "127.0.0.2"),
        ({"FORWARDER_URL": "http://x", "FORWARDER_KEY": "k", "FORWARDER_CONFIG": "/x"}, 8000, "127.0.0.1"),
    ],
)
def test_the_environment_overrides_keys_of_the_file(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], port: int, host: str
) -> None:
    config = loaded(monkeypatch, env)
    assert (config.server.port, config.server.host) == (port, host)


def test_arrays_come_as_json(monkeypatch: pytest.MonkeyPatch) -> None:
    config = loaded(
        monkeypatch,
        {
            "FORWARDER_SECURITY__ALLOWED_DESTINATION_NETWORKS": '["10.0.0.0/8"]',
            "FORWARDER_DATABASES": '[{"id": "a", "name": "a", "log": {"path": "/var/log/a/*.log"}}]',
            "FORWARDER_STORE__RETENTION_DAYS": "3",
        },
    )
    assert config.security.allowed_destination_networks == ["10.0.0.0/8"]
    assert [db.id for db in config.databases] == ["a"]  # replaced whole, as a TOML array would be
    assert config.store.retention_days == 3


@pytest.mark.parametrize(
    ("env", "problem"),
    [
        # a value given by a variable is a mistake of the variable's, named so (not the file's)
        ({"FORWARDER_SERVER__NOPE": "1"}, "FORWARDER_SERVER__NOPE: server.nope: Extra inputs are not permitted"),
        (
            {"FORWARDER_SERVER__PORT": "70000"},
            "FORWARDER_SERVER__PORT: server.port: Input should be less than or equal to 65535",
        ),
        (
            {"FORWARDER_SERVER": '{"port": "abc"}'},
            "FORWARDER_SERVER: server.port: Input should be a valid integer, unable to parse string as an integer",
        ),
        # a section's key under a section that does not exist is a mistake, not someone else's variable
        (
            {"FORWARDER_SERVR__PORT": "9000"},
            f"FORWARDER_SERVR__PORT: no section 'servr' (the sections: {', '.join(sorted(Config.model_fields))})",
        ),
        (
            {"FORWARDER_SERVER": "port=1"},
            "FORWARDER_SERVER: server takes JSON here: Expecting value: line 1 column 1 (char 0)",
        ),
        (
            {"FORWARDER_SECURITY__ALLOWED_DESTINATION_NETWORKS": "10.0.0.0/8"},
            "FORWARDER_SECURITY__ALLOWED_DESTINATION_NETWORKS: security.allowed_destination_networks takes JSON"
            " here: Extra data: line 1 column 5 (char 4)",
        ),
        (
            {"FORWARDER_DATABASES__0__NAME": "b"},
            "FORWARDER_DATABASES__0__NAME: databases is set whole, as JSON (FORWARDER_DATABASES='[...]')",
        ),
        ({"FORWARDER_SERVER__PORT__X": "1"}, "FORWARDER_SERVER__PORT__X: server.port takes a value, not keys"),
        (
            {"FORWARDER_SERVER": "[1]", "FORWARDER_SERVER__HOST": "::1"},
            "FORWARDER_SERVER__HOST: server was set as a whole by another variable",
        ),
    ],
)
def test_a_wrong_variable_is_named(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], problem: str) -> None:
    assert refused(monkeypatch, env) == [problem]


def test_a_mistake_in_the_file_is_the_files_even_with_variables_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORWARDER_SERVER__HOST", "127.0.0.2")
    with pytest.raises(ConfigError) as caught:
        config_from_dict({**FILE, "server": {"port": "abc"}}, read_secrets=False)
    (problem,) = caught.value.problems
    assert problem.startswith("server.port: Input should be a valid integer")


def test_the_overrides_are_a_document_shaped_like_the_file() -> None:
    document, problems = environment_overrides(
        {"FORWARDER_WEB__ENABLED": "false", "FORWARDER_ASK__BUILTIN": '{"provider": "openai"}', "PATH": "/bin"}
    )
    assert (document, problems) == ({"web": {"enabled": "false"}, "ask": {"builtin": {"provider": "openai"}}}, [])
