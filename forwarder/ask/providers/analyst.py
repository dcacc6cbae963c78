"""The built-in analyst: deterministic answers planned from the question and rendered from tool results.

It is a provider like a model's: a turn either calls tools or writes the answer. `plan` reads the
question's words (deadlocks, slow queries, autovacuum, connections, a time of day, "since
yesterday", errors, locks, checkpoints, temp files, alerts) and `about`, and names the tool calls
of the next step; once every step has its results, `render` writes Markdown from those results
only. Both are pure functions of the request and the results: the same input gives the same
answer. The steps of one answer:

1. `list_databases` when neither the request nor `about` names a database (then each of the first
   few databases is looked at), and the object `about` names;
2. the tools of each intent, for each database;
3. `get_finding` for the findings step 2 found (their evidence and fixes), and for an alert the
   lines it counted.

Log text is untrusted and reaches the answer only escaped: inline text has Markdown's special
characters backslash-escaped, statements sit in fenced blocks longer than any backtick run inside.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Final, Literal

import orjson

from forwarder.ask.providers.base import (
    About,
    Delta,
    Finished,
    ModelRequest,
    TextDelta,
    ToolCall,
    ToolResultTurn,
    Turn,
    UserTurn,
)

Intent = Literal[
    "deadlocks",
    "slow",
    "autovacuum",
    "connections",
    "moment",
    "changes",
    "errors",
    "locks",
    "checkpoints",
    "temp_files",
    "alerts",
]
Step = Literal["dbs", "main", "more"]
STEPS: Final[tuple[Step, ...]] = ("dbs", "main", "more")
MAX_DATABASES: Final = 3  # looked at when the question names none
FINDINGS_READ: Final = 2  # findings of each intent read whole (evidence, fixes)

# What a question is about, from its words (lowercased); the order is the answer's.
INTENT_WORDS: Final[tuple[tuple[Intent, re.Pattern[str]], ...]] = (
    ("deadlocks", re.compile(r"\bdead-?locks?")),
    ("slow", re.compile(r"\bslow|\bquer(y|ies)\b|\blatenc|\bexpensive|\blong[- ]running")),
    ("autovacuum", re.compile(r"vacuum|\bbloat|dead tuples|wraparound|\banalyze")),
    ("connections", re.compile(r"\bconnect|\bauth|\blog ?ins?\b|\bpassword|too many clients")),
    ("moment", re.compile(r"\b\d{1,2}:\d{2}\b")),
    ("changes", re.compile(r"\bchang|\bsince yesterday|\bcompar|\bdifferen|\bnew\b")),
    ("errors", re.compile(r"\berrors?\b|\bfail|\bwrong\b|\bbroken\b")),
    ("locks", re.compile(r"\block(s|ed|ing)?\b|\bblock|\bwait")),
    ("checkpoints", re.compile(r"checkpoint|\bwal\b|max_wal_size")),
    ("temp_files", re.compile(r"\btemp(orary)?[ _]?files?|work_mem|\bspill")),
    ("alerts", re.compile(r"\balert|\bfiring")),
)
# The rules whose findings each intent reads (docs/insights.md lists them).
INTENT_RULES: Final[dict[Intent, tuple[str, ...]]] = {
    "deadlocks": ("deadlocks",),
    "autovacuum": ("autovacuum", "wraparound"),
    "connections": ("auth_failures", "connection_limit"),
    "locks": ("lock_waits", "deadlocks"),
    "checkpoints": ("checkpoints",),
    "temp_files": ("temp_files",),
    "slow": ("statement_timeouts",),
}
INTENT_KINDS: Final[dict[Intent, list[str]]] = {
    "deadlocks": ["deadlock"],
    "autovacuum": ["autovacuum"],
    "connections": ["auth_failure", "too_many_connections"],
    "locks": ["locks"],
    "checkpoints": ["checkpoint"],
    "temp_files": ["temp_file"],
}
_TIME: Final = re.compile(r"\b(\d{1,2}):(\d{2})(?::(\d{2}))?\b")
_DATE: Final = re.compile(r"\b(\d{4}-\d{2}-\d{2})\b")
_PROCESS: Final = re.compile(r"^Process (\d+): (.*?)(?=\nProcess \d+: |\Z)", re.MULTILINE | re.DOTALL)
_TABLE: Final = re.compile(r'automatic (vacuum|analyze) of table "([^"]+)"')
_ELAPSED: Final = re.compile(r"elapsed: ([0-9.]+) s")
_TEMP_SIZE: Final = re.compile(r"size (\d+)")


# --- understanding the question ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ask:
    """What the analyst plans from: the question's intents and times, `about`, the database."""

    intents: tuple[Intent, ...]
    day: str | None  # "today", "yesterday" or a date the question names
    moment: str | None  # a time of day the question names ("14:05", "yesterday 14:05")
    slowest: bool  # "slowest": by mean time, else by total time
    database: str | None
    about: About | None
    turn: int  # the user turn this answer is for: makes call ids unique in a conversation


