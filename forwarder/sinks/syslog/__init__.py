"""Syslog: RFC 5424 messages over TLS (RFC 5425), or over plain TCP to a local relay (RFC 6587).

Each line is one SYSLOG-MSG (RFC 5424 section 6), framed by octet counting (RFC 5425 section 4.3):

    MSG-LEN SP <PRI>1 TIMESTAMP HOSTNAME postgresql PROCID MSGID
               [service@32473 database="..." kind="..." sqlstate="..."][line@32473 id="..." ...] MSG

facility local0, severity from PostgreSQL's; MSGID is the line's kind; MSG the line as text (or its
SPEC 2.1 JSON). A batch is one write on a connection kept open between batches; syslog has no
answer, so it counts as delivered once written, drained and acknowledged by the receiver's TCP. A
broken connection fails the batch, which is then sent again whole on a new connection: the receiver
may get some lines twice. Shapes, cuts and the reasons for each choice: docs/destinations.md ("syslog").

A folder of three, in the sink order: `config` (Config), `message` (encode, pure), `sink` (send and
classify).
"""

from forwarder.sinks.syslog.config import SyslogConfig
from forwarder.sinks.syslog.message import (
    frame,
    header,
    header_field,
    json_message,
    priority,
    sd_value,
    structured_data,
    syslog_message,
    timestamp,
)
from forwarder.sinks.syslog.sink import HandshakeRefused, SetupError, SyslogSink, classify_error, tls_context

__all__ = [
    "HandshakeRefused",
    "SetupError",
    "SyslogConfig",
    "SyslogSink",
    "classify_error",
    "frame",
    "header",
    "header_field",
    "json_message",
    "priority",
    "sd_value",
    "structured_data",
    "syslog_message",
    "timestamp",
    "tls_context",
]
