"""Every source format reads the corpus as the stderr format does, and none leaks a value.

The corpus (test_pglog_corpus.py: PostgreSQL 13-18 entries with planted values) is wrapped as a
syslog file, as a container log and as the journal would hold it (envelopes.py), read with that format, and
compared field by field with the stderr reading; every planted value is checked absent, with the
same `_SECRET` pattern as the corpus.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Final

import pytest
from envelopes import cri_of, journal_of, syslog_of
from pglog_helpers import PREFIX
from test_pglog_corpus import _SECRET, CASES

from forwarder.model import LogLine, spec_fields
from forwarder.pglog import Format, make_reader, parse_stream

ENVELOPES: Final[dict[Format, Callable[[str], bytes]]] = {
    "syslog": syslog_of,
    "cri": lambda text: cri_of(text.encode()),
    "journal": journal_of,
}


def read(fmt: Format, data: bytes, prefix: str) -> list[LogLine]:
    reader = make_reader(fmt, line_prefix=prefix, timezone="UTC", full_text=False)
    return list(parse_stream(reader, [data]))


def comparable(line: LogLine) -> dict[str, Any]:
    fields = spec_fields(line)
    if line.unparsed:
        del fields["time"]  # the time of reading
    return fields


@pytest.mark.parametrize("fmt", list(ENVELOPES))
@pytest.mark.parametrize(("text", "kind", "expected"), CASES)
def test_the_corpus_reads_the_same_in_every_envelope(
    fmt: Format, text: str, kind: str, expected: dict[str, Any]
) -> None:
    prefix = expected.get("prefix", PREFIX)
    plain = read("stderr", text.encode(), prefix)
    wrapped = read(fmt, ENVELOPES[fmt](text), prefix)
    assert [comparable(x) for x in wrapped] == [comparable(x) for x in plain]
    out = json.dumps([spec_fields(x) for x in wrapped]) + "".join(str(x.fingerprint) for x in wrapped)
    for secret in set(_SECRET.findall(text)):
        assert secret not in out, (secret, out)


# A statement of ~3 kB: syslog cuts it into pieces of at most 900 bytes (at blanks, and once
# inside a word run, never inside a character); a value at the end of it is still removed.
LONG = (
    "2026-11-22 02:18:58.123 UTC [4242] app@shop/web LOG:  statement: SELECT "
    + ", ".join(f"colonne_été_{i}" for i in range(150))
    + " FROM t WHERE x = '"
    + "ü" * 700
    + "' AND note = 'S3CR-long'\n"
)


@pytest.mark.parametrize("fmt", list(ENVELOPES))
def test_a_long_statement_comes_back_whole(fmt: Format) -> None:
    plain = read("stderr", LONG.encode(), PREFIX)
    wrapped = read(fmt, ENVELOPES[fmt](LONG), PREFIX)
    assert [comparable(x) for x in wrapped] == [comparable(x) for x in plain]
    assert wrapped[0].statement is not None and "colonne_été_149 FROM t WHERE x = $1" in wrapped[0].statement
    assert "S3CR" not in json.dumps(spec_fields(wrapped[0]))
    assert len(syslog_of(LONG).splitlines()) >= 4
