"""One connection of the 0.7 listener (docs/protocol.md §2): read a request, handle it, answer it, repeat.

Responses leave in request order because a connection handles one request at
a time, exactly like 0.7.  Everything already received is parsed in one go
(``RequestReader`` buffers pipelined frames), so a producer that streams
PRODUCE requests without waiting costs one ``receive_some`` per socket read,
not per request.

Each request goes to its type's entry in ``HANDLERS``, the broker's side of
the wire's request table (``RequestType``); its latency is observed under the
table's label.

The connection closes, without writing anything, on every condition of §2: a
framing error from the reader (``RemoteProtocolError``) or a request the
handler refuses (``CloseConnection``).  A vanished peer just ends it.
Other exceptions (a failed log, a bug) propagate and bring the broker down.

Shutdown: ``stop()`` makes the connection finish the requests it has already
received completely, then close; a connection idle in ``receive_some`` is
cancelled out of it at once.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Awaitable, Callable, Iterable

import trio

from trikafka.wire.errors import RemoteProtocolError
from trikafka.wire.framing import NEED_DATA, RequestReader
from trikafka.wire.responses import Chunk
from trikafka.wire.replication import EpochEndOffsetRequest, ReplicaFetchRequest
from trikafka.wire.requests import (CreateTopicRequest, FetchWaitRequest, OffsetsRequest, ProduceAckedRequest,
                                     RequestType)

from .handlers import CloseConnection, RequestHandler
from .metrics import LatencyHistogram
from .receive_loop import PEER_GONE, ReceiveLoop
from .replication import serving as replicated
from .replication.unserved import not_a_replica
from .sendfile import RegionTruncatedError, send_chunks
from .short_circuit import answer_fetch_local, passes_descriptors

logger = logging.getLogger(__name__)


# How the broker serves one request type: given the connection and the decoded request, an
# awaitable that handles it and writes its answer, if it has one.  ``Any``: each handler takes
# its own request class, which a table of many types cannot name.
Handle = Callable[["ServedConnection07", Any], Awaitable[None]]


async def _answer(conn: ServedConnection07, response: Iterable[Chunk]) -> None:
    await send_chunks(conn.stream, response)


async def _offsets(conn: ServedConnection07, request: OffsetsRequest) -> None:
    await send_chunks(conn.stream, [await conn.handler.offsets(request)])


async def _produce_acked(conn: ServedConnection07, request: ProduceAckedRequest) -> None:
    await send_chunks(conn.stream, [await conn.handler.produce_acked(request)])


async def _fetch_wait(conn: ServedConnection07, request: FetchWaitRequest) -> None:
    await send_chunks(conn.stream, await conn.handler.fetch_wait(request))


async def _create_topic(conn: ServedConnection07, request: CreateTopicRequest) -> None:
    await send_chunks(conn.stream, [await conn.handler.create_topic(request)])


async def _replica_fetch(conn: ServedConnection07, request: ReplicaFetchRequest) -> None:
    replicas = conn.handler.engine.replicas
    await send_chunks(conn.stream, await replicated.replica_fetch(replicas, request) if replicas
                      else not_a_replica(request))


def _epoch_end_offset(conn: ServedConnection07, request: EpochEndOffsetRequest) -> Awaitable[None]:
    replicas = conn.handler.engine.replicas
    return _answer(conn, replicated.epoch_end_offset(replicas, request) if replicas else not_a_replica(request))


# The broker's request table: one handler per request type of the wire table (``RequestType``).
# Plain functions that return the awaitable where the handler's own coroutine is all there is
# to it, so the most frequent requests (PRODUCE) cost no extra coroutine.
HANDLERS: dict[RequestType, Handle] = {
    RequestType.PRODUCE: lambda conn, request: conn.handler.produce(request.part),
    RequestType.FETCH: lambda conn, request: _answer(conn, conn.handler.fetch(request)),
    RequestType.MULTIFETCH: lambda conn, request: _answer(conn, conn.handler.multifetch(request)),
    RequestType.MULTIPRODUCE: lambda conn, request: conn.handler.multiproduce(request),
    RequestType.OFFSETS: _offsets,
    RequestType.PRODUCE_ACKED: _produce_acked,
    RequestType.FETCH_WAIT: _fetch_wait,
    RequestType.METADATA: lambda conn, request: _answer(conn, [conn.handler.metadata(request)]),
    RequestType.CREATE_TOPIC: _create_topic,
    RequestType.FETCH_LOCAL: lambda conn, request: answer_fetch_local(conn.stream, request, conn.handler,
                                                                      descriptors=conn.descriptors),
    RequestType.REPLICA_FETCH: _replica_fetch,
    RequestType.EPOCH_END_OFFSET: _epoch_end_offset,
}


class ServedConnection07:
    """Serves one stream until the peer leaves, breaks the protocol, or shutdown."""

    def __init__(self, stream: trio.abc.Stream, handler: RequestHandler, *,
                 max_request_bytes: int, peer: str = "?"):
        self.stream: trio.abc.Stream = stream
        self.handler: RequestHandler = handler
        self._reader = RequestReader(max_request_bytes)
        self._receiving = ReceiveLoop(stream)
        self.peer = peer
        self.requests_handled = 0
        self.close_reason: str | None = None
        self.descriptors: bool = passes_descriptors(stream)  # FETCH_LOCAL may answer with a descriptor
        # Each request class's type, handler and latency histogram, found once per connection.
        self._dispatch: dict[type, tuple[RequestType, Handle, LatencyHistogram]] = {
            kind.api.request_class: (kind, HANDLERS[kind], handler.engine.metrics.requests[kind.label])
            for kind in RequestType
        }

    def stop(self) -> None:
        """Finish the requests already received, then close (graceful shutdown)."""
        self._receiving.stop()

    async def run(self) -> None:
        try:
            self.close_reason = await self._receiving.run(self._reader.receive_data, self._handle_received)
        except (RemoteProtocolError, CloseConnection) as exc:
            self.close_reason = f"{type(exc).__name__}: {exc}"
            logger.info("closing connection from %s: %s", self.peer, exc)
        except PEER_GONE as exc:
            self.close_reason = f"peer gone: {exc!r}"
        except RegionTruncatedError as exc:
            self.close_reason = f"fetch response cut short: {exc}"
            logger.warning("closing connection from %s: %s", self.peer, exc)
        finally:
            await trio.aclose_forcefully(self.stream)

    async def _handle_received(self) -> None:
        """Handle, in order, every request received whole."""
        reader, dispatch, refused = self._reader, self._dispatch, self.handler.refused_types
        perf_counter = time.perf_counter
        while (request := reader.next_event()) is not NEED_DATA:
            self.requests_handled += 1
            kind, handle, latency = dispatch[type(request)]  # the reader yields only the table's classes
            if refused and kind in refused:
                raise CloseConnection(f"request type {int(kind)} is refused")
            started_s = perf_counter()
            try:
                await handle(self, request)
            finally:  # a request that closes the connection counts too
                latency.observe(perf_counter() - started_s)
