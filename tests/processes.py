"""The processes a test run started and left running, read from /proc (psutil is not a dependency)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Proc:
    """A live process: its id and command line."""

    pid: int
    cmdline: str

    def __str__(self) -> str:
        return f"pid {self.pid}: {self.cmdline[:200]}"


def _stat(pid_dir: Path) -> tuple[str, int] | None:
    """(state, parent pid) of a /proc/<pid> entry; None when it is gone."""
    try:
        stat = (pid_dir / "stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may hold spaces or parentheses itself.
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[0], int(fields[1])


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def is_live(pid: int) -> bool:
    """The process exists and has not exited (a zombie only waits for its parent to read its status)."""
    st = _stat(Path(f"/proc/{pid}"))
    return st is not None and st[0] not in ("Z", "X")


def live_descendants(pid: int | None = None) -> list[Proc]:
    """Processes below `pid` (this one by default) that have not exited.

    A zombie (exited, not yet reaped) is not live.
    """
    root = os.getpid() if pid is None else pid
    children: dict[int, list[tuple[int, str]]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (st := _stat(entry)) is not None:
            children.setdefault(st[1], []).append((int(entry.name), st[0]))
    found: list[Proc] = []
    todo = [root]
    while todo:
        for child, state in children.get(todo.pop(), []):
            todo.append(child)
            if state in ("Z", "X"):
                continue
            found.append(Proc(child, _cmdline(child)))
    return found


def leftovers(grace_seconds: float = 2.0) -> list[Proc]:
    """The live descendants still there after `grace_seconds` (a process told to stop may take a moment)."""
    deadline = time.monotonic() + grace_seconds
    while (alive := live_descendants()) and time.monotonic() < deadline:
        time.sleep(0.1)  # another process's exit can only be polled for
    return alive


def kill(procs: list[Proc]) -> None:
    """SIGKILL each of `procs`, so a run that failed for leaving them does not leave them too."""
    for proc in procs:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(proc.pid, signal.SIGKILL)
