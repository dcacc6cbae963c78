"""The daemon's configuration: one TOML file plus FORWARDER_* environment overrides.

Environment variables win over the file; nested keys use `__`, e.g. FORWARDER_SERVER__PORT=9000.
Unknown keys are errors. Every mistake is reported with its TOML path (`databases[1].log.format`).
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import socket
import tomllib
import unicodedata
import urllib.parse
import zoneinfo
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import NoneType, UnionType
from typing import Annotated, Any, Final, Union, get_args, get_origin

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from forwarder.insights.model import Severity
from forwarder.insights.queries import DEFAULT_MAX_QUERIES
from forwarder.pglog import Format
from forwarder.pglog.prefix import unknown_escapes

LogFormat = Format  # one list of the formats: the readers' own
_JOURNAL_KEYS = ("journal_unit", "journal_match", "journal_directory", "journalctl_path")
_JOURNAL_MATCH = re.compile(r"[A-Z0-9_]+=.*|\+", re.DOTALL)  # journalctl(1) MATCHES; "+" is OR
_UNIT_NAME = re.compile(r"[A-Za-z0-9:_.\\@-]+\.[a-z]+")

_ID_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")


def _check_id(value: str) -> str:
    """Ids of databases and destinations: they appear in API paths and metric labels."""
    if not _ID_RE.match(value):
        raise ValueError("must be 1-63 characters of a-z, 0-9, '_' or '-', starting with a letter or digit")
    return value


# Unicode's bidirectional formatting characters (UAX #9: LRE..RLO, LRI..PDI, LRM, RLM, ALM): one
# in a name reorders the text printed after it ("Trojan Source", CVE-2021-42574).
_BIDI_CONTROLS: Final = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c")


def _no_control_characters(value: str) -> str:
    # Names are printed on terminals: ESC, BEL or CR in one could rewrite the screen or the title;
    # a line or paragraph separator breaks the line, a bidi control reorders it.
    if any(unicodedata.category(c) in ("Cc", "Zl", "Zp") or c in _BIDI_CONTROLS for c in value):
        raise PydanticCustomError(
            "control_characters",
            "must not contain control characters (such as ESC, CR or LF), line separators or bidi controls",
        )
    if not value.strip():
        raise PydanticCustomError("blank", "must not be blank")
    return value


DisplayName = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(_no_control_characters)]
PrintedName = Annotated[str, AfterValidator(_no_control_characters)]
"""A database's name or host: printed on terminals and pages like a destination's name."""


def _not_empty(value: object) -> object:
    # Path("") is Path("."): the store or key file would be the working directory itself.
    if value == "":
        raise PydanticCustomError("empty_path", "must not be empty")
    return value


NonEmptyPath = Annotated[Path, BeforeValidator(_not_empty)]
"""A destination's display name: 1-200 characters, not blank, none of them a control character, a
line separator or a bidi control."""


class ConfigError(Exception):
    """A configuration that cannot be used; `problems` are `path: message` lines."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


MAX_RETENTION_DAYS: Final = 100_000  # ~274 years: now minus that, in microseconds, fits SQLite's 64-bit integer
# A count the API answers with: no larger than a JSON number carries exactly (RFC 8259 section 6,
# IEEE 754 doubles, as in JavaScript); past 2**64 orjson cannot write it at all (the overview's
# `retention.max_bytes` was a 500).
MAX_JSON_INT: Final = 2**53 - 1


class _Section(BaseModel):
    # TOML has inf and nan: no setting means anything by them, and an infinite number of seconds or
    # days fails where it is turned into an integer (a timer, an SQLite bound), not here.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class ServerConfig(_Section):
    """Where the HTTP API listens."""

    # Not empty: aiohttp reads "" as every interface, which would expose the API by a slip.
    host: str = Field(
        "127.0.0.1", min_length=1, description="Address the Logs API listens on (0.0.0.0 or :: for every interface)."
    )
    port: int = Field(8780, ge=0, le=65535, description="TCP port of the Logs API (0 picks a free one).")
    max_connections: int = Field(
        1024,
        ge=1,
        description="Connections the API holds open at once; more are closed at once (logged and counted). "
        "Never more than the process's descriptor limit less reserved_descriptors.",
    )
    reserved_descriptors: int = Field(
        256,
        ge=16,
        description="Descriptors kept back from the API for reading logs, the store and deliveries.",
    )
    header_timeout_seconds: float = Field(
        10.0, gt=0, le=600, description="A new connection that has not sent a complete request head by then is closed."
    )
    keepalive_timeout_seconds: float = Field(
        15.0, gt=0, le=3600, description="An idle keep-alive connection is closed after this long."
    )