def understand(question: str, database: str | None, about: About | None, turn: int = 1) -> Ask:
    """The question's intents (in a fixed order), the day and the time of day it names."""
    text = question.lower()
    intents = tuple(intent for intent, words in INTENT_WORDS if words.search(text))
    date = _DATE.search(text)
    day = date[1] if date else "yesterday" if "yesterday" in text and "since yesterday" not in text else None
    if day is None and "today" in text:
        day = "today"
    moment = None
    if (t := _TIME.search(text)) and int(t[1]) < 24 and int(t[2]) < 60:
        clock = f"{int(t[1]):02d}:{t[2]}" + (f":{t[3]}" if t[3] else "")
        moment = f"{day} {clock}" if day and day != "today" else clock
    elif "moment" in intents:
        intents = tuple(i for i in intents if i != "moment")
    if "errors" in intents and len(intents) > 1 and not re.search(r"\berrors?\b", text):
        intents = tuple(i for i in intents if i != "errors")  # "why did connections fail": not every error
    if database is None and about is not None:
        database = about.database or (about.id if about.kind == "database" else None)
    slowest = not re.search(r"\btotal|most time|expensive|heaviest|\bload", text)
    return Ask(intents, day, moment, slowest, database, about, turn)


# --- planning ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Result:
    """A tool call of this answer and what it returned (`error`: the tool refused, with why)."""

    call: ToolCall
    data: Any
    error: str | None = None


def _call(ask: Ask, step: Step, tag: str, n: int, name: str, **args: Any) -> ToolCall:
    return ToolCall(f"analyst-{ask.turn}-{step}-{tag}-{n}", name, {k: v for k, v in args.items() if v is not None})


def _part(call_id: str, n: int) -> str:
    parts = call_id.split("-")
    return parts[n] if len(parts) == 6 and parts[0] == "analyst" else ""


def _tag(call_id: str) -> str:
    """The intent (or `about`, `dbs`, ...) a call of the analyst was made for."""
    return _part(call_id, 3)


def _step_of(call_id: str) -> str:
    return _part(call_id, 2)


def databases_of(ask: Ask, done: tuple[Result, ...]) -> list[str | None]:
    """The databases the answer covers: the named one, else the first few listed."""
    if ask.database:
        return [ask.database]
    for r in done:
        if r.call.name == "list_databases" and r.error is None:
            return [str(d["id"]) for d in r.data.get("databases", [])[:MAX_DATABASES]]
    return []


def _intent_calls(ask: Ask, intent: Intent, db: str, n: int) -> list[ToolCall]:
    day = ask.day
    c: Callable[..., ToolCall] = lambda name, **a: _call(ask, "main", intent, n, name, database=db, **a)  # noqa: E731
    rules = list(INTENT_RULES.get(intent, ()))
    kinds = INTENT_KINDS.get(intent)
    match intent:
        case "slow":
            return [
                c("list_queries", sort="mean" if ask.slowest else "total", **({"from": day} if day else {}), limit=10),
                c("list_findings", rule=rules, status="open"),
            ]
        case "moment":
            notable = ["errors", "locks", "maintenance", "server"]
            return [
                c("search_logs", around=ask.moment, minutes=5, limit=50),
                _call(ask, "main", "momentnotable", n, "search_logs", database=db, around=ask.moment, minutes=5,
                      kind=notable, limit=30),
            ]  # fmt: skip
        case "changes":
            return [c("count_lines", days=2), c("list_findings", **{"from": "yesterday"}, limit=50)]
        case "errors":
            return [
                c("log_groups", kind=["errors"], **({"from": day} if day else {}), limit=15),
                c("list_findings", status="open"),
            ]
        case "alerts":
            return [c("list_alerts", limit=20)]
        case "connections":
            return [
                c("list_findings", rule=rules, **({"from": day} if day else {})),
                c("log_groups", kind=kinds, **({"from": day} if day else {}), limit=15),
                c("search_logs", kind=kinds, day=day, limit=10),
            ]
        case _:
            return [
                c("list_findings", rule=rules, **({"from": day} if day else {})),
                c("search_logs", kind=kinds, day=day, limit=50 if intent == "autovacuum" else 20),
            ]


def _about_calls(ask: Ask) -> list[ToolCall]:
    about = ask.about
    if about is None:
        return []
    match about.kind:
        case "finding":
            return [_call(ask, "dbs", "about", 0, "get_finding", id=about.id, database=about.database)]
        case "query":
            return [_call(ask, "dbs", "about", 0, "get_query", id=about.id, database=about.database)]
        case "alert":
            return [_call(ask, "dbs", "about", 0, "get_alert", id=about.id)]
        case _:
            return []


