"""One Trio connection to one broker, speaking every request type (docs/protocol.md §2, §5, §9).

Nothing in 0.7 matches a response to its request except order, so requests
on a connection are serialized with a lock: a request holds it from the first
byte sent to the last byte of its response.  PRODUCE and MULTIPRODUCE have no
response and release it as soon as they are sent.

A connection that fails mid-request (closed, timed out, cancelled, malformed
response) can no longer tell which response belongs to which request, so it
is closed and every later call raises ``BrokerConnectionError``.
"""

from __future__ import annotations

import contextlib
import math
import ssl
from typing import AsyncIterator, Awaitable, Callable, Iterable, Sequence

import trio

from trikafka.wire import (
    FetchResult,
    top_level_error,
    ACKS_FLUSHED,
    CreateTopicRequest,
    CreateTopicResult,
    FetchPart,
    FetchRequest,
    FetchWaitRequest,
    Metadata,
    MetadataRequest,
    MultiFetchRequest,
    MultiProduceRequest,
    OffsetsRequest,
    ProduceAckedRequest,
    ProduceAckedResult,
    ProducePart,
    ProduceRequest,
    RemoteProtocolError,
    Request,
    ResponseFrame,
    ResponseReader,
    decode_create_topic_payload,
    decode_metadata_payload,
    decode_multifetch_payload,
    decode_offsets_payload,
    decode_produce_acked_payload,
    encode_request,
)

from .tls import tls_handshake
from .errors import (
    BrokerConnectionError,
    BrokerError,
    BrokerProtocolError,
    BrokerTimeoutError,
    ExtensionNotSupported,
)

DEFAULT_CONNECT_TIMEOUT_S = 10.0
# A 100 MiB fetch (the broker's default request bound) plus headers.  Bounds
# what a hostile size prefix can make us buffer.
DEFAULT_MAX_RESPONSE_BYTES = 100 * 1024 * 1024 + 64 * 1024
_RECEIVE_BYTES = 256 * 1024
_RESPONSE_HEADER_BYTES = 6  # size:int32 + errorCode:int16


ProducePartLike = ProducePart | tuple[str, int, bytes]
FetchPartLike = FetchPart | tuple[str, int, int, int]


def _produce_parts(parts: Iterable[ProducePartLike]) -> tuple[ProducePart, ...]:
    return tuple(p if isinstance(p, ProducePart) else ProducePart(*p) for p in parts)


def _fetch_parts(parts: Iterable[FetchPartLike]) -> tuple[FetchPart, ...]:
    return tuple(p if isinstance(p, FetchPart) else FetchPart(*p) for p in parts)


