"""Security protocols and TLS for the broker's listeners (docs/protocol.md §18.1).

``SecurityProtocol`` is the one table of the listeners' security protocols:
whether each speaks TLS, whether SASL.  ``TlsContexts`` reads the broker's
certificate, key and CA files once, at start, into the ``ssl.SSLContext`` the
listeners serve with and the one followers connect to their leaders with; a
bad file is a ``TlsSettingError`` naming the setting and the file.
``TlsAcceptance`` performs a connection's server handshake, bounded in time,
and names the principal of a client certificate.
"""

from __future__ import annotations

import enum
import logging
import ssl
from dataclasses import dataclass
from typing import Awaitable, Callable, Protocol

import trio

from .kafka.connection import CLIENT_PRINCIPAL

logger = logging.getLogger(__name__)

MINIMUM_TLS_VERSION = ssl.TLSVersion.TLSv1_2  # §18.1


class SecurityProtocol(enum.Enum):
    """A listener's security protocol (docs/protocol.md §18): (speaks TLS, authenticates with SASL)."""

    PLAINTEXT = (False, False)
    SSL = (True, False)
    SASL_PLAINTEXT = (False, True)
    SASL_SSL = (True, True)

    @property
    def tls(self) -> bool:
        """Whether the listener's connections are TLS."""
        return self.value[0]

    @property
    def sasl(self) -> bool:
        """Whether the listener's clients authenticate with SASL before any other request."""
        return self.value[1]

    @classmethod
    def parse(cls, text: str) -> SecurityProtocol:
        """The protocol named ``text`` (case-insensitive); ValueError with a one-line message."""
        try:
            return cls[text.strip().upper()]
        except KeyError:
            names = ", ".join(member.name for member in cls)
            raise ValueError(f"unknown security protocol {text!r} (one of {names})") from None


# --------------------------------------------------------------------------- contexts


class TlsSettingError(ValueError):
    """A TLS setting names a missing, unreadable or unusable file; the message names both (one line)."""


class TlsSettings(Protocol):
    """The settings TLS reads (``BrokerConfig``'s fields of the same names, §18.1)."""

    @property
    def serves_kafka(self) -> bool: ...
    @property
    def kafka_security_protocol(self) -> str: ...
    @property
    def port_security_protocol(self) -> str: ...
    @property
    def metrics_security_protocol(self) -> str: ...
    @property
    def metrics_port(self) -> int | None: ...
    @property
    def ssl_certificate_location(self) -> str | None: ...
    @property
    def ssl_key_location(self) -> str | None: ...
    @property
    def ssl_key_password(self) -> str | None: ...
    @property
    def ssl_client_ca_location(self) -> str | None: ...
    @property
    def ssl_ca_location(self) -> str | None: ...


class _KeyNeedsPassword(Exception):
    """Raised by the password callback: the PEM key is encrypted and no password was given."""


@dataclass(frozen=True)
class TlsContexts:
    """The broker's TLS contexts; None where nothing uses TLS."""

    server: ssl.SSLContext | None  # the TLS listeners' (either listener with a TLS protocol)
    broker_client: ssl.SSLContext | None  # a follower's, to its leader's 0.7 port (port.security.protocol SSL)

    @classmethod
    def load(cls, config: TlsSettings) -> TlsContexts:
        """Read the files ``config`` names (blocking: a worker thread's job, or before the loop runs).

        Raises ``TlsSettingError`` naming the setting and the file when one is missing, unreadable,
        not PEM, or the key does not match the certificate (§18.1)."""
        kafka_tls = config.serves_kafka and SecurityProtocol.parse(config.kafka_security_protocol).tls
        port_tls = SecurityProtocol.parse(config.port_security_protocol).tls
        metrics_tls = config.metrics_port is not None and SecurityProtocol.parse(config.metrics_security_protocol).tls
        if not (kafka_tls or port_tls or metrics_tls):
            return cls(server=None, broker_client=None)
        server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server.minimum_version = MINIMUM_TLS_VERSION
        server.options |= ssl.OP_NO_RENEGOTIATION  # a peer cannot make the broker redo handshakes (TLS 1.2)
        _load_own_certificate(server, config)
        if config.ssl_client_ca_location:
            _load_ca(server, "ssl.client.ca.location", config.ssl_client_ca_location)
            server.verify_mode = ssl.CERT_REQUIRED
        return cls(server=server, broker_client=broker_client_context(config) if port_tls else None)

    def open_to_broker(self, open_stream: Callable[[str, int], Awaitable[trio.abc.Stream]]
                       ) -> Callable[[str, int], Awaitable[trio.abc.Stream]]:
        """``open_stream`` for followers: TLS over ``open_stream`` when the 0.7 port speaks it."""
        context = self.broker_client
        if context is None:
            return open_stream

        async def open_tls(host: str, port: int) -> trio.abc.Stream:
            return await client_handshake(await open_stream(host, port), context, host, port)

        return open_tls


