"""One Trio connection to a broker speaking the Apache Kafka protocol (docs/protocol.md §16.2).

Kafka matches a response to its request by ``correlation_id`` and answers in
request order, so requests are pipelined: a caller sends under the send lock
(which also queues what it waits for, keeping queue and wire in one order),
then waits for its answer.  Whoever holds the receive lock reads frames and
hands each to the oldest waiting request; a caller whose answer another
reader already took returns it without reading.  Produce with ``acks`` 0 is
never answered and queues nothing.

``open_kafka_connection`` also negotiates versions: it asks ApiVersions and
keeps, per api of §16.3, the highest version both sides serve; given a
``SaslLogin`` it then authenticates (SaslHandshake, SaslAuthenticate, §18.2).

A connection that fails (closed, timed out, a frame that does not decode, a
send cut by cancellation) is out of step: it closes, every waiting and later
request raises ``BrokerConnectionError``.
"""

from __future__ import annotations

import collections
import math
import ssl
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Iterable, Mapping, TypeVar

import trio
from kio.schema.errors import ErrorCode
from kio.static.protocol import RequestPayload, ResponsePayload

from trikafka.client.errors import BrokerConnectionError, BrokerProtocolError, BrokerTimeoutError
from trikafka.client.tls import tls_handshake
from trikafka.kafka.apis import KafkaApi, lookup
from trikafka.kafka.errors import KafkaCodecError
from trikafka.kafka.framing import FrameReader, decode_response, encode_request
from trikafka.kafka.sasl import SaslFailed
from trikafka.kafka.sasl_client import SaslLogin, sasl_client

from . import schema
from .errors import check

T = TypeVar("T")

DEFAULT_CLIENT_ID = "trikafka"
DEFAULT_CONNECT_TIMEOUT_S = 10.0
DEFAULT_REQUEST_TIMEOUT_S = 30.0
# A fetch of the largest default max_bytes (50 MiB, as Kafka's fetch.max.bytes) plus headers.
DEFAULT_MAX_RESPONSE_BYTES = 64 * 1024 * 1024
_RECEIVE_BYTES = 256 * 1024
_CORRELATION_IDS = 1 << 31
SOFTWARE_NAME = "trikafka"
NO_CAPS: Mapping[KafkaApi, int] = {}  # negotiate's default: every api at the highest version both serve
UNKNOWN_SOFTWARE_VERSION = "unknown"  # ApiVersions v3's client_software_version when the caller names none
# ApiVersions v4 (Kafka 3.9) adds nothing the client reads, and older brokers would refuse it (§16.2).
ASKED_API_VERSIONS_VERSION = 3
# How a connection's stream is opened: ``open_stream(host, port)``, TCP unless a caller gives another
# (``trikafka.testing``'s in-memory network), as ``trikafka.client.connect`` takes it for the 0.7 protocol.
OpenStream = Callable[[str, int], Awaitable[trio.abc.Stream]]


async def take(lock: trio.Lock | trio.Semaphore) -> None:
    """Acquire ``lock``: at once, with no schedule point, when it is free and nobody waits for it (the
    stream operation done under it is the caller's checkpoint); otherwise in turn, as ``acquire``.

    A request takes two of these locks (and a produced batch its partition's in-flight slot); each
    uncontended ``acquire`` was a pass through Trio's scheduler of its own, most of a request's task
    steps before its bytes left.  A cancelled task raises Cancelled here, as ``acquire`` does, before
    it takes anything (a send it went on to would break its connection).
    """
    await trio.lowlevel.checkpoint_if_cancelled()  # a cancel point that yields only when cancelled
    try:
        lock.acquire_nowait()
    except trio.WouldBlock:
        await lock.acquire()


class UnsupportedApi(BrokerConnectionError):
    """The broker serves no version of an api that this client also speaks."""


@dataclass
class _Waiting:
    """One request sent and not yet answered: how to read its answer, and the answer once read."""

    decode: Callable[[memoryview], ResponsePayload]
    done: trio.Event = field(default_factory=trio.Event)
    body: ResponsePayload | None = None


