"""The `config` of a syslog destination and the limits it works within."""

from __future__ import annotations

from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, field_validator, model_validator

DEFAULT_PORT: Final = 6514  # RFC 5425 section 4.1: the port assigned to syslog over TLS
# RFC 5425 section 4.3.1: receivers MUST support messages of 2048 octets and SHOULD support 8192.
MIN_MESSAGE_BYTES: Final = 2048
DEFAULT_MESSAGE_BYTES: Final = 8192
MAX_MESSAGE_BYTES: Final = 1024 * 1024  # for relays configured for large messages (rsyslog maxMessageSize)
MAX_LINES: Final = 500
BATCH_BYTES: Final = 1024 * 1024  # of stored documents; one batch is one write
TIMEOUT_SECONDS: Final = 15.0  # connect, TLS handshake, write and drain of one batch
MAX_PEM_CHARS: Final = 100_000
# How long a new TLS connection waits before its first write (see SyslogSink._connection).
HANDSHAKE_GRACE: Final = (0.1, 1.0)


def _certificates(value: str | None) -> str | None:
    if value is None:
        return None
    if "PRIVATE KEY" in value:
        # The config is shown by the API; a key pasted here would be shown with it.
        raise ValueError("holds a private key: give the private key in the destination's `secret`, not in `config`")
    # Imported here: cryptography's x509 (~29 ms) is needed only by a config that has certificates.
    from cryptography import x509

    try:
        x509.load_pem_x509_certificates(value.encode())
    except ValueError:
        raise ValueError("must be one or more PEM certificates (-----BEGIN CERTIFICATE-----)") from None
    return value


class SyslogConfig(BaseModel):
    """`config` of a syslog destination."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    host: str = Field(
        min_length=1,
        max_length=253,
        description="The receiver's host name (the TLS certificate must be valid for it) or IP address.",
    )
    port: StrictInt = Field(
        DEFAULT_PORT, ge=1, le=65535, description="The receiver's TCP port; 6514 is syslog over TLS (RFC 5425)."
    )
    tls: StrictBool = Field(
        True,
        description="Speak TLS (RFC 5425). false sends in clear text over TCP with the same framing (RFC 6587): "
        "only for a relay on the operator's own network, so only the config file's [[destinations]] may set it "
        "(the API refuses it).",
    )
    ca_certificate_pem: str | None = Field(
        None,
        min_length=1,
        max_length=MAX_PEM_CHARS,
        description="Extra CA certificate(s), PEM, trusted besides the system's for the receiver's certificate.",
    )
    client_certificate_pem: str | None = Field(
        None,
        min_length=1,
        max_length=MAX_PEM_CHARS,
        description="Client certificate (and chain), PEM, for receivers that authenticate senders; its private "
        "key (PEM, unencrypted) is the destination's `secret`.",
    )
    max_message_bytes: StrictInt = Field(
        DEFAULT_MESSAGE_BYTES,
        ge=MIN_MESSAGE_BYTES,
        le=MAX_MESSAGE_BYTES,
        description="Largest SYSLOG-MSG in bytes (frame length not counted); longer messages are cut. "
        "8192 is what RFC 5425 says receivers should accept; raise it only with the receiver's limit.",
    )
    message_format: Literal["text", "json"] = Field(
        "text",
        description="MSG is the line as text (like PostgreSQL's log) or its JSON document (every field of the line).",
    )

    @field_validator("ca_certificate_pem", "client_certificate_pem")
    @classmethod
    def _pem_certificates(cls, value: str | None) -> str | None:
        return _certificates(value)

    @model_validator(mode="after")
    def _tls_settings_need_tls(self) -> SyslogConfig:
        if not self.tls and (self.ca_certificate_pem or self.client_certificate_pem):
            raise ValueError("ca_certificate_pem and client_certificate_pem need tls: true")
        return self
