"""`[databases.connection]`: the DSN never holds a password, which comes from the environment or a file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from forwarder.config import ConfigError, config_from_dict


def _config(connection: dict[str, Any], *, read_secrets: bool = True) -> Any:
    db = {"id": "main", "name": "main", "log": {"path": "/var/log/postgresql/*.log"}, "connection": connection}
    return config_from_dict({"databases": [db]}, read_secrets=read_secrets)


def _problems(connection: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        _config(connection)
    return caught.value.problems


@pytest.mark.parametrize(
    "dsn",
    [
        "postgresql://admin:hunter2@db.internal:5432/postgres",
        "postgres://admin:hunter2@db.internal/postgres",
        "postgresql://admin@db.internal/postgres?password=hunter2",
        "postgresql://admin@db.internal/postgres?sslmode=require&sslpassword=hunter2",
    ],
)
def test_a_dsn_with_a_password_is_refused_by_its_toml_path_without_repeating_it(dsn: str) -> None:
    problems = _problems({"dsn": dsn})

    assert problems == [
        "databases[0].connection.dsn: must not hold a password; give password_env or password_file instead"
    ]
    assert "hunter2" not in "".join(problems)


@pytest.mark.parametrize("dsn", ["host=db user=admin", "mysql://admin@db/x", "postgresql://db/x?sslmode"])
def test_a_dsn_that_is_not_a_postgresql_uri_is_refused(dsn: str) -> None:
    (problem,) = _problems({"dsn": dsn})

    assert problem.startswith("databases[0].connection.dsn: ")


def test_the_password_comes_from_the_environment_or_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FWD_TEST_PG_PASSWORD", "from-env")
    secret = tmp_path / "pg.password"
    secret.write_text("from-file\n")

    by_env = _config({"dsn": "postgresql://admin@db/postgres", "password_env": "FWD_TEST_PG_PASSWORD"})
    by_file = _config({"dsn": "postgresql://admin@db/postgres", "password_file": str(secret)})
    neither = _config({"dsn": "postgresql://admin@db/postgres"})

    assert by_env.databases[0].connection.read_password() == "from-env"
    assert by_file.databases[0].connection.read_password() == "from-file"
    assert neither.databases[0].connection.read_password() is None
    assert "from-env" not in repr(by_env) and "from-file" not in repr(by_file)


def test_an_unreadable_password_is_named_by_its_source(tmp_path: Path) -> None:
    problems = _problems({"dsn": "postgresql://a@db/p", "password_env": "FWD_TEST_SURELY_UNSET"})
    missing = _problems({"dsn": "postgresql://a@db/p", "password_file": str(tmp_path / "nope")})
    both = _problems({"dsn": "postgresql://a@db/p", "password_env": "X", "password_file": "/x"})

    assert problems == ["databases[0].connection.password_env: environment variable FWD_TEST_SURELY_UNSET is not set"]
    assert missing[0].startswith("databases[0].connection.password_file: cannot read ")
    assert both == ["databases[0].connection: give password_env or password_file, not both"]


def test_fixes_are_off_unless_allowed_and_there_is_no_connection_by_default() -> None:
    connected = _config({"dsn": "postgresql://a@db/p"})
    plain = config_from_dict({"databases": [{"id": "m", "name": "m", "log": {"path": "/x/*.log"}}]})

    assert connected.databases[0].connection.allow_fixes is False
    assert connected.databases[0].connection.statement_timeout_seconds == 30
    assert plain.databases[0].connection is None