class StoreConfig(_Section):
    """The embedded SQLite store."""

    path: NonEmptyPath = Field(Path("var/forwarder.db"), description="SQLite database file (WAL mode).")
    # Bounded (MAX_RETENTION_DAYS): 1e9 days, meant as "forever", overflowed the cutoff's integer
    # and stopped retention and the insights' own clean-up at their first pass.
    retention_days: float = Field(
        7.0, gt=0, le=MAX_RETENTION_DAYS, description="Lines older than this are deleted (at most 100,000: ~274 years)."
    )
    max_bytes: int = Field(
        1 << 30,
        ge=1 << 20,
        le=MAX_JSON_INT,
        description="Size cap of the store; the oldest lines are deleted beyond it.",
    )
    retention_interval_seconds: float = Field(60.0, gt=0, description="How often retention by age and by size runs.")


class SecurityConfig(_Section):
    """Secrets at rest and where destinations may be."""

    secrets_key_file: NonEmptyPath = Field(
        Path("var/secrets.key"),
        description="AES-256 key file for secrets at rest; created with mode 0600 on first start.",
    )
    allowed_destination_networks: list[str] = Field(
        default_factory=list,
        description="Networks (CIDR) destinations may be in although not public, e.g. an internal Loki. "
        "Operators only: the API can never widen this.",
    )

    @field_validator("allowed_destination_networks")
    @classmethod
    def _networks(cls, values: list[str]) -> list[str]:
        for value in values:
            try:
                ipaddress.ip_network(value, strict=False)
            except ValueError:
                raise ValueError(f"{value!r} is not a network in CIDR form such as 10.0.0.0/8") from None
        return values

    def networks(self) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
        return [ipaddress.ip_network(v, strict=False) for v in self.allowed_destination_networks]


class IngestConfig(_Section):
    """How logs are parsed."""

    parse_workers: int = Field(
        1,
        ge=0,
        le=16,
        description="Worker processes that parse logs beside the daemon (one core each); 0 parses in the "
        "daemon's own process. Databases are spread over them.",
    )


