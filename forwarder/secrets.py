"""Secrets at rest: AES-256-GCM with a key from a file (created 0600 on first start) or the environment.

The key is FORWARDER_SECRETS_KEY (base64 of 32 bytes) when set, else the file named by
`security.secrets_key_file`. Each sealed value is `nonce (12 bytes) || ciphertext+tag`, with the
owner's id as associated data, so a sealed secret moved to another row does not open.
"""

from __future__ import annotations

import base64
import os
import secrets as _random
from pathlib import Path
from typing import Final

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

KEY_BYTES: Final = 32
NONCE_BYTES: Final = 12
ENV_KEY: Final = "FORWARDER_SECRETS_KEY"


class SecretKeyError(Exception):
    """The key cannot be read or created; the message names the file, never key material."""


class SecretBox:
    """Seals and opens short secrets (credentials, signing secrets)."""

    def __init__(self, key: bytes) -> None:
        if len(key) != KEY_BYTES:
            raise SecretKeyError(f"a secrets key is {KEY_BYTES} bytes")
        self._aead = AESGCM(key)

    def seal(self, plaintext: str, owner: str) -> bytes:
        nonce = _random.token_bytes(NONCE_BYTES)
        return nonce + self._aead.encrypt(nonce, plaintext.encode(), owner.encode())

    def open(self, sealed: bytes, owner: str) -> str:
        return self._aead.decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], owner.encode()).decode()

    def __repr__(self) -> str:
        return "SecretBox(<key hidden>)"


def load_key(path: Path) -> bytes:
    """The key from the environment, or from `path`, creating it (mode 0600) if it does not exist."""
    env = os.environ.get(ENV_KEY)
    if env:
        try:
            key = base64.b64decode(env, validate=True)
        except ValueError:
            raise SecretKeyError(f"{ENV_KEY} is not base64") from None
        if len(key) != KEY_BYTES:
            raise SecretKeyError(f"{ENV_KEY} must hold {KEY_BYTES} bytes")
        return key
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        key = _random.token_bytes(KEY_BYTES)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process made it first: use theirs
            return load_key(path)
        with os.fdopen(fd, "wb") as fh:
            fh.write(base64.b64encode(key) + b"\n")
        return key
    except PermissionError:
        raise SecretKeyError(f"cannot read the secrets key file {path}: permission denied") from None
    try:
        key = base64.b64decode(data.strip(), validate=True)
    except ValueError:
        raise SecretKeyError(f"the secrets key file {path} is not base64") from None
    if len(key) != KEY_BYTES:
        raise SecretKeyError(f"the secrets key file {path} must hold {KEY_BYTES} bytes")
    return key