class KafkaConnection:
    """A Kafka-protocol connection over any ``trio.abc.Stream``; see the module docstring.

    ``versions`` maps each api both sides serve to the version this
    connection sends; ``open_kafka_connection`` fills it.
    """

    def __init__(self, stream: trio.abc.Stream, *, address: tuple[str, int] | None = None,
                 client_id: str = DEFAULT_CLIENT_ID, request_timeout_s: float | None = DEFAULT_REQUEST_TIMEOUT_S,
                 max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES):
        self._stream = stream
        self._reader = FrameReader(max_response_bytes)
        self._send_lock = trio.Lock()
        self._receive_lock = trio.Lock()
        self._waiting: collections.deque[_Waiting] = collections.deque()
        self._next_correlation_id = 0
        self._closed_reason: str | None = None
        self.address = address
        self.client_id = client_id
        self.request_timeout_s = request_timeout_s
        self.versions: dict[KafkaApi, int] = {}
        self.tls = False  # open_kafka_connection: the stream speaks TLS
        self.authenticated = False  # authenticate succeeded
        self._frames_received = 0

    @property
    def closed(self) -> bool:
        return self._closed_reason is not None

    def version(self, api: KafkaApi) -> int:
        """The version of ``api`` this connection sends; raises ``UnsupportedApi`` if none is shared."""
        try:
            return self.versions[api]
        except KeyError:
            raise UnsupportedApi(f"{self._peer()} serves no version of {api.label} in "
                                 f"v{api.min_version}-v{api.max_version}") from None

    async def aclose(self) -> None:
        """Close the connection; waiting requests raise ``BrokerConnectionError``."""
        await self._break("closed by the client")

    async def __aenter__(self) -> KafkaConnection:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def request(self, api: KafkaApi, *, extra_wait_s: float = 0.0, **values: object) -> ResponsePayload:
        """Send ``api`` at the negotiated version with body ``values`` (``schema.build``); its answer."""
        version = self.version(api)
        body = schema.build(api, version, **values)
        answer = await self.send(api, version, body, extra_wait_s=extra_wait_s)
        assert answer is not None
        return answer

    async def send(self, api: KafkaApi, version: int, body: RequestPayload, *, expect_answer: bool = True,
                   extra_wait_s: float = 0.0,
                   decode: Callable[[memoryview], ResponsePayload] | None = None,
                   sent: trio.Event | None = None) -> ResponsePayload | None:
        """Send one request; its decoded answer, or None when ``expect_answer`` is off (Produce, acks 0).

        ``extra_wait_s`` lengthens the timeout for a request the broker may
        hold on purpose (a long-poll Fetch, Produce waiting for acks).
        ``sent`` is set once the request is on the wire (or failed to get
        there): a caller that pipelines sends the next request after it.
        """
        async def send_and_receive() -> ResponsePayload | None:
            try:
                waiting = await self._send(api, version, body, expect_answer, decode)
            finally:
                if sent is not None:
                    sent.set()
            return None if waiting is None else await self._receive(waiting)

        return await self._within_timeout(api, extra_wait_s, send_and_receive)

    async def request_ahead(self, api: KafkaApi, *, extra_wait_s: float = 0.0,
                            **values: object) -> Callable[[], Awaitable[ResponsePayload]]:
        """Send ``api`` as ``request`` does, returning once it is on the wire: what to await for its
        answer, later.

        Answers are read in request order, so the broker works on this one
        while the caller does something else; one never awaited is read, and
        dropped, by the next request's wait.  The timeout runs from the await.
        """
        version = self.version(api)
        body = schema.build(api, version, **values)
        waiting = await self._within_timeout(api, 0.0, lambda: self._send(api, version, body, True, None))
        assert waiting is not None

        async def answer() -> ResponsePayload:
            return await self._within_timeout(api, extra_wait_s, lambda: self._receive(waiting))

        return answer

    async def _within_timeout(self, api: KafkaApi, extra_wait_s: float, steps: Callable[[], Awaitable[T]]) -> T:
        """``steps`` within the request timeout plus ``extra_wait_s``; past it the connection breaks
        (its answers would be out of step) and ``BrokerTimeoutError`` is raised."""
        timeout_s = math.inf if self.request_timeout_s is None else self.request_timeout_s + extra_wait_s
        try:
            with trio.fail_after(timeout_s):
                return await steps()
        except trio.TooSlowError:
            await self._break("request timed out")
            raise BrokerTimeoutError(f"{self._peer()}: no answer to {api.label} within {timeout_s} s") from None

    async def _send(self, api: KafkaApi, version: int, body: RequestPayload, expect_answer: bool,
                    decode: Callable[[memoryview], ResponsePayload] | None) -> _Waiting | None:
        await take(self._send_lock)
        try:
            self._check_open()
            correlation_id = self._next_correlation_id
            self._next_correlation_id = (correlation_id + 1) % _CORRELATION_IDS
            frame = encode_request(int(api), version, correlation_id, self.client_id, body)
            waiting = None
            if expect_answer:
                waiting = _Waiting(decode or _decoder(api, version, correlation_id))
                self._waiting.append(waiting)
            try:
                await self._stream.send_all(frame)
            except BaseException as exc:  # a send cut anywhere (error or cancellation) leaves the stream out of step
                await self._break(f"sending failed: {exc!r}")
                if isinstance(exc, (trio.BrokenResourceError, trio.ClosedResourceError, OSError)):
                    raise BrokerConnectionError(f"{self._peer()}: sending failed: {exc!r}") from exc
                raise
            return waiting
        finally:
            self._send_lock.release()

    async def _receive(self, waiting: _Waiting) -> ResponsePayload:
        await take(self._receive_lock)
        try:
            while not waiting.done.is_set():
                self._check_open()
                frame = await self._next_frame()
                answered = self._waiting.popleft()
                try:
                    answered.body = answered.decode(frame)
                except KafkaCodecError as exc:
                    await self._break(f"malformed answer: {exc}")
                    raise BrokerProtocolError(f"{self._peer()}: {exc}") from None
                answered.done.set()
        finally:
            self._receive_lock.release()
        if waiting.body is None:  # the connection broke before this answer arrived
            self._check_open()
        assert waiting.body is not None
        return waiting.body

    async def _next_frame(self) -> memoryview:
        while True:
            try:
                frame = self._reader.next_frame()
            except KafkaCodecError as exc:
                await self._break(f"bad frame: {exc}")
                raise BrokerProtocolError(f"{self._peer()}: {exc}") from None
            if frame is not None:
                self._frames_received += 1
                return frame
            try:
                data = await self._stream.receive_some(_RECEIVE_BYTES)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                await self._break(f"receiving failed: {exc!r}")
                # A TLS stream's error names OpenSSL's reason (the broker's alert) only in its cause.
                raise BrokerConnectionError(f"{self._peer()}: receiving failed: {exc.__cause__ or exc!r}"
                                            f"{self._security_hint()}") from exc
            if not data:
                await self._break("closed by the broker")
                raise BrokerConnectionError(f"{self._peer()} closed the connection{self._security_hint()}")
            try:
                self._reader.feed(data)
            except KafkaCodecError as exc:
                await self._break(f"bad frame: {exc}")
                raise BrokerProtocolError(f"{self._peer()}: {exc}") from None

    async def negotiate(self, software_version: str = UNKNOWN_SOFTWARE_VERSION,
                        max_versions: Mapping[KafkaApi, int] = NO_CAPS) -> None:
        """Ask ApiVersions and keep, per api, the highest version both sides serve (§16.3), at most
        ``max_versions[api]`` for an api named there (an api whose cap is below its range is dropped).

        A broker that does not serve ApiVersions v3 answers UNSUPPORTED_VERSION
        with its table in a v0 body (§16.2); the question is then asked again at
        the highest version both serve; one whose refusal names no version of
        ApiVersions (librdkafka's mock cluster) is asked again at v0, which
        every broker serves.
        """
        api = KafkaApi.API_VERSIONS
        version = ASKED_API_VERSIONS_VERSION
        for _ in range(2):
            body = schema.build(api, version, client_software_name=SOFTWARE_NAME,
                                client_software_version=software_version)
            # Any: an ApiVersionsResponse of whichever version (0-3) answered; they share the fields read.
            answer: Any = await self.send(api, version, body, decode=_api_versions_decoder(version))
            if answer.error_code == ErrorCode.none:
                break
            if answer.error_code != ErrorCode.unsupported_version or version == 0:
                raise BrokerProtocolError(f"{self._peer()}: ApiVersions answered {answer.error_code!r}")
            theirs = {int(e.api_key): int(e.max_version) for e in answer.api_keys}
            version = min(version - 1, theirs.get(int(api), 0))
        else:
            raise BrokerProtocolError(f"{self._peer()}: ApiVersions did not settle on a version")
        self.versions = shared_versions(
            ((int(e.api_key), int(e.min_version), int(e.max_version)) for e in answer.api_keys), max_versions)

    async def authenticate(self, login: SaslLogin) -> None:
        """SaslHandshake, then the mechanism's tokens in SaslAuthenticate requests (§18.2).

        A refusal raises ``KafkaResponseError`` (``SASL_AUTHENTICATION_FAILED``,
        ``UNSUPPORTED_SASL_MECHANISM``, ...); a server whose SCRAM answers do not
        verify raises ``BrokerProtocolError``.  The PBKDF2 work runs in a worker thread.
        """
        handshake: Any = await self.request(KafkaApi.SASL_HANDSHAKE, mechanism=login.mechanism.value)
        check(handshake.error_code, f"{self._peer()} SASL {login.mechanism.value}")
        exchange = sasl_client(login)
        try:
            token: bytes | None = exchange.first()
            while token is not None:
                token = await trio.to_thread.run_sync(exchange.step, await self._sasl_step(login, token))
        except SaslFailed as exc:
            await self._break(f"SASL: {exc}")
            raise BrokerProtocolError(f"{self._peer()}: SASL {login.mechanism.value}: {exc}") from None
        self.authenticated = True

    async def _sasl_step(self, login: SaslLogin, token: bytes) -> bytes:
        answer: Any = await self.request(KafkaApi.SASL_AUTHENTICATE, auth_bytes=token)
        check(answer.error_code, f"{self._peer()} SASL {login.mechanism.value} as {login.username}",
              answer.error_message)
        return bytes(answer.auth_bytes)

    def _security_hint(self) -> str:
        """Why a broker closes a new connection, as far as what it answered tells (§18): a TLS
        listener closes a plaintext client at its first request, a SASL listener answers ApiVersions
        and closes at the first request that comes before authentication."""
        if self._frames_received == 0 and not self.tls:
            return (" at the first request: does its listener expect TLS or SASL (security protocol SSL, "
                    "SASL_SSL or SASL_PLAINTEXT)?")
        if self._frames_received <= 1 and not self.authenticated:
            return " before authentication: does its listener expect SASL (SASL_PLAINTEXT or SASL_SSL)?"
        return ""

    def _check_open(self) -> None:
        if self._closed_reason is not None:
            raise BrokerConnectionError(f"{self._peer()}: connection is closed ({self._closed_reason})")

    def _peer(self) -> str:
        return "broker" if self.address is None else f"broker {self.address[0]}:{self.address[1]}"

    async def _break(self, reason: str) -> None:
        if self._closed_reason is None:
            self._closed_reason = reason
        for waiting in self._waiting:  # their callers see the connection closed
            waiting.done.set()
        self._waiting.clear()
        await trio.aclose_forcefully(self._stream)


