"""A small blocking 0.7 client for Spark tasks and planners (plain ``socket``).

Spark runs ``DataSourceReader.read()`` as a plain generator inside a forked
worker, so rows cannot be yielded out of ``trio.run``; this client does the
same requests as ``trikafka.client`` with ordinary blocking sockets.  Every
byte is encoded and decoded by ``trikafka.wire`` (``encode_request``,
``ResponseReader`` and the ``decode_*`` payload functions); this module only
moves bytes.

One connection carries one request at a time and reads its response before
the next request, exactly as the 0.7 broker answers them (spec §2).

The socket is in blocking mode with the timeout set in the kernel
(``SO_RCVTIMEO``/``SO_SNDTIMEO``), not Python's timeout mode, which polls
before every receive: ``fetch_into`` takes a whole response in one
``recv_into`` (``MSG_WAITALL``) straight into the caller's buffer, the one
copy the bytes cost.  Any socket error, an early close, or a malformed
response closes the connection and raises ``BrokerConnectionError``: a 0.7
broker answers bad requests by closing (spec §2).
A non-zero top-level error raises ``trikafka.client.BrokerError``, checked by
the same ``trikafka.wire.top_level_error`` as the Trio client.

``partition_counts`` and ``probe_partition_count`` are the blocking twins of
``trikafka.client.topics``'s: METADATA, else the FETCH probe on a plain 0.7 broker.
"""

from __future__ import annotations

import os
import socket
import struct
from typing import Iterable, Sequence

from trikafka.client.errors import BrokerConnectionError, BrokerError, ExtensionNotSupported
from trikafka.client.topics import PartitionCounts, PartitionProbe, TopicPartitions, counts_from_metadata
from trikafka.wire import (
    FETCH_LOCAL_INLINE,
    FETCH_LOCAL_TAIL_BYTES,
    FetchResult,
    top_level_error,
    ACKS_FLUSHED,
    OFFSETS_EARLIEST,
    OFFSETS_LATEST,
    NEED_DATA,
    CreateTopicRequest,
    CreateTopicResult,
    FetchLocalRequest,
    FetchPart,
    FetchRequest,
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
    RequestType,
    ResponseFrame,
    ResponseReader,
    decode_create_topic_payload,
    decode_fetch_local_tail,
    decode_metadata_payload,
    decode_multifetch_payload,
    decode_offsets_payload,
    decode_produce_acked_payload,
    encode_request,
)
from trikafka.wire.errors import ErrorCode
from trikafka.wire.framing import RESPONSE_HEAD_BYTES
from trikafka.wire.cursor import INT32_MAX

from .granted import GrantedRegion
from .sockets import connect_unix, describe_error, receive_with_descriptors, use_kernel_timeouts

DEFAULT_TIMEOUT_S = 30.0
# Largest response we accept: a 100 MiB fetch plus headers.  Bounds memory if a
# peer sends a hostile size prefix.
DEFAULT_MAX_RESPONSE_BYTES = 100 * 1024 * 1024 + 64 * 1024
_RECV_BYTES = 1 << 20
_REQUEST_TYPE = struct.Struct(">h")  # after a frame's int32 size


class BlockingExtensionNotSupported(ExtensionNotSupported):
    """The broker closed the connection on a trikafka extension: a plain 0.7 broker.

    Also a ``trikafka.client.ExtensionNotSupported``, so one ``except`` serves both clients.
    """


