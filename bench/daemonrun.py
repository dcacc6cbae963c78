"""`forwarder run` as the benchmarks run it: a config of their own, the CLI on it, start to
/readyz, stop. Each benchmark writes its own config (what it measures differs); the process
handling is this one piece.
"""

from __future__ import annotations

import http.client
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

PY = sys.executable
REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("SHARED_BENCH", str(REPO.parent / "shared" / "bench")))  # the shared bench kit
PREFIX = "%m [%p] %q%u@%d/%a "  # the log_line_prefix of every benchmark's log


class ForwarderProcess:
    """`forwarder run --config <root>/forwarder.toml` on `port`, its output in `<root>/daemon.log`."""

    def __init__(self, root: Path, port: int, config_lines: list[str]) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.config = root / "forwarder.toml"
        self.config.write_text("\n".join([*config_lines, ""]))
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
