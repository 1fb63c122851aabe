"""One client connection (spec §2): read a request, handle it, answer it, repeat.

Responses leave in request order because a connection handles one request at
a time, exactly like 0.7.  Everything already received is parsed in one go
(``RequestReader`` buffers pipelined frames), so a producer that streams
PRODUCE requests without waiting costs one ``receive_some`` per socket read,
not per request.

The connection closes, without writing anything, on every condition of spec
§7.2: a framing error from the reader (``RemoteProtocolError``) or a request
the handler refuses (``CloseConnection``).  A vanished peer just ends it.
Other exceptions (a failed log, a bug) propagate and bring the broker down.

Shutdown: ``stop()`` makes the connection finish the requests it has already
received completely, then close; a connection idle in ``receive_some`` is
cancelled out of it at once.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import trio

from trikafka.wire.errors import RemoteProtocolError
from trikafka.wire.framing import NEED_DATA, RequestReader
from trikafka.wire.requests import (
    CreateTopicRequest,
    FetchLocalRequest,
    FetchRequest,
    FetchWaitRequest,
    MetadataRequest,
    MultiFetchRequest,
    MultiProduceRequest,
    OffsetsRequest,
    ProduceAckedRequest,
    ProduceRequest,
)

from trikafka.wire.replication import EpochEndOffsetRequest, ReplicaFetchRequest

from .handlers import CloseConnection, RequestHandler
from .replication import serving as replicated
from .replication.unserved import not_a_replica
from .sendfile import RegionTruncatedError, send_chunks
from .short_circuit import answer_fetch_local, passes_descriptors

logger = logging.getLogger(__name__)

# One socket read.  Big enough for ~300 single-message PRODUCE requests or
# six 50-message batches per read, small enough to stay off glibc's mmap path.
RECEIVE_BYTES = 128 * 1024

_PEER_GONE = (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError)
_REQUEST_CLASSES = (ProduceRequest, FetchRequest, MultiFetchRequest, MultiProduceRequest, OffsetsRequest,
                    ProduceAckedRequest, FetchWaitRequest, MetadataRequest, CreateTopicRequest,
                    ReplicaFetchRequest, EpochEndOffsetRequest, FetchLocalRequest)


class Connection:
    """Serves one stream until the peer leaves, breaks the protocol, or shutdown."""

    def __init__(self, stream: trio.abc.Stream, handler: RequestHandler, *,
                 max_request_bytes: int, peer: str = "?"):
        self._stream = stream
        self._handler = handler
        self._reader = RequestReader(max_request_bytes)
        self._stopping = False
        self._receive_scope: trio.CancelScope | None = None
        self.peer = peer
        self.requests_handled = 0
        self.close_reason: str | None = None
        self._descriptors = passes_descriptors(stream)  # FETCH_LOCAL may answer with a descriptor
        # Each request class's latency histogram, found once per connection rather than per request.
        self._latency = {cls: handler.metrics.request_histogram(cls.__name__) for cls in _REQUEST_CLASSES}

    def stop(self) -> None:
        """Finish the requests already received, then close (graceful shutdown)."""
        self._stopping = True
        if self._receive_scope is not None:
            self._receive_scope.cancel()

    async def run(self) -> None:
        try:
            await self._serve()
        except (RemoteProtocolError, CloseConnection) as exc:
            self.close_reason = f"{type(exc).__name__}: {exc}"
            logger.info("closing connection from %s: %s", self.peer, exc)
        except _PEER_GONE as exc:
            self.close_reason = f"peer gone: {exc!r}"
        except RegionTruncatedError as exc:
            self.close_reason = f"fetch response cut short: {exc}"
            logger.warning("closing connection from %s: %s", self.peer, exc)
        finally:
            await trio.aclose_forcefully(self._stream)

    async def _serve(self) -> None:
        reader = self._reader
        while not self._stopping:
            with trio.CancelScope() as scope:
                self._receive_scope = scope
                data = await self._stream.receive_some(RECEIVE_BYTES)
            self._receive_scope = None
            if scope.cancelled_caught:
                break  # stop() while idle
            if not data:
                self.close_reason = "peer closed"
                return
            reader.receive_data(data)
            while (request := reader.next_event()) is not NEED_DATA:
                await self._handle(request)
        # Stopping: answer what was received whole, accept nothing more.
        while (request := reader.next_event()) is not NEED_DATA:
            await self._handle(request)
        self.close_reason = self.close_reason or "broker shutting down"

    async def _handle(self, request: Any) -> None:
        handler = self._handler
        self.requests_handled += 1
        kind = type(request)
        if handler.refused_types and request.type in handler.refused_types:
            raise CloseConnection(f"request type {int(request.type)} is refused")
        started_s = time.perf_counter()
        try:
            if kind is ProduceRequest:
                await handler.produce(request.part)
                return
            if kind is FetchRequest:
                response: Any = handler.fetch(request)
            elif kind is FetchLocalRequest:
                await answer_fetch_local(self._stream, request, handler, descriptors=self._descriptors)
                return
            elif kind is MultiFetchRequest:
                response = handler.multifetch(request)
            elif kind is MultiProduceRequest:
                await handler.multiproduce(request)
                return
            elif kind is OffsetsRequest:
                response = [await handler.offsets(request)]
            elif kind is ProduceAckedRequest:
                response = [await handler.produce_acked(request)]
            elif kind is FetchWaitRequest:
                response = await handler.fetch_wait(request)
            elif kind is MetadataRequest:
                response = [handler.admin.metadata(request)]
            elif kind is CreateTopicRequest:
                response = [await handler.admin.create_topic(request)]
            elif kind is ReplicaFetchRequest:
                replicas = handler.replicas
                response = await replicated.replica_fetch(replicas, request) if replicas else not_a_replica(request)
            elif kind is EpochEndOffsetRequest:
                replicas = handler.replicas
                response = replicated.epoch_end_offset(replicas, request) if replicas else not_a_replica(request)
            else:  # the reader only yields the types above
                raise AssertionError(f"unexpected request {request!r}")
            await send_chunks(self._stream, response)
        finally:  # a request that closes the connection counts too
            self._latency[kind].observe(time.perf_counter() - started_s)