class LogSourceConfig(_Section):
    """Where and how a database's server log is read."""

    path: str = Field(
        "",
        description="Glob of the log files, e.g. /var/log/postgresql/postgresql-*.log (every format but journal).",
    )
    format: LogFormat = Field(
        "stderr",
        description="How the server's log is read: stderr, csvlog or jsonlog (log_destination with the logging "
        "collector), syslog (a syslog daemon's file, e.g. /var/log/syslog), cri (a Kubernetes node's container "
        "log files, /var/log/pods/*/*/*.log) or journal (a server without the logging collector whose stderr "
        "systemd sends to the journal, read with journalctl).",
    )
    line_prefix: str = Field(
        "%m [%p] ",
        description="The server's log_line_prefix (every format but csvlog and jsonlog, which have fields).",
    )
    syslog_ident: str = Field(
        "postgres",
        min_length=1,
        max_length=64,
        pattern=r"^[^\s\[\]:]+$",
        description="The server's syslog_ident (format syslog): its lines' tag; lines of other programs are skipped.",
    )
    journal_unit: str | None = Field(
        None,
        description="format = journal: the systemd unit of the server, e.g. postgresql@15-main.service; only the "
        "records its own processes wrote are read (_SYSTEMD_UNIT=<unit>).",
    )
    journal_match: list[str] = Field(
        default_factory=list,
        description='format = journal: journalctl matches FIELD=value, e.g. ["SYSLOG_IDENTIFIER=postgres"]; '
        "several on one field are alternatives, on different fields all must hold.",
    )
    journal_directory: Path | None = Field(
        None,
        description="format = journal: read the journal files of this directory (journalctl --directory) instead "
        "of the system journal.",
    )
    journalctl_path: str = Field("journalctl", description="format = journal: the journalctl program to run.")
    timezone: str = Field("UTC", description="The server's log_timezone, an IANA name.")
    poll_interval_seconds: float = Field(
        0.25,
        gt=0,
        le=10,
        description="How often the files are checked for new data when no change is reported (seconds).",
    )
    batch_window_seconds: float = Field(
        0.05,
        ge=0,
        le=1,
        description="Woken by a change of the log files, the reader still lets this long pass between two reads "
        "(seconds), so one store transaction and one delivery take what was written meanwhile: shorter lowers "
        "the latency, longer the CPU.",
    )

    @field_validator("line_prefix")
    @classmethod
    def _known_escapes(cls, value: str) -> str:
        if unknown := unknown_escapes(value):
            raise ValueError(
                f"PostgreSQL's log_line_prefix has no escape {', '.join(unknown)}; copy the server's "
                "value (SHOW log_line_prefix;), and write %% for a literal %"
            )
        return value

    @field_validator("journal_match")
    @classmethod
    def _matches(cls, values: list[str]) -> list[str]:
        for value in values:
            if not _JOURNAL_MATCH.fullmatch(value):
                raise ValueError(f"{value!r} is not a journal match FIELD=value (e.g. SYSLOG_IDENTIFIER=postgres)")
        return values

    @field_validator("journal_unit")
    @classmethod
    def _unit(cls, value: str | None) -> str | None:
        if value is not None and not _UNIT_NAME.fullmatch(value):
            raise ValueError(f"{value!r} is not a systemd unit name such as postgresql@15-main.service")
        return value

    def problems(self) -> list[tuple[str, str]]:
        """(key, why) for keys that do not fit the format: a log source needs its files or its journal."""
        if self.format != "journal":
            out = [(key, 'only for format = "journal"') for key in _JOURNAL_KEYS if key in self.model_fields_set]
            if not self.path:
                out.append(("path", f"required for format = {self.format!r}: a glob of the server's log files"))
            return out
        out = []
        if "path" in self.model_fields_set:
            out.append(("path", 'not used with format = "journal" (the journal is read with journalctl): remove it'))
        if self.journal_unit is None and not self.journal_match:
            out.append(
                (
                    "journal_unit",
                    'format = "journal" needs journal_unit (e.g. "postgresql@15-main.service") or journal_match '
                    '(e.g. ["SYSLOG_IDENTIFIER=postgres"]): the whole journal is not a PostgreSQL log',
                )
            )
        return out

    def source(self) -> str:
        """What is read, in words: the glob of the files, or `journal` and journalctl's matches."""
        return self.path if self.format != "journal" else " ".join(["journal", *self.journal_matches()])

    def journal_matches(self) -> list[str]:
        """The journalctl matches of a journal source: the unit's processes, then `journal_match`."""
        unit = [f"_SYSTEMD_UNIT={self.journal_unit}"] if self.journal_unit is not None else []
        return unit + self.journal_match

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            zoneinfo.ZoneInfo(value)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {value!r} (use an IANA name such as Europe/Berlin)") from None
        return value


class DatabaseConnectionConfig(_Section):
    """How the daemon connects to the monitored server itself, to apply fixes of its findings.

    Operators only: the API can neither see nor change it. The password comes from the environment
    or a file, never from the TOML itself, so the config can be shared and committed.
    """

    dsn: str = Field(
        description="A libpq connection URI without a password, e.g. "
        "postgresql://forwarder@127.0.0.1:5432/postgres?sslmode=require.",
    )
    password_env: str | None = Field(None, description="Environment variable holding the password.")
    password_file: Path | None = Field(None, description="File holding the password (trailing newline ignored).")
    connect_timeout_seconds: float = Field(10.0, gt=0, le=300, description="Give up connecting after this long.")
    statement_timeout_seconds: float = Field(
        30.0, gt=0, le=3600, description="PostgreSQL's statement_timeout for every statement the daemon runs."
    )
    allow_fixes: bool = Field(
        False,
        description="Let a read-write API key apply a finding's fix through this connection (ALTER SYSTEM and the "
        "like: the role needs the privileges). Off: the API answers with the SQL to run by hand.",
    )

    @field_validator("dsn")
    @classmethod
    def _dsn_shape(cls, value: str) -> str:
        # Never echo the value: it may hold the very password refused here.
        url = urllib.parse.urlsplit(value)
        if url.scheme not in ("postgresql", "postgres"):
            raise ValueError("must be a connection URI starting with postgresql://")
        try:
            query = urllib.parse.parse_qs(url.query, strict_parsing=True) if url.query else {}
        except ValueError:
            raise ValueError("its query part is not key=value pairs joined by &") from None
        if url.password is not None or {"password", "sslpassword"} & set(query):
            raise ValueError("must not hold a password; give password_env or password_file instead")
        return value

    @model_validator(mode="after")
    def _one_password_source(self) -> DatabaseConnectionConfig:
        if self.password_env is not None and self.password_file is not None:
            raise ValueError("give password_env or password_file, not both")
        return self

    def read_password(self) -> str | None:
        """The password from its source (None when it has none: trust, peer or certificate login);
        ValueError naming the source, never the value, if it cannot be read."""
        return _read_secret(self.password_env, self.password_file)