def broker_client_context(config: TlsSettings) -> ssl.SSLContext:
    """The context a broker connects to another broker with (replica fetches, §18.1; its own calls,
    §18.5): it verifies the peer's certificate against ``ssl.ca.location`` (default: the system's)
    and host name, and presents the broker's own certificate when asked (blocking: reads PEM files)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies the peer and its host name
    context.minimum_version = MINIMUM_TLS_VERSION
    if config.ssl_ca_location:
        _load_ca(context, "ssl.ca.location", config.ssl_ca_location)
    else:
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    _load_own_certificate(context, config)
    return context


async def client_handshake(stream: trio.abc.Stream, context: ssl.SSLContext, host: str,
                           port: int) -> trio.SSLStream[trio.abc.Stream]:
    """``stream`` under TLS as the client of another broker at ``host``; a failed handshake closes it and
    raises ``trio.BrokenResourceError`` naming OpenSSL's reason (an untrusted certificate, the peer's alert)."""
    tls = trio.SSLStream(stream, context, server_hostname=host)
    try:
        await tls.do_handshake()
    except trio.BrokenResourceError as exc:
        await trio.aclose_forcefully(tls)
        raise trio.BrokenResourceError(f"TLS handshake with {host}:{port} failed: {exc.__cause__}") from exc
    except BaseException:
        await trio.aclose_forcefully(tls)
        raise
    return tls


def check_files(config: TlsSettings) -> None:
    """Raise ``TlsSettingError`` (one line) if a TLS file ``config`` needs is bad; ``trikafka serve`` checks
    before it starts."""
    TlsContexts.load(config)


def _readable(setting: str, path: str) -> None:
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise TlsSettingError(f"{setting} {path}: {exc.strerror or exc}") from None


def _load_ca(context: ssl.SSLContext, setting: str, path: str) -> None:
    _readable(setting, path)
    try:
        context.load_verify_locations(cafile=path)
    except ssl.SSLError as exc:
        raise TlsSettingError(f"{setting} {path}: no PEM CA certificate in it ({exc.reason or exc})") from None


def _load_own_certificate(context: ssl.SSLContext, config: TlsSettings) -> None:
    cert, key = config.ssl_certificate_location, config.ssl_key_location
    if not cert or not key:
        raise TlsSettingError("TLS needs ssl.certificate.location (--tls-cert) and ssl.key.location (--tls-key)")
    _readable("ssl.certificate.location", cert)
    _readable("ssl.key.location", key)
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cafile=cert)
    except ssl.SSLError as exc:
        raise TlsSettingError(f"ssl.certificate.location {cert}: no PEM certificate in it ({exc.reason or exc})") from None

    def password() -> str:
        if config.ssl_key_password is None:
            raise _KeyNeedsPassword
        return config.ssl_key_password

    try:
        context.load_cert_chain(cert, key, password=password)
    except _KeyNeedsPassword:
        raise TlsSettingError(f"ssl.key.location {key} is encrypted: give ssl.key.password") from None
    except ssl.SSLError as exc:
        if "KEY_VALUES_MISMATCH" in str(exc):
            raise TlsSettingError(f"ssl.key.location {key} does not match ssl.certificate.location {cert}") from None
        raise TlsSettingError(f"ssl.key.location {key}: not a PEM private key, or a wrong ssl.key.password "
                          f"({exc.reason or exc})") from None


# --------------------------------------------------------------------------- the handshake


class TlsAcceptance:
    """A TLS listener's server side of each new connection: handshake within ``handshake_timeout_s``."""

    def __init__(self, context: ssl.SSLContext, handshake_timeout_s: float):
        self.context = context
        self.handshake_timeout_s = handshake_timeout_s
        self.handshakes_failed = 0

    async def secure(self, stream: trio.abc.Stream, peer: str) -> trio.SSLStream[trio.abc.Stream] | None:
        """The TLS stream over ``stream`` once its handshake is done, or None (closed, logged in one
        line) when the handshake fails or takes too long.  Sets the connection task's
        ``CLIENT_PRINCIPAL`` from a client certificate (§18.1)."""
        tls = trio.SSLStream(stream, self.context, server_side=True)
        reason = None
        with trio.move_on_after(self.handshake_timeout_s) as scope:
            try:
                await tls.do_handshake()
            except Exception as exc:  # whatever a peer makes the handshake raise costs that peer only
                cause = exc.__cause__ if exc.__cause__ is not None else exc
                reason = (f"{cause.reason or cause}" if isinstance(cause, ssl.SSLError)
                          else f"{cause!r}")
        if scope.cancelled_caught:
            reason = f"not finished within {self.handshake_timeout_s:g} s"
        if reason is not None:
            self.handshakes_failed += 1
            logger.info("TLS handshake with %s failed: %s", peer, reason)
            if not scope.cancelled_caught:
                await _send_alert(tls)
            await trio.aclose_forcefully(tls)
            return None
        certificate = tls.getpeercert()
        if certificate:
            CLIENT_PRINCIPAL.set(certificate_principal(certificate))
        return tls