def _overview_calls(ask: Ask, db: str, n: int) -> list[ToolCall]:
    return [
        _call(ask, "main", "overview", n, "overview", database=db),
        _call(ask, "main", "overview", n, "list_findings", database=db, status="open"),
        _call(ask, "main", "overview", n, "list_alerts", database=db, state="firing"),
    ]


def plan(ask: Ask, done: tuple[Result, ...]) -> tuple[ToolCall, ...]:
    """The tool calls of the next step, given the results so far; () when the answer can be written.

    A call's id is `analyst-<user turn>-<step>-<intent>-<database index>-<sequence>`: rendering
    finds each result's purpose in it."""
    return tuple(replace(c, id=f"{c.id}-{i}") for i, c in enumerate(_plan(ask, done)))


def _plan(ask: Ask, done: tuple[Result, ...]) -> list[ToolCall]:
    steps = {_step_of(r.call.id) for r in done}
    if "dbs" not in steps:
        first = _about_calls(ask)
        if not ask.database:
            first.insert(0, _call(ask, "dbs", "dbs", 0, "list_databases"))
        if first:
            return first
    if "main" not in steps:
        calls: list[ToolCall] = []
        for n, db in enumerate(databases_of(ask, done)):
            if db is None:
                continue
            if not ask.intents:
                if ask.about is None or ask.about.kind == "database":
                    calls += _overview_calls(ask, db, n)
                continue
            for intent in ask.intents:
                calls += _intent_calls(ask, intent, db, n)
        if calls:
            return calls
    if "more" not in steps:
        return _more_calls(ask, done)
    return []


def _more_calls(ask: Ask, done: tuple[Result, ...]) -> list[ToolCall]:
    """Findings read whole (evidence, fixes) and, for an alert, the lines it counted."""
    calls: list[ToolCall] = []
    seen: set[str] = set()
    for r in done:
        if r.error is not None:
            continue
        if r.call.name == "list_findings" and _tag(r.call.id) in INTENT_RULES:
            found = sorted(r.data.get("findings", []), key=lambda f: f["status"] != "open")
            for f in found[:FINDINGS_READ]:
                if f["id"] in seen:
                    continue
                seen.add(f["id"])
                db = r.data["database"]
                calls.append(_call(ask, "more", "finding", len(calls), "get_finding", id=f["id"], database=db))
        if r.call.name == "get_alert":
            # The lines the rule counted: its window before the evaluation that fired, up to the end.
            a = r.data
            started = datetime.fromisoformat(str(a["started_at"]).replace("Z", "+00:00"))
            since = (started - timedelta(seconds=int(a["window_seconds"]))).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            calls.append(
                _call(ask, "more", "alertlines", len(calls), "search_logs", database=a["database_id"],
                      **{"from": since}, to=a["resolved_at"], limit=20)
            )  # fmt: skip
    return calls


def collect(ask: Ask, turns: Iterable[Turn]) -> tuple[Result, ...]:
    """This answer's results so far, step by step: each step's calls are planned again (planning is
    pure) and paired with the tool results the engine fed back, by call id."""
    answers: dict[str, ToolResultTurn] = {}
    for t in turns:
        if isinstance(t, UserTurn):
            answers = {}
        elif isinstance(t, ToolResultTurn):
            answers[t.call_id] = t
    done: tuple[Result, ...] = ()
    for _ in STEPS:
        calls = plan(ask, done)
        if not calls or not all(c.id in answers for c in calls):
            break
        done += tuple(_result(c, answers[c.id]) for c in calls)
    return done


def _result(call: ToolCall, turn: ToolResultTurn) -> Result:
    try:
        data = orjson.loads(turn.content)
    except orjson.JSONDecodeError:
        data = turn.content
    if turn.is_error:
        message = data.get("error", data) if isinstance(data, dict) else data
        return Result(call, None, str(message) or "the tool failed")
    return Result(call, data)


# --- writing the answer: safe Markdown ---------------------------------------------------------

_SPECIAL: Final = re.compile(r"([\\`*_\[\]<>|#~!])")


def md(value: Any, limit: int = 200) -> str:
    """Text from a tool result as inline Markdown: one line, cut to `limit`, every character that
    could start markup (`|`, backticks, `<`, emphasis, links) backslash-escaped."""
    one = " ".join(str(value).split())
    if len(one) > limit:
        one = one[: limit - 1] + "…"
    return _SPECIAL.sub(r"\\\1", one)


def fence(code: str, info: str = "sql") -> str:
    """`code` in a fenced block whose fence is longer than any backtick run inside it."""
    longest = max((len(run) for run in re.findall(r"`+", code)), default=0)
    bar = "`" * max(3, longest + 1)
    return f"{bar}{info}\n{code.rstrip()}\n{bar}"