class DatabaseConfig(_Section):
    """One monitored PostgreSQL server (a database of the API: `database_id`, `database_name`, `{ref}`)."""

    id: str = Field(description="Stable identifier used in the API and in stored lines.")
    name: PrintedName = Field(description="Display name (default: the id); the API also accepts it as {ref}.")
    host: PrintedName = Field(default_factory=socket.gethostname, description="Host name shown on every line.")
    enabled: bool = Field(True, description="Initial setting: read this database's log.")
    full_text: bool = Field(False, description="Initial setting: keep values in lines (no redaction).")
    log: LogSourceConfig
    connection: DatabaseConnectionConfig | None = Field(
        None, description="A connection to the server for applying fixes ([databases.connection]); none by default."
    )

    _id_shape = field_validator("id")(_check_id)

    @model_validator(mode="before")
    @classmethod
    def _name_defaults_to_the_id(cls, data: Any) -> Any:
        # As a destination's: a config of one database needs no second name for it.
        if isinstance(data, dict) and "name" not in data and isinstance(data.get("id"), str):
            return {**data, "name": data["id"]}
        return data

    @field_validator("name")
    @classmethod
    def _name_shape(cls, value: str) -> str:
        if not value.strip() or len(value) > 200:
            raise ValueError("must be 1-200 characters and not blank")
        return value


class DeliveryConfig(_Section):
    """How deliveries behave around a stop."""

    shutdown_grace_seconds: float = Field(
        30.0,
        ge=0,
        le=600,
        description="On SIGTERM/SIGINT, requests in flight may finish for this long before they are cut off "
        "(a cut-off batch is resent after the restart). Keep systemd's TimeoutStopSec above it.",
    )


class InsightsConfig(_Section):
    """Queries, findings and their fixes, derived from the stored lines (docs/insights.md)."""

    enabled: bool = Field(
        True,
        description="Keep query statistics and findings, updated as lines are stored. Off: the insights "
        "endpoints answer 503 and no time is spent on them.",
    )
    max_queries: int = Field(
        DEFAULT_MAX_QUERIES,
        ge=100,
        le=1_000_000,
        description="Statements (by fingerprint) kept per database, as pg_stat_statements.max: past it "
        "the least used 5% are forgotten with their statistics, so a log of one-off statements does not "
        "grow the store without bound.",
    )


class WebConfig(_Section):
    """The web pages under /ui/ (docs/web.md)."""

    enabled: bool = Field(True, description="Serve the pages under /ui/ on the API's port.")
    session_hours: float = Field(
        12.0, gt=0, le=24 * 30, description="A sign-in lasts this long; then the key is asked for again."
    )


def _http_url(value: str) -> str:
    url = urllib.parse.urlsplit(value)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise ValueError("must be an http:// or https:// URL with a host")
    if url.password is not None:
        raise ValueError("must not hold a password; give api_key_env or api_key_file instead")
    return value.rstrip("/")


HttpUrl = Annotated[str, AfterValidator(_http_url)]


class AskBuiltinConfig(_Section):
    """The operator's own model server for everyone's built-in questions: any server with the
    OpenAI chat-completions API (Ollama, vLLM, llama.cpp's server). Without it the built-in
    analyst answers (deterministic, inside the daemon)."""

    base_url: HttpUrl = Field(description="The API's base URL, e.g. http://127.0.0.1:11434/v1 for Ollama.")
    fast_model: str = Field(min_length=1, description="Model for ordinary questions.")
    deep_model: str = Field("", description="Model for questions asked with `deep`; empty: the fast one.")
    api_key_env: str | None = Field(None, description="Environment variable holding the server's key, if it needs one.")
    api_key_file: Path | None = Field(None, description="File holding the server's key (trailing newline ignored).")

    @model_validator(mode="after")
    def _one_key_source(self) -> AskBuiltinConfig:
        if self.api_key_env is not None and self.api_key_file is not None:
            raise ValueError("give api_key_env or api_key_file, not both")
        return self

    def read_api_key(self) -> str | None:
        return _read_secret(self.api_key_env, self.api_key_file)


