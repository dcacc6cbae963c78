"""Imports point down the flow (DESIGN "Layout"): checked on the source with `ast`, nothing is imported.

Every import counts, also one inside a function or under `if TYPE_CHECKING:`: each is a dependency
of the layer all the same.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "forwarder"

# layer -> (what it may import of the daemon, or None for "anything but the forbidden"; what it must not)
RULES: dict[str, tuple[tuple[str, ...] | None, tuple[str, ...]]] = {
    "forwarder.pglog": (("forwarder.model", "forwarder.pglog", "forwarder.blake2"), ()),
    "forwarder.sinks": (None, ("forwarder.delivery", "forwarder.store", "forwarder.api")),
    "forwarder.store": (None, ("forwarder.delivery", "forwarder.api", "forwarder.sinks")),
    "forwarder.delivery": (None, ("forwarder.api",)),
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path) -> Iterator[tuple[int, str]]:
    """(line, absolute module) of every import in `path`; `from a import b` yields `a.b` (b may be a module)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}" if alias.name != "*" else base


def within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def breaches(layer: str) -> list[str]:
    allowed, forbidden = RULES[layer]
    out = []
    for path in sorted((PACKAGE / layer.removeprefix("forwarder.")).rglob("*.py")):
        for line, module in sorted(imported(path)):
            if not within(module, "forwarder"):
                continue
            # `from forwarder import model` names the module forwarder.model; `import forwarder` alone is the root.
            bad = any(within(module, f) for f in forbidden) or (
                allowed is not None and not any(within(module, a) for a in allowed)
            )
            if bad:
                out.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    return out


@pytest.mark.parametrize("layer", sorted(RULES))
def test_each_layer_imports_only_what_sits_below_it(layer: str) -> None:
    assert (PACKAGE / layer.removeprefix("forwarder.")).is_dir()
    found = breaches(layer)
    assert not found, f"{layer} breaks the import rules:\n" + "\n".join(found)


def test_the_check_sees_every_form_of_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "forwarder" / "sinks"
    pkg.mkdir(parents=True)
    (pkg / "x.py").write_text(
        "import forwarder.store\n"
        "from forwarder import api\n"
        "from ..delivery import deliverer\n"
        "from . import base\n"
        "def f():\n"
        "    from forwarder.delivery.netguard import check\n"
    )
    (tmp_path / "forwarder" / "pglog").mkdir()
    (tmp_path / "forwarder" / "pglog" / "y.py").write_text(
        "from forwarder.model import LogLine\nfrom .classify import kind\nfrom forwarder import metrics\n"
    )
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    monkeypatch.setattr(f"{__name__}.PACKAGE", tmp_path / "forwarder")
    assert breaches("forwarder.sinks") == [
        "forwarder/sinks/x.py:1 imports forwarder.store",
        "forwarder/sinks/x.py:2 imports forwarder.api",
        "forwarder/sinks/x.py:3 imports forwarder.delivery.deliverer",
        "forwarder/sinks/x.py:6 imports forwarder.delivery.netguard.check",
    ]
    assert breaches("forwarder.pglog") == ["forwarder/pglog/y.py:3 imports forwarder.metrics"]


def test_the_daemon_process_does_not_load_the_parser() -> None:
    # Parsing runs in the parse worker: the daemon's own process (app, API, config with its prefix
    # check, sources, insights) must not load the value-removal tables and libpg_query, which cost
    # start-up time and memory it never uses (DESIGN: the worker parses).
    code = (
        "import sys, forwarder.app\n"
        "from forwarder.config import config_from_dict\n"
        "config_from_dict({'databases': [{'id': 'm', 'name': 'm', 'log': {'path': '/x/*.log',"
        " 'line_prefix': '%m [%p] %q%u@%d '}}]}, read_secrets=False)\n"
        "print(sorted(m for m in sys.modules if m.startswith('forwarder.pglog.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT, check=True)
    loaded = set(ast.literal_eval(out.stdout.strip()))
    assert loaded.isdisjoint({"forwarder.pglog.entry", "forwarder.pglog.redact", "forwarder.pglog.normalize"}), loaded
    assert "forwarder.pglog.prefix" in loaded  # the config's prefix check ran


def test_the_parse_worker_loads_none_of_the_daemons_libraries() -> None:
    # The worker's memory counts in the daemon's footprint (parse_worker's docstring): parsing and
    # encoding a real PostgreSQL 15 log (a fixture with statements, so normalization and group
    # keys run) must not load the daemon's libraries, nor OpenSSL's libcrypto (hashlib's
    # `_hashlib`, ~3.4 MB: forwarder.blake2) or SQLite (the store's connections are the daemon's).
    log = ROOT / "tests" / "unit" / "pglog" / "fixtures" / "pg15_stderr_for_cri.log"
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from forwarder.sources.parse_worker import ReaderSpec, w_call, w_open\n"
        "from forwarder.store.lines import Identity\n"
        "w_open(1, ReaderSpec('stderr', '%m [%p] %q%u@%d ', 'UTC', Identity(1, 'm', 'm', 'h')), False)\n"
        "rows = w_call(1, 'feed', False, Path(sys.argv[1]).read_bytes(), 0.0).rows\n"
        "rows += w_call(1, 'flush', False, b'', 0.0).rows\n"
        "print(len(rows), sorted(sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(log)], capture_output=True, text=True, timeout=60, cwd=ROOT, check=True
    )
    count, modules = out.stdout.split(" ", 1)
    assert int(count) >= 10  # the fixture's entries were parsed and encoded
    loaded = set(ast.literal_eval(modules))
    forbidden = {
        *("aiohttp", "pydantic", "prometheus_client", "asyncio", "multiprocessing", "jinja2", "cryptography"),
        *("_hashlib", "ssl", "sqlite3", "_sqlite3"),
        *("forwarder.metrics", "forwarder.store.store", "forwarder.store.state"),
    }
    assert not loaded & forbidden, sorted(loaded & forbidden)
    assert {"forwarder.pglog.normalize", "pgparse", "zstandard"} <= loaded  # it did the work