def link(label: Any, href: str) -> str:
    """A link to one of the daemon's pages (tools give only paths of them)."""
    if not href.startswith("/") or href.startswith("//"):
        return md(label)
    safe = href.replace("(", "%28").replace(")", "%29").replace(" ", "%20").replace("<", "%3C").replace(">", "%3E")
    return f"[{md(label, 120)}]({safe})"


def table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _ms(value: Any) -> str:
    return "-" if value is None else f"{float(value):,.1f}"


def _when(ask: Ask) -> str:
    match ask.day:
        case None:
            return "in the stored log"
        case "today" | "yesterday":
            return f"{ask.day} (UTC)"
        case day:
            return f"on {day} (UTC)"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _t(value: Any) -> str:
    """An RFC 3339 time as `2026-11-23 21:15:13 UTC` (the tools give UTC times), not escaped."""
    text = str(value or "")
    return text[:10] + " " + text[11:19] + " UTC" if len(text) >= 19 else text


def _time(value: Any) -> str:
    return md(_t(value))


def render(ask: Ask, done: tuple[Result, ...]) -> str:
    """The answer's Markdown, from the results only."""
    out: list[str] = []
    for r in done:
        if r.error is not None:
            out.append(f"_Could not run {md(r.call.name)}: {md(r.error, 300)}_")
    names = _names(done)
    about = [r for r in done if _tag(r.call.id) == "about" and r.error is None]
    for r in about:
        out += _render_about(r, done)
    dbs = databases_of(ask, done)
    many = len(dbs) > 1
    for n, db in enumerate(dbs):
        if db is None:
            continue
        mine = [r for r in done if r.error is None and _part(r.call.id, 4) == str(n)]
        section: list[str] = []
        for intent in ask.intents:
            section += RENDERERS[intent](ask, [r for r in mine if _tag(r.call.id).startswith(intent)], done)
        if not ask.intents and (ask.about is None or ask.about.kind == "database"):
            section += _render_overview(ask, [r for r in mine if _tag(r.call.id) == "overview"])
        if section and many:
            section.insert(0, f"### {md(names.get(db, db))}")
        out += section
    if not ask.intents and ask.about is None:
        out.insert(0, HELP)
    if not out:
        out.append("The tools returned nothing to answer this from.")
    return "\n\n".join(out) + "\n"


HELP: Final = (
    "I am the built-in analyst: I answer from this daemon's logs, findings, queries and alerts. Ask"
    " me, for example:\n\n"
    "- why were there deadlocks today?\n"
    "- what are the slowest queries?\n"
    "- is autovacuum keeping up?\n"
    "- why did connections fail?\n"
    "- what happened at 14:05? (a UTC time)\n"
    "- what changed since yesterday?\n"
    "- errors, lock waits, checkpoints, temporary files or alerts of a database\n\n"
    "Here is where things stand:"
)


def _names(done: tuple[Result, ...]) -> dict[str, str]:
    for r in done:
        if r.call.name == "list_databases" and r.error is None:
            return {str(d["id"]): str(d["name"]) for d in r.data.get("databases", [])}
    return {}


def _of(results: list[Result], name: str) -> list[Any]:
    return [r.data for r in results if r.call.name == name]


def _finding_reads(done: tuple[Result, ...], ids: Iterable[str]) -> list[Any]:
    full = {r.data["id"]: r.data for r in done if r.call.name == "get_finding" and r.error is None}
    return [full[i] for i in ids if i in full]


def _findings_section(results: list[Result], done: tuple[Result, ...], none: str | None = None) -> list[str]:
    """The findings a list_findings of `results` returned; read whole ones with evidence and fixes."""
    out: list[str] = []
    for listing in _of(results, "list_findings"):
        found = listing.get("findings", [])
        if not found:
            if none:
                out.append(none)
            continue
        full = {f["id"]: f for f in _finding_reads(done, [f["id"] for f in found])}
        items = []
        for f in found:
            head = (
                f"- {link(f['title'], f['href'])}: {md(f['severity'])}, {md(f['status'])},"
                f" {_plural(int(f['count']), 'occurrence')}, last seen {_time(f['last_seen'])}"
            )
            items.append(head)
            for fix in full.get(f["id"], {}).get("fixes", []):
                how = "by hand" if fix.get("manual") else f"risk {md(fix.get('risk'))}, on the finding's page"
                items.append(f"  - Fix: {md(fix['label'], 300)} ({how})")
        out.append("**Findings:**\n\n" + "\n".join(items))
        for f in full.values():
            sql = [x for x in f.get("fixes", []) if x.get("sql")]
            for x in sql[:2]:
                out.append(f"The fix {md(x['label'], 120)} runs:\n\n{fence(str(x['sql']))}")
    return out