class BrokerConnection:
    """One blocking connection to one broker; use as a context manager.

    With ``unix_path`` it connects to the broker's local Unix-domain listener
    at that path instead of ``host:port`` (docs/protocol.md §2), which
    ``host``/``port`` still name in messages; there ``short_circuit`` makes
    ``fetch_into`` read granted ranges of segment files (FETCH_LOCAL, §9.8).

    Not thread-safe.  After any ``BrokerConnectionError`` the connection is
    closed and every later call raises again.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        unix_path: str | None = None,
        short_circuit: bool = False,
    ):
        self.host = host
        self.port = port
        self.max_response_bytes = max_response_bytes
        self.unix_path = unix_path
        self.timeout_s = timeout_s
        self.short_circuit = short_circuit and unix_path is not None
        self._sock: socket.socket | None = self._open()
        self._reader = ResponseReader(max_response_bytes)
        self._head = bytearray(RESPONSE_HEAD_BYTES + FETCH_LOCAL_TAIL_BYTES)
        self._region: GrantedRegion | None = None  # the last range FETCH_LOCAL granted (docs §9.8)

    def _open(self) -> socket.socket:
        try:
            if self.unix_path is not None:
                sock = connect_unix(self.unix_path, self.timeout_s)
            else:
                sock = socket.create_connection((self.host, self.port), timeout=self.timeout_s)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError as exc:
            where = f"{self.host}:{self.port}" + (f" at {self.unix_path}" if self.unix_path else "")
            raise BrokerConnectionError(f"cannot connect to broker {where}: {exc}") from exc
        use_kernel_timeouts(sock, self.timeout_s)
        return sock

    # -- lifecycle -----------------------------------------------------------

    def close(self) -> None:
        """Close the socket (and a granted range's descriptor); idempotent."""
        self._drop_region()
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    @property
    def closed(self) -> bool:
        return self._sock is None

    def __enter__(self) -> "BrokerConnection":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"BrokerConnection({self.host}:{self.port}, {state})"

    # -- requests ------------------------------------------------------------

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int) -> FetchResult:
        """FETCH (spec §5.2): up to ``max_bytes`` of the log from ``offset``."""
        frame = self._call(encode_request(FetchRequest(FetchPart(topic, partition, offset, max_bytes))))
        return FetchResult(frame.error_code, frame.payload, offset)

    def fetch_into(self, topic: str, partition: int, offset: int, max_bytes: int,
                   buffer: bytearray) -> tuple[ErrorCode, int]:
        """FETCH (spec §5.2) with the returned bytes written to ``buffer[:size]``: (error, size).

        ``buffer`` must hold ``max_bytes``; it is reused by the caller from fetch
        to fetch, so no per-fetch allocation is made.  It grows, in place, for an
        answer longer than ``max_bytes``: a compacted log's synthesized padding
        entry makes one (docs §11.3.2), so the caller holds no view of it across
        calls.  The response is checked like any other (size bounds by
        ``wire``'s ``ResponseReader``).  With ``short_circuit``, the same bytes
        read from the range the last FETCH_LOCAL granted (asked for again past
        its end); a broker without FETCH_LOCAL gets FETCH from then on.
        """
        if len(buffer) < max_bytes:
            raise ValueError(f"a buffer of {len(buffer)} bytes cannot hold a fetch of {max_bytes}")
        part = FetchPart(topic, partition, offset, max_bytes)
        if self.short_circuit:
            region = self._region
            if region is not None and region.covers(topic, partition, offset, max_bytes):
                return ErrorCode.NO_ERROR, self._read_granted(region, memoryview(buffer)[:max_bytes], offset)
            try:
                return self._fetch_local_into(part, buffer)
            except BlockingExtensionNotSupported:
                self.short_circuit = False  # an older broker (docs §9.1): FETCH on a new connection
                self._sock = self._open()
        self._send(encode_request(FetchRequest(part)))
        head = memoryview(self._head)[:RESPONSE_HEAD_BYTES]
        self._receive_exactly(head, RequestType.FETCH)
        code, size = self._checked(lambda: self._reader.decode_head(head))
        _make_room(buffer, size)
        self._receive_exactly(memoryview(buffer)[:size], RequestType.FETCH)
        return code, size

    def _fetch_local_into(self, part: FetchPart, buffer: bytearray) -> tuple[ErrorCode, int]:
        """FETCH_LOCAL (docs §9.8) for the rest of the segment: the answer inline (at most
        ``part.max_bytes``), or a granted range that this fetch and the next ones read from."""
        wide = FetchPart(part.topic, part.partition, part.offset, INT32_MAX)
        self._send(encode_request(FetchLocalRequest(wide, part.max_bytes)))
        fds: list[int] = []
        try:
            head = memoryview(self._head)
            self._receive_exactly(head, RequestType.FETCH_LOCAL, fds=fds, answer_start=True)
            code, payload = self._checked(lambda: self._reader.decode_head(head[:RESPONSE_HEAD_BYTES]))
            position, length = self._checked(lambda: decode_fetch_local_tail(payload, head[RESPONSE_HEAD_BYTES:]))
            if len(fds) != (position != FETCH_LOCAL_INLINE):
                self.close()
                raise BrokerConnectionError(
                    f"{self.host}:{self.port} sent {len(fds)} descriptors with a FETCH_LOCAL answer at {position}")
            if position == FETCH_LOCAL_INLINE:
                _make_room(buffer, length)
                self._receive_exactly(memoryview(buffer)[:length], RequestType.FETCH_LOCAL)
                return code, length
            if code != ErrorCode.NO_ERROR or not length:
                return code, 0  # never sent so (§9.8): nothing to read, nothing to keep
            self._drop_region()
            self._region = GrantedRegion(part.topic, part.partition, part.offset, fds.pop(), position, length)
            return code, self._read_granted(self._region, memoryview(buffer)[:part.max_bytes], part.offset)
        finally:
            for fd in fds:
                os.close(fd)

    def _read_granted(self, region: GrantedRegion, view: memoryview, offset: int) -> int:
        try:
            return region.read_into(view, offset)
        except OSError as exc:
            self.close()
            raise BrokerConnectionError(f"reading the segment file of {region.topic}-{region.partition} "
                                        f"that {self.host}:{self.port} passed failed: {exc}") from exc

    def _drop_region(self) -> None:
        if self._region is not None:
            self._region.close()
            self._region = None

    def _checked(self, decode):  # type: ignore[no-untyped-def]
        """``decode()``, its RemoteProtocolError closing the connection as a BrokerConnectionError."""
        try:
            return decode()
        except RemoteProtocolError as exc:
            self.close()
            raise BrokerConnectionError(f"bad response framing from {self.host}:{self.port}: {exc}") from exc

    def multifetch(self, parts: Sequence[FetchPart]) -> list[FetchResult]:
        """MULTIFETCH (spec §5.3): one result per part, in request order."""
        frame = self._call(encode_request(MultiFetchRequest(tuple(parts))))
        self._expect_no_error(frame, "MULTIFETCH")
        decoded = self._decode(decode_multifetch_payload, frame.payload)
        if len(decoded) != len(parts):
            self.close()
            raise BrokerConnectionError(f"multifetch asked {len(parts)} parts, got {len(decoded)}")
        return [FetchResult(code, data, p.offset) for (code, data), p in zip(decoded, parts)]

    def offsets(self, topic: str, partition: int, time_ms: int, max_offsets: int = 1) -> list[int]:
        """OFFSETS (spec §5.5), descending; ``time_ms`` -1 = latest, -2 = earliest."""
        frame = self._call(encode_request(OffsetsRequest(topic, partition, time_ms, max_offsets)))
        self._expect_no_error(frame, "OFFSETS")
        return self._decode(decode_offsets_payload, frame.payload)

    def visible_end(self, topic: str, partition: int) -> int:
        """The partition's visible end E: OFFSETS(-1, 1) (0 when there is no log yet)."""
        return self._single_offset(topic, partition, OFFSETS_LATEST)

    def log_start(self, topic: str, partition: int) -> int:
        """The partition's first retained offset S: OFFSETS(-2, 1)."""
        return self._single_offset(topic, partition, OFFSETS_EARLIEST)

    def produce(self, topic: str, partition: int, messages: bytes) -> None:
        """PRODUCE (spec §5.1); the broker never answers, so nothing confirms it."""
        self._send(encode_request(ProduceRequest(ProducePart(topic, partition, messages))))

    def multiproduce(self, parts: Sequence[ProducePart]) -> None:
        """MULTIPRODUCE (spec §5.4); unanswered like PRODUCE."""
        self._send(encode_request(MultiProduceRequest(tuple(parts))))

    def produce_acked(
        self, parts: Sequence[ProducePart], *, acks: int = ACKS_FLUSHED, timeout_ms: int = 30_000
    ) -> list[ProduceAckedResult]:
        """PRODUCE_ACKED (trikafka extension, spec §9.2): one result per part."""
        frame = self._call(encode_request(ProduceAckedRequest(acks, timeout_ms, tuple(parts))))
        self._expect_no_error(frame, "PRODUCE_ACKED")
        return self._decode(decode_produce_acked_payload, frame.payload)

    def metadata(self, topics: Iterable[str] | None = None) -> Metadata:
        """METADATA (docs/protocol.md §9.4); ``BlockingExtensionNotSupported`` on a 0.7 broker."""
        frame = self._call(encode_request(MetadataRequest(tuple(topics or ()))))
        self._expect_no_error(frame, "METADATA")
        return self._decode(decode_metadata_payload, frame.payload)

    def create_topic(self, topic: str, partitions: int) -> CreateTopicResult:
        """CREATE_TOPIC (docs/protocol.md §9.5); ``BlockingExtensionNotSupported`` on a 0.7 broker."""
        frame = self._call(encode_request(CreateTopicRequest(topic, partitions)))
        self._expect_no_error(frame, "CREATE_TOPIC")
        return self._decode(decode_create_topic_payload, frame.payload)

    # -- plumbing ------------------------------------------------------------

    def _single_offset(self, topic: str, partition: int, time_ms: int) -> int:
        found = self.offsets(topic, partition, time_ms, 1)
        if len(found) != 1:
            raise BrokerConnectionError(
                f"OFFSETS({time_ms}, 1) for {topic}/{partition} on {self.host}:{self.port} gave {found}"
            )
        return found[0]

    @staticmethod
    def _expect_no_error(frame: ResponseFrame, what: str) -> None:
        # The same check as the Trio client's (wire's top_level_error).
        reason = top_level_error(frame.error_code, what)
        if reason is not None:
            raise BrokerError(frame.error_code, reason)

    def _decode(self, decoder, payload: bytes):  # type: ignore[no-untyped-def]
        try:
            return decoder(payload)
        except RemoteProtocolError as exc:
            self.close()
            raise BrokerConnectionError(f"malformed response from {self.host}:{self.port}: {exc}") from exc

    def _send(self, frame: bytes) -> None:
        sock = self._require_open()
        try:
            sock.sendall(frame)
        except OSError as exc:
            self.close()
            raise BrokerConnectionError(f"send to {self.host}:{self.port} failed: {describe_error(exc, self.timeout_s)}") from exc

    def _call(self, frame: bytes) -> ResponseFrame:
        self._send(frame)
        return self._receive_frame(RequestType(_REQUEST_TYPE.unpack_from(frame, 4)[0]))

    def _receive_frame(self, request_type: RequestType) -> ResponseFrame:
        sock = self._require_open()
        reader = self._reader
        try:
            while True:
                event = reader.next_frame()
                if event is not NEED_DATA:
                    return event  # type: ignore[return-value]
                chunk = sock.recv(_RECV_BYTES)
                if not chunk:
                    raise self._closed_on(request_type, answer_started=reader.buffered_bytes > 0)
                reader.receive_data(chunk)
        except RemoteProtocolError as exc:
            self.close()
            raise BrokerConnectionError(f"bad response framing from {self.host}:{self.port}: {exc}") from exc
        except OSError as exc:
            self.close()
            if isinstance(exc, BrokerConnectionError):
                raise
            raise BrokerConnectionError(f"receive from {self.host}:{self.port} failed: {describe_error(exc, self.timeout_s)}") from exc

    def _receive_exactly(self, view: memoryview, request_type: RequestType, *, fds: list[int] | None = None,
                         answer_start: bool = False) -> None:
        """Fill ``view`` from the socket; with ``fds``, descriptors passed with the bytes are
        collected there (the caller closes them).  ``answer_start``: ``view`` begins the answer,
        so a close before its first byte is how a plain 0.7 broker refuses an extension."""
        sock = self._require_open()
        got, want = 0, len(view)
        try:
            while got < want:
                if fds is None:
                    n = sock.recv_into(view[got:], want - got, socket.MSG_WAITALL)
                else:
                    n = receive_with_descriptors(sock, view[got:], fds)
                if n == 0:
                    raise self._closed_on(request_type, answer_started=got > 0 or not answer_start)
                got += n
        except OSError as exc:
            self.close()
            if isinstance(exc, BrokerConnectionError):
                raise
            raise BrokerConnectionError(f"receive from {self.host}:{self.port} failed: {describe_error(exc, self.timeout_s)}") from exc

    def _closed_on(self, request_type: RequestType, *, answer_started: bool) -> BrokerConnectionError:
        """The error for a broker that closed the connection instead of (finishing) its answer."""
        if request_type.is_extension and not answer_started:
            # What a plain 0.7 broker does with an unknown request type.
            return BlockingExtensionNotSupported(
                f"broker {self.host}:{self.port} closed the connection on request type "
                f"{int(request_type)}: it does not support trikafka extensions")
        return BrokerConnectionError(
            f"broker {self.host}:{self.port} closed the connection before answering {request_type.name}")

    def _require_open(self) -> socket.socket:
        if self._sock is None:
            raise BrokerConnectionError(f"connection to {self.host}:{self.port} is closed")
        return self._sock


