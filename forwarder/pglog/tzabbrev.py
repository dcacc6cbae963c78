"""PostgreSQL's default time zone abbreviations (`timezone_abbreviations = 'Default'`).

The table is PostgreSQL's own file src/timezone/tznames/Default (installed as
share/postgresql/timezonesets/Default), as of PostgreSQL 15: the abbreviations a server
understands without configuration, each either a fixed offset in seconds east of UTC (with a
flag for daylight-saving time: `D` in the file) or the name of an IANA zone whose offset at the
time in question is meant (PostgreSQL's "dynamic" abbreviations, e.g. `ART`).

Generated, not typed: `python -m forwarder.pglog.tzabbrev /usr/share/postgresql/15/timezonesets/Default`
prints the two tables below from the file (`parse_tznames`); a unit test compares them with the
installed file when there is one.
"""

from __future__ import annotations

import sys
from typing import Final


def parse_tznames(text: str) -> tuple[dict[str, tuple[int, bool]], dict[str, str]]:
    """The fixed (abbreviation -> (offset seconds, is_dst)) and dynamic (abbreviation -> zone)
    entries of a timezonesets file (src/backend/utils/misc/tzparser.c's format, without @INCLUDE)."""
    fixed: dict[str, tuple[int, bool]] = {}
    dynamic: dict[str, str] = {}
    for raw in text.splitlines():
        words = raw.split("#", 1)[0].split()
        if not words:
            continue
        if words[0].startswith("@"):
            raise ValueError(f"directives are not supported: {raw!r}")
        name, value = words[0].upper(), words[1]
        if value.lstrip("+-").isdigit():
            fixed[name] = (int(value), len(words) > 2 and words[2].upper() == "D")
        else:
            dynamic[name] = value
    return fixed, dynamic