def _lines(results: list[Result], tag_suffix: str = "") -> list[Any]:
    return [
        r.data
        for r in results
        if r.call.name == "search_logs" and _tag(r.call.id).endswith(tag_suffix) and "lines" in r.data
    ]


def _count_text(search: Any) -> str:
    n = int(search.get("count", 0))
    return f"at least {n}" if search.get("has_more") else str(n)


def deadlock_statements(line: dict[str, Any]) -> list[tuple[str, str]]:
    """(process, statement) of a `deadlock detected` line's DETAIL, in order."""
    return [(p, s.strip()) for p, s in _PROCESS.findall(str(line.get("detail") or ""))]


def _render_deadlocks(ask: Ask, results: list[Result], done: tuple[Result, ...]) -> list[str]:
    out: list[str] = []
    for search in _lines(results):
        lines = [ln for ln in search["lines"] if ln.get("kind") == "deadlock"]
        errors = [ln for ln in lines if str(ln.get("message", "")).startswith("deadlock detected")]
        if not errors:
            out.append(f"**No deadlocks** were logged {_when(ask)}.")
            continue
        count = _count_text(search) if len(errors) == len(lines) else str(len(errors))
        relations = sorted({m for ln in errors for m in re.findall(r'relation "([^"]+)"', str(ln.get("context")))})
        on = " on " + ", ".join(md(r) for r in relations) if relations else ""
        out.append(
            f"**{count} deadlock{'s' if count != '1' else ''}** {_when(ask)}{on}. Each time two transactions"
            " waited for row locks the other held, and PostgreSQL cancelled one of them (SQLSTATE 40P01):"
            " the transactions take their locks in opposite orders."
        )
        for ln in errors[:3]:
            statements = deadlock_statements(ln)
            who = ", ".join(md(ln[k]) for k in ("application", "user") if ln.get(k))
            head = f"{link('Deadlock at ' + _t(ln['time']), ln['href'])}" + (f" ({who})" if who else "")
            if statements:
                body = "\n".join(f"-- process {p}\n{s}" for p, s in statements)
                out.append(f"{head}: the two statements:\n\n{fence(body)}")
            elif ln.get("statement"):
                out.append(f"{head}: the cancelled statement:\n\n{fence(str(ln['statement']))}")
            else:
                out.append(head)
        out.append(f"All of them: {link('the deadlock lines', search['logs_page'])}.")
    out += _findings_section(results, done)
    return out


def _render_slow(ask: Ask, results: list[Result], done: tuple[Result, ...]) -> list[str]:
    out: list[str] = []
    for listing in _of(results, "list_queries"):
        queries = listing.get("queries", [])
        if not queries:
            out.append("No statement durations are logged yet (set `log_min_duration_statement` to see them).")
            continue
        order = {"mean": "mean time", "total": "total time"}.get(listing["sort"], listing["sort"])
        rows = [
            [link(str(i + 1), q["href"]), md(q["text"], 90), f"{int(q['calls']):,}", _ms(q["mean_ms"]),
             _ms(q["p95_ms"]), _ms(q["max_ms"]), _ms(q["total_ms"]), str(q["errors"])]
            for i, q in enumerate(queries)
        ]  # fmt: skip
        out.append(f"**The {len(queries)} slowest queries by {order}** {_when(ask)}:")
        out.append(table(["", "Query", "Calls", "Mean ms", "p95 ms", "Max ms", "Total ms", "Errors"], rows))
        top = queries[0]
        out.append(
            f"The first, {_plural(int(top['calls']), 'call')} from {md(', '.join(top['users']) or 'unknown users')}:"
            f"\n\n{fence(str(top['text']))}"
        )
        out.append(f"All of them: {link('the queries page', listing['queries_page'])}.")
    out += _findings_section(results, done)
    return out


