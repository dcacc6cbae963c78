"""systemd/forwarder.service's reload and stop settings against what the daemon does."""

from __future__ import annotations

import shlex
import signal
import subprocess
from pathlib import Path

from forwarder.app import StopForced
from tests.daemonproc import FORWARDER

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "systemd" / "forwarder.service"


def settings() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in UNIT.read_text().splitlines():
        if line and not line.startswith(("#", "[")) and "=" in line:
            key, _, value = line.partition("=")
            out.setdefault(key, []).append(value)
    return out


def test_reload_checks_the_file_the_daemon_runs_with_before_the_sighup(tmp_path: Path) -> None:
    # The daemon ends every reload with READY=1 (sd_notify(3) has no "reload failed"): without this
    # check `systemctl reload` succeeded for a broken file. ExecReload= commands run in order and
    # the first that fails ends the reload (systemd.service(5)).
    s = settings()
    [start] = s["ExecStart"]
    check, hup = s["ExecReload"]
    binary, command, *args = shlex.split(start)
    assert command == "run" and args[0] == "--config"
    assert shlex.split(check) == [binary, "check-config", args[1]]
    assert hup == "/bin/kill -HUP $MAINPID"

    # The check as the unit runs it, with this checkout's forwarder: a broken file fails it.
    config = tmp_path / "forwarder.toml"
    config.write_text('[server]\nport = "not a port"\n')
    argv = [*FORWARDER, *shlex.split(check)[1:-1], str(config)]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert out.returncode == 78 and "server.port" in out.stderr


def test_a_forced_stop_is_a_clean_exit_for_systemd() -> None:
    # A second SIGTERM/SIGINT during the drain: a stop asked for twice, not a failure to restart.
    codes = {StopForced(sig).exit_code for sig in (signal.SIGTERM, signal.SIGINT)}
    assert codes == {143, 130}
    assert set(" ".join(settings()["SuccessExitStatus"]).split()) == {str(c) for c in codes}