# abbreviation -> (seconds east of UTC, is daylight-saving time)
FIXED: Final[dict[str, tuple[int, bool]]] = {
    "EAT": (10800, False),
    "SAST": (7200, False),
    "WAT": (3600, False),
    "ACT": (-18000, False),
    "AKDT": (-28800, True),
    "AKST": (-32400, False),
    "BOT": (-14400, False),
    "BRA": (-10800, False),
    "BRST": (-7200, True),
    "BRT": (-10800, False),
    "COT": (-18000, False),
    "CDT": (-18000, True),
    "CLST": (-10800, True),
    "CST": (-21600, False),
    "EDT": (-14400, True),
    "EGST": (0, True),
    "EGT": (-3600, False),
    "EST": (-18000, False),
    "FNT": (-7200, False),
    "FNST": (-3600, True),
    "GFT": (-10800, False),
    "MDT": (-21600, True),
    "MST": (-25200, False),
    "NDT": (-9000, True),
    "NFT": (-12600, False),
    "NST": (-12600, False),
    "PET": (-18000, False),
    "PDT": (-25200, True),
    "PMDT": (-7200, True),
    "PMST": (-10800, False),
    "PST": (-28800, False),
    "PYST": (-10800, True),
    "UYST": (-7200, True),
    "UYT": (-10800, False),
    "WGST": (-7200, True),
    "WGT": (-10800, False),
    "DDUT": (36000, False),
    "AFT": (16200, False),
    "ALMT": (21600, False),
    "ALMST": (25200, True),
    "AMT": (-14400, False),
    "BDT": (21600, False),
    "BNT": (28800, False),
    "BORT": (28800, False),
    "BTT": (21600, False),
    "CCT": (28800, False),
    "HKT": (28800, False),
    "ICT": (25200, False),
    "IDT": (10800, True),
    "IRT": (12600, False),
    "IST": (7200, False),
    "JAYT": (32400, False),
    "JST": (32400, False),
    "KDT": (36000, True),
    "KGST": (21600, True),
    "KST": (32400, False),
    "MMT": (23400, False),
    "MYT": (28800, False),
    "NPT": (20700, False),
    "PHT": (28800, False),
    "PKT": (18000, False),
    "PKST": (21600, True),
    "TJT": (18000, False),
    "ULAST": (32400, True),
    "UZST": (21600, True),
    "UZT": (18000, False),
    "XJT": (21600, False),
    "YEKST": (21600, True),
    "ADT": (-10800, True),
    "AST": (-14400, False),
    "AZOST": (0, True),
    "AZOT": (-3600, False),
    "ACSST": (37800, True),
    "ACDT": (37800, True),
    "ACST": (34200, False),
    "ACWST": (31500, False),
    "AESST": (39600, True),
    "AEDT": (39600, True),
    "AEST": (36000, False),
    "AWSST": (32400, True),
    "AWST": (28800, False),
    "CADT": (37800, True),
    "CAST": (34200, False),
    "LHST": (37800, False),
    "LIGT": (36000, False),
    "NZT": (43200, False),
    "SADT": (37800, True),
    "WADT": (28800, True),
    "WAST": (25200, False),
    "WDT": (32400, True),
    "GMT": (0, False),
    "UCT": (0, False),
    "UT": (0, False),
    "UTC": (0, False),
    "Z": (0, False),
    "ZULU": (0, False),
    "BST": (3600, True),
    "BDST": (7200, True),
    "CEST": (7200, True),
    "CET": (3600, False),
    "CETDST": (7200, True),
    "EEST": (10800, True),
    "EET": (7200, False),
    "EETDST": (10800, True),
    "FET": (10800, False),
    "MEST": (7200, True),
    "MESZ": (7200, True),
    "MET": (3600, False),
    "METDST": (7200, True),
    "MEZ": (3600, False),
    "MSD": (14400, True),
    "WET": (0, False),
    "WETDST": (3600, True),
    "CXT": (25200, False),
    "MUT": (14400, False),
    "MUST": (18000, True),
    "MVT": (18000, False),
    "RET": (14400, False),
    "SCT": (14400, False),
    "TFT": (18000, False),
    "CHADT": (49500, True),
    "CHAST": (45900, False),
    "CHUT": (36000, False),
    "FJST": (46800, True),
    "FJT": (43200, False),
    "GALT": (-21600, False),
    "GAMT": (-32400, False),
    "GILT": (43200, False),
    "HST": (-36000, False),
    "MART": (-34200, False),
    "MHT": (43200, False),
    "MPT": (36000, False),
    "NZDT": (46800, True),
    "NZST": (43200, False),
    "PGT": (36000, False),
    "PONT": (39600, False),
    "PWT": (32400, False),
    "TAHT": (-36000, False),
    "TOT": (46800, False),
    "TRUT": (36000, False),
    "TVT": (43200, False),
    "VUT": (39600, False),
    "WAKT": (43200, False),
    "WFT": (43200, False),
    "YAPT": (36000, False),
}
# abbreviation -> the IANA zone whose offset at the time is meant
DYNAMIC: Final[dict[str, str]] = {
    "ART": "America/Argentina/Buenos_Aires",
    "ARST": "America/Argentina/Buenos_Aires",
    "CLT": "America/Santiago",
    "GYT": "America/Guyana",
    "PYT": "America/Asuncion",
    "VET": "America/Caracas",
    "DAVT": "Antarctica/Davis",
    "MAWT": "Antarctica/Mawson",
    "AMST": "Asia/Yerevan",
    "ANAST": "Asia/Anadyr",
    "ANAT": "Asia/Anadyr",
    "AZST": "Asia/Baku",
    "AZT": "Asia/Baku",
    "GEST": "Asia/Tbilisi",
    "GET": "Asia/Tbilisi",
    "IRKST": "Asia/Irkutsk",
    "IRKT": "Asia/Irkutsk",
    "KGT": "Asia/Bishkek",
    "KRAST": "Asia/Krasnoyarsk",
    "KRAT": "Asia/Krasnoyarsk",
    "LKT": "Asia/Colombo",
    "MAGST": "Asia/Magadan",
    "MAGT": "Asia/Magadan",
    "NOVST": "Asia/Novosibirsk",
    "NOVT": "Asia/Novosibirsk",
    "OMSST": "Asia/Omsk",
    "OMST": "Asia/Omsk",
    "PETST": "Asia/Kamchatka",
    "PETT": "Asia/Kamchatka",
    "SGT": "Asia/Singapore",
    "TMT": "Asia/Ashgabat",
    "ULAT": "Asia/Ulaanbaatar",
    "VLAST": "Asia/Vladivostok",
    "VLAT": "Asia/Vladivostok",
    "YAKST": "Asia/Yakutsk",
    "YAKT": "Asia/Yakutsk",
    "YEKT": "Asia/Yekaterinburg",
    "FKST": "Atlantic/Stanley",
    "FKT": "Atlantic/Stanley",
    "LHDT": "Australia/Lord_Howe",
    "MSK": "Europe/Moscow",
    "VOLT": "Europe/Volgograd",
    "IOT": "Indian/Chagos",
    "CKT": "Pacific/Rarotonga",
    "EASST": "Pacific/Easter",
    "EAST": "Pacific/Easter",
    "KOST": "Pacific/Kosrae",
    "LINT": "Pacific/Kiritimati",
    "NUT": "Pacific/Niue",
    "TKT": "Pacific/Fakaofo",
}


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as f:
        _fixed, _dynamic = parse_tznames(f.read())
    print("FIXED: Final[dict[str, tuple[int, bool]]] = {")
    for _name, (_offset, _dst) in _fixed.items():
        print(f'    "{_name}": ({_offset}, {_dst}),')
    print("}")
    print("DYNAMIC: Final[dict[str, str]] = {")
    for _name, _zone in _dynamic.items():
        print(f'    "{_name}": "{_zone}",')
    print("}")
