"""Secrets at rest: the key file is made private, the environment can supply the key, errors are clear."""

from __future__ import annotations

import base64
import stat
from pathlib import Path

import pytest
from cryptography.exceptions import InvalidTag

from forwarder.secrets import ENV_KEY, SecretBox, SecretKeyError, load_key


def test_the_key_file_is_created_private_and_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_KEY, raising=False)
    path = tmp_path / "sub" / "secrets.key"
    key = load_key(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and len(key) == 32
    assert load_key(path) == key


def test_the_environment_wins_over_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env_key = bytes(range(32))
    monkeypatch.setenv(ENV_KEY, base64.b64encode(env_key).decode())
    assert load_key(tmp_path / "never-created.key") == env_key
    assert not (tmp_path / "never-created.key").exists()


@pytest.mark.parametrize("value", ["not base64!", base64.b64encode(b"short").decode()])
def test_a_bad_key_is_a_clear_error_without_key_material(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(ENV_KEY, value)
    with pytest.raises(SecretKeyError) as err:
        load_key(tmp_path / "k")
    assert value not in str(err.value)


def test_sealed_secrets_open_only_for_their_owner() -> None:
    box = SecretBox(bytes(32))
    sealed = box.seal("whsec_abc", "dst_1")
    assert b"whsec_abc" not in sealed and box.open(sealed, "dst_1") == "whsec_abc"
    with pytest.raises(InvalidTag):
        box.open(sealed, "dst_2")  # moved to another destination's row: refused
    assert "abc" not in repr(box)