class Connection:
    """A client connection over any ``trio.abc.Stream`` (normally TCP).

    Use ``await connect(host, port)`` or ``async with Connection.open(host, port)``.
    ``request_timeout_s`` bounds the wait for each response (``None``: no bound;
    FETCH_WAIT adds its ``max_wait_ms``).
    """

    def __init__(
        self,
        stream: trio.abc.Stream,
        *,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        request_timeout_s: float | None = None,
        address: tuple[str, int] | None = None,
    ):
        self._stream = stream
        self._reader = ResponseReader(max_response_bytes)
        self._lock = trio.Lock()
        self._closed_reason: str | None = None
        self.max_response_bytes = max_response_bytes
        self.request_timeout_s = request_timeout_s
        self.address = address

    @classmethod
    @contextlib.asynccontextmanager
    async def open(cls, host: str, port: int, **kwargs) -> AsyncIterator["Connection"]:
        """``async with Connection.open(host, port) as conn``; closed on exit."""
        conn = await connect(host, port, **kwargs)
        async with conn:
            yield conn

    # ------------------------------------------------------------------ lifecycle

    @property
    def closed(self) -> bool:
        return self._closed_reason is not None

    async def aclose(self) -> None:
        """Close the connection (idempotent)."""
        if self._closed_reason is None:
            self._closed_reason = "the connection was closed by the client"
        await trio.aclose_forcefully(self._stream)

    async def __aenter__(self) -> "Connection":
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.aclose()

    def _check_open(self) -> None:
        if self._closed_reason is not None:
            raise BrokerConnectionError(f"{self._peer()}: {self._closed_reason}")

    def _peer(self) -> str:
        return f"broker {self.address[0]}:{self.address[1]}" if self.address else "broker"

    async def _break(self, reason: str) -> None:
        # The stream is out of step (or dead): nothing on it can be trusted again.
        if self._closed_reason is None:
            self._closed_reason = reason
        await trio.aclose_forcefully(self._stream)

    # ------------------------------------------------------------------ transport

    async def _send(self, frame: bytes) -> None:
        try:
            await self._stream.send_all(frame)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            await self._break(f"sending failed: {exc!r}")
            raise BrokerConnectionError(f"{self._peer()}: sending failed: {exc!r}") from exc

    async def _receive_frame(self, request: Request) -> ResponseFrame:
        while True:
            try:
                frame = self._reader.next_frame()
            except RemoteProtocolError as exc:
                await self._break(f"malformed response: {exc}")
                raise BrokerProtocolError(f"{self._peer()}: malformed response: {exc}") from exc
            if isinstance(frame, ResponseFrame):
                return frame
            cause: BaseException | None
            try:
                data = await self._stream.receive_some(_RECEIVE_BYTES)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                data, cause = b"", exc
            else:
                cause = None
            if not data:
                raise await self._closed_by_broker(request, cause)
            self._reader.receive_data(data)

    async def _closed_by_broker(self, request: Request, cause: BaseException | None) -> BrokerConnectionError:
        got_nothing = self._reader.buffered_bytes == 0
        await self._break("the broker closed the connection")
        if request.type.is_extension and got_nothing:
            # A plain 0.7 broker closes on unknown request types (§2, §9.1).
            err: BrokerConnectionError = ExtensionNotSupported(
                f"{self._peer()} closed the connection on request type {int(request.type)}: "
                "it does not support trikafka extensions"
            )
        else:
            err = BrokerConnectionError(
                f"{self._peer()} closed the connection before answering {request.type.name}"
            )
        err.__cause__ = cause
        return err

    async def _call(self, request: Request, *, extra_wait_s: float = 0.0) -> ResponseFrame:
        """Send ``request`` and return its response, holding the lock throughout."""
        frame = encode_request(request)
        async with self._lock:
            self._check_open()
            timeout_s = math.inf if self.request_timeout_s is None else self.request_timeout_s + extra_wait_s
            try:
                with trio.fail_after(timeout_s):
                    await self._send(frame)
                    return await self._receive_frame(request)
            except trio.TooSlowError:
                await self._break("a response timed out")
                raise BrokerTimeoutError(
                    f"{self._peer()}: no response to {request.type.name} within {timeout_s} s"
                ) from None
            except BaseException:
                # Cancelled (or failed) mid-exchange: the response may still come and
                # would be read as the answer to the next request.
                await self._break("a request was interrupted before its response")
                raise

    async def _send_only(self, request: Request) -> None:
        frame = encode_request(request)
        async with self._lock:
            self._check_open()
            try:
                await self._send(frame)
            except BaseException:
                await self._break("a produce was interrupted while sending")
                raise

    def _check_response_fits(self, parts: Sequence[FetchPart]) -> None:
        worst = _RESPONSE_HEADER_BYTES + sum(_RESPONSE_HEADER_BYTES + max(p.max_bytes, 0) for p in parts)
        if worst - 4 > self.max_response_bytes:
            raise ValueError(
                f"fetching up to {worst} bytes exceeds this connection's max_response_bytes "
                f"({self.max_response_bytes}); raise it or fetch less"
            )

    # ------------------------------------------------------------------ requests

    async def produce(self, topic: str, partition: int, message_set: bytes) -> None:
        """PRODUCE (type 0): send and return; the broker never answers."""
        await self._send_only(ProduceRequest(ProducePart(topic, partition, message_set)))

    async def multiproduce(self, parts: Iterable[ProducePartLike]) -> None:
        """MULTIPRODUCE (type 3): several parts in one unanswered request."""
        await self._send_only(MultiProduceRequest(_produce_parts(parts)))

    async def fetch(self, topic: str, partition: int, offset: int, max_bytes: int) -> FetchResult:
        """FETCH (type 1): up to ``max_bytes`` of the log from ``offset``."""
        part = FetchPart(topic, partition, offset, max_bytes)
        if max_bytes > self.max_response_bytes - 2:
            raise ValueError(f"max_bytes {max_bytes} exceeds max_response_bytes {self.max_response_bytes}")
        frame = await self._call(FetchRequest(part))
        return FetchResult(frame.error_code, frame.payload, offset)

    async def multifetch(self, parts: Iterable[FetchPartLike]) -> list[FetchResult]:
        """MULTIFETCH (type 2): one result per part, in request order."""
        fetch_parts = _fetch_parts(parts)
        self._check_response_fits(fetch_parts)
        frame = await self._call(MultiFetchRequest(fetch_parts))
        return await self._fetch_results(frame, fetch_parts)

    async def fetch_wait(
        self, parts: Iterable[FetchPartLike], max_wait_ms: int, min_bytes: int = 1
    ) -> list[FetchResult]:
        """FETCH_WAIT (type 101): like MULTIFETCH, but the broker may wait for data.

        Raises ``ExtensionNotSupported`` against a plain 0.7 broker.
        """
        fetch_parts = _fetch_parts(parts)
        self._check_response_fits(fetch_parts)
        frame = await self._call(
            FetchWaitRequest(max_wait_ms, min_bytes, fetch_parts), extra_wait_s=max(max_wait_ms, 0) / 1000
        )
        return await self._fetch_results(frame, fetch_parts)

    async def offsets(self, topic: str, partition: int, time_ms: int, max_offsets: int) -> list[int]:
        """OFFSETS (type 4): offsets before ``time_ms`` (-1 latest, -2 earliest), descending."""
        frame = await self._call(OffsetsRequest(topic, partition, time_ms, max_offsets))
        self._expect_no_error(frame, "OFFSETS")
        return await self._decode(decode_offsets_payload, frame.payload)

    async def produce_acked(
        self, parts: Iterable[ProducePartLike], acks: int = ACKS_FLUSHED, timeout_ms: int = 10_000
    ) -> list[ProduceAckedResult]:
        """PRODUCE_ACKED (type 100): per-part results once appended (1) or flushed (-1).

        Raises ``ExtensionNotSupported`` against a plain 0.7 broker.
        """
        request = ProduceAckedRequest(acks, timeout_ms, _produce_parts(parts))
        frame = await self._call(request, extra_wait_s=max(timeout_ms, 0) / 1000)
        self._expect_no_error(frame, "PRODUCE_ACKED")
        results = await self._decode(decode_produce_acked_payload, frame.payload)
        if len(results) != len(request.parts):
            await self._break("PRODUCE_ACKED answered the wrong number of parts")
            raise BrokerProtocolError(f"{len(results)} results for {len(request.parts)} parts")
        return results

    async def metadata(self, topics: Iterable[str] | None = None) -> Metadata:
        """METADATA (type 102): brokers, ``max.message.size``, and the partitions of
        ``topics`` (None or empty: every topic the broker has).

        Raises ``ExtensionNotSupported`` against a plain 0.7 broker; see
        ``trikafka.client.partition_counts`` for the fallback.
        """
        frame = await self._call(MetadataRequest(tuple(topics or ())))
        self._expect_no_error(frame, "METADATA")
        return await self._decode(decode_metadata_payload, frame.payload)

    async def create_topic(self, topic: str, partitions: int,
                           settings: dict[str, str] | None = None) -> CreateTopicResult:
        """CREATE_TOPIC (type 103): create partitions ``0 .. partitions-1`` of ``topic`` with ``settings``.

        The result's ``error`` is 0 (created, or already exactly so), 7 (name not
        accepted), 9 (exists with another count, given in ``partitions``), 10
        (count out of range) or 11 (a setting refused: nothing created).
        Raises ``ExtensionNotSupported`` against 0.7.
        """
        frame = await self._call(CreateTopicRequest(topic, partitions, tuple(sorted((settings or {}).items()))))
        self._expect_no_error(frame, "CREATE_TOPIC")
        return await self._decode(decode_create_topic_payload, frame.payload)

    async def _fetch_results(self, frame: ResponseFrame, parts: Sequence[FetchPart]) -> list[FetchResult]:
        self._expect_no_error(frame, "MULTIFETCH")
        decoded = await self._decode(decode_multifetch_payload, frame.payload)
        if len(decoded) != len(parts):
            await self._break("a multifetch response had the wrong number of parts")
            raise BrokerProtocolError(f"{len(decoded)} parts in a response to {len(parts)}")
        return [FetchResult(code, data, p.offset) for (code, data), p in zip(decoded, parts)]

    async def _decode(self, decode, payload: bytes):
        try:
            return decode(payload)
        except RemoteProtocolError as exc:
            await self._break(f"malformed response payload: {exc}")
            raise BrokerProtocolError(f"{self._peer()}: malformed response payload: {exc}") from exc

    @staticmethod
    def _expect_no_error(frame: ResponseFrame, what: str) -> None:
        reason = top_level_error(frame.error_code, what)
        if reason is not None:
            raise BrokerError(frame.error_code, reason)


