"""The syslog kind against a real rsyslogd: TLS (gtls), octet-counted RFC 5424, parsed by rsyslog.

rsyslog runs from a temporary directory on a free loopback port: no imuxsock or imklog, so the
system's /dev/log and /var/log are never touched. Every message it receives goes to a file as
rsyslog's own parse (`jsonmesg`, structured data unescaped by mmpstrucdata), and each is compared
with the line that was sent.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
import trustme

from forwarder.model import LogLine
from forwarder.sinks._encode import line_text
from forwarder.sinks.base import OutLine
from forwarder.sinks.syslog import header, structured_data, syslog_message
from tests.harness import free_port
from tests.linegen import AWKWARD, mixed_lines
from tests.unit.delivery.test_syslog_delivery import SERVER_CA, Env, start_env
from tests.unit.sinks.test_syslog import CLIENT_CA, CLIENT_CERT_PEM, CLIENT_KEY_PEM

RSYSLOGD = shutil.which("rsyslogd") or "/usr/sbin/rsyslogd"
MODULE_DIRS = [
    Path("/usr/lib/x86_64-linux-gnu/rsyslog"),
    Path("/usr/lib/aarch64-linux-gnu/rsyslog"),
    Path("/usr/lib/rsyslog"),
]
START_TIMEOUT = 10.0

# The receiving config documented in docs/destinations.md ("syslog"), with paths filled in.
CONFIG = """\
global(
  workDirectory="{work}"
  maxMessageSize="64k"
  defaultNetstreamDriver="gtls"
  defaultNetstreamDriverCAFile="{ca}"
  defaultNetstreamDriverCertFile="{cert}"
  defaultNetstreamDriverKeyFile="{key}"
  parser.escapeControlCharactersOnReceive="off"
)
module(load="imtcp" streamDriver.name="gtls" streamDriver.mode="1" streamDriver.authMode="{auth_mode}")
module(load="mmpstrucdata")
template(name="json" type="string" string="%jsonmesg%\\n")
ruleset(name="fromForwarder" parser="rsyslog.rfc5424") {{
  action(type="mmpstrucdata")
  action(type="omfile" file="{out}" template="json")
}}
input(type="imtcp" address="127.0.0.1" port="{port}" ruleset="fromForwarder" supportOctetCountedFraming="on")
"""


def missing() -> str | None:
    if not Path(RSYSLOGD).is_file():
        return "rsyslogd is not installed (scripts/install-test-deps.sh installs rsyslog and rsyslog-gnutls)"
    if not any((d / "lmnsd_gtls.so").is_file() for d in MODULE_DIRS):
        return "rsyslog's gtls module is not installed (package rsyslog-gnutls)"
    return None


@dataclass
class Rsyslog:
    """A running rsyslogd and the file its parsed messages go to."""

    port: int
    out: Path
    log: Path
    proc: subprocess.Popen[bytes]

    def records(self) -> list[dict[str, Any]]:
        if not self.out.exists():
            return []
        complete = self.out.read_bytes().split(b"\n")[:-1]  # the last line may be half written
        return [orjson.loads(line) for line in complete]

    async def wait_for(self, n: int, timeout: float = 20.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while len(records := self.records()) < n:
            if time.monotonic() > deadline:
                raise AssertionError(f"rsyslog wrote {len(records)} of {n} messages; its log:\n{self.log.read_text()}")
            await asyncio.sleep(0.05)
        return records


def start_rsyslog(tmp: Path, auth_mode: str = "anon", client_ca: trustme.CA | None = None) -> Rsyslog:
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "work").mkdir(exist_ok=True)
    server = SERVER_CA.issue_cert("syslog.test")
    server.cert_chain_pems[0].write_to_path(tmp / "server.pem")
    server.private_key_pem.write_to_path(tmp / "server.key")
    # The CA file is what rsyslog verifies senders with (x509 modes).
    (tmp / "ca.pem").write_bytes(SERVER_CA.cert_pem.bytes() + (client_ca.cert_pem.bytes() if client_ca else b""))
    port = free_port()
    out, log = tmp / "received.jsonl", tmp / "rsyslogd.log"
    conf = tmp / "rsyslog.conf"
    conf.write_text(
        CONFIG.format(
            work=tmp / "work",
            ca=tmp / "ca.pem",
            cert=tmp / "server.pem",
            key=tmp / "server.key",
            auth_mode=auth_mode,
            out=out,
            port=port,
        )
    )
    with log.open("wb") as log_file:
        proc = subprocess.Popen(
            [RSYSLOGD, "-n", "-f", str(conf), "-i", str(tmp / "rsyslogd.pid")],
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + START_TIMEOUT
    while True:  # listening once a TCP connect succeeds
        if proc.poll() is not None:
            raise AssertionError(f"rsyslogd exited with {proc.returncode}:\n{log.read_text()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                raise AssertionError(
                    f"rsyslogd did not listen within {START_TIMEOUT:g} s:\n{log.read_text()}"
                ) from None
            time.sleep(0.02)
    return Rsyslog(port, out, log, proc)


def stop(r: Rsyslog) -> None:
    r.proc.terminate()
    try:
        r.proc.wait(10)
    except subprocess.TimeoutExpired:
        r.proc.kill()
        r.proc.wait()


@pytest.fixture
def rsyslog_available() -> None:
    reason = missing()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"{reason} (CI must run these tests)")
        pytest.skip(reason)


@pytest.fixture
def rsyslog(rsyslog_available: None, tmp_path: Path) -> Iterator[Rsyslog]:
    r = start_rsyslog(tmp_path / "rsyslog")
    yield r
    stop(r)


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    e = await start_env(tmp_path / "daemon")
    yield e
    await e.session.close()
    await e.daemon.aclose()


# local0 (16 * 8) + the severity of docs/destinations.md's table, written out independently here.
PRI = {"PANIC": 130, "FATAL": 130, "ERROR": 131, "WARNING": 132, "NOTICE": 133, "LOG": 134, "INFO": 134, "DEBUG": 135}


def expected_record(line_id: int, doc: bytes, max_bytes: int = 8192) -> dict[str, Any]:
    """What rsyslog should have parsed out of the message for one stored line."""
    fields = orjson.loads(doc)
    message = syslog_message(OutLine(line_id, doc), max_bytes)
    msg = message[len(header(fields).encode()) + 1 :].decode()
    assert msg == line_text(fields) or (msg.endswith("...") and line_text(fields).startswith(msg[:-3]))
    sd = {"database": fields["database_name"], "kind": fields["kind"]}
    if fields["sqlstate"]:
        sd["sqlstate"] = fields["sqlstate"]
    # The second element: the fields neither the header nor the text carry, JSON-spelled.
    spelled = {True: "true", False: "false"}
    line_sd = {
        k: spelled.get(v, str(v)) if isinstance(v, bool) else str(v)
        for k in ("id", "database_id", "user", "database", "application", "client", "duration_ms", "redacted")
        if (v := fields[k]) is not None
    }
    return {
        "pri": str(PRI[fields["severity"]]),
        "syslogfacility": "16",
        "timereported": fields["time"],
        "hostname": fields["host"],
        "app-name": "postgresql",
        "procid": str(fields["pid"]) if fields["pid"] is not None else "-",
        "msgid": fields["kind"],
        "structured-data": structured_data(fields),
        "sd": {"service@32473": sd, "line@32473": line_sd},
        "msg": msg,
    }


def as_received(record: dict[str, Any]) -> dict[str, Any]:
    keys = (
        "pri",
        "syslogfacility",
        "timereported",
        "hostname",
        "app-name",
        "procid",
        "msgid",
        "structured-data",
        "msg",
    )
    out = {k: record[k] for k in keys}
    out["sd"] = record["$!"]["rfc5424-sd"]
    return out


async def test_rsyslog_parses_every_line_as_sent_and_refuses_a_wrong_name(env: Env, rsyslog: Rsyslog) -> None:
    # The host name the certificate is not for resolves to the same rsyslog: no message may arrive from it.
    wrong = await env.create(rsyslog.port, host="other.test")
    good = await env.create(rsyslog.port)
    awkward = LogLine(
        time_us=1_700_000_100_000_000,
        severity="ERROR",
        kind="error",
        message=" ".join(AWKWARD) + ' [x="y\\"] ]',
        sqlstate="XX000",
        detail="日本語 " * 4000,  # longer than 8192 bytes: cut, never inside a character
        pid=None,
    )
    lines = [*mixed_lines(1000), awkward]
    await env.add(lines)
    records = await rsyslog.wait_for(len(lines))
    await env.until_sent(good["id"], len(lines))
    docs = await env.daemon.store.docs_by_ids(list(range(1, len(lines) + 1)))
    expected = [expected_record(i, docs[i]) for i in range(1, len(lines) + 1)]
    received = [as_received(r) for r in records]
    for got, want in zip(received, expected, strict=True):  # rsyslog keeps the order of one connection
        assert got == want
    last = received[-1]
    assert 8192 - 4 < len(records[-1]["rawmsg"].encode()) <= 8192 and last["msg"].endswith("...")
    assert last["sd"]["service@32473"]["database"] == 'shop "eu" \\ [x] ü'
    assert [r["syslogseverity"] for r in records[:8]] == [str(int(r["pri"]) - 128) for r in records[:8]]

    assert await env.until_sleeping(wrong["id"], 1) > 0
    d = await env.delivery(wrong["id"])
    assert d["sent_lines"] == 0 and d["in_flight_lines"] > 0
    assert d["last_error"] == "TLS certificate refused: Hostname mismatch, certificate is not valid for 'other.test'"
    await asyncio.sleep(0.2)
    assert len(rsyslog.records()) == len(lines)  # nothing from the refused destination


async def test_rsyslog_authenticates_the_client_certificate(env: Env, rsyslog_available: None, tmp_path: Path) -> None:
    r = start_rsyslog(tmp_path / "rsyslog-x509", auth_mode="x509/certvalid", client_ca=CLIENT_CA)
    try:
        anonymous = await env.create(r.port)
        authenticated = await env.create(r.port, secret=CLIENT_KEY_PEM, client_certificate_pem=CLIENT_CERT_PEM)
        await env.add(mixed_lines(50))
        await r.wait_for(50)
        await env.until_sent(authenticated["id"], 50)
        # TLS 1.3: rsyslog refuses the certificate-less sender after its handshake; nothing counts as sent.
        assert await env.until_sleeping(anonymous["id"], 1) > 0
        d = await env.delivery(anonymous["id"])
        assert d["sent_lines"] == 0, d
        assert d["last_error"].startswith("TLS failed: ") or "right after the TLS handshake" in d["last_error"], d
        await asyncio.sleep(0.2)
        assert len(r.records()) == 50
    finally:
        stop(r)