class AskProviderUrls(_Section):
    """Where the model providers are reached with an organization's own key. Only this file can
    change them (the API cannot): point them at a proxy, or at a fake in tests."""

    openai: HttpUrl = Field("https://api.openai.com/v1", description="OpenAI's API base URL.")
    anthropic: HttpUrl = Field("https://api.anthropic.com", description="Anthropic's API base URL.")
    openrouter: HttpUrl = Field("https://openrouter.ai/api/v1", description="OpenRouter's API base URL.")


class AskConfig(_Section):
    """Ask: streamed answers about the databases (docs/ask.md)."""

    builtin_monthly_questions: int = Field(
        100,
        ge=0,
        le=MAX_JSON_INT,
        description="Built-in questions each organization may ask per UTC calendar month; 0: none (then "
        "only an organization's own key answers).",
    )
    answer_timeout_seconds: float = Field(
        120.0, gt=0, le=3600, description="An answer that takes longer ends with an error event."
    )
    builtin: AskBuiltinConfig | None = Field(
        None, description="The operator's model server; left out: the built-in analyst answers."
    )
    provider_urls: AskProviderUrls = AskProviderUrls()


class DestinationFilterConfig(_Section):
    """Which lines a config-declared destination receives; empty lists mean everything."""

    kinds: list[str] = Field(default_factory=list, description="Kinds (or errors, locks, maintenance).")
    database_ids: list[str] = Field(default_factory=list, description="Ids of [[databases]] entries.")

    @field_validator("kinds")
    @classmethod
    def _kinds(cls, values: list[str]) -> list[str]:
        from forwarder.model import expand_kinds

        expand_kinds(values)  # ValueError names the unknown kind
        return values


class DestinationConfig(_Section):
    """A log destination declared in the file: created, changed and removed with the file (on SIGHUP too).

    The API shows and tests it but cannot change it. Its secret comes from the environment or a
    file, never from the TOML itself, so the config can be shared and committed.
    """

    id: str = Field(description="Stable identifier, also its id in the API (the cursor is kept under it).")
    type: str = Field(description="The kind: webhook, datadog, better_stack, loki, elasticsearch or syslog.")
    name: DisplayName | None = Field(None, description="Display name; defaults to the id.")
    enabled: bool = Field(True, description="Deliver to it.")
    config: dict[str, Any] = Field(default_factory=dict, description="The kind's settings (docs/destinations.md).")
    secret_env: str | None = Field(None, description="Environment variable holding the credential.")
    secret_file: Path | None = Field(None, description="File holding the credential (trailing newline ignored).")
    filter: DestinationFilterConfig = DestinationFilterConfig()

    _id_shape = field_validator("id")(_check_id)

    @field_validator("type")
    @classmethod
    def _known_type(cls, value: str) -> str:
        from forwarder.sinks import SINK_TYPES

        if value not in SINK_TYPES:
            raise ValueError(f"unknown destination type {value!r}; use one of {', '.join(sorted(SINK_TYPES))}")
        return value

    @model_validator(mode="after")
    def _one_secret_source(self) -> DestinationConfig:
        if self.secret_env is not None and self.secret_file is not None:
            raise ValueError("give secret_env or secret_file, not both")
        return self

    def read_secret(self) -> str | None:
        """The credential from its source; ValueError (naming the source, never the value) if unreadable."""
        return _read_secret(self.secret_env, self.secret_file)

    def display_name(self) -> str:
        return self.name or self.id


def _read_secret(env: str | None, path: Path | None) -> str | None:
    """A credential from an environment variable or a file; ValueError naming the source, never the value."""
    if env is not None:
        value = os.environ.get(env)
        if not value:
            raise ValueError(f"environment variable {env} is not set")
        return value
    if path is not None:
        try:
            text = path.read_text().rstrip("\r\n")
        except OSError as exc:
            raise ValueError(f"cannot read {path}: {exc.strerror}") from None
        if not text:
            raise ValueError(f"{path} is empty")
        return text
    return None


