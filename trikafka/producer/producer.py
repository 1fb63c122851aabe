"""The producer: ``async with Producer(...) as p: await p.send(topic, value, key=...)``.

Two modes, as in 0.7 (``producer.type``):

* ``sync``: every ``send`` (or ``send_batch``) is one request per broker
  involved and returns once it went out (``acks=0``) or was acknowledged
  (``acks`` 1/-1): ``send`` a resolved ``Delivery``, ``send_batch`` the
  ``SendResult``s.
* ``async``: ``send`` queues the message and returns a ``Delivery`` at once.
  Either way ``await delivery.result()`` gives the ``SendResult``.
  A sender task in the producer's nursery dispatches ``batch_size`` messages
  as soon as that many are queued, or whatever is queued once the oldest has
  waited ``queue_time_s``.  At most ``queue_size`` messages are queued or in
  flight; ``send`` waits for room beyond that (backpressure; with
  ``enqueue_timeout_s`` it gives up with ``QueueFullError``).  ``flush()``
  waits until everything queued is delivered or failed, and leaving the
  ``async with`` flushes, then raises ``DeliveryFailedError`` for failures
  nobody looked at (through ``Delivery.result()``/``wait()``/``peek()``).

Routing (spec §11.6; replicated topics: docs/protocol.md §12 and ``routing``): the partition list of the topic comes from the
discovery (ZooKeeper watches or a static list).  A message without a key goes
to a random partition, preferring brokers not backing off after a failure; a
keyed message goes to ``partitioner(key, n)`` (default: the stable Java-style
hash modulo n, never Python's ``hash()``).  A failed request is retried
``num_retries`` times, re-routed each time (keyed messages move only if the
partition list changed).  With ``acks`` 1/-1 a message is reported delivered
only when the broker said it was appended (1) or flushed (-1); a retry after
a lost answer can therefore duplicate a message, never lose one silently.
The async sender has one batch in flight at a time (its brokers are sent to
concurrently), so messages of one partition stay in order unless a retry
re-routes them.  With a static broker list and no partition count the
producer sends partition -1 and the broker picks (0.7's ``broker.list``
mode); a key then only picks the broker.

Hot path: ``send`` in async mode only appends a tuple; routing, message-set
building (``encoding.encode_plain``) and grouping happen once per batch.
"""

from __future__ import annotations

import contextlib
import logging
import random
from typing import Any, Awaitable, Callable, Iterable

import trio

from trikafka.client import Connection, LeaderDirectory
from trikafka.wire.keyed import KeyedPayload
from trikafka.zk import paths
from trikafka.zk.coordinator import Coordinator
from trikafka.zk.errors import InvalidPathError

from .async_queue import AsyncQueue, _cancel_shielded_checkpoint, _checkpoint_if_cancelled
from .audit import AuditTrail, publish_audit, run_audit_loop
from .config import ProducerConfig
from .discovery import StaticDiscovery, ZooKeeperDiscovery
from .errors import MessageTooLargeError, ProducerClosedError
from .partitioner import HashPartitioner
from .pool import BrokerPool
from .passthrough import send_prebuilt
from .results import Delivery, DeliveryFailedError, SendResult
from .routing import Routing, _Message

log = logging.getLogger(__name__)

_NEW, _OPEN, _CLOSING, _CLOSED = "new", "open", "closing", "closed"
# Messages kept as examples in a DeliveryFailedError raised by close().
MAX_REPORTED_FAILURES = 100