def _render_autovacuum(ask: Ask, results: list[Result], done: tuple[Result, ...]) -> list[str]:
    out: list[str] = []
    open_ = [f for listing in _of(results, "list_findings") for f in listing.get("findings", [])]
    for search in _lines(results):
        runs: dict[tuple[str, str], list[Any]] = {}
        for ln in search["lines"]:
            if m := _TABLE.search(str(ln.get("message", ""))):
                runs.setdefault((m[2], m[1]), []).append(ln)
        if not runs:
            out.append(
                f"No autovacuum runs were logged {_when(ask)} (PostgreSQL logs them when"
                " `log_autovacuum_min_duration` is set)."
            )
            continue
        total = sum(len(v) for v in runs.values())
        verdict = (
            "It is **not keeping up**: see the findings below."
            if any(f["status"] == "open" for f in open_)
            else "No finding says it is falling behind."
        )
        out.append(f"Autovacuum logged **{total} runs** on {_plural(len({t for t, _ in runs}), 'table')}"
                   f" {_when(ask)}{' (the newest ' + str(search['count']) + ')' if search.get('has_more') else ''}."
                   f" {verdict}")  # fmt: skip
        rows = []
        for (tbl, what), lns in sorted(runs.items()):
            elapsed = [float(e[1]) for ln in lns if (e := _ELAPSED.search(str(ln.get("message", ""))))]
            rows.append([md(tbl), what, str(len(lns)), _ms(max(elapsed) * 1000 if elapsed else None),
                         _time(lns[0]["time"])])  # fmt: skip
        out.append(table(["Table", "Run", "Runs", "Longest ms", "Last"], rows))
        out.append(f"The lines: {link('autovacuum lines', search['logs_page'])}.")
    out += _findings_section(results, done, "No autovacuum or wraparound finding is open.")
    return out


def _groups_table(listing: Any) -> str:
    rows = [
        [md(g["kind"]), md(g.get("message") or "", 120), f"{int(g['count']):,}", _time(g["last_time"]),
         link("lines", g["logs_page"])]
        for g in listing.get("groups", [])
    ]  # fmt: skip
    return table(["Kind", "Message", "Count", "Last", ""], rows)


def _render_connections(ask: Ask, results: list[Result], done: tuple[Result, ...]) -> list[str]:
    out: list[str] = []
    for listing in _of(results, "log_groups"):
        groups = listing.get("groups", [])
        if not groups:
            out.append(f"**No failed connections** (authentication failures, connection limits) {_when(ask)}.")
            continue
        total = sum(int(g["count"]) for g in groups)
        out.append(f"**{total:,} failed connections** since {_time(listing['window']['from'])}, by message:")
        out.append(_groups_table(listing))
    for search in _lines(results):
        users = sorted({f"{ln.get('user') or '?'} from {ln.get('client') or '?'}" for ln in search["lines"]})
        if users:
            out.append("Who: " + ", ".join(md(u) for u in users[:10]) + ".")
    out += _findings_section(results, done)
    return out


def _render_moment(ask: Ask, results: list[Result], done: tuple[Result, ...]) -> list[str]:
    out: list[str] = []
    for search in [r.data for r in results if r.call.name == "search_logs" and _tag(r.call.id) == "moment"]:
        w = search["window"]
        counts: dict[str, int] = {}
        for ln in search["lines"]:
            counts[ln["kind"]] = counts.get(ln["kind"], 0) + 1
        if not counts:
            out.append(f"**Nothing was logged** between {_time(w['from'])} and {_time(w['to'])}.")
            continue
        newest = " (the newest 50 lines)" if search.get("has_more") else ""
        out.append(f"Between {_time(w['from'])} and {_time(w['to'])}{newest}, lines by kind:")
        out.append(table(["Kind", "Lines"], [[md(k), str(n)] for k, n in sorted(counts.items(), key=lambda x: -x[1])]))
        out.append(f"Every line: {link('the logs of that window', search['logs_page'])}.")
    for search in _lines(results, "momentnotable"):
        rows = [[link(_t(ln["time"]), ln["href"]), md(ln.get("severity", "")), md(ln["kind"]),
                 md(ln.get("message", ""), 140)] for ln in reversed(search["lines"])]  # fmt: skip
        if rows:
            out.append(f"**{_count_text(search)} notable lines** (errors, locks, maintenance, server), oldest first:")
            out.append(table(["Time", "Severity", "Kind", "Message"], rows))
        else:
            out.append("No errors, lock waits, maintenance or server events in that window.")
    return out


def _render_changes(ask: Ask, results: list[Result], done: tuple[Result, ...]) -> list[str]:
    out: list[str] = []
    for counts in _of(results, "count_lines"):
        days = counts.get("days", [])
        if len(days) < 2:
            continue
        before, now = days[-2], days[-1]
        rows = []
        for kind in now["counts"]:
            a, b = int(before["counts"].get(kind, 0)), int(now["counts"][kind])
            if a or b:
                change = "new" if not a else f"{(b - a) / a:+.0%}"
                rows.append([md(kind), f"{a:,}", f"{b:,}", change])
        out.append(
            f"Lines per kind, yesterday ({md(before['day'])}) and today so far ({md(now['day'])}, UTC,"
            f" until {_time(counts['now'])}):"
        )
        out.append(table(["Kind", "Yesterday", "Today", "Change"], rows) if rows else "No lines on either day.")
    for listing in _of(results, "list_findings"):
        since = str(listing["window"]["from"] or "")
        found = listing.get("findings", [])
        new = [f for f in found if str(f["first_seen"]) >= since]
        gone = [f for f in found if f["status"] == "resolved"]
        if new:
            out.append("**New findings since yesterday:**\n\n" + "\n".join(
                f"- {link(f['title'], f['href'])} ({md(f['severity'])}, first seen {_time(f['first_seen'])})"
                for f in new))  # fmt: skip
        else:
            out.append("No new findings since yesterday.")
        if gone:
            out.append("**Resolved:** " + ", ".join(link(f["title"], f["href"]) for f in gone) + ".")
    return out