class AlertRuleConfig(_Section):
    """An alert rule (`[[alerts]]`): fires for a database while its matching lines in the window reach the threshold.

    Evaluated every 30 s per database it covers: the value is the count of matching lines written in
    the last `window_seconds`; at or above `threshold` the rule fires for that database (one firing
    alert per rule and database), below it the alert resolves.
    """

    id: str = Field(description="Stable identifier: the alert's `rule` in the API and the metric's `rule` label.")
    kinds: list[str] = Field(
        default_factory=list, description="Kinds (or errors, locks, maintenance) of the lines counted; empty: all."
    )
    database_ids: list[str] = Field(
        default_factory=list, description="Ids of [[databases]] entries the rule watches; empty: all."
    )
    text: Annotated[str, Field(min_length=1, max_length=200), AfterValidator(_no_control_characters)] | None = Field(
        None,
        description="Count only lines whose message, detail or statement contains this text (case-insensitive).",
    )
    # At most MAX_JSON_INT: stored with the alert (SQLite's 64-bit integer) and shown by the API;
    # 10**30 passed, then every evaluation of every rule failed on it (OverflowError).
    threshold: int = Field(ge=1, le=MAX_JSON_INT, description="Lines in the window at which the rule fires.")
    window_seconds: int = Field(300, ge=60, le=3600, description="The window the lines are counted over, in seconds.")
    severity: Severity = Field("warning", description="info, warning or critical: shown with the alert.")

    _id_shape = field_validator("id")(_check_id)

    @field_validator("kinds")
    @classmethod
    def _kinds(cls, values: list[str]) -> list[str]:
        from forwarder.model import expand_kinds

        expand_kinds(values)  # ValueError names the unknown kind
        return values


class Config(_Section):
    """The whole configuration file (environment overrides applied: `config_from_dict`)."""

    server: ServerConfig = ServerConfig()
    store: StoreConfig = StoreConfig()
    security: SecurityConfig = SecurityConfig()
    ingest: IngestConfig = IngestConfig()
    delivery: DeliveryConfig = DeliveryConfig()
    insights: InsightsConfig = InsightsConfig()
    web: WebConfig = WebConfig()
    ask: AskConfig = AskConfig()
    databases: list[DatabaseConfig] = Field(default_factory=list)
    destinations: list[DestinationConfig] = Field(default_factory=list)
    alerts: list[AlertRuleConfig] = Field(default_factory=list)


def _unique_problems(config: Config) -> list[str]:
    """Database ids and names, and destination ids, used twice; databases a destination's filter
    names that the file does not declare. Each at its TOML path (the later of two entries)."""
    problems: list[str] = []
    seen_ids: set[str] = set()
    seen_names: set[str] = set()
    for i, db in enumerate(config.databases):
        if db.id in seen_ids:
            problems.append(f"databases[{i}].id: duplicate database id {db.id!r}")
        if db.name in seen_names:
            problems.append(f"databases[{i}].name: duplicate database name {db.name!r}")
        seen_ids.add(db.id)
        seen_names.add(db.name)
    dest_ids: set[str] = set()
    for i, dest in enumerate(config.destinations):
        if dest.id in dest_ids:
            problems.append(f"destinations[{i}].id: duplicate destination id {dest.id!r}")
        dest_ids.add(dest.id)
        for j, db_id in enumerate(dest.filter.database_ids):
            if db_id not in seen_ids:
                problems.append(f"destinations[{i}].filter.database_ids[{j}]: unknown database id {db_id!r}")
    return problems


def _alert_problems(config: Config) -> list[str]:
    """Alert ids used twice and databases an alert names that the file does not declare."""
    database_ids = {db.id for db in config.databases}
    problems: list[str] = []
    rule_ids: set[str] = set()
    for i, rule in enumerate(config.alerts):
        if rule.id in rule_ids:
            problems.append(f"alerts[{i}].id: duplicate alert id {rule.id!r}")
        rule_ids.add(rule.id)
        for j, db_id in enumerate(rule.database_ids):
            if db_id not in database_ids:
                problems.append(f"alerts[{i}].database_ids[{j}]: unknown database id {db_id!r}")
    return problems


def _loc_to_path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + part
    return out or "(top level)"


ENV_PREFIX = "forwarder_"  # matched without regard to case, as the file's keys are all lower case
ENV_NESTING = "__"


def _unwrapped(annotation: Any) -> list[Any]:
    """The types a field may hold: a union's members (None left out), else the annotation."""
    if get_origin(annotation) in (Union, UnionType):
        return [a for a in get_args(annotation) if a is not NoneType]
    return [annotation]