def shared_versions(theirs: Iterable[tuple[int, int, int]],
                    max_versions: Mapping[KafkaApi, int] = NO_CAPS) -> dict[KafkaApi, int]:
    """Per api of §16.3, the highest version in both ranges and at most ``max_versions[api]``;
    ``theirs`` is (api_key, min, max) rows."""
    versions: dict[KafkaApi, int] = {}
    for api_key, low, high in theirs:
        api = lookup(api_key)
        if api is None:
            continue
        version = min(api.max_version, high, max_versions.get(api, api.max_version))
        if version >= max(api.min_version, low):
            versions[api] = version
    return versions


def _decoder(api: KafkaApi, version: int, correlation_id: int) -> Callable[[memoryview], ResponsePayload]:
    def decode(frame: memoryview) -> ResponsePayload:
        answered_id, body = decode_response(int(api), version, frame)
        if answered_id != correlation_id:
            raise KafkaCodecError(f"{api.label} answer has correlation id {answered_id}, expected {correlation_id}")
        return body
    return decode


def _api_versions_decoder(version: int) -> Callable[[memoryview], ResponsePayload]:
    """ApiVersions' reader: the asked version's body, or the v0 body an UNSUPPORTED_VERSION answer has.

    Each is tried whole (a v0 body partly decodes as a flexible one); then the asked version with
    bytes after it, as every response is read (librdkafka's mock cluster refuses v3 so, §16.2).
    """
    api_key = int(KafkaApi.API_VERSIONS)
    # dict.fromkeys keeps the order and drops the second whole v0 reading when v0 was asked.
    *first, last = dict.fromkeys(((version, True), (0, True), (version, False)))

    def decode(frame: memoryview) -> ResponsePayload:
        for tried, whole in first:
            try:
                return decode_response(api_key, tried, frame, whole=whole)[1]
            except KafkaCodecError:
                pass
        return decode_response(api_key, last[0], frame, whole=last[1])[1]
    return decode


