"""A server with `lc_messages` other than C: translated severities, labels, `[unknown]` and cursor
positions are read as the English ones (translated.py), in the stderr and csvlog formats.

The tables are checked against PostgreSQL's own message catalogs where they are installed (the
postgresql-15 package installs them); the readers are checked with lines built from the tables,
in every language. tests/integration/test_translated_pg.py reads what a real server writes.
"""

from __future__ import annotations

import gettext
import shutil
import subprocess
from pathlib import Path

import pytest
from pglog_helpers import T0, T0_US, parse_text

from forwarder.pglog import make_reader, parse_stream
from forwarder.pglog.translated import (
    CATALOGS,
    EVERY_CATALOG,
    FORMER_CATALOGS,
    LABEL_NAMES,
    LABELS,
    SEVERITIES,
    SEVERITY_NAMES,
    TRANSLITERATED,
    UNKNOWN,
    Catalog,
    ascii_degraded,
)

# the current catalogs by language, the former ones as "<language> former <n>"
NAMED_CATALOGS = {
    **CATALOGS,
    **{f"{lang} former {i}": catalog for lang, former in FORMER_CATALOGS.items() for i, catalog in enumerate(former)},
}
LOCALE_DIRS = (Path("/usr/share/locale"), Path("/usr/lib/postgresql/15/share/locale"))


def installed_catalogs() -> dict[str, Path]:
    """language -> the newest postgres-<major>.mo installed for it."""
    found: dict[str, Path] = {}
    for base in LOCALE_DIRS:
        for mo in sorted(base.glob("*/LC_MESSAGES/postgres-*.mo")):
            found[mo.parts[-3]] = mo
    return found


def differences(po: gettext.GNUTranslations, ours: Catalog) -> list[str]:
    """Where `ours` differs from PostgreSQL's installed catalog `po` (the msgids elog.c translates)."""
    wanted = [(severity, ours.severities.get(severity, severity)) for severity in SEVERITY_NAMES]
    for label in LABEL_NAMES:
        if label == "LOCATION":
            written = ours.labels.get(label, "LOCATION:  ")
            wanted += [("LOCATION:  %s:%d\n", written + "%s:%d\n"), ("LOCATION:  %s, %s:%d\n", written + "%s, %s:%d\n")]
        else:
            wanted.append((f"{label}:  ", ours.labels.get(label, f"{label}:  ")))
    wanted += [("[unknown]", ours.unknown), (" at character %d", ours.at_character)]
    return [f"{msgid!r}: {po.gettext(msgid)!r}, ours {word!r}" for msgid, word in wanted if po.gettext(msgid) != word]


@pytest.mark.parametrize("lang", sorted(installed_catalogs()) or ["none"])
def test_each_catalog_is_postgresqls_own(lang: str) -> None:
    """The installed catalog is the current one or, on a machine with an older minor release, one
    of the former ones."""
    if lang == "none":
        pytest.skip("PostgreSQL's message catalogs are not installed (postgresql-15 installs them)")
    with installed_catalogs()[lang].open("rb") as f:
        po = gettext.GNUTranslations(f)
    ours = CATALOGS.get(lang)
    assert ours is not None, f"PostgreSQL has a catalog for {lang!r}: add it to translated.CATALOGS"
    found = [differences(po, catalog) for catalog in (ours, *FORMER_CATALOGS.get(lang, ()))]
    assert [] in found, found[0]


def test_each_word_reads_back_as_the_english_one() -> None:
    english = {*SEVERITY_NAMES, *LABEL_NAMES}
    assert not (set(SEVERITIES) | set(LABELS)) & english
    assert not set(SEVERITIES) & set(LABELS)
    for lang, catalog in NAMED_CATALOGS.items():
        for severity, word in catalog.severities.items():
            expected = "WARNING" if (lang, severity) == ("ka", "NOTICE") else severity  # one Georgian word
            assert SEVERITIES[word] == expected, (lang, word)
        for label, written in catalog.labels.items():
            word = written.rstrip(" ").removesuffix(":").rstrip(" ")
            assert LABELS.get(word, (word, ":  ")) == (label, written[len(word) :] if word != label else ":  "), lang
        assert (
            catalog.unknown in UNKNOWN
            and (TRANSLITERATED.get(catalog.unknown) or ascii_degraded(catalog.unknown)) in UNKNOWN
        )


