"""The `forwarder` command's entry point (pyproject.toml's `[project.scripts]`).

It imports nothing at the top on purpose. A parse worker is started with multiprocessing's
`spawn`, which first runs the parent's main script again in the child as `__mp_main__`
(`multiprocessing.spawn._fixup_main_from_path`); the script pip writes for the command imports
the module it names. Were that `forwarder.cli`, every parse worker of a daemon started as
`forwarder run` (systemd, the container) would load the CLI, the config's models and pydantic,
~22 MB it never uses. (`python -m forwarder` is spared: a `__main__` module is never re-run.)
"""

from __future__ import annotations


def main() -> int:
    from forwarder.cli import main as cli_main

    return cli_main()