def partition_counts(host: str, port: int, topics: Iterable[str] = (), *,
                     timeout_s: float = DEFAULT_TIMEOUT_S) -> PartitionCounts:
    """The blocking twin of ``trikafka.client.partition_counts``: METADATA, else the probe."""
    topics = list(topics)
    try:
        with BrokerConnection(host, port, timeout_s=timeout_s) as conn:
            return counts_from_metadata(conn.metadata(topics), topics)
    except BlockingExtensionNotSupported:
        pass
    with BrokerConnection(host, port, timeout_s=timeout_s) as conn:
        return PartitionCounts({t: probe_partition_count(conn, t) for t in topics}, None)


def probe_partition_count(conn: BrokerConnection, topic: str) -> TopicPartitions:
    """The FETCH probe of ``trikafka.client.topics`` over ``conn`` (any 0.7 broker)."""
    probe = PartitionProbe(topic)
    while probe.result is None:
        probe.feed([r.error for r in conn.multifetch(probe.parts())])
    return probe.result


def _make_room(buffer: bytearray, size: int) -> None:
    """Grow ``buffer`` to ``size`` bytes if it is shorter (the answer's size is already bounded
    by ``max_response_bytes``)."""
    if size > len(buffer):
        buffer.extend(bytes(size - len(buffer)))