def stderr_entry(catalog: Catalog) -> str:
    """A connection line and an error with all its secondary lines, as `catalog`'s server writes
    them with PREFIX (the messages themselves are English: only the frame is under test)."""
    sev = catalog.severities
    lab = catalog.labels
    unknown = catalog.unknown
    position = (catalog.at_character or " at character %d") % 15
    head = f"{T0} [42] alice@shop/app "
    return (
        f"{T0} [42] {unknown}@{unknown}/{unknown} {sev.get('LOG', 'LOG')}:  connection received: host=[local]\n"
        f'{head}{sev.get("ERROR", "ERROR")}:  relation "missing" does not exist{position}\n'
        f"{head}{lab.get('DETAIL', 'DETAIL:  ')}Key (id)=(1) already exists.\n"
        f"{head}{lab.get('HINT', 'HINT:  ')}Try again.\n"
        f"{head}{lab.get('QUERY', 'QUERY:  ')}SELECT 1\n"
        f"{head}{lab.get('CONTEXT', 'CONTEXT:  ')}SQL function f line 1\n"
        f"{head}{lab.get('LOCATION', 'LOCATION:  ')}parserOpenTable, parse_relation.c:1392\n"
        f"{head}{lab.get('BACKTRACE', 'BACKTRACE:  ')}\n"
        "\tpostgres: alice shop [local] SELECT(errfinish+0x1a) [0x55d1]\n"
        f"{head}{lab.get('STATEMENT', 'STATEMENT:  ')}SELECT * FROM missing WHERE a = 'secret';\n"
        f"{T0} [43] {sev.get('FATAL', 'FATAL')}:  the end\n"
    )


@pytest.mark.parametrize("lang", [*sorted(NAMED_CATALOGS), "C"])
def test_stderr_of_every_language_reads_as_english(lang: str) -> None:
    catalog = NAMED_CATALOGS.get(lang, Catalog({}, {}, "[unknown]", None))
    connection, error, fatal = parse_text(stderr_entry(catalog), full_text=True)
    assert (connection.severity, connection.user, connection.database, connection.application) == (
        "LOG",
        None,
        None,
        None,
    )
    assert connection.kind == "connection" and connection.time_us == T0_US and connection.pid == 42
    assert (error.severity, error.kind, error.pid, error.user, error.database, error.application) == (
        "ERROR",
        "error",
        42,
        "alice",
        "shop",
        "app",
    )
    assert error.message == 'relation "missing" does not exist at character 15'
    assert (error.detail, error.hint) == ("Key (id)=(1) already exists.", "Try again.")
    # QUERY leads the context (entry.py); LOCATION and BACKTRACE are dropped, their lines too
    assert error.context == "internal query: SELECT 1\nSQL function f line 1"
    assert error.statement == "SELECT * FROM missing WHERE a = 'secret';"
    assert not error.unparsed and not fatal.unparsed
    assert (fatal.severity, fatal.message, fatal.pid) == ("FATAL", "the end", 43)


def test_a_process_without_a_database_writes_question_marks_read_as_log() -> None:
    """The postmaster and checkpointer of a server whose LC_CTYPE is C: letters ASCII lacks are
    question marks (translated.ascii_degraded); which severity it was cannot be told."""
    text = (
        f"{T0} [7] ??:  checkpoint ?????\n"
        f"{T0} [8] [????]@[????]/[????] ?????????:  ?? ??: host=[local]\n"
        # Georgian LOCATION's three spaces: not a severity; the line has its entry's prefix text
        f"{T0} [8] [????]@[????]/[????] ??????????:   pqcomm.c:573\n"
    )
    checkpoint, connection = parse_text(text, full_text=True)
    assert (checkpoint.severity, checkpoint.pid, checkpoint.message) == ("LOG", 7, "checkpoint ?????")
    assert (connection.severity, connection.pid, connection.user, connection.application) == ("LOG", 8, None, None)
    assert connection.message.endswith(
        "?? ??: host=[local]\n" + f"{T0} [8] [????]@[????]/[????] ??????????:   pqcomm.c:573"
    )


