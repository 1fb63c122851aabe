"""A small in-memory broker for testing clients (producer, consumers, tools).

It speaks the real wire protocol over loopback TCP, using the same codec as
the real broker (``RequestReader`` and the response encoders), and follows
the request semantics of spec §6 and §16 on one in-memory "segment" per
partition.  It is deliberately simple: no disk, no ZooKeeper, no segments, and
OFFSETS answers only times -1 and -2.  Use the real broker (``trikafka.broker``)
for anything about storage.

Fault injection: subclass and override ``respond`` (raise ``CloseConnection``
to close without answering, as 0.7 does for §7.2 conditions), set
``extensions=False`` to act as a plain 0.7 broker, or ``auto_flush=False`` to
keep appended data invisible until ``flush()``.
"""

from __future__ import annotations

import contextlib
import functools
import re
from typing import AsyncIterator, Sequence

import trio

from trikafka.wire import (
    NEED_DATA,
    Chunk,
    ErrorCode,
    FetchPart,
    FetchRequest,
    FetchWaitRequest,
    MessageError,
    MessageSizeTooLargeError,
    MultiFetchRequest,
    MultiProduceRequest,
    OffsetsRequest,
    ProduceAckedRequest,
    ProduceAckedResult,
    ProducePart,
    ProduceRequest,
    RemoteProtocolError,
    Request,
    RequestReader,
    RequestType,
    encode_fetch_response,
    encode_multifetch_response,
    encode_offsets_response,
    encode_produce_acked_response,
    validate_message_set,
)

# The extensions this fake answers; it closes on the others (METADATA, CREATE_TOPIC)
# like a 0.7 broker, so clients fall back as they would there.
_FAKED_EXTENSIONS = (RequestType.PRODUCE_ACKED, RequestType.FETCH_WAIT)
_TOPIC_RE = re.compile(r"[A-Za-z0-9._-]{1,255}")


class CloseConnection(Exception):
    """Raised by ``respond`` to close the connection without answering (spec §7.2)."""


def topic_is_valid(topic: str) -> bool:
    """Spec §16.3 topic names."""
    return bool(_TOPIC_RE.fullmatch(topic)) and topic not in (".", "..")


