"""A Kafka connection's SASL authentication gate (docs/protocol.md §18.2, §18.4).

``SaslGate`` sees each request of a connection on a SASL listener until it
has authenticated: ApiVersions passes to the service, SaslHandshake picks the
mechanism, SaslAuthenticate carries the tokens to the sans-I/O mechanism of
``trikafka.kafka.sasl`` (each step in a worker thread: PBKDF2 and HMAC work
stays off the event loop).  Anything else, or a request out of order, raises
``SaslRefused``: the connection closes.  A failed authentication is answered
``SASL_AUTHENTICATION_FAILED`` after the failed-authentication delay, then
the connection closes.  Once authenticated, SaslHandshake and
SaslAuthenticate close the connection too.

On a listener without SASL the two apis answer ``ILLEGAL_SASL_STATE``
(``sasl_not_enabled``, the service's handler for both).
"""

from __future__ import annotations

import datetime
import logging
from typing import Any

import trio
from kio.schema.errors import ErrorCode

from trikafka.kafka.apis import KafkaApi
from trikafka.kafka.framing import Request, encode_response
from trikafka.kafka.sasl import SaslFailed, SaslMechanism, SaslServer, enabled_mechanisms, sasl_server
from trikafka.wire.responses import Chunk

from ..credentials import Credentials
from .entities import Reply

logger = logging.getLogger(__name__)

SASL_APIS = frozenset({KafkaApi.SASL_HANDSHAKE, KafkaApi.SASL_AUTHENTICATE})
NO_SESSION_LIFETIME = datetime.timedelta(0)  # §18.2: the broker never asks for re-authentication (KIP-368 not served)


class SaslRefused(Exception):
    """The connection must close: a request out of order, or a failed authentication (already answered)."""


def sasl_not_enabled(service: Any, request: Request) -> Any:  # Any: the service; this api's response entity
    """SaslHandshake or SaslAuthenticate on a listener without SASL: ``ILLEGAL_SASL_STATE`` (§18.2)."""
    reply = Reply(request.api_key, request.api_version)
    if request.api is KafkaApi.SASL_HANDSHAKE:
        return reply.response(error_code=ErrorCode.illegal_sasl_state, mechanisms=())
    return reply.response(error_code=ErrorCode.illegal_sasl_state, error_message="SASL is not enabled on this "
                          "listener", auth_bytes=b"", session_lifetime=NO_SESSION_LIFETIME)


class SaslGate:
    """One connection's authentication state; see the module docstring."""

    def __init__(self, credentials: Credentials, *, failed_delay_s: float, handshake_timeout_s: float,
                 max_request_bytes: int):
        self._credentials = credentials
        self._failed_delay_s = failed_delay_s
        self.handshake_timeout_s = handshake_timeout_s  # from accept to authenticated (§18.4)
        self.max_request_bytes = max_request_bytes  # a frame before authentication (§18.4)
        self._mechanism: SaslMechanism | None = None
        self._server: SaslServer | None = None
        self.user: str | None = None  # set once authenticated

    @property
    def authenticated(self) -> bool:
        return self.user is not None

    async def answer(self, request: Request) -> list[Chunk] | None:
        """The answer to a request the gate handles; None: the service answers it (ApiVersions).

        Raises ``SaslRefused`` to close the connection; its subclass
        ``SaslFailedAnswer`` carries the answer to send before closing.
        """
        api = request.api
        if self.authenticated:
            raise SaslRefused(f"{api.label} after authentication")
        if api is KafkaApi.API_VERSIONS:
            return None
        if api is KafkaApi.SASL_HANDSHAKE:
            return [self._handshake(request)]
        if api is KafkaApi.SASL_AUTHENTICATE:
            return [await self._authenticate(request)]
        raise SaslRefused(f"{api.label} before authentication")

    def _handshake(self, request: Request) -> bytes:
        if self._server is not None:
            raise SaslRefused("a second SaslHandshake")
        body: Any = request.body  # Any: SaslHandshakeRequest of the request's version
        name = str(body.mechanism)
        reply = Reply(request.api_key, request.api_version)
        try:
            mechanism = SaslMechanism.parse(name)
        except ValueError:
            body = reply.response(error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=enabled_mechanisms())
            return encode_response(request, body)
        self._mechanism = mechanism
        self._server = sasl_server(mechanism, self._credentials.lookup)
        return encode_response(request, reply.response(error_code=ErrorCode.none, mechanisms=enabled_mechanisms()))

    async def _authenticate(self, request: Request) -> bytes:
        server = self._server
        if server is None:
            raise SaslRefused("SaslAuthenticate before SaslHandshake")
        body: Any = request.body  # Any: SaslAuthenticateRequest of the request's version
        token = bytes(body.auth_bytes)
        reply = Reply(request.api_key, request.api_version)
        await self._credentials.refresh()
        try:
            answer = await trio.to_thread.run_sync(server.step, token)
        except SaslFailed as exc:
            await trio.sleep(self._failed_delay_s)
            body = reply.response(error_code=ErrorCode.sasl_authentication_failed, error_message=str(exc),
                                  auth_bytes=b"", session_lifetime=NO_SESSION_LIFETIME)
            raise SaslFailedAnswer(str(exc), encode_response(request, body)) from None
        self.user = server.user
        return encode_response(request, reply.response(error_code=ErrorCode.none, error_message=None,
                                                       auth_bytes=answer, session_lifetime=NO_SESSION_LIFETIME))


class SaslFailedAnswer(SaslRefused):
    """A failed authentication: ``answer`` (``SASL_AUTHENTICATION_FAILED``) goes out, then the connection closes."""

    def __init__(self, reason: str, answer: bytes):
        super().__init__(f"authentication failed: {reason}")
        self.answer = answer