def test_csvlog_severity_in_the_servers_language() -> None:
    def record(severity: str) -> str:
        session = f'{T0},"alice","shop",42,"[local]",6b0.1,1,"SELECT",{T0},3/1,0'
        return f'{session},{severity},42P01,"nope",,,,,,,,,"app","client backend",,0\n'

    reader = make_reader("csvlog", line_prefix="", timezone="UTC", full_text=True)
    text = "".join(record(s) for s in ("FEHLER", "ОШИБКА", "??", "ERROR", "B??D"))
    lines = list(parse_stream(reader, [text.encode()]))
    assert [line.severity for line in lines] == ["ERROR", "ERROR", "LOG", "ERROR", "ERROR"]
    assert all(line.kind == "error" and not line.unparsed for line in lines[:2])


def test_a_raise_on_a_translated_server_keeps_no_value() -> None:
    """RAISE's CONTEXT frame in the server's language still marks the message as the function's
    own words: one copying a server message's shape keeps nothing of it."""
    text = (
        f'{T0} [42] alice@shop/app WARNUNG:  relation "alice@example.com" does not exist\n'
        f"{T0} [42] alice@shop/app ZUSAMMENHANG:  PL/pgSQL-Funktion inline_code_block Zeile 2 bei RAISE\n"
        f'{T0} [42] alice@shop/app 警告:  relation "bob@example.com" does not exist\n'
        f"{T0} [42] alice@shop/app 上下文:  在RAISE的第2行的PL/pgSQL函数inline_code_block\n"
        f'{T0} [42] alice@shop/app WARNING:  relation "carol@example.com" does not exist\n'
        f"{T0} [42] alice@shop/app CONTEXT:  PL/pgSQL function raise_it() line 2 at SQL statement\n"
    )
    german, chinese, english = parse_text(text)
    assert "example.com" not in repr((german, chinese))
    assert german.severity == chinese.severity == "WARNING"
    # an English frame of another statement in a function named like it is not a RAISE
    assert english.message == 'relation "carol@example.com" does not exist' or "carol" not in english.message


def test_the_words_of_a_process_without_a_database_are_what_glibc_writes() -> None:
    """A process without a database (postmaster, checkpointer) with LC_CTYPE C gets its translations
    through iconv's ASCII//TRANSLIT: Cyrillic transliterated (translated.TRANSLITERATED), other
    letters ASCII lacks as "?" (ascii_degraded). Checked against glibc's own iconv."""
    iconv = shutil.which("iconv")
    if iconv is None:
        pytest.skip("glibc's iconv is not installed")
    for catalog in EVERY_CATALOG:
        words = [
            *catalog.severities.values(),
            *(w.rstrip(" ").removesuffix(":").rstrip(" ") for w in catalog.labels.values()),
        ]
        for word in [*words, catalog.unknown]:
            written = subprocess.run(
                [iconv, "-f", "UTF-8", "-t", "ASCII//TRANSLIT"],
                input=word.encode(),
                capture_output=True,
                env={"LC_ALL": "C"},
                check=True,
            ).stdout.decode()
            assert written == (TRANSLITERATED.get(word) or ascii_degraded(word)), word


def test_a_russian_postmaster_with_lc_ctype_c_is_read() -> None:
    text = (
        f"{T0} [8475] SOOBSHHENIE:  database system is ready\n"
        f"{T0} [8475] POLOZHENIE: PostmasterMain, postmaster.c:1203\n"
        f"{T0} [8476] [n/d]@[n/d]/[n/d] OSHIBKA:  boom\n"
    )
    ready, boom = parse_text(text, full_text=True)
    assert (ready.severity, ready.pid, ready.message) == ("LOG", 8475, "database system is ready")
    assert (boom.severity, boom.user, boom.database, boom.application) == ("ERROR", None, None, None)
