"""The in-memory network in-process brokers are reached over (``trikafka.testing.broker``).

Each listener of a broker is named by ``(host, port)``: its 0.7 listener where
``add`` says, its Kafka listener (when it serves one) where its Metadata
answers say it is, so the Kafka clients follow the addresses they are told.
A client's ``open_stream(host, port)`` gets one end of a
``stream_pair`` and the listener the other.  Every 0.7
request a client sends is decoded on the way (``requests``), and a hook per
address may hold it first (``before_request``: to stall or slow a broker);
Kafka streams go through as they are.
"""

from __future__ import annotations

import operator
from collections import defaultdict
from typing import Any, Awaitable, Callable

import trio

from trikafka.broker.server import LISTENER_07, LISTENER_KAFKA, Broker
from trikafka.client import Connection, connect
from trikafka.wire import RemoteProtocolError, Request, RequestReader
from trikafka.wire.framing import _NeedData  # what a reader returns between requests (isinstance narrows it)


class InMemoryNetwork:
    """Brokers' listeners by ``(host, port)``, reached through in-memory stream pairs."""

    def __init__(self) -> None:
        self.brokers: dict[tuple[str, int], Broker] = {}  # whose listener is at an address
        self.listeners: dict[tuple[str, int], str] = {}  # which one (LISTENER_07, LISTENER_KAFKA)
        self.down: set[tuple[str, int]] = set()
        self.connects: dict[tuple[str, int], int] = defaultdict(int)  # streams handed out, by address
        self._server_streams: dict[tuple[str, int], list[trio.abc.Stream]] = defaultdict(list)
        self.requests: dict[tuple[str, int], list[Request]] = defaultdict(list)  # as clients sent them
        # address -> await hook(request) before the request goes on (to stall or slow a broker)
        self.before_request: dict[tuple[str, int], Callable[[Request], Awaitable[None]]] = {}

    def add(self, broker: Broker, address: tuple[str, int] | None = None) -> tuple[str, int]:
        """Reach ``broker``'s 0.7 listener at ``address`` (default: where it listens) and its Kafka
        listener, if it serves one, at ``kafka_address(broker)``; returns the 0.7 address."""
        address = address if address is not None else (broker.host, broker.port)
        kafka = kafka_address(broker)
        for where, listener in ((address, LISTENER_07), (kafka, LISTENER_KAFKA)):
            if where is not None:
                self.brokers[where] = broker
                self.listeners[where] = listener
        return address

    async def open_stream(self, host: str, port: int) -> trio.abc.Stream:
        """A stream to the listener at ``(host, port)``; OSError (refused) if none is there or it is down."""
        await trio.lowlevel.checkpoint()
        address = (host, port)
        broker = self.brokers.get(address)
        if broker is None or address in self.down or broker.shutting_down:
            raise ConnectionRefusedError(f"no in-process broker at {host}:{port}")
        self.connects[address] += 1
        client, server = stream_pair()
        self._server_streams[address].append(server)
        listener = self.listeners[address]
        await broker.connect_stream(server, listener=listener)
        if listener != LISTENER_07:
            return client
        return _RecordingStream(client, self.requests[address], lambda: self.before_request.get(address))

    def connect_kwargs(self) -> dict[str, Any]:
        """Keyword arguments that make ``trikafka.client.connect`` use this network
        (a ``SimpleConsumer``'s ``connect_kwargs=``)."""
        return {"open_stream": self.open_stream}

    async def connector(self, host: str, port: int, **kwargs: Any) -> Connection:
        """``trikafka.client.connect`` over this network (a ``Producer``'s ``connector=``)."""
        return await connect(host, port, open_stream=self.open_stream, **kwargs)

    async def kill(self, host: str, port: int) -> None:
        """Refuse new connections to ``(host, port)`` and break the open ones (the broker keeps its data)."""
        address = (host, port)
        self.down.add(address)
        for stream in self._server_streams.pop(address, []):
            await trio.aclose_forcefully(stream)

    def revive(self, host: str, port: int) -> None:
        """Accept connections to ``(host, port)`` again."""
        self.down.discard((host, port))


def kafka_address(broker: Broker) -> tuple[str, int] | None:
    """Where ``broker``'s Kafka listener is, as its Metadata answers name it (None: it serves none)."""
    if broker.kafka is None:
        return None
    return broker.kafka.host, broker.kafka.port


