"""The `forwarder` command's entry point (`forwarder ...`, `python -m forwarder ...`).

For `run`, SIGHUP is ignored before anything else is imported. Its default action ends the process,
and a logrotate `postrotate` (or any `kill -HUP`) may send it while the daemon starts: the imports
of the command line alone take a few hundred milliseconds. `cli.cmd_run` then keeps it ignored
until the daemon's reload handler is in place. Other commands keep the default: a `logs tail` in
a terminal ends when the terminal goes away.
"""

from __future__ import annotations

import signal
import sys


def main() -> int:
    command = next((arg for arg in sys.argv[1:] if not arg.startswith("-")), None)
    if command == "run":
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    from forwarder.cli import main as cli_main

    return cli_main()