def _render_errors(ask: Ask, results: list[Result], done: tuple[Result, ...]) -> list[str]:
    out: list[str] = []
    for listing in _of(results, "log_groups"):
        if not listing.get("groups"):
            out.append(f"**No errors** since {_time(listing['window']['from'])}.")
            continue
        total = sum(int(g["count"]) for g in listing["groups"])
        out.append(f"**{total:,} errors** since {_time(listing['window']['from'])}, the most frequent first:")
        out.append(_groups_table(listing))
    out += _findings_section(results, done)
    return out


def _render_kind(label: str, none: str) -> Callable[[Ask, list[Result], tuple[Result, ...]], list[str]]:
    def render_(ask: Ask, results: list[Result], done: tuple[Result, ...]) -> list[str]:
        out: list[str] = []
        for search in _lines(results):
            lines = search["lines"]
            if not lines:
                out.append(f"**No {label}** were logged {_when(ask)}.")
                continue
            out.append(f"**{_count_text(search)} {label}** {_when(ask)}, the newest first:")
            rows = [[link(_t(ln["time"]), ln["href"]), md(ln.get("message", ""), 140),
                     md(ln.get("statement") or "", 80)] for ln in lines[:10]]  # fmt: skip
            out.append(table(["Time", "Message", "Statement"], rows))
            if label == "temporary files":
                sizes = [int(m[1]) for ln in lines if (m := _TEMP_SIZE.search(str(ln.get("message", ""))))]
                if sizes:
                    out.append(f"Together {sum(sizes) / 1048576:,.1f} MB; the largest {max(sizes) / 1048576:,.1f} MB.")
            out.append(f"All of them: {link('the lines', search['logs_page'])}.")
        out += _findings_section(results, done, none)
        return out

    return render_


def _render_alerts(ask: Ask, results: list[Result], done: tuple[Result, ...]) -> list[str]:
    out: list[str] = []
    for listing in _of(results, "list_alerts"):
        alerts = listing.get("alerts", [])
        if not alerts:
            out.append("**No alerts** have fired.")
            continue
        firing = sum(1 for a in alerts if a["state"] == "firing")
        out.append(f"**{firing} firing**, {len(alerts) - firing} resolved (the newest {len(alerts)}):")
        rows = [[link(a["rule"], a["href"]), md(a["state"]), md(a["severity"]), f"{a['value']} / {a['threshold']}",
                 _time(a["started_at"])] for a in alerts]  # fmt: skip
        out.append(table(["Rule", "State", "Severity", "Count / threshold", "Started"], rows))
    return out


def _render_overview(ask: Ask, results: list[Result]) -> list[str]:
    out: list[str] = []
    for ov in _of(results, "overview"):
        db = ov["database"]
        source = ov["source"]
        state = str(source["state"]).replace("_", " ")
        reading = "its log is read" if state == "reading" else f"its log is not read: {md(state)}"
        if source.get("reason"):
            reading += f" ({md(source['reason'])})"
        out.append(f"{link(db['name'], ov['href'])}: {reading}.")
        counts = [[md(k), f"{int(n):,}"] for k, n in ov["counts_24h"].items() if n]
        out.append(
            "Lines in the last 24 hours:\n\n" + table(["Kind", "Lines"], counts)
            if counts
            else "No lines in the last 24 hours."
        )
    for listing in _of(results, "list_findings"):
        found = listing.get("findings", [])
        out.append(
            "**Open findings:**\n\n"
            + "\n".join(f"- {link(f['title'], f['href'])} ({md(f['severity'])})" for f in found)
            if found
            else "No open findings."
        )
    for listing in _of(results, "list_alerts"):
        alerts = listing.get("alerts", [])
        out.append(
            "**Firing alerts:** " + ", ".join(link(a["rule"], a["href"]) for a in alerts) + "."
            if alerts
            else "No firing alerts."
        )
    return out