ALERT_SEND_TIMEOUT_S = 1.0  # a peer that reads nothing does not hold the connection for its alert


async def _send_alert(tls: trio.SSLStream[trio.abc.Stream]) -> None:
    """Send what OpenSSL wrote after the handshake failed: the TLS alert naming why (certificate
    required, expired, unknown CA), which the client's library then reports to its user.  Trio marks
    the stream broken without flushing its outgoing buffer, so this reads that buffer (a private
    attribute, hence the getattr); best effort, bounded in time."""
    outgoing = getattr(tls, "_outgoing", None)
    if not isinstance(outgoing, ssl.MemoryBIO) or not outgoing.pending:
        return
    with trio.move_on_after(ALERT_SEND_TIMEOUT_S):
        try:
            await tls.transport_stream.send_all(outgoing.read())
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass


# Attribute types by their RFC 2253 keyword; any other keeps OpenSSL's long name (§18.1).
_RFC2253_KEYWORDS = {
    "commonName": "CN", "localityName": "L", "stateOrProvinceName": "ST", "organizationName": "O",
    "organizationalUnitName": "OU", "countryName": "C", "streetAddress": "STREET", "domainComponent": "DC",
    "userId": "UID",
}
_RFC2253_SPECIAL = frozenset(',+"\\<>;')

# ``SSLSocket.getpeercert()``'s dict, whose values are nested tuples of several shapes.
PeerCertificate = dict[str, object]


def certificate_principal(certificate: PeerCertificate) -> str:
    """``User:`` + the subject of a verified peer certificate in RFC 2253 form (§18.1)."""
    subject = certificate.get("subject", ())
    assert isinstance(subject, tuple)
    rdns = ["+".join(f"{_RFC2253_KEYWORDS.get(kind, kind)}={_escape_dn_value(value)}" for kind, value in rdn)
            for rdn in reversed(subject)]
    return "User:" + ",".join(rdns)


def _escape_dn_value(value: str) -> str:
    escaped = "".join(f"\\{ch}" if ch in _RFC2253_SPECIAL else ch for ch in value)
    if escaped[:1] in ("#", " "):
        escaped = "\\" + escaped
    if escaped.endswith(" ") and not escaped.endswith("\\ "):
        escaped = escaped[:-1] + "\\ "
    return escaped
