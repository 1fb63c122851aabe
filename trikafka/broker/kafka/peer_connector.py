"""How this broker connects to another broker's Kafka listener for its own calls (docs/protocol.md §18.5).

``PeerConnector.from_config`` reads, once, what the Kafka listener's security
protocol asks of a caller: a TLS client context (``ssl.ca.location``, the
broker's own certificate for mutual TLS) and the inter-broker SASL login
(``sasl.mechanism.inter.broker.protocol``, ``sasl.inter.broker.username``,
the password from ``sasl.inter.broker.password.file`` or the environment).
``connect`` opens TCP (or whatever stream its ``open_stream`` opens: the
in-memory network of ``trikafka.testing``), then TLS, then logs in
(SaslHandshake, SaslAuthenticate) before ``peer_call`` sends its request.
"""

from __future__ import annotations

import ssl
from typing import Any, Awaitable, Callable, Mapping

import trio
from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from trikafka.kafka.apis import KafkaApi
from trikafka.kafka.sasl import SaslFailed, SaslMechanism
from trikafka.kafka.sasl_client import SaslLogin, sasl_client
from trikafka.util.settings import read_secret
from trikafka.wire.metadata import BrokerAddress

from ..config import INTER_BROKER_PASSWORD_VARIABLE, BrokerConfig
from ..security import broker_client_context, client_handshake
from .peer_call import PeerCallError, PeerStream

SASL_HANDSHAKE_VERSION = 1  # the versions every client of §18.2 sends
SASL_AUTHENTICATE_VERSION = 2


class PeerSettingError(ValueError):
    """The inter-broker login cannot be made from the settings; the message names the setting (one line)."""


def inter_broker_login(config: BrokerConfig, environ: Mapping[str, str] | None = None) -> SaslLogin | None:
    """The SASL login of this broker's calls to others (§18.5), None when there is no Kafka listener, it has
    no SASL, or no ``sasl.inter.broker.username`` is set.  Blocking: reads the password file (``environ``: where
    ``TRIKAFKA_INTER_BROKER_SASL_PASSWORD`` is looked up, default ``os.environ``)."""
    username = config.sasl_inter_broker_username
    if not (config.serves_kafka and config.kafka_security.sasl and username):
        return None
    path = config.sasl_inter_broker_password_file
    try:
        password = read_secret(path, INTER_BROKER_PASSWORD_VARIABLE, environ)
    except OSError as exc:
        raise PeerSettingError(f"sasl.inter.broker.password.file {path}: {exc.strerror or exc}") from None
    if not password:
        where = (f"sasl.inter.broker.password.file {path} is empty" if path else
                 f"give sasl.inter.broker.password.file (--inter-broker-sasl-password-file) or "
                 f"${INTER_BROKER_PASSWORD_VARIABLE}")
        raise PeerSettingError(f"sasl.inter.broker.username {username} needs a password: {where}")
    return SaslLogin(SaslMechanism.parse(config.sasl_mechanism_inter_broker_protocol), username, password)


class PeerConnector:
    """Opens an authenticated connection to another broker's Kafka listener; see the module docstring.

    ``tls``: speak TLS with this client context (None: plaintext); ``login``: log in with SASL (None: not);
    ``open_stream(host, port)``: how the connection is opened (default TCP).
    """

    def __init__(self, *, tls: ssl.SSLContext | None = None, login: SaslLogin | None = None,
                 open_stream: Callable[[str, int], Awaitable[trio.abc.Stream]] = trio.open_tcp_stream):
        self.tls = tls
        self.login = login
        self.open_stream = open_stream

    @classmethod
    def from_config(cls, config: BrokerConfig,
                    open_stream: Callable[[str, int], Awaitable[trio.abc.Stream]] = trio.open_tcp_stream,
                    ) -> PeerConnector:
        """What the Kafka listener's security protocol asks of a caller (blocking: reads PEM and password
        files).  Raises ``PeerSettingError`` or ``security.TlsSettingError`` (one line)."""
        tls = broker_client_context(config) if config.kafka_security.tls else None
        return cls(tls=tls, login=inter_broker_login(config), open_stream=open_stream)

    async def connect(self, address: BrokerAddress) -> PeerStream:
        """A connection to ``address``'s Kafka listener, ready for a request.  Raises ``PeerCallError`` (a
        refused login), ``OSError`` or ``trio.BrokenResourceError`` (no connection, a failed handshake)."""
        stream: trio.abc.Stream = await self.open_stream(address.host, address.port)
        if self.tls is not None:
            stream = await client_handshake(stream, self.tls, address.host, address.port)
        peer = PeerStream(stream, address)
        if self.login is not None:
            try:
                await self._log_in(peer, self.login)
            except BaseException:
                await peer.aclose()
                raise
        return peer

    async def _log_in(self, peer: PeerStream, login: SaslLogin) -> None:
        mechanism = login.mechanism.value
        handshake: Any = await peer.request(  # Any: kio's response class of this version
            KafkaApi.SASL_HANDSHAKE, SASL_HANDSHAKE_VERSION, SaslHandshakeRequest(mechanism=mechanism))
        if handshake.error_code != ErrorCode.none:
            raise PeerCallError(f"SaslHandshake {mechanism} refused: {ErrorCode(handshake.error_code).name} "
                                f"(the peer enables {', '.join(map(str, handshake.mechanisms)) or 'none'})")
        exchange = sasl_client(login)
        token: bytes | None = exchange.first()
        try:
            while token is not None:
                answer: Any = await peer.request(  # Any: kio's response class of this version
                    KafkaApi.SASL_AUTHENTICATE, SASL_AUTHENTICATE_VERSION, SaslAuthenticateRequest(auth_bytes=token))
                if answer.error_code != ErrorCode.none:
                    raise PeerCallError(f"SASL {mechanism} login as {login.username} refused: "
                                        f"{answer.error_message or ErrorCode(answer.error_code).name}")
                token = await trio.to_thread.run_sync(exchange.step, bytes(answer.auth_bytes))  # PBKDF2 work
        except SaslFailed as exc:
            raise PeerCallError(f"SASL {mechanism} login as {login.username}: {exc}") from None
