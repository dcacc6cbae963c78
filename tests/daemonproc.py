"""Run `forwarder run` as a real subprocess for tests: config file, keys, readiness, signals."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from forwarder.client import request_json
from tests.harness import free_port

FORWARDER = [sys.executable, "-m", "forwarder"]
T = TypeVar("T")


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


class LoopThread:
    """An asyncio loop of its own in a daemon thread: receivers answer while the test blocks."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="receiver-loop", daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


class DaemonProcess:
    """One daemon with its own config and store under `root`; restartable; keys made by the CLI."""

    def __init__(
        self,
        root: Path,
        databases: list[dict[str, Any]],
        allowed_networks: tuple[str, ...] = (),
        extra_toml: str = "",
        **store: Any,
    ) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.config_path = root / "forwarder.toml"
        lines = [
            "[server]",
            'host = "127.0.0.1"',
            f"port = {self.port}",
            "[store]",
            f"path = {toml_value(root / 'store.db')}",
        ]
        lines += [f"{k} = {toml_value(v)}" for k, v in store.items()]
        lines += ["[security]", f"secrets_key_file = {toml_value(root / 'secrets.key')}"]
        if allowed_networks:
            lines.append("allowed_destination_networks = [" + ", ".join(toml_value(n) for n in allowed_networks) + "]")
        for db in databases:
            lines.append("[[databases]]")
            lines += [f"{k} = {toml_value(v)}" for k, v in db.items() if not isinstance(v, dict)]
            for table, values in db.items():  # [databases.log], [databases.connection]
                if isinstance(values, dict):
                    lines.append(f"[databases.{table}]")
                    lines += [f"{k} = {toml_value(v)}" for k, v in values.items()]
        self.base_toml = "\n".join(lines) + "\n"
        self.write_config(extra_toml)
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = root / "daemon.log"
        self.url = f"http://127.0.0.1:{self.port}"
        self.key = self.cli("keys", "create", "--role", "read-write", "--name", "tests").stdout.strip()
        self.read_only_key = self.cli("keys", "create", "--role", "read-only").stdout.strip()

    def cli(self, *args: str, check: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        extra = ["--config", str(self.config_path)] if args[0] == "keys" else []
        return subprocess.run(
            [*FORWARDER, *args, *extra],
            capture_output=True,
            text=True,
            check=check,
            input=stdin,
            timeout=60,
            env={**os.environ, "FORWARDER_LOG_LEVEL": "info"},
        )

    def write_config(self, extra_toml: str = "", *, whole: str | None = None) -> None:
        """The config file: the generated part plus `extra_toml` (tables such as [[destinations]]),
        or `whole` as given (a broken config, say)."""
        self.config_path.write_text(whole if whole is not None else self.base_toml + extra_toml)

    def start(self, timeout: float = 20, env: dict[str, str] | None = None) -> None:
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child process
        self.proc = subprocess.Popen(
            [*FORWARDER, "run", "--config", str(self.config_path)],
            stdout=log,
            stderr=log,
            env={**os.environ, **(env or {})},
            start_new_session=True,  # its own process group, as a service's: a test may signal the group
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited with {self.proc.returncode}: {self.log_path.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(self.url + "/readyz", timeout=1) as resp:  # noqa: S310
                    if resp.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.05)
        raise TimeoutError("daemon did not become ready")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        code = self.proc.wait(timeout)
        self.proc = None
        return code

    def get(self, path: str, key: str | None = None, **params: Any) -> Any:
        return request_json(self.url, key or self.key, path, params)

    def send(self, method: str, path: str, body: dict[str, Any]) -> Any:
        """A write with a JSON body (read-write key); the JSON answer."""
        import json

        req = urllib.request.Request(  # noqa: S310 - loopback test URL
            self.url + path,
            data=json.dumps(body).encode(),
            method=method,
            headers={"Authorization": f"Bearer {self.key}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310
            return json.loads(resp.read())

    def patch(self, path: str, body: dict[str, Any]) -> Any:
        return self.send("PATCH", path, body)

    def all_lines(self, db: str, **params: Any) -> list[dict[str, Any]]:
        """Every line of `db` matching params, oldest first, paging with `before`."""
        out: list[dict[str, Any]] = []
        before = None
        while True:
            page = self.get(f"/v1/databases/{db}/logs", limit=500, before=before, **params)
            out.extend(page["lines"])
            if not page["has_more"]:
                break
            before = page["lines"][-1]["id"]
        return list(reversed(out))

    def wait_for_line(self, db: str, q: str, count: int = 1, timeout: float = 20) -> list[dict[str, Any]]:
        """Poll the API until `count` lines match `q` (the daemon reads another process's output)."""
        deadline = time.monotonic() + timeout
        while True:
            lines = self.get(f"/v1/databases/{db}/logs", q=q, limit=500)["lines"]
            if len(lines) >= count or time.monotonic() > deadline:
                return lines
            time.sleep(0.1)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
