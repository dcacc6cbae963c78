"""`forwarder run` as the benchmarks run it: a config of their own, the CLI on it, start to
/readyz, stop. Each benchmark writes its own config (what it measures differs); the process
handling is this one piece.
"""

from __future__ import annotations

import compileall
import http.client
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

PY = sys.executable
REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("SHARED_BENCH", str(REPO.parent / "shared" / "bench")))  # the shared bench kit
PREFIX = "%m [%p] %q%u@%d/%a "  # the log_line_prefix of every benchmark's log


def free_port() -> int:
    """A loopback port free now (the benchmarks' daemons, receivers and peers listen on one)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def compile_bytecode() -> None:
    """Write the package's bytecode (__pycache__, ignored by git), as `pip install` of the wheel
    does. The benchmarks run the checkout, and with PYTHONDONTWRITEBYTECODE set (as in CI here)
    every start compiled ~100 modules from source again: ~150-200 ms of start to ready that an
    installed daemon never spends."""
    compileall.compile_dir(REPO / "forwarder", quiet=1)


class ForwarderProcess:
    """`forwarder run --config <root>/forwarder.toml` on a free loopback port, its output in
    `<root>/daemon.log`.

    The config's `[server]`, `[store]` (at `store`, then `store_lines`) and `[security]` (the
    secrets key under `root`, then `security_lines`) are written here; `config_lines` follow them.
    """

    def __init__(
        self,
        root: Path,
        store: Path,
        config_lines: Sequence[str],
        *,
        store_lines: Sequence[str] = (),
        security_lines: Sequence[str] = (),
    ) -> None:
        root.mkdir(parents=True, exist_ok=True)
        compile_bytecode()
        self.root = root
        self.port = port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.config = root / "forwarder.toml"
        lines = ["[server]", 'host = "127.0.0.1"', f"port = {port}", "[store]", f'path = "{store}"', *store_lines]
        lines += ["[security]", f'secrets_key_file = "{root / "secrets.key"}"', *security_lines, *config_lines]
        self.config.write_text("\n".join([*lines, ""]))
        self.log_path = root / "daemon.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def cli(self, *args: str, timeout: float = 300) -> str:
        """A `forwarder` command on this config; its standard output."""
        cmd = [PY, "-m", "forwarder", *args, "--config", str(self.config)]
        return subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=timeout).stdout

    def create_key(self, role: str, name: str) -> str:
        return self.cli("keys", "create", "--role", role, "--name", name).strip()

    def start(self, timeout: float = 300) -> float:
        """Exec `forwarder run` and wait for /readyz 200; the seconds between."""
        t0 = time.monotonic()
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                [PY, "-m", "forwarder", "run", "--config", str(self.config), "--log-level", "warning"],
                stdout=out,
                stderr=out,
            )
        while time.monotonic() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited: {self.log_path.read_text()[-2000:]}")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                try:
                    conn.request("GET", "/readyz")
                    if conn.getresponse().status == 200:
                        return time.monotonic() - t0
                finally:
                    conn.close()
            except OSError:
                pass
            time.sleep(0.005)  # polling a starting process's port
        raise TimeoutError("daemon not ready")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self, grace_seconds: float = 60) -> None:
        """SIGTERM, then SIGKILL after `grace_seconds`."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace_seconds)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