def _is_table(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _is_json(annotation: Any) -> bool:
    """A table, an array or a mapping: given in the environment as JSON."""
    return _is_table(annotation) or get_origin(annotation) in (list, dict, tuple, set, frozenset)


def _env_value(name: str, path: list[str], value: str) -> Any:
    """`value` as the key at `path` takes it: JSON for a table or an array, else the string itself
    (the models convert it, as they do the file's, and name the key if they cannot)."""
    kinds: list[Any] = [Config]
    for depth, key in enumerate(path):
        tables = [k for k in kinds if _is_table(k)]
        if not tables:
            where = ".".join(path[:depth])
            if any(_is_json(k) for k in kinds):
                whole = ENV_NESTING.join(name.split(ENV_NESTING)[:depth])
                shape = "{...}" if any(get_origin(k) is dict for k in kinds) else "[...]"
                raise ValueError(f"{name}: {where} is set whole, as JSON ({whole}='{shape}')")
            raise ValueError(f"{name}: {where} takes a value, not keys")
        field = tables[0].model_fields.get(key)
        if field is None:
            return value  # an unknown key: validation says so, with its path
        kinds = _unwrapped(field.annotation)
    if not any(_is_json(k) for k in kinds):
        return value
    try:
        return json.loads(value)
    except ValueError as exc:
        if all(_is_json(k) for k in kinds):
            raise ValueError(f"{name}: {'.'.join(path)} takes JSON here: {exc}") from None
        return value  # a union that also takes a string


def environment_overrides(environ: Mapping[str, str]) -> tuple[dict[str, Any], list[str]]:
    """FORWARDER_<SECTION>[__<KEY>...] variables as a document shaped like the file, and what is
    wrong with them. Variables whose first part names no section (FORWARDER_URL, FORWARDER_KEY,
    FORWARDER_CONFIG: the CLI's own) are not the config's. A whole section given as JSON comes
    first, its keys given one by one over it (FORWARDER_SERVER='{"port": 9000}' with
    FORWARDER_SERVER__HOST), as pydantic-settings, which read them before, did."""
    document: dict[str, Any] = {}
    problems: list[str] = []
    named = [(name, name.lower().removeprefix(ENV_PREFIX).split(ENV_NESTING), value) for name, value in environ.items()]
    for name, path, value in sorted(named, key=lambda item: len(item[1])):
        if not name.lower().startswith(ENV_PREFIX):
            continue
        if path[0] not in Config.model_fields:
            if len(path) > 1:  # FORWARDER_SERVR__PORT: a section's key, in a section mistyped
                sections = ", ".join(sorted(Config.model_fields))
                problems.append(f"{name}: no section {path[0]!r} (the sections: {sections})")
            continue
        try:
            parsed = _env_value(name, path, value)
        except ValueError as exc:
            problems.append(str(exc))
            continue
        table = document
        for key in path[:-1]:
            table = table.setdefault(key, {})
            if not isinstance(table, dict):  # a section given as a JSON array or value
                problems.append(f"{name}: {'.'.join(path[:-1])} was set as a whole by another variable")
                break
        else:
            table[path[-1]] = parsed
    return document, problems


def _merged(file: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """`file` with `overrides` over it, table by table (an array or a value is replaced whole)."""
    out = dict(file)
    for key, value in overrides.items():
        below = out.get(key)
        out[key] = _merged(below, value) if isinstance(below, dict) and isinstance(value, dict) else value
    return out


def load_config(path: str | Path, *, read_secrets: bool = True) -> Config:
    """Read and validate the TOML file at `path`; raises ConfigError listing every mistake.

    `read_secrets=False` skips checking that destination secrets can be read (commands that only
    need the store, such as `keys`, run without the daemon's environment).
    """
    try:
        with open(path, "rb") as fh:
            data: dict[str, Any] = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError([f"{path}: file not found"]) from None
    except PermissionError:
        raise ConfigError([f"{path}: permission denied"]) from None
    except IsADirectoryError:
        raise ConfigError([f"{path}: is a directory, not a file"]) from None
    except OSError as exc:
        raise ConfigError([f"{path}: cannot be read: {exc.strerror or type(exc).__name__}"]) from None
    except UnicodeDecodeError as exc:
        # TOML is UTF-8 (TOML 1.0, "Spec"); tomllib raises this, not TOMLDecodeError, for other bytes.
        raise ConfigError([f"{path}: not UTF-8 (byte {exc.start}), which TOML requires"]) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([f"{path}: not valid TOML: {exc}"]) from None
    return config_from_dict(data, read_secrets=read_secrets)


def config_from_dict(data: dict[str, Any], *, read_secrets: bool = True) -> Config:
    """Validate an already parsed TOML document, the environment's FORWARDER_* variables over it;
    raises ConfigError listing every mistake."""
    overrides, problems = environment_overrides(os.environ)
    if problems:
        raise ConfigError(problems)
    try:
        config = Config.model_validate(_merged(data, overrides))
    except ValidationError as exc:
        raise ConfigError(
            [_named_by_variable(err, overrides, os.environ) + problem for err, problem in _errors(exc)]
        ) from None
    problems = _unique_problems(config) + _alert_problems(config)
    for i, dest in enumerate(config.destinations):
        problems += _destination_problems(i, dest, read_secrets, config.security.networks())
    for i, db in enumerate(config.databases):
        problems += [f"databases[{i}].log.{key}: {why}" for key, why in db.log.problems()]
        if read_secrets and db.connection is not None:
            try:
                db.connection.read_password()
            except ValueError as exc:
                field = "password_env" if db.connection.password_env is not None else "password_file"
                problems.append(f"databases[{i}].connection.{field}: {exc}")
    if read_secrets and config.ask.builtin is not None:
        try:
            config.ask.builtin.read_api_key()
        except ValueError as exc:
            field = "api_key_env" if config.ask.builtin.api_key_env is not None else "api_key_file"
            problems.append(f"ask.builtin.{field}: {exc}")
    if problems:
        raise ConfigError(problems)
    return config


def _problems(exc: ValidationError, prefix: tuple[int | str, ...] = ()) -> list[str]:
    return [problem for _, problem in _errors(exc, prefix)]


def _errors(exc: ValidationError, prefix: tuple[int | str, ...] = ()) -> list[tuple[Any, str]]:
    """Each error of `exc` with its text: `path: what is wrong`."""
    out = []
    for err in exc.errors(include_url=False, include_input=False):
        msg = err["msg"].removeprefix("Value error, ")
        out.append((err, f"{_loc_to_path((*prefix, *err['loc']))}: {msg}"))
    return out


def _named_by_variable(err: Any, overrides: dict[str, Any], environ: Mapping[str, str]) -> str:
    """`NAME: ` of the FORWARDER_* variable that gave the value an error is about ("" when the
    file gave it): a mistake in a variable is not one of the file's, where it cannot be found."""
    table: Any = overrides
    loc = [str(part).lower() for part in err["loc"]]
    for part in loc:
        if not isinstance(table, dict) or part not in table:
            return ""
        table = table[part]
    names = {name.lower(): name for name in environ}
    for end in range(len(loc), 0, -1):  # the variable of the longest path: a key's own, or its section's JSON
        if (name := names.get(ENV_PREFIX + ENV_NESTING.join(loc[:end]))) is not None:
            return f"{name}: "
    return ""


def _destination_problems(
    i: int,
    dest: DestinationConfig,
    read_secrets: bool,
    allowed: Sequence[ipaddress.IPv4Network | ipaddress.IPv6Network],
) -> list[str]:
    """Check a destination's `config` against its kind's model, where it connects as far as that
    is known without DNS (an http(s) URL; an address that is an IP literal must be public or in
    `allowed`), and that its secret can be read."""
    from forwarder.delivery.netguard import refused_before_lookup
    from forwarder.sinks import SINK_TYPES

    kind = SINK_TYPES[dest.type]
    problems: list[str] = []
    try:
        model = kind.config.model_validate(dest.config)
    except ValidationError as exc:
        problems += _problems(exc, ("destinations", i, "config"))
    else:
        address = kind.address(model)
        if address is not None:
            at = f"destinations[{i}].config.{address.field}"
            host, port = address.host or "", address.port or 0
            if address.url is not None:
                # Not parse_destination_url: a config file may keep user:password@ (masked where shown).
                parts = urllib.parse.urlsplit(address.url)
                if parts.scheme.lower() not in ("http", "https"):
                    problems.append(f"{at}: the URL scheme must be http or https")
                try:
                    port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
                except ValueError:
                    port = 0  # check_host says why
                host = parts.hostname or ""
            reason = refused_before_lookup(host, port, allowed)
            if reason is not None:
                problems.append(f"{at}: {reason} (allow its network in security.allowed_destination_networks)")
    if not read_secrets:
        return problems
    try:
        secret = dest.read_secret()
    except ValueError as exc:
        field = "secret_env" if dest.secret_env is not None else "secret_file"
        problems.append(f"destinations[{i}].{field}: {exc}")
    else:
        if secret is None and kind.secret_required:
            problems.append(f"destinations[{i}]: a {dest.type} destination needs secret_env or secret_file")
    return problems
