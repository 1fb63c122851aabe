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

The producer is the front of the collaborators it builds when it opens: the
connection pool (``pool``), the discovery (``discovery``: ZooKeeper watches
or a static list), the ``Router`` (``routing``: which partition each message
goes to, and replicated topics' leaders, docs/protocol.md §12.13), the
``Dispatcher`` (``delivery``: one request per broker, retries, acks) and, in
async mode, the ``SendQueue`` (``async_queue``: batching, backpressure,
flushing).

A message without a key goes to a random partition, preferring brokers not
backing off after a failure; a keyed message goes to ``partitioner(key, n)``
(default: the stable Java-style hash modulo n, never Python's ``hash()``).
With ``acks`` 1/-1 a message is reported delivered only when the broker said
it was appended (1) or flushed (-1); a retry after a lost answer can
therefore duplicate a message, never lose one silently.  The async sender
has one batch in flight at a time (its brokers are sent to concurrently), so
messages of one partition stay in order unless a retry re-routes them.  With
a static broker list and no partition count the producer sends partition -1
and the broker picks (0.7's ``broker.list`` mode); a key then only picks the
broker.

Hot path: ``send`` in async mode only appends a tuple; routing, message-set
building (``encoding.encode_plain``) and grouping happen once per batch.
"""

from __future__ import annotations

import contextlib
import random
from types import TracebackType
from typing import Any, AsyncIterator, Iterable

import trio

from trikafka.client.leaders import Connector
from trikafka.wire.keyed import KeyedPayload
from trikafka.zk import paths
from trikafka.zk.client import ZooKeeperClient
from trikafka.zk.errors import InvalidPathError

from .async_queue import SendQueue
from .audit import AuditTrail, publish_audit, run_audit_loop
from .config import ProducerConfig, Value
from .delivery import Dispatcher
from .discovery import StaticDiscovery, ZooKeeperDiscovery
from .errors import MessageTooLargeError, ProducerClosedError
from .partitioner import HashPartitioner, Key
from .pool import BrokerPool
from .results import Delivery, DeliveryFailedError, SendResult, SendStats
from .routing import Message, Router

_NEW, _OPEN, _CLOSING, _CLOSED = "new", "open", "closing", "closed"
# Messages kept as examples in a DeliveryFailedError raised by close().
MAX_REPORTED_FAILURES = 100


class Producer:
    """A Kafka 0.7 producer on Trio.  See the module docstring; settings in ``ProducerConfig``.

    Exactly one of ``brokers`` (static list), ``zk_connect`` (a ZooKeeper
    connect string; the producer owns the session) or ``coordinator`` (an
    open ``ZooKeeperClient``, e.g. ``FakeZooKeeperClient``; not closed by the
    producer) must be given.  ``rng`` drives the random partitioning and
    ``connector`` opens connections (see ``BrokerPool``); both are for tests.
    ``close_timeout_s`` bounds the flush when the producer closes.
    """

    def __init__(
        self,
        config: ProducerConfig | None = None,
        *,
        coordinator: ZooKeeperClient | None = None,
        rng: random.Random | None = None,
        close_timeout_s: float = 30.0,
        connector: Connector | None = None,
        **settings: Any,  # ProducerConfig's keywords, each of its own type
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
        # A copy of a hot setting (one attribute lookup instead of two per send).
        self._max_message_size = config.max_message_size
        # Auditing wraps every payload, so it takes the checked path in send().
        self.audit = AuditTrail(config.audit_window_s) if config.audit else None
        self._plain_values = (config.serializer is None and not config.write_keys and not config.keyed_topics
                              and self.audit is None)
        self._state = _NEW
        self._valid_topics: set[str] = set()
        self._stats = SendStats()
        # Built when the producer opens (they need the discovery and the pool), kept after
        # it closes so that the failures and the views can still be read.
        self._discovery: StaticDiscovery | ZooKeeperDiscovery | None = None
        self._pool: BrokerPool | None = None
        self._dispatcher: Dispatcher | None = None
        self._queue: SendQueue | None = None  # async mode only

    @property
    def messages_sent(self) -> int:
        """Messages delivered so far."""
        return self._stats.messages_sent

    @property
    def messages_failed(self) -> int:
        """Messages that failed for good so far (after their retries)."""
        return self._stats.messages_failed

    @property
    def requests_sent(self) -> int:
        """Produce requests sent so far, retries included."""
        return self._stats.requests_sent

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> "Producer":
        if self._state != _NEW:
            raise ProducerClosedError("a Producer can be entered only once")
        self._state = _CLOSING  # until _lifecycle says it is open
        self._lifecycle_cm = self._lifecycle()
        return await self._lifecycle_cm.__aenter__()

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> bool | None:
        if self._state == _CLOSED:
            return None
        suppress = await self._lifecycle_cm.__aexit__(exc_type, exc, tb)
        unobserved = [] if self._queue is None else self._queue.unobserved_failures()
        if exc_type is None and unobserved:
            sample = [r for d in unobserved[:MAX_REPORTED_FAILURES] if (r := d.peek()) is not None]
            raise DeliveryFailedError("closing the producer", sample, len(unobserved))
        return suppress

    @contextlib.asynccontextmanager
    async def _lifecycle(self) -> AsyncIterator["Producer"]:
        """Coordinator (if ours) > connection pool > nursery (discovery, sender), nested."""
        try:
            async with contextlib.AsyncExitStack() as stack:
                coordinator = self._coordinator
                if self.config.zk_connect is not None:
                    from trikafka.zk import KazooZooKeeperClient

                    coordinator = await stack.enter_async_context(KazooZooKeeperClient(
                        self.config.zk_connect, session_timeout_s=self.config.zk_session_timeout_s))
                discovery: StaticDiscovery | ZooKeeperDiscovery
                if coordinator is not None:
                    discovery = ZooKeeperDiscovery(coordinator)
                else:
                    assert self.config.brokers is not None
                    discovery = StaticDiscovery(self.config.brokers, self.config.static_partitions)
                pool = BrokerPool(
                    discovery.view.address_of,
                    connect_timeout_s=self.config.connect_timeout_s,
                    request_timeout_s=self.config.request_timeout_s,
                    reconnect_backoff_s=self.config.reconnect_backoff_s,
                    reconnect_backoff_max_s=self.config.reconnect_backoff_max_s,
                    **({} if self._connector is None else {"connector": self._connector}),
                )
                stack.push_async_callback(pool.aclose)
                router = Router(self.config, discovery, pool, rng=self._rng, partitioner=self._partitioner,
                                connector=self._connector)
                dispatcher = Dispatcher(self.config, router, pool, self._stats, self.audit)
                self._discovery, self._pool, self._dispatcher = discovery, pool, dispatcher
                async with trio.open_nursery() as nursery:
                    await nursery.start(discovery.run)
                    if self.config.is_async:
                        self._queue = SendQueue(self.config, dispatcher.deliver, check_open=self._check_open,
                                                stats=self._stats)
                        await nursery.start(self._queue.run)
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
            if self._queue is not None:
                self._queue.close()

    async def _drain(self, *, shielded: bool) -> None:
        """Closing: deliver what is queued, within ``close_timeout_s``.

        Graceful: the queue flushes as usual, then its sender stops.  Unwinding
        an exception: shielded, see ``SendQueue.drain``.
        """
        self._state = _CLOSING
        if self._queue is None:
            return
        with trio.CancelScope(shield=shielded):
            with trio.move_on_after(self.close_timeout_s):
                await self._queue.drain(graceful=not shielded)

    @property
    def discovery(self) -> StaticDiscovery | ZooKeeperDiscovery:
        """The broker/partition view (``.view``); for tools and tests."""
        if self._discovery is None:
            raise ProducerClosedError("the producer is not open")
        return self._discovery

    @property
    def pool(self) -> BrokerPool:
        """The broker connections; for tools and tests."""
        if self._pool is None:
            raise ProducerClosedError("the producer is not open")
        return self._pool

    # ------------------------------------------------------------------ sending

    def _payload(self, topic: str, value: Value, key: Key = None) -> bytes:
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

    def _keyed_payload(self, topic: str, value: Value, key: Key) -> KeyedPayload:
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

    def _delivering(self) -> Dispatcher:
        """The dispatcher of an open producer."""
        self._check_open()
        assert self._dispatcher is not None  # built before the state turns open
        return self._dispatcher

    async def send(self, topic: str, value: Value, key: Key = None) -> Delivery:
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
        queue = self._queue
        if queue is not None:
            return await queue.put(topic, key, payload)
        [result] = await self._delivering().deliver([(topic, key, payload, None)])
        return Delivery.resolved(result.raise_for_error())

    async def send_batch(self, topic: str, values: Iterable[Value], keys: Iterable[Key] | None = None
                         ) -> list[Any]:  # Deliveries (async) or SendResults (sync): by mode, not by type
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

    async def send_many(self, records: Iterable[tuple[str, Value] | tuple[str, Value, Key]]
                        ) -> list[Any]:  # Deliveries (async) or SendResults (sync): by mode, not by type
        """Like ``send_batch`` for ``(topic, value)`` or ``(topic, value, key)`` records of any topics."""
        dispatcher = self._delivering()
        messages: list[Message] = []
        for record in records:
            topic, value, key = (record[0], record[1], record[2] if len(record) > 2 else None)
            messages.append((topic, key, self._payload(topic, value, key), None))
        queue = self._queue
        if queue is not None:
            return [await queue.put(topic, key, payload) for topic, key, payload, _ in messages]
        results = await dispatcher.deliver(messages)
        failed = [r for r in results if r.error is not None]
        if failed:
            raise DeliveryFailedError("send_batch", failed, all_results=results)
        return results

    async def send_message_set(self, topic: str, position: int, message_set: bytes) -> SendResult:
        """Send a ready-made message set, byte for byte, to position ``position`` (mod the
        count) of ``topic``'s partition list; one attempt, the error in the result."""
        return await self._delivering().send_prebuilt(topic, position, message_set)

    async def flush(self) -> None:
        """async mode: wait until every queued message is delivered or failed."""
        if self._queue is not None:
            await self._queue.flush()
        await trio.lowlevel.checkpoint()