class FakeBroker:
    """In-memory broker state plus a per-connection request loop."""

    def __init__(
        self,
        *,
        partitions: int = 1,
        extensions: bool = True,
        auto_flush: bool = True,
        max_message_size: int = 1_000_000,
        max_request_bytes: int = 104857600,
    ):
        self.partitions = partitions
        self.extensions = extensions
        self.auto_flush = auto_flush
        self.max_message_size = max_message_size
        self.max_request_bytes = max_request_bytes
        self.logs: dict[tuple[str, int], bytearray] = {}
        self.visible_end: dict[tuple[str, int], int] = {}
        self.requests: list[Request] = []  # every decoded request, for assertions
        self.connections_closed_by_broker = 0
        self._data_visible = trio.Event()

    # ------------------------------------------------------------------ state

    def append(self, topic: str, partition: int, message_set: bytes) -> tuple[int, int]:
        """Validate and append; returns (base_offset, next_offset).  Raises MessageError."""
        validated = validate_message_set(message_set, self.max_message_size)
        log = self.logs.setdefault((topic, partition), bytearray())
        self.visible_end.setdefault((topic, partition), 0)
        base = len(log)
        log += message_set[:validated.valid_bytes]
        if self.auto_flush:
            self.flush()
        return base, len(log)

    def flush(self) -> None:
        """Make every appended byte visible and wake long polls (spec §10.4, §16.2)."""
        for key, log in self.logs.items():
            self.visible_end[key] = len(log)
        self._data_visible.set()
        self._data_visible = trio.Event()

    def _fetch_part(self, part: FetchPart) -> tuple[ErrorCode, bytes]:
        key = (part.topic, part.partition)
        if not topic_is_valid(part.topic):
            return ErrorCode.UNKNOWN, b""
        if not 0 <= part.partition < self.partitions:
            return ErrorCode.WRONG_PARTITION, b""
        if key not in self.logs:
            return ErrorCode.NO_ERROR, b""
        end = self.visible_end[key]
        if part.offset < 0 or part.offset > end:
            return ErrorCode.OFFSET_OUT_OF_RANGE, b""
        if part.max_bytes < 0:
            return ErrorCode.INVALID_FETCH_SIZE, b""
        return ErrorCode.NO_ERROR, bytes(self.logs[key][part.offset:min(part.offset + part.max_bytes, end)])

    def _check_produce_target(self, part: ProducePart) -> None:
        if not topic_is_valid(part.topic) or not 0 <= part.partition < self.partitions:
            raise CloseConnection(f"bad produce target {part.topic!r}/{part.partition}")

    def _produce(self, part: ProducePart) -> None:
        self._check_produce_target(part)
        self.logs.setdefault((part.topic, part.partition), bytearray())
        self.visible_end.setdefault((part.topic, part.partition), 0)
        try:
            self.append(part.topic, part.partition, part.messages)
        except MessageSizeTooLargeError:
            return  # 0.7.2 drops the set and keeps the connection (§6.1 step 5)
        except MessageError as exc:
            raise CloseConnection(str(exc)) from exc

    def _produce_acked_part(self, part: ProducePart) -> ProduceAckedResult:
        if not topic_is_valid(part.topic):
            return ProduceAckedResult(part.topic, part.partition, ErrorCode.INVALID_TOPIC, -1, -1)
        if not 0 <= part.partition < self.partitions:
            return ProduceAckedResult(part.topic, part.partition, ErrorCode.WRONG_PARTITION, -1, -1)
        try:
            base, nxt = self.append(part.topic, part.partition, part.messages)
        except MessageError as exc:
            return ProduceAckedResult(part.topic, part.partition, exc.error_code, -1, -1)
        return ProduceAckedResult(part.topic, part.partition, ErrorCode.NO_ERROR, base, nxt)

    def _offsets(self, req: OffsetsRequest) -> list[int]:
        self._check_produce_target(ProducePart(req.topic, req.partition, b""))
        key = (req.topic, req.partition)
        if key not in self.logs:
            return [0] if req.time_ms in (-1, -2) else []
        if req.max_offsets < 0:
            raise CloseConnection("negative maxNumOffsets")
        end = self.visible_end[key]
        candidates = [0, end] if end > 0 else [0]  # one segment starting at 0, then (E, now)
        if req.time_ms == -2:
            return candidates[:1][:req.max_offsets]
        if req.time_ms == -1:
            return list(reversed(candidates))[:req.max_offsets]
        return []

    # ------------------------------------------------------------------ requests

    async def respond(self, request: Request) -> list[Chunk] | None:
        """The response chunks for ``request`` (None: no response)."""
        if request.type.is_extension and (not self.extensions or request.type not in _FAKED_EXTENSIONS):
            raise CloseConnection("unknown request type")  # what a plain 0.7 broker does
        if isinstance(request, ProduceRequest):
            self._produce(request.part)
            return None
        if isinstance(request, MultiProduceRequest):
            for part in request.parts:
                self._produce(part)
            return None
        if isinstance(request, FetchRequest):
            return encode_fetch_response(*self._fetch_part(request.part))
        if isinstance(request, MultiFetchRequest):
            return encode_multifetch_response([self._fetch_part(p) for p in request.parts])
        if isinstance(request, OffsetsRequest):
            return [encode_offsets_response(self._offsets(request))]
        if isinstance(request, ProduceAckedRequest):
            return [encode_produce_acked_response([self._produce_acked_part(p) for p in request.parts])]
        assert isinstance(request, FetchWaitRequest)
        return encode_multifetch_response(await self._fetch_wait(request))

    async def _fetch_wait(self, request: FetchWaitRequest) -> list[tuple[ErrorCode, bytes]]:
        with trio.move_on_after(max(request.max_wait_ms, 0) / 1000):
            while True:
                parts = [self._fetch_part(p) for p in request.parts]
                if sum(len(data) for _, data in parts) >= request.min_bytes:
                    return parts
                await self._data_visible.wait()
        return [self._fetch_part(p) for p in request.parts]

    async def serve_connection(self, stream: trio.abc.Stream) -> None:
        """Answer requests on one connection until the peer closes or breaks the protocol."""
        reader = RequestReader(self.max_request_bytes)
        async with stream:
            try:
                await self._request_loop(stream, reader)
            except (RemoteProtocolError, CloseConnection):
                self.connections_closed_by_broker += 1
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass

    async def _request_loop(self, stream: trio.abc.Stream, reader: RequestReader) -> None:
        while True:
            event = reader.next_event()
            if event is NEED_DATA:
                data = await stream.receive_some(65536)
                if not data:
                    return
                reader.receive_data(data)
                continue
            self.requests.append(event)
            chunks = await self.respond(event)
            for chunk in chunks or ():
                await stream.send_all(chunk if isinstance(chunk, bytes) else chunk.read())


@contextlib.asynccontextmanager
async def serve_fake_broker(broker: FakeBroker) -> AsyncIterator[tuple[str, int]]:
    """Serve ``broker`` on 127.0.0.1 (a free port); yields ``(host, port)``."""
    async with trio.open_nursery() as nursery:
        listeners: Sequence[trio.SocketListener] = await nursery.start(
            functools.partial(trio.serve_tcp, broker.serve_connection, 0, host="127.0.0.1")
        )
        port = listeners[0].socket.getsockname()[1]
        try:
            yield "127.0.0.1", port
        finally:
            nursery.cancel_scope.cancel()
