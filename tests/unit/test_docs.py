"""The docs stand alone and stay true: the log line's field table follows the code's list of
fields, links between the pages land on a heading, and nothing shipped cites a document or a
machine the reader of the repository does not have."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from forwarder.api.openapi import openapi_document
from forwarder.model import SPEC_FIELDS

REPO = Path(__file__).resolve().parents[2]
API_DOC = REPO / "docs" / "api.md"


def _markdown_pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "bench" / "README.md"]


def _prose(text: str) -> Iterator[str]:
    """The lines of a Markdown page outside fenced code blocks."""
    fenced = False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            yield line


def _section(text: str, heading: str) -> list[str]:
    """The prose lines under `heading` up to the next heading of the same level or above."""
    level = heading.split(" ", 1)[0]
    lines = list(_prose(text))
    start = lines.index(heading) + 1
    end = next(
        (i for i in range(start, len(lines)) if re.match(rf"#{{1,{len(level)}}} ", lines[i])),
        len(lines),
    )
    return lines[start:end]


def _table(lines: list[str]) -> list[list[str]]:
    """The body rows of the first Markdown table in `lines`, cells stripped (`\\|` stays in a cell)."""
    rows = [line for line in lines if line.startswith("|")]
    return [[cell.strip() for cell in re.split(r"(?<!\\)\|", row)[1:-1]] for row in rows[2:]]


def _field_rows() -> list[list[str]]:
    return _table(_section(API_DOC.read_text(), "## The log line"))


def test_the_log_line_table_lists_every_field_of_a_line_in_order() -> None:
    names = [row[0].strip("`") for row in _field_rows()]

    assert names == list(SPEC_FIELDS)


def test_the_log_line_table_gives_each_field_the_json_type_the_api_serves() -> None:
    served = openapi_document()["components"]["schemas"]["LogLine"]["properties"]
    json_types = {str: "string", int: "integer", float: "number", bool: "boolean"}
    for name, json_type, meaning, example in _field_rows():
        field = name.strip("`")
        # A field that may be null is `anyOf` its type and null in the document pydantic derives.
        expected = {branch["type"] for branch in served[field].get("anyOf", [served[field]])}
        assert set(re.findall(r"`(\w+)`", json_type)) == expected, field
        assert meaning, field
        value = json.loads(example.strip("`"))
        assert json_types[type(value)] in expected, field


def _slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lowercase, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {_slug(line.lstrip("#")) for line in _prose(page.read_text()) if re.match(r"#{1,6} ", line)}


def test_links_between_the_pages_land_on_a_file_and_a_heading() -> None:
    broken = []
    for page in _markdown_pages():
        for line in _prose(page.read_text()):
            for target in re.findall(r"\]\(([^)\s]+)\)", line):
                if re.match(r"[a-z]+:", target):
                    continue  # an outside address
                path, _, anchor = target.partition("#")
                linked = (page.parent / path).resolve() if path else page
                if not linked.exists() or (anchor and anchor not in _anchors(linked)):
                    broken.append(f"{page.relative_to(REPO)}: {target}")
    assert broken == []


def _shipped_texts() -> Iterator[Path]:
    """Every page and file an operator reads: docs, README, benchmarks, config, deploy and systemd."""
    yield from _markdown_pages()
    yield REPO / "config.example.toml"
    for folder in ("bench", "deploy", "systemd"):
        yield from (p for p in sorted((REPO / folder).rglob("*")) if p.is_file() and p.suffix != ".pyc")


def test_shipped_texts_cite_no_document_the_reader_does_not_have() -> None:
    citation = re.compile(r"\bSPEC\b|\b[Ii]ssues? \d")
    found = []
    for path in _shipped_texts():
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if citation.search(line):
                found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert found == []


def _tracked_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True, timeout=60).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [REPO / name for name in out.decode().split("\0") if name]


def test_no_tracked_text_names_a_path_of_one_machine() -> None:
    # The shared bench kit is ../shared/bench from the repository root; a checkout elsewhere has
    # no /work. This file is left out: it has to name what it looks for.
    machine_path = b"/work/"
    found = []
    for path in _tracked_files():
        if path == Path(__file__).resolve() or not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data:
            continue  # binary
        if machine_path in data:
            found.append(str(path.relative_to(REPO)))
    assert found == []
