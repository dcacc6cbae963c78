"""Normalizing a statement seen before: the same answer from the cache, and the cache stays bounded."""

from __future__ import annotations

from forwarder.pglog import normalize as N


def test_a_repeated_statement_is_normalized_the_same_with_or_without_its_fingerprint() -> None:
    sql = "SELECT * FROM orders WHERE id = 42 AND note = 'x'"
    first = N.normalize_statement(sql)
    assert N.normalize_statement(sql) == first == ("SELECT * FROM orders WHERE id = $1 AND note = $2", True, first[2])
    assert len(first[2]) == 16
    # Asked without the fingerprint after it was cached with one (and back): each gets what it asked for.
    assert N.normalize_statement(sql, False) == (first[0], True, "")
    assert N.normalize(sql) == (first[0], True)
    assert N.normalize_statement(sql) == first


def test_the_cache_holds_a_bounded_number_of_short_statements() -> None:
    for i in range(3 * N._CACHE_ENTRIES):
        N.normalize_statement(f"SELECT c{i} FROM t WHERE x = {i}")
    long_sql = "SELECT " + ", ".join(f"c{i}" for i in range(N._CACHE_MAX_CHARS)) + " FROM t WHERE x = 1"
    assert N.normalize_statement(long_sql)[0].endswith("WHERE x = $1")
    cached = N._CACHE[True]
    assert 0 < len(cached) <= N._CACHE_ENTRIES
    assert long_sql not in cached
    assert all(len(sql) <= N._CACHE_MAX_CHARS for sql in cached)
