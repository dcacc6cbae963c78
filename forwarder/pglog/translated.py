# ruff: noqa: RUF001  (the catalogs are Cyrillic, Georgian, CJK words on purpose)
"""The words a server with `lc_messages` other than `C` writes where the readers look for English.

A server whose `lc_messages` is a language PostgreSQL has a catalog for (initdb takes it from
the environment, so a server installed with `LANG=de_DE.UTF-8` logs in German) translates:

- the severity: `_(error_severity(elevel))` before `:  ` in the stderr format
  (elog.c send_message_to_server_log), and the csvlog's `error_severity` column (csvlog.c
  write_csvlog); jsonlog keeps the English word (jsonlog.c write_jsonlog);
- the labels of the secondary lines, whole, colon and spaces included: `_("DETAIL:  ")`,
  `_("HINT:  ")`, `_("QUERY:  ")`, `_("CONTEXT:  ")`, `_("LOCATION:  %s, %s:%d\\n")`,
  `_("STATEMENT:  ")`, `_("BACKTRACE:  ")` (French writes `ASTUCE :  `, Korean `쿼리:`);
- `[unknown]`, which `log_line_prefix` writes for a session's user, database or application
  name not known yet (elog.c log_status_format).

The tables below are those words of PostgreSQL's backend catalogs (src/backend/po/<lang>.po,
PostgreSQL licence), one entry per language, only where the translation differs from English,
and a language's words of an earlier minor release that changed them (FORMER_CATALOGS).
tests/unit/pglog/test_translated.py checks them against the catalogs installed with PostgreSQL.
Messages themselves stay translated: they are not known to classify.py or redact.py, so their
kind comes from severity and SQLSTATE and their text is removed whole (docs/parsing.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal

Severity = Literal["DEBUG", "LOG", "INFO", "NOTICE", "WARNING", "ERROR", "FATAL", "PANIC"]
Label = Literal["DETAIL", "HINT", "QUERY", "CONTEXT", "LOCATION", "STATEMENT", "BACKTRACE"]

SEVERITY_NAMES: Final[tuple[Severity, ...]] = ("DEBUG", "LOG", "INFO", "NOTICE", "WARNING", "ERROR", "FATAL", "PANIC")
LABEL_NAMES: Final[tuple[Label, ...]] = ("DETAIL", "HINT", "QUERY", "CONTEXT", "LOCATION", "STATEMENT", "BACKTRACE")
# What PostgreSQL writes after a label's word (and after a severity's, always: "%s:  ").
ENGLISH_LABEL_END: Final = ":  "


@dataclass(frozen=True, slots=True)
class Catalog:
    """One language's words. `labels` hold the word with what follows it, as written
    (`"ASTUCE :  "`); for LOCATION, the part before `%s`."""

    severities: dict[Severity, str]
    labels: dict[Label, str]
    unknown: str
    at_character: str | None  # elog.c: _(" at character %d"), the cursor position after a message


CATALOGS: Final[dict[str, Catalog]] = {
    "de": Catalog(
        {"NOTICE": "HINWEIS", "WARNING": "WARNUNG", "ERROR": "FEHLER", "PANIC": "PANIK"},
        {
            "HINT": "TIPP:  ",
            "QUERY": "ANFRAGE:  ",
            "CONTEXT": "ZUSAMMENHANG:  ",
            "LOCATION": "ORT:  ",
            "STATEMENT": "ANWEISUNG:  ",
        },
        "[unbekannt]",
        " bei Zeichen %d",
    ),
    "es": Catalog(
        {},
        {
            "DETAIL": "DETALLE:  ",
            "QUERY": "CONSULTA:  ",
            "CONTEXT": "CONTEXTO:  ",
            "LOCATION": "UBICACIÓN:  ",
            "STATEMENT": "SENTENCIA:  ",
        },
        "[desconocido]",
        " en carácter %d",
    ),
    "fr": Catalog(
        {"WARNING": "ATTENTION", "ERROR": "ERREUR"},
        {
            "DETAIL": "DÉTAIL:  ",
            "HINT": "ASTUCE :  ",
            "QUERY": "REQUÊTE :  ",
            "CONTEXT": "CONTEXTE :  ",
            "LOCATION": "EMPLACEMENT :  ",
            "STATEMENT": "INSTRUCTION :  ",
            "BACKTRACE": "PILE D'APPEL : ",
        },
        "[inconnu]",
        " au caractère %d",
    ),
    "it": Catalog(
        {"NOTICE": "NOTIFICA", "WARNING": "ATTENZIONE", "ERROR": "ERRORE", "FATAL": "FATALE", "PANIC": "PANICO"},
        {
            "DETAIL": "DETTAGLI:  ",
            "HINT": "SUGGERIMENTO:  ",
            "CONTEXT": "CONTESTO:  ",
            "LOCATION": "POSIZIONE:  ",
            "STATEMENT": "ISTRUZIONE:  ",
        },
        "[sconosciuto]",
        " al carattere %d",
    ),
    "ja": Catalog(
        {},
        {
            "DETAIL": "詳細:  ",
            "HINT": "ヒント:  ",
            "QUERY": "問い合わせ:  ",
            "CONTEXT": "文脈:  ",
            "LOCATION": "場所:  ",
            "STATEMENT": "文:  ",
            "BACKTRACE": "バックトレース:  ",
        },
        "[不明]",
        "(%d文字目)",
    ),
    # Georgian writes one word for NOTICE and WARNING: read as WARNING, the one a server logs by
    # default (log_min_messages = warning).
    "ka": Catalog(
        {
            "DEBUG": "გამართვა",
            "LOG": "ჟურნალი",
            "INFO": "ინფორმაცია",
            "NOTICE": "გაფრთხილება",
            "WARNING": "გაფრთხილება",
            "ERROR": "შეცდომა",
            "FATAL": "ფატალური",
            "PANIC": "პანიკა",
        },
        {
            "DETAIL": "დეტალები:  ",
            "HINT": "მინიშნება:  ",
            "QUERY": "მოთხოვნა:  ",
            "CONTEXT": "კონტექსტი:  ",
            "LOCATION": "მდებარეობა:   ",
            "STATEMENT": "ოპერატორი:  ",
            "BACKTRACE": "სტეკი:  ",
        },
        "[უცნობი]",
        " სიმბოლოსთან %d",
    ),
    "ko": Catalog(
        {
            "DEBUG": "디버그",
            "LOG": "로그",
            "INFO": "정보",
            "NOTICE": "알림",
            "WARNING": "경고",
            "ERROR": "오류",
            "FATAL": "치명적오류",
            "PANIC": "손상",
        },
        {
            "DETAIL": "상세정보:  ",
            "HINT": "힌트:  ",
            "QUERY": "쿼리:",
            "CONTEXT": "내용:  ",
            "LOCATION": "위치: ",
            "STATEMENT": "명령 구문:  ",
            "BACKTRACE": "역추적:  ",
        },
        "[알수없음]",
        " %d 번째 문자 부근",
    ),
    "ru": Catalog(
        {
            "DEBUG": "ОТЛАДКА",
            "LOG": "СООБЩЕНИЕ",
            "INFO": "ИНФОРМАЦИЯ",
            "NOTICE": "ЗАМЕЧАНИЕ",
            "WARNING": "ПРЕДУПРЕЖДЕНИЕ",
            "ERROR": "ОШИБКА",
            "FATAL": "ВАЖНО",
            "PANIC": "ПАНИКА",
        },
        {
            "DETAIL": "ПОДРОБНОСТИ:  ",
            "HINT": "ПОДСКАЗКА:  ",
            "QUERY": "ЗАПРОС:  ",
            "CONTEXT": "КОНТЕКСТ:  ",
            "LOCATION": "ПОЛОЖЕНИЕ: ",
            "STATEMENT": "ОПЕРАТОР:  ",
            "BACKTRACE": "СТЕК:  ",
        },
        "[н/д]",
        " (символ %d)",
    ),
    "sv": Catalog(
        {"LOG": "LOGG", "NOTICE": "NOTIS", "WARNING": "VARNING", "ERROR": "FEL", "FATAL": "FATALT", "PANIC": "PANIK"},
        {
            "DETAIL": "DETALJ:  ",
            "HINT": "TIPS:  ",
            "QUERY": "FRÅGA:  ",
            "CONTEXT": "KONTEXT:  ",
            "LOCATION": "PLATS:  ",
            "STATEMENT": "SATS:  ",
        },
        "[okänd]",
        " vid tecken %d",
    ),
    "uk": Catalog(
        {
            "DEBUG": "НАЛАГОДЖЕННЯ",
            "LOG": "ЗАПИСУВАННЯ",
            "INFO": "ІНФОРМАЦІЯ",
            "NOTICE": "ПОВІДОМЛЕННЯ",
            "WARNING": "ПОПЕРЕДЖЕННЯ",
            "ERROR": "ПОМИЛКА",
            "FATAL": "ФАТАЛЬНО",
            "PANIC": "ПАНІКА",
        },
        {
            "DETAIL": "ВІДОМОСТІ:  ",
            "HINT": "УКАЗІВКА:  ",
            "QUERY": "ЗАПИТ:  ",
            "CONTEXT": "КОНТЕКСТ:  ",
            "LOCATION": "РОЗТАШУВАННЯ:  ",
            "STATEMENT": "ІНСТРУКЦІЯ:  ",
            "BACKTRACE": "ВІДСТЕЖУВАТИ:  ",
        },
        "[unknown]",
        " символ %d",
    ),
    "zh_CN": Catalog(
        {
            "DEBUG": "调试",
            "LOG": "日志",
            "INFO": "信息",
            "NOTICE": "注意",
            "WARNING": "警告",
            "ERROR": "错误",
            "FATAL": "致命错误",
            "PANIC": "灾难性错误",
        },
        {
            "DETAIL": "详情:  ",
            "HINT": "提示:  ",
            "QUERY": "查询:  ",
            "CONTEXT": "上下文:  ",
            "LOCATION": "位置:  ",
            "STATEMENT": "语句:  ",
            "BACKTRACE": "回溯:  ",
        },
        "[未知]",
        " 第 %d 个字符处",
    ),
    "zh_TW": Catalog(
        {
            "DEBUG": "除錯",
            "LOG": "日誌",
            "INFO": "資訊",
            "NOTICE": "注意",
            "WARNING": "警告",
            "ERROR": "錯誤",
            "FATAL": "致命錯誤",
            "PANIC": "嚴重錯誤",
        },
        {
            "DETAIL": "詳情:  ",
            "HINT": "提示:  ",
            "QUERY": "查詢:  ",
            "CONTEXT": "上下文:  ",
            "LOCATION": "位置:  ",
            "STATEMENT": "陳述式:  ",
            "BACKTRACE": "回溯:  ",
        },
        "[不明]",
        " 在第 %d 個字元處",
    ),
    # Catalogs that PostgreSQL 15 does not ship, as in the last release that had them
    # (9.4-9.6: Indonesian, Brazilian Portuguese, Polish) and that PostgreSQL 16+ may ship again;
    # their cursor position's words were not checked.
    "id": Catalog(
        {"WARNING": "PERINGATAN", "PANIC": "PANIK"},
        {
            "DETAIL": "DETIL:  ",
            "HINT": "PETUNJUK :  ",
            "QUERY": "QUERY :  ",
            "CONTEXT": "KONTEKS:  ",
            "LOCATION": "LOKASI:  ",
            "STATEMENT": "PERNYATAAN:  ",
        },
        "[tidak diketahui]",
        None,
    ),
    "pl": Catalog(
        {
            "LOG": "DZIENNIK",
            "INFO": "INFORMACJA",
            "NOTICE": "UWAGA",
            "WARNING": "OSTRZEŻENIE",
            "ERROR": "BŁĄD",
            "FATAL": "KATASTROFALNY",
            "PANIC": "PANIKA",
        },
        {
            "DETAIL": "SZCZEGÓŁY:  ",
            "HINT": "PODPOWIEDŹ:  ",
            "QUERY": "ZAPYTANIE:  ",
            "CONTEXT": "KONTEKST:  ",
            "LOCATION": "POZYCJA:  ",
            "STATEMENT": "WYRAŻENIE:  ",
        },
        "[nieznany]",
        None,
    ),
    "pt_BR": Catalog(
        {"DEBUG": "DEPURAÇÃO", "NOTICE": "NOTA", "WARNING": "AVISO", "ERROR": "ERRO", "PANIC": "PÂNICO"},
        {
            "DETAIL": "DETALHE:  ",
            "HINT": "DICA:  ",
            "QUERY": "CONSULTA:  ",
            "CONTEXT": "CONTEXTO:  ",
            "LOCATION": "LOCAL:  ",
            "STATEMENT": "COMANDO:  ",
        },
        "[desconhecido]",
        None,
    ),
}


# A language's words as an earlier minor release wrote them. PostgreSQL updates its translations in
# minor releases (15.20 rewrote Simplified Chinese's PANIC and DETAIL, translated its BACKTRACE, and
# added Traditional Chinese), and servers of one major version run many minor ones: the readers
# take the words of both.
_ZH_CN: Final = CATALOGS["zh_CN"]
FORMER_CATALOGS: Final[dict[str, tuple[Catalog, ...]]] = {
    "zh_CN": (
        Catalog(  # up to 15.18: PANIC and DETAIL worded otherwise, BACKTRACE not translated
            {**_ZH_CN.severities, "PANIC": "比致命错误还过分的错误"},
            {**{k: v for k, v in _ZH_CN.labels.items() if k != "BACKTRACE"}, "DETAIL": "详细信息:  "},
            _ZH_CN.unknown,
            _ZH_CN.at_character,
        ),
    ),
}
# every catalog the readers know, current and former
EVERY_CATALOG: Final[tuple[Catalog, ...]] = (
    *CATALOGS.values(),
    *(catalog for former in FORMER_CATALOGS.values() for catalog in former),
)


def ascii_degraded(text: str) -> str:
    """`text` as a process without a database writes it when its LC_CTYPE is C: the postmaster,
    checkpointer and a backend before its database is known have no encoding to convert a
    translation to, and gettext writes "?" for every letter ASCII lacks ("FR?GA" for "FRÅGA")."""
    return "".join(c if c < "\x80" else "?" for c in text)


# What glibc's gettext writes for the Cyrillic words in a process without a database whose LC_CTYPE
# is C: not question marks, its C locale's transliteration (iconv's ASCII//TRANSLIT; a real Russian
# server's postmaster writes "SOOBSHHENIE:  " for "СООБЩЕНИЕ:  "). The other scripts' letters
# come out as "?" (ascii_degraded). Checked against iconv by tests/unit/pglog/test_pglog_translated.py.
TRANSLITERATED: Final[dict[str, str]] = {
    # ru
    "ОТЛАДКА": "OTLADKA",
    "СООБЩЕНИЕ": "SOOBSHHENIE",
    "ИНФОРМАЦИЯ": "INFORMACZIYA",
    "ЗАМЕЧАНИЕ": "ZAMECHANIE",
    "ПРЕДУПРЕЖДЕНИЕ": "PREDUPREZHDENIE",
    "ОШИБКА": "OSHIBKA",
    "ВАЖНО": "VAZHNO",
    "ПАНИКА": "PANIKA",
    "ПОДРОБНОСТИ": "PODROBNOSTI",
    "ПОДСКАЗКА": "PODSKAZKA",
    "ЗАПРОС": "ZAPROS",
    "КОНТЕКСТ": "KONTEKST",
    "ПОЛОЖЕНИЕ": "POLOZHENIE",
    "ОПЕРАТОР": "OPERATOR",
    "СТЕК": "STEK",
    "[н/д]": "[n/d]",
    # uk
    "НАЛАГОДЖЕННЯ": "NALAGODZHENNYA",
    "ЗАПИСУВАННЯ": "ZAPISUVANNYA",
    "ІНФОРМАЦІЯ": "INFORMACZIYA",
    "ПОВІДОМЛЕННЯ": "POVIDOMLENNYA",
    "ПОПЕРЕДЖЕННЯ": "POPEREDZHENNYA",
    "ПОМИЛКА": "POMILKA",
    "ФАТАЛЬНО": "FATAL`NO",
    "ПАНІКА": "PANIKA",
    "ВІДОМОСТІ": "VIDOMOSTI",
    "УКАЗІВКА": "UKAZIVKA",
    "ЗАПИТ": "ZAPIT",
    "РОЗТАШУВАННЯ": "ROZTASHUVANNYA",
    "ІНСТРУКЦІЯ": "INSTRUKCZIYA",
    "ВІДСТЕЖУВАТИ": "VIDSTEZHUVATI",
}


def written_forms(word: str) -> list[str]:
    """`word` as a server may write it: itself, and as a process without a database writes it
    (transliterated, or with "?" for letters ASCII lacks) when that still tells the word."""
    forms = [word, TRANSLITERATED.get(word) or ascii_degraded(word)]
    return [form for i, form in enumerate(forms) if form not in forms[:i] and (i == 0 or _readable(form))]


def _readable(word: str) -> bool:
    """A degraded word still tells which one it was (all question marks do not)."""
    return word.strip("? ") != ""


def _severities() -> dict[str, Severity]:
    words: dict[str, Severity] = {}
    for catalog in EVERY_CATALOG:
        for severity in SEVERITY_NAMES:  # in order: a word two severities share ends as the higher
            word = catalog.severities.get(severity)
            if word is not None:
                for form in written_forms(word):
                    words[form] = severity
    return words


def _labels() -> dict[str, tuple[Label, str]]:
    words: dict[str, tuple[Label, str]] = {}
    for catalog in EVERY_CATALOG:
        for label, written in catalog.labels.items():
            word = written.rstrip(" ").removesuffix(":").rstrip(" ")
            if word == label:
                continue  # Indonesian "QUERY :  ": the English word, read with any spacing
            for form in written_forms(word):
                words[form] = (label, written[len(word) :])
    return words


# translated word -> English severity (only words that differ from English; with their ASCII
# degraded forms that still tell the word)
SEVERITIES: Final[dict[str, Severity]] = _severities()
# severity word (English or translated) -> English severity: what the readers look up
SEVERITY_OF: Final[dict[str, str]] = {**{s: s for s in SEVERITY_NAMES}, **SEVERITIES}
# translated label word (without the colon) -> (English label, what follows the word)
LABELS: Final[dict[str, tuple[Label, str]]] = _labels()
# the message's end where a translation puts the cursor position (the number in group 1)
AT_CHARACTER: Final[tuple[re.Pattern[str], ...]] = tuple(
    re.compile(re.escape(c.at_character).replace("%d", r"(\d+)") + r"\Z")
    for c in EVERY_CATALOG
    if c.at_character is not None
)
# the last characters of those ends: only a message ending in one of them is searched
AT_CHARACTER_ENDS: Final = frozenset(
    {*"0123456789", *(c.at_character[-1] for c in EVERY_CATALOG if c.at_character is not None)} - {"d"}
)


def english_position(message: str) -> str:
    """`message` with a translated cursor position written as the English " at character N",
    as the csvlog and jsonlog readers write it (the column is a number there)."""
    for pattern in AT_CHARACTER:
        m = pattern.search(message)
        if m is not None:
            return f"{message[: m.start()]} at character {m.group(1)}"
    return message


# `[unknown]` in every language, and as a process without a database writes it ("[????]")
UNKNOWN: Final[frozenset[str]] = frozenset(
    {
        "[unknown]",
        *(c.unknown for c in EVERY_CATALOG),
        *(TRANSLITERATED.get(c.unknown) or ascii_degraded(c.unknown) for c in EVERY_CATALOG),
    }
)