async def connect(
    host: str,
    port: int,
    *,
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    request_timeout_s: float | None = None,
    open_stream: Callable[[str, int], Awaitable[trio.abc.Stream]] = trio.open_tcp_stream,
    ssl_context: ssl.SSLContext | None = None,
) -> Connection:
    """Open a TCP connection to a broker.  Use as ``async with await connect(...) as conn``.

    ``open_stream(host, port)`` replaces ``trio.open_tcp_stream``: the in-process
    brokers of ``trikafka.testing`` hand out in-memory streams through it.
    ``ssl_context``: speak TLS to a 0.7 port with ``port.security.protocol`` SSL
    (docs/protocol.md §18.1); the handshake counts against ``connect_timeout_s``.
    """
    try:
        with trio.fail_after(connect_timeout_s):
            stream = await open_stream(host, port)
            if ssl_context is not None:
                stream = await tls_handshake(stream, ssl_context, host, port)
    except trio.TooSlowError:
        raise BrokerConnectionError(f"connecting to {host}:{port} timed out after {connect_timeout_s} s") from None
    except OSError as exc:
        raise BrokerConnectionError(f"cannot connect to {host}:{port}: {exc}") from exc
    return Connection(
        stream,
        max_response_bytes=max_response_bytes,
        request_timeout_s=request_timeout_s,
        address=(host, port),
    )