class _RecordingStream(trio.abc.Stream):
    """A client's end of a stream that decodes what the client sends, into ``requests``."""

    def __init__(self, inner: trio.abc.Stream, requests: list[Request],
                 hook: Callable[[], Callable[[Request], Awaitable[None]] | None]) -> None:
        self._inner = inner
        self._requests = requests
        self._hook = hook
        self._reader: RequestReader | None = RequestReader((1 << 31) - 1)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        events: list[Request] = []
        if self._reader is not None:
            try:
                self._reader.receive_data(bytes(data))
                while not isinstance(event := self._reader.next_event(), _NeedData):
                    events.append(event)
            except RemoteProtocolError:
                self._reader = None  # a client sending garbage on purpose: the broker will judge it
        for event in events:
            self._requests.append(event)
            hook = self._hook()
            if hook is not None:
                await hook(event)
        await self._inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self._inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self._inner.receive_some(max_bytes)

    async def send_eof(self) -> None:
        await self._inner.send_eof()  # type: ignore[attr-defined]

    async def aclose(self) -> None:
        await self._inner.aclose()


def stream_pair() -> tuple["PipeStream", "PipeStream"]:
    """Two connected in-memory streams with unbounded buffers: what ``trio.testing.memory_stream_pair``
    does, at one checkpoint a call instead of its two to four (it checkpoints twice on purpose to
    catch two tasks using one stream; the simulation spends most of its time in Trio's scheduler)."""
    a_to_b, b_to_a = _Pipe(), _Pipe()
    return PipeStream(b_to_a, a_to_b), PipeStream(a_to_b, b_to_a)


class _Pipe:
    """One direction: the bytes sent and not yet received, the EOF, and the reader waiting for them."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.eof = False  # the sender closed or sent EOF
        self.reader_closed = False  # the receiving end closed: a send breaks
        self.lot = trio.lowlevel.ParkingLot()

    def put(self, data: bytes | bytearray | memoryview) -> None:
        if self.reader_closed:
            raise trio.BrokenResourceError("the receiving end is closed")
        if data:  # an empty send is no EOF
            self.data += data
            self.lot.unpark_all()

    def put_eof(self) -> None:
        self.eof = True
        self.lot.unpark_all()


class PipeStream(trio.abc.HalfCloseableStream):
    """One end of ``stream_pair``: sends into one pipe, receives from the other.

    As ``memory_stream_pair``'s ends: a closed end raises ClosedResourceError, a send to a closed end
    BrokenResourceError, a receive after the peer's EOF or close answers empty, and two tasks sending
    (or receiving) at once BusyResourceError."""

    def __init__(self, incoming: _Pipe, outgoing: _Pipe) -> None:
        self._incoming, self._outgoing = incoming, outgoing
        self._closed = False
        self._sending = self._receiving = False

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self._sending:
            raise trio.BusyResourceError("another task is sending on this stream")
        self._sending = True
        try:
            await trio.lowlevel.checkpoint()
            if self._closed or self._outgoing.eof:
                raise trio.ClosedResourceError("this stream is closed for sending")
            self._outgoing.put(data)
        finally:
            self._sending = False

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()
        if self._closed:
            raise trio.ClosedResourceError("this stream is closed")

    async def send_eof(self) -> None:
        await trio.lowlevel.checkpoint()
        if self._closed:
            raise trio.ClosedResourceError("this stream is closed")
        self._outgoing.put_eof()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        if max_bytes is not None and operator.index(max_bytes) < 1:
            raise ValueError("max_bytes must be >= 1")
        if self._receiving:
            raise trio.BusyResourceError("another task is receiving on this stream")
        self._receiving = True
        try:
            pipe = self._incoming
            if self._closed:
                raise trio.ClosedResourceError("this stream is closed")
            if pipe.data or pipe.eof:
                await trio.lowlevel.checkpoint()
            else:
                while True:  # one reader a pipe: woken by a send, an EOF or a close
                    await pipe.lot.park()
                    if pipe.data or pipe.eof or self._closed:
                        break
            if self._closed:  # closed while it waited
                raise trio.ClosedResourceError("this stream is closed")
            end = len(pipe.data) if max_bytes is None else max_bytes
            chunk = pipe.data[:end]
            del pipe.data[:end]
            return chunk
        finally:
            self._receiving = False

    async def aclose(self) -> None:
        self._close()
        await trio.lowlevel.checkpoint()

    def _close(self) -> None:
        if not self._closed:
            self._closed = True
            self._outgoing.put_eof()
            self._incoming.reader_closed = True
            self._incoming.data.clear()
            self._incoming.lot.unpark_all()  # a receive in progress raises ClosedResourceError
