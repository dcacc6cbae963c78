"""Property tests of the stderr reader: whatever the bytes and however they are chunked, it never
crashes, never drops an entry, and its committed offset only moves forward within what was fed.

- Random bytes (invalid UTF-8, NULs, CRs, TABs, stray newlines) and structured logs (prefixed
  primary lines, DETAIL/STATEMENT lines, TAB continuations, lines without prefix) are fed whole
  and in random chunks: the entries (every field but the reading time of orphans) are the same.
- With full text on, the text of every non-empty physical line is in some field of the output
  (the alphabet of the generated text has no `:` and no `w`, so no classification moves part of
  it elsewhere and no password scrubbing applies).
- Lines at and past the 1 MiB entry cap, and a last line without its newline.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pglog_helpers import PREFIX, T0

from forwarder.model import LogLine, spec_fields
from forwarder.pglog import MAX_ENTRY_BYTES, make_reader

FAST = settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])

PAYLOAD = st.text(
    alphabet=st.characters(
        blacklist_categories=("Cs",), blacklist_characters=":w\n\r\t\x00\x85\u2028\u2029\x0b\x0c\x1c\x1d\x1e"
    ),
    min_size=1,
    max_size=60,
).filter(lambda t: t.strip() != "")
SEVERITY = st.sampled_from(["LOG", "ERROR", "FATAL", "WARNING", "NOTICE", "PANIC", "DEBUG1", "INFO"])
# (LOCATION is left out: it is dropped on purpose, and so are the lines that continue it)
SECONDARY = st.sampled_from(["DETAIL", "HINT", "CONTEXT", "STATEMENT", "QUERY"])


@st.composite
def log_lines(draw: st.DrawFn) -> list[tuple[str, str]]:
    """(physical line, its payload) pairs of a plausible stderr log; payload "" when it has none."""
    out: list[tuple[str, str]] = []
    for _ in range(draw(st.integers(1, 12))):
        pid = draw(st.sampled_from([1, 2]))
        kind = draw(st.integers(0, 9))
        text = draw(PAYLOAD)
        if kind <= 4:
            out.append((f"{T0} [{pid}] u@d/a {draw(SEVERITY)}:  {text}", text))
        elif kind <= 6:
            label = draw(SECONDARY)
            out.append((f"{T0} [{pid}] u@d/a {label}:  {text}", text))
        elif kind <= 8:
            out.append(("\t" + text, text))
        else:
            out.append((text, text))
    return out


def feed_all(data: bytes, cuts: list[int], *, full_text: bool) -> list[LogLine]:
    """Feed `data` split at `cuts`; check the offset contract on the way; return every entry."""
    reader = make_reader("stderr", line_prefix=PREFIX, timezone="UTC", full_text=full_text)
    out: list[LogLine] = []
    fed = 0
    last = 0
    bounds = sorted({c for c in cuts if 0 < c < len(data)})
    for start, end in zip([0, *bounds], [*bounds, len(data)], strict=True):
        out += reader.feed(data[start:end], 0.0)
        fed = end
        offset = reader.committed_offset
        assert last <= offset <= fed
        last = offset
    out += reader.flush()
    assert reader.committed_offset == len(data)
    return out


def comparable(lines: list[LogLine]) -> list[dict[str, object]]:
    """The fields that depend only on the text (an orphan's time is the time of reading)."""
    return [{k: v for k, v in spec_fields(x).items() if k != "time" or x.kind != "other"} for x in lines]


def all_text(lines: list[LogLine]) -> str:
    return "\n".join(str(v) for x in lines for v in spec_fields(x).values() if isinstance(v, str))


@FAST
@given(st.binary(max_size=400), st.lists(st.integers(0, 400), max_size=8), st.booleans())
def test_random_bytes_never_crash_and_chunking_changes_nothing(data: bytes, cuts: list[int], full_text: bool) -> None:
    whole = feed_all(data, [], full_text=full_text)
    assert comparable(feed_all(data, cuts, full_text=full_text)) == comparable(whole)
    assert comparable(feed_all(data, list(range(len(data))), full_text=full_text)) == comparable(whole)


@FAST
@given(log_lines(), st.lists(st.integers(0, 2000), max_size=8), st.booleans(), st.booleans())
def test_every_line_is_kept(lines: list[tuple[str, str]], cuts: list[int], final_newline: bool, crlf: bool) -> None:
    end = "\r\n" if crlf else "\n"
    data = (end.join(line for line, _ in lines) + (end if final_newline else "")).encode()
    full = feed_all(data, cuts, full_text=True)
    assert comparable(full) == comparable(feed_all(data, [], full_text=True))
    text = all_text(full)
    for _, payload in lines:
        if payload.strip():
            assert payload in text, (payload, full)
    # the number of entries does not depend on value removal either
    assert len(feed_all(data, cuts, full_text=False)) == len(full)


@FAST
@given(st.lists(st.binary(max_size=30), min_size=1, max_size=10), st.lists(st.integers(0, 300), max_size=6))
def test_invalid_utf8_in_prefixed_lines(parts: list[bytes], cuts: list[int]) -> None:
    # (newlines and NULs, which the reader takes for line ends, are spaces here)
    data = b"".join(
        f"{T0} [1] u@d/a LOG:  ".encode() + p.replace(b"\n", b" ").replace(b"\x00", b" ") + b"\n" for p in parts
    )
    lines = feed_all(data, cuts, full_text=False)
    assert len(lines) == len(parts)  # one entry per primary line, whatever its bytes
    assert comparable(lines) == comparable(feed_all(data, [], full_text=False))


@SLOW
@given(
    st.integers(MAX_ENTRY_BYTES - 40, MAX_ENTRY_BYTES + 40),
    st.lists(st.integers(0, MAX_ENTRY_BYTES + 200), max_size=4),
    st.booleans(),
)
def test_lines_at_the_entry_cap(size: int, cuts: list[int], final_newline: bool) -> None:
    head = f"{T0} [1] u@d/a ERROR:  ".encode()
    big = head + b"x" * (size - len(head))
    data = big + b"\n" + f"{T0} [1] u@d/a LOG:  after\n".encode() + b"\tcontinued" + (b"\n" if final_newline else b"")
    lines = feed_all(data, cuts, full_text=True)
    assert [x.message[:3] for x in lines] == ["xxx", "aft"]
    assert lines[0].truncated == (len(big) > MAX_ENTRY_BYTES)
    assert len(lines[0].message) <= MAX_ENTRY_BYTES
    assert lines[1].message == "after\ncontinued"
    assert comparable(lines) == comparable(feed_all(data, [], full_text=True))


@SLOW
@given(st.integers(1, 3), st.booleans())
def test_a_huge_entry_made_of_many_lines_is_capped(megabytes: int, full_text: bool) -> None:
    line = b"\t" + b"y" * 9999 + b"\n"
    data = f"{T0} [1] u@d/a LOG:  start\n".encode() + line * (megabytes * 110)
    lines = feed_all(data, [len(data) // 3, len(data) // 2], full_text=full_text)
    assert len(lines) == 1
    assert lines[0].truncated
    assert len(lines[0].message) <= MAX_ENTRY_BYTES + 1000


NAME = st.text(alphabet="ab@/ ,:-[]", max_size=8)


@FAST
@given(
    st.sampled_from([PREFIX, "%t [%p]: [%l-1] user=%u,db=%d,app=%a,client=%h ", "%m %u@%d %a: ", "%a|%u|%d|"]),
    NAME,
    NAME,
    NAME,
    st.sampled_from(["LOG", "ERROR", "DETAIL", "NOTICE"]),
)
def test_fast_prefix_regex_agrees_with_the_exact_one(prefix: str, user: str, db: str, app: str, sev: str) -> None:
    from forwarder.pglog.prefix import compile_prefix

    p = compile_prefix(prefix)
    assert p.fast_regex is not None
    line = (
        prefix.replace("%m", T0)
        .replace("%t", T0[:19] + " UTC")
        .replace("%p", "7")
        .replace("%l", "3")
        .replace("%h", "10.0.0.1")
        .replace("%q", "")
        .replace("%u", user)
        .replace("%d", db)
        .replace("%a", app)
        + f"{sev}:  text"
    )
    fast, exact = p.fast_regex.match(line), p.regex.match(line)
    if fast is not None:
        assert exact is not None and fast.groups() == exact.groups() and fast.end() == exact.end()