def _render_about(r: Result, done: tuple[Result, ...]) -> list[str]:
    d = r.data
    out: list[str] = []
    if r.call.name == "get_finding":
        ev = d["evidence"]
        out.append(
            f"{link(d['title'], d['href'])}: {md(d['severity'])}, {md(d['status'])};"
            f" {_plural(int(ev['count']), 'occurrence')}"
            f" between {_time(ev['from'])} and {_time(ev['to'])}, first seen {_time(d['first_seen'])}."
        )
        facts = ev.get("facts", {})
        statements = facts.get("statements") or []
        if statements:
            out.append("Statements involved:\n\n" + fence("\n".join(str(s) for s in statements)))
        rows = [[md(k), md(orjson.dumps(v).decode() if not isinstance(v, str) else v, 160)]
                for k, v in facts.items() if k != "statements"]  # fmt: skip
        if rows:
            out.append(table(["Fact", "Value"], rows))
        for fix in d.get("fixes", []):
            how = "done by hand" if fix.get("manual") else f"risk {md(fix['risk'])}, applies to {md(fix['applies_to'])}"
            out.append(
                f"**Fix:** {md(fix['label'], 300)} ({how})" + (f"\n\n{fence(fix['sql'])}" if fix.get("sql") else "")
            )
        if ev.get("lines"):
            out.append("Lines: " + ", ".join(link(f"line {h.rsplit('/', 1)[-1]}", h) for h in ev["lines"][:5]) + ".")
    elif r.call.name == "get_query":
        out.append(f"{link('This query', d['href'])}, {_plural(int(d['calls']), 'call')}:\n\n{fence(str(d['text']))}")
        out.append(table(
            ["Calls", "Mean ms", "p95 ms", "Max ms", "Total ms", "Errors"],
            [[f"{int(d['calls']):,}", _ms(d["mean_ms"]), _ms(d["p95_ms"]), _ms(d["max_ms"]), _ms(d["total_ms"]),
              str(d["errors"])]],
        ))  # fmt: skip
        series = d.get("series", [])
        if series:
            peak = max(series, key=lambda p: (p["max_ms"], p["start"]))
            out.append(
                f"Slowest 5 minutes: from {_time(peak['start'])}, {peak['calls']} calls, max {_ms(peak['max_ms'])} ms."
            )
        out.append(
            f"Users: {md(', '.join(d['users']) or '-')}; applications: {md(', '.join(d['applications']) or '-')}."
        )
    elif r.call.name == "get_alert":
        state = "firing" if d["state"] == "firing" else f"resolved at {_time(d['resolved_at'])}"
        out.append(
            f"{link('Alert ' + str(d['rule']), d['href'])} on {md(d.get('database_name') or d['database_id'])}:"
            f" {md(d['severity'])}, {state}; {_plural(int(d['value']), 'matching line')} in"
            f" {d['window_seconds']} s against a threshold of {d['threshold']}, since {_time(d['started_at'])}."
        )
        for search in [x.data for x in done if _tag(x.call.id) == "alertlines" and x.error is None]:
            rows = [[link(_t(ln["time"]), ln["href"]), md(ln["kind"]), md(ln.get("message", ""), 140)]
                    for ln in search["lines"][:10]]  # fmt: skip
            if rows:
                out.append(f"The newest lines since it started ({_count_text(search)}):")
                out.append(table(["Time", "Kind", "Message"], rows))
    return out


RENDERERS: Final[dict[Intent, Callable[[Ask, list[Result], tuple[Result, ...]], list[str]]]] = {
    "deadlocks": _render_deadlocks,
    "slow": _render_slow,
    "autovacuum": _render_autovacuum,
    "connections": _render_connections,
    "moment": _render_moment,
    "changes": _render_changes,
    "errors": _render_errors,
    "locks": _render_kind("lock waits and deadlocks", "No lock-wait or deadlock finding."),
    "checkpoints": _render_kind("checkpoint lines", "No checkpoint finding."),
    "temp_files": _render_kind("temporary files", "No temporary-file finding."),
    "alerts": _render_alerts,
}


def pieces(markdown: str) -> list[str]:
    """The answer in several text events: one per paragraph (the separators kept)."""
    parts = re.split(r"(?<=\n\n)", markdown)
    return [p for p in parts if p]


# --- the provider ------------------------------------------------------------------------------


def ask_of(request: ModelRequest) -> Ask:
    turn = sum(1 for t in request.turns if isinstance(t, UserTurn))
    return understand(request.question, request.database, request.about, max(turn, 1))


class Analyst:
    """The built-in analyst as a provider: one turn calls the next step's tools or writes the answer."""

    async def stream(self, request: ModelRequest) -> AsyncIterator[Delta]:
        ask = ask_of(request)
        done = collect(ask, request.turns)
        calls = plan(ask, done)
        answered = {t.call_id for t in request.turns if isinstance(t, ToolResultTurn)}
        if calls and not any(c.id in answered for c in calls):
            for call in calls:
                yield call
        else:
            for piece in pieces(render(ask, done)):
                yield TextDelta(piece)
        yield Finished(request.model)

    async def aclose(self) -> None:
        return None