async def open_kafka_connection(host: str, port: int, *, connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
                                client_id: str = DEFAULT_CLIENT_ID,
                                request_timeout_s: float | None = DEFAULT_REQUEST_TIMEOUT_S,
                                max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
                                software_version: str = UNKNOWN_SOFTWARE_VERSION,
                                ssl_context: ssl.SSLContext | None = None,
                                sasl: SaslLogin | None = None,
                                max_versions: Mapping[KafkaApi, int] = NO_CAPS,
                                open_stream: OpenStream = trio.open_tcp_stream) -> KafkaConnection:
    """Connect to a Kafka-protocol listener (with TLS over ``ssl_context``), negotiate versions and
    (``sasl``) authenticate; close it with ``aclose``.

    ``software_version`` is what ApiVersions v3 tells the broker of this client's version;
    ``max_versions`` caps the version sent of the apis it names (a broker that mis-reads a version
    it advertises: librdkafka's mock cluster, JoinGroup v6).
    ``ssl_context``: speak TLS (a listener with ``SSL``, docs/protocol.md §18.1), checking the
    broker's certificate against ``host``; the handshake counts against ``connect_timeout_s``.
    ``open_stream(host, port)`` replaces ``trio.open_tcp_stream`` (``trikafka.testing``'s
    in-process clusters hand out in-memory streams through it).
    """
    try:
        with trio.fail_after(connect_timeout_s):
            stream: trio.abc.Stream = await open_stream(host, port)
            if ssl_context is not None:
                stream = await tls_handshake(stream, ssl_context, host, port)
    except trio.TooSlowError:
        raise BrokerConnectionError(f"connecting to {host}:{port} timed out after {connect_timeout_s} s") from None
    except OSError as exc:
        raise BrokerConnectionError(f"cannot connect to {host}:{port}: {exc}") from exc
    connection = KafkaConnection(stream, address=(host, port), client_id=client_id,
                                 request_timeout_s=request_timeout_s, max_response_bytes=max_response_bytes)
    connection.tls = ssl_context is not None
    try:
        await connection.negotiate(software_version, max_versions)
        if sasl is not None:
            await connection.authenticate(sasl)
    except BaseException:
        await connection.aclose()
        raise
    return connection