class Producer(AsyncQueue, Routing):
    """A Kafka 0.7 producer on Trio.  See the module docstring; settings in ``ProducerConfig``.

    Exactly one of ``brokers`` (static list), ``zk_connect`` (a ZooKeeper
    connect string; the producer owns the session) or ``coordinator`` (an
    open ``Coordinator``, e.g. ``FakeCoordinator``; not closed by the
    producer) must be given.  ``rng`` drives the random partitioning and
    ``connector`` opens connections (see ``BrokerPool``); both are for tests.
    ``close_timeout_s`` bounds the flush when the producer closes.
    """

    def __init__(
        self,
        config: ProducerConfig | None = None,
        *,
        coordinator: Coordinator | None = None,
        rng: random.Random | None = None,
        close_timeout_s: float = 30.0,
        connector: Callable[..., Awaitable[Connection]] | None = None,
        **settings: Any,
    ) -> None:
        if config is None:
            config = ProducerConfig(**settings)
        elif settings:
            config = config.replace(**settings)
        sources = sum(x is not None for x in (config.brokers, config.zk_connect, coordinator))
        if sources != 1:
            raise ValueError("give exactly one of brokers=, zk_connect= or coordinator=")
        self.config = config
        self._coordinator = coordinator
        self._rng = rng if rng is not None else random.Random()
        self._partitioner = config.partitioner if config.partitioner is not None else HashPartitioner()
        self.close_timeout_s = close_timeout_s
        self._connector = connector
        # Copies of hot settings (one attribute lookup instead of two per send).
        self._is_async = config.is_async
        self._batch_size = config.batch_size
        self._queue_size = config.queue_size
        self._max_message_size = config.max_message_size
        # Auditing wraps every payload, so it takes the checked path in send().
        self.audit = AuditTrail(config.audit_window_s) if config.audit else None
        self._plain_values = (config.serializer is None and not config.write_keys and not config.keyed_topics
                              and self.audit is None)
        self._state = _NEW
        self._valid_topics: set[str] = set()
        self._discovery: StaticDiscovery | ZooKeeperDiscovery | None = None
        self._pool: BrokerPool | None = None
        self._leader_directory: LeaderDirectory | None = None  # replicated topics' leaders (routing)
        # async mode
        self._pending: list[_Message] = []
        self._first_queued_at = 0.0
        self._occupancy = 0  # queued + in flight
        self._wake_sender = trio.Event()
        self._progress = trio.lowlevel.ParkingLot()  # occupancy went down
        self._flush_requests = 0
        self._in_flight: list[_Message] = []
        self._sender_scope = trio.CancelScope()
        self._sender_done = trio.Event()
        self._failed: list[Delivery] = []
        self._extension_strikes: dict[int, int] = {}  # broker id -> PRODUCE_ACKED refusals in a row
        # stats
        self.messages_sent = 0
        self.messages_failed = 0
        self.requests_sent = 0

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> "Producer":
        if self._state != _NEW:
            raise ProducerClosedError("a Producer can be entered only once")
        self._state = _CLOSING  # until _lifecycle says it is open
        self._lifecycle_cm = self._lifecycle()
        return await self._lifecycle_cm.__aenter__()

    async def __aexit__(self, exc_type, exc, tb) -> bool | None:
        if self._state == _CLOSED:
            return None
        suppress = await self._lifecycle_cm.__aexit__(exc_type, exc, tb)
        unobserved = [d for d in self._failed if not d.observed]
        if exc_type is None and unobserved:
            sample = [d.peek() for d in unobserved[:MAX_REPORTED_FAILURES]]
            raise DeliveryFailedError("closing the producer", sample, len(unobserved))  # type: ignore[arg-type]
        return suppress

    @contextlib.asynccontextmanager
    async def _lifecycle(self):
        """Coordinator (if ours) > connection pool > nursery (discovery, sender), nested."""
        try:
            async with contextlib.AsyncExitStack() as stack:
                coordinator = self._coordinator
                if self.config.zk_connect is not None:
                    from trikafka.zk import KazooCoordinator

                    coordinator = await stack.enter_async_context(KazooCoordinator(
                        self.config.zk_connect, session_timeout_s=self.config.zk_session_timeout_s))
                if coordinator is not None:
                    self._discovery = ZooKeeperDiscovery(coordinator)
                else:
                    assert self.config.brokers is not None
                    self._discovery = StaticDiscovery(self.config.brokers, self.config.static_partitions)
                self._pool = BrokerPool(
                    self._discovery.view.address_of,
                    connect_timeout_s=self.config.connect_timeout_s,
                    request_timeout_s=self.config.request_timeout_s,
                    reconnect_backoff_s=self.config.reconnect_backoff_s,
                    reconnect_backoff_max_s=self.config.reconnect_backoff_max_s,
                    **({} if self._connector is None else {"connector": self._connector}),
                )
                stack.push_async_callback(self._pool.aclose)
                async with trio.open_nursery() as nursery:
                    await nursery.start(self._discovery.run)
                    if self.config.is_async:
                        await nursery.start(self._sender_loop)
                    if self.audit is not None:
                        nursery.start_soon(run_audit_loop, self)
                    self._state = _OPEN
                    try:
                        yield self
                        if self.audit is not None:  # the last windows' counts, after everything else
                            await self.flush()
                            await publish_audit(self, everything=True)
                    except BaseException:
                        # Unwinding (maybe a Cancelled): what was queued still gets
                        # close_timeout_s to go out, shielded.
                        await self._drain(shielded=True)
                        raise
                    else:
                        await self._drain(shielded=False)
                    finally:
                        nursery.cancel_scope.cancel()
        finally:
            self._state = _CLOSED
            # Whatever the sender had not finished when it was cancelled.
            closed = ProducerClosedError("the producer closed before this message was delivered")
            for message in self._in_flight + self._pending:
                self._resolve_failed(message, closed)
            self._in_flight, self._pending = [], []
            self._occupancy = 0
            self._progress.unpark_all()

    async def _drain(self, *, shielded: bool) -> None:
        """Closing: deliver what is queued, within ``close_timeout_s``.

        Graceful: the sender flushes as usual, then stops.  Unwinding an
        exception (maybe a Cancelled that also hit the sender mid-batch): stop
        the sender and deliver its interrupted batch and the queue from here,
        shielded.  An interrupted batch may have partly reached a broker
        before, so it can be duplicated, never silently dropped.
        """
        self._state = _CLOSING
        if not self._is_async:
            return
        with trio.CancelScope(shield=shielded):
            with trio.move_on_after(self.close_timeout_s):
                if not shielded:
                    await self.flush()
                self._sender_scope.cancel()
                await self._sender_done.wait()
                leftovers = [m for m in self._in_flight if m[3] is not None and not m[3].done] + self._pending
                self._in_flight, self._pending = leftovers, []
                for start in range(0, len(leftovers), self._batch_size):
                    batch = leftovers[start:start + self._batch_size]
                    self._finish_batch(batch, await self._deliver(batch))
                self._in_flight = []

    @property
    def discovery(self) -> StaticDiscovery | ZooKeeperDiscovery:
        """The broker/partition view (``.view``); for tools and tests."""
        if self._discovery is None:
            raise ProducerClosedError("the producer is not open")
        return self._discovery

    @property
    def pool(self) -> BrokerPool:
        if self._pool is None:
            raise ProducerClosedError("the producer is not open")
        return self._pool

    # ------------------------------------------------------------------ sending

    def _payload(self, topic: str, value: Any, key: Any = None) -> bytes:
        if topic not in self._valid_topics:
            try:
                paths.validate_topic(topic)
            except InvalidPathError as exc:
                raise ValueError(str(exc)) from None
            self._valid_topics.add(topic)
        if self.config.writes_keys(topic):
            return self._keyed_payload(topic, value, key)
        serializer = self.config.serializer
        if serializer is not None:
            value = serializer(value)
        if type(value) is not bytes:
            if not isinstance(value, (bytearray, memoryview)):
                raise TypeError(f"message values must be bytes (or give serializer=), not {type(value).__name__}")
            value = bytes(value)
        if self.audit is not None:
            value = self.audit.wrap(topic, value)
        if len(value) > self.config.max_message_size:
            raise MessageTooLargeError(
                f"a {len(value)}-byte message exceeds max_message_size {self.config.max_message_size}")
        return value

    def _keyed_payload(self, topic: str, value: Any, key: Any) -> bytes:
        # A keyed topic: the key is bytes (or text, as UTF-8); a value of None deletes the key.
        if isinstance(key, str):
            key = key.encode()
        if not isinstance(key, (bytes, bytearray)):
            raise TypeError(f"messages to the keyed topic {topic!r} need a bytes or str key, not {type(key).__name__}")
        if value is not None:
            if self.config.serializer is not None:
                value = self.config.serializer(value)
            if not isinstance(value, (bytes, bytearray, memoryview)):
                raise TypeError(f"message values must be bytes (or give serializer=), not {type(value).__name__}")
            value = bytes(value)
        payload = KeyedPayload(bytes(key), value)
        if len(payload) > self.config.max_message_size:
            raise MessageTooLargeError(
                f"a {len(payload)}-byte message exceeds max_message_size {self.config.max_message_size}")
        return payload

    def _check_open(self) -> None:
        if self._state != _OPEN:
            raise ProducerClosedError(f"the producer is {self._state}; use 'async with Producer(...)'")

    async def send(self, topic: str, value: Any, key: Any = None) -> Delivery:
        """Send one message; returns its ``Delivery`` in both modes (``await d.result()``).

        sync mode: returns once the message was sent (acks 0) or acknowledged,
        with the delivery already resolved, and raises its error (a
        ``ProducerError``) if it was not delivered.
        async mode: returns once queued (waiting for room if
        ``queue_size`` messages are queued or in flight).  It always checks for
        cancellation but yields to the scheduler only when a batch is full or
        the queue is: a loop of sends lets the sender run once per batch.
        Raises ``ValueError``/``TypeError``/``MessageTooLargeError`` for a
        message that can never be sent, before anything is queued.
        """
        if self._state is not _OPEN:
            self._check_open()
        # The hot path of async mode: plain bytes to a known topic, room in the queue.
        if type(value) is bytes and self._plain_values and topic in self._valid_topics \
                and len(value) <= self._max_message_size:
            payload = value
        else:
            payload = self._payload(topic, value, key)
        if not self._is_async:
            [result] = await self._deliver([(topic, key, payload, None)])
            return Delivery.resolved(result.raise_for_error())
        if self._occupancy >= self._queue_size:
            await self._wait_for_room()
        else:
            await _checkpoint_if_cancelled()
        delivery = Delivery(topic)
        pending = self._pending
        if not pending:
            self._first_queued_at = trio.current_time()
            self._wake_sender.set()  # start the queue_time clock
        pending.append((topic, key, payload, delivery))
        self._occupancy += 1
        if len(pending) >= self._batch_size:
            self._wake_sender.set()
            # Let the sender run now: it has a full batch (cancellation was already
            # checked above, so this needs no second cancellation point).
            await _cancel_shielded_checkpoint()
        return delivery

    async def send_batch(self, topic: str, values: Iterable[Any], keys: Iterable[Any] | None = None) -> list[Any]:
        """Send many messages to one topic; ``keys`` (if given) pairs up with ``values``.

        sync mode: one request per broker involved; returns the ``SendResult``s
        in order, or raises ``DeliveryFailedError`` (``.results``: the failed
        ones, ``.all_results``: all) if any was not delivered.
        async mode: queues them; returns their ``Delivery`` handles.
        """
        values = list(values)
        key_list = [None] * len(values) if keys is None else list(keys)
        if len(key_list) != len(values):
            raise ValueError(f"{len(key_list)} keys for {len(values)} values")
        return await self.send_many([(topic, v, k) for v, k in zip(values, key_list)])

    async def send_many(self, records: Iterable[tuple[str, Any] | tuple[str, Any, Any]]) -> list[Any]:
        """Like ``send_batch`` for ``(topic, value)`` or ``(topic, value, key)`` records of any topics."""
        self._check_open()
        messages: list[_Message] = []
        for record in records:
            topic, value, key = (record[0], record[1], record[2] if len(record) > 2 else None)
            messages.append((topic, key, self._payload(topic, value, key), None))
        if not self.config.is_async:
            results = await self._deliver(messages)
            failed = [r for r in results if r.error is not None]
            if failed:
                error = DeliveryFailedError("send_batch", failed)
                error.all_results = results  # type: ignore[attr-defined]
                raise error
            return results
        return [await self._enqueue(topic, key, payload) for topic, key, payload, _ in messages]

    async def send_message_set(self, topic: str, position: int, message_set: bytes) -> SendResult:
        """Send a ready-made message set, byte for byte, to position ``position`` (mod the
        count) of ``topic``'s partition list; one attempt, the error in the result."""
        self._check_open()
        return await send_prebuilt(self, topic, position, message_set)

    async def flush(self) -> None:
        """async mode: wait until every queued message is delivered or failed."""
        if not self.config.is_async:
            await trio.lowlevel.checkpoint()
            return
        self._flush_requests += 1
        self._wake()
        try:
            while self._occupancy > 0 and self._state not in (_CLOSED,):
                await self._progress.park()
        finally:
            self._flush_requests -= 1
        await trio.lowlevel.checkpoint()
