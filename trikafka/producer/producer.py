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

Routing (spec §11.6): the partition list of the topic comes from the
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

Auditing (``audit=True``, docs/protocol.md 10): every payload gets the audit
envelope, and the acknowledged ones are counted per topic and
``audit_window_s`` window and published to ``trikafka-audit`` (``audit.py``).
``send_message_set`` sends a set that is already built, byte for byte (a
mirror's pass-through, ``passthrough.py``).

Hot path: ``send`` in async mode only appends a tuple; routing, message-set
building (``encoding.encode_plain``) and grouping happen once per batch.
"""

from __future__ import annotations

import contextlib
import logging
import random
from typing import Any, Awaitable, Callable, Iterable, Sequence

import trio

from trikafka.client import BrokerConnectionError, BrokerError, Connection, ExtensionNotSupported, ProducePart
from trikafka.wire import ErrorCode, LocalProtocolError
from trikafka.zk import paths
from trikafka.zk.coordinator import Coordinator
from trikafka.zk.errors import InvalidPathError

from trikafka.wire.audit import AUDIT_TOPIC, encode_event

from .audit import AuditTrail
from .config import ProducerConfig
from .discovery import StaticDiscovery, ZooKeeperDiscovery
from .encoding import encode_part
from .errors import (
    AcksNotSupportedError,
    BrokerRejectedError,
    DeliveryFailedError,
    MessageTooLargeError,
    NoBrokersAvailableError,
    PartitionerError,
    ProducerClosedError,
    ProducerError,
    QueueFullError,
)
from .partitioner import BrokerPartition, HashPartitioner
from .passthrough import send_prebuilt
from .pool import BrokerPool
from .results import Delivery, SendResult

log = logging.getLogger(__name__)

_NEW, _OPEN, _CLOSING, _CLOSED = "new", "open", "closing", "closed"
_checkpoint_if_cancelled = trio.lowlevel.checkpoint_if_cancelled
_cancel_shielded_checkpoint = trio.lowlevel.cancel_shielded_checkpoint
# Messages kept as examples in a DeliveryFailedError raised by close().
MAX_REPORTED_FAILURES = 100
_PRUNE_FAILED_AT = 10_000
# Per-part errors that mean "the partition list moved": re-route and retry.
_RETRIABLE_CODES = frozenset({ErrorCode.WRONG_PARTITION})

# A queued message: (topic, key, payload, delivery or None).
_Message = tuple[str, Any, bytes, "Delivery | None"]


class Producer:
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
        self._plain_values = config.serializer is None and self.audit is None
        self._state = _NEW
        self._valid_topics: set[str] = set()
        self._discovery: StaticDiscovery | ZooKeeperDiscovery | None = None
        self._pool: BrokerPool | None = None
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
                    self._discovery.view.brokers.get,
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
                        nursery.start_soon(self._audit_loop)
                    self._state = _OPEN
                    try:
                        yield self
                        if self.audit is not None:
                            await self.flush()
                            await self._publish_audit(everything=True)
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

    def _payload(self, topic: str, value: Any) -> bytes:
        if topic not in self._valid_topics:
            try:
                paths.validate_topic(topic)
            except InvalidPathError as exc:
                raise ValueError(str(exc)) from None
            self._valid_topics.add(topic)
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
            payload = self._payload(topic, value)
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
            messages.append((topic, key, self._payload(topic, value), None))
        if not self.config.is_async:
            results = await self._deliver(messages)
            failed = [r for r in results if r.error is not None]
            if failed:
                error = DeliveryFailedError("send_batch", failed)
                error.all_results = results  # type: ignore[attr-defined]
                raise error
            return results
        return [await self._enqueue(topic, key, payload) for topic, key, payload, _ in messages]

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

    async def send_message_set(self, topic: str, position: int, message_set: bytes) -> SendResult:
        """Send a ready-made message set, byte for byte, to position ``position`` (mod the
        count) of ``topic``'s partition list; one attempt, the error in the result."""
        self._check_open()
        return await send_prebuilt(self, topic, position, message_set)

    async def _audit_loop(self) -> None:
        assert self.audit is not None
        while True:
            await trio.sleep(self.audit.window_ms / 1000)
            await self._publish_audit()

    async def _publish_audit(self, *, everything: bool = False) -> None:
        """Publish the audit events of closed windows (all with ``everything``) on the audit topic."""
        assert self.audit is not None
        events = self.audit.take_events(everything=everything)
        if not events:
            return
        try:
            sent = await self.send_many([(AUDIT_TOPIC, encode_event(e), e.topic) for e in events])
            if self._is_async:
                await self.flush()
                sent = [d.peek() for d in sent]
            for result in sent:
                result.raise_for_error()
        except ProducerError as exc:
            log.warning("audit events for %d window(s) not published: %s", len(events), exc)

    # ------------------------------------------------------------------ async queue

    def _wake(self) -> None:
        self._wake_sender.set()

    async def _enqueue(self, topic: str, key: Any, payload: bytes) -> Delivery:
        """Queue a checked payload (``send`` inlines the same steps: it is the hot path)."""
        if self._occupancy >= self._queue_size:
            await self._wait_for_room()
        else:
            await _checkpoint_if_cancelled()
        delivery = Delivery(topic)
        pending = self._pending
        if not pending:
            self._first_queued_at = trio.current_time()
            self._wake_sender.set()
        pending.append((topic, key, payload, delivery))
        self._occupancy += 1
        if len(pending) >= self._batch_size:
            self._wake_sender.set()
            await _cancel_shielded_checkpoint()
        return delivery

    async def _wait_for_room(self) -> None:
        timeout_s = self.config.enqueue_timeout_s
        with trio.move_on_after(float("inf") if timeout_s is None else timeout_s) as scope:
            while self._occupancy >= self.config.queue_size:
                self._check_open()
                await self._progress.park()
            return
        if scope.cancelled_caught:
            raise QueueFullError(f"{self._occupancy} messages queued or in flight (queue_size "
                                 f"{self.config.queue_size}) for {timeout_s} s")

    async def _sender_loop(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            with self._sender_scope:
                task_status.started()
                await self._send_batches()
        finally:
            self._sender_done.set()

    async def _send_batches(self) -> None:
        batch_size = self.config.batch_size
        while True:
            pending = self._pending
            if not pending:
                self._wake_sender = trio.Event()
                await self._wake_sender.wait()
                continue
            if len(pending) < batch_size and not self._flush_requests:
                deadline = self._first_queued_at + self.config.queue_time_s
                if trio.current_time() < deadline:
                    self._wake_sender = trio.Event()
                    with trio.move_on_at(deadline):
                        await self._wake_sender.wait()
                    continue
            batch = pending[:batch_size]
            del pending[:batch_size]
            # What is left keeps the old deadline: each of those messages came
            # no earlier than the first one did, so none waits past queue_time_s
            # (0.7 restarted the clock here, letting a message wait up to twice as long).
            self._in_flight = batch
            results = await self._deliver(batch)
            self._in_flight = []
            self._finish_batch(batch, results)

    def _finish_batch(self, batch: list[_Message], results: list[SendResult]) -> None:
        for message, result in zip(batch, results):
            delivery = message[3]
            if delivery is not None:
                delivery.resolve(result)
                if result.error is not None:
                    self._failed.append(delivery)
        if len(self._failed) > _PRUNE_FAILED_AT:
            # Failures somebody already looked at need no report at close.
            self._failed = [d for d in self._failed if not d.observed]
        self._occupancy -= len(batch)
        self._progress.unpark_all()

    def _resolve_failed(self, message: _Message, error: ProducerError) -> None:
        delivery = message[3]
        if delivery is not None and not delivery.done:
            delivery.resolve(SendResult(message[0], None, None, error=error))
            self._failed.append(delivery)
            self.messages_failed += 1

    # ------------------------------------------------------------------ delivery

    async def _deliver(self, messages: Sequence[_Message]) -> list[SendResult]:
        """Send ``messages`` (retrying as configured); one result per message, in order."""
        results: list[SendResult | None] = [None] * len(messages)
        last_error: dict[int, ProducerError | BrokerConnectionError] = {}
        todo = list(range(len(messages)))
        attempts = self.config.num_retries + 1
        assert self._discovery is not None
        for attempt in range(attempts):
            if attempt:
                backoff_s = self.config.retry_backoff_s * 2 ** (attempt - 1)
                await trio.sleep(min(backoff_s, self.config.reconnect_backoff_max_s))
            for topic in {messages[i][0] for i in todo}:
                await self._discovery.ensure_topic(topic)
            by_broker = self._route(messages, todo, results, last_error)
            if len(by_broker) == 1:
                [(broker_id, parts)] = by_broker.items()
                await self._send_to_broker(broker_id, parts, messages, results, last_error)
            elif by_broker:
                async with trio.open_nursery() as nursery:
                    for broker_id, parts in by_broker.items():
                        nursery.start_soon(self._send_to_broker, broker_id, parts, messages, results,
                                           last_error)
            todo = [i for i in todo if results[i] is None]
            if not todo:
                break
        for i in todo:
            cause = last_error.get(i)
            error = NoBrokersAvailableError(
                f"no broker took the message for {messages[i][0]!r} in {attempts} attempt(s)"
                + (f"; last error: {cause}" if cause is not None else ""))
            error.__cause__ = cause
            results[i] = SendResult(messages[i][0], None, None, error=error)
        failures = sum(1 for r in results if r is not None and r.error is not None)
        if self.audit is not None:
            for message, result in zip(messages, results):
                if result is not None and result.error is None:
                    self.audit.delivered(message[0], message[2])
        self.messages_failed += failures
        self.messages_sent += len(messages) - failures
        return results  # type: ignore[return-value]

    def _targets(self, topic: str) -> tuple[list[BrokerPartition], list[BrokerPartition]]:
        """(every partition, those on brokers not backing off) of ``topic``."""
        assert self._discovery is not None and self._pool is not None
        every = self._discovery.partitions(topic)
        available = [bp for bp in every if self._pool.available(bp.broker_id)]
        return every, (available or every)

    def _route(self, messages: Sequence[_Message], todo: list[int], results: list[SendResult | None],
               last_error: dict) -> dict[int, list[tuple[str, int, list[int]]]]:
        """Group ``todo`` by broker, then by (topic, partition); routing failures are final."""
        per_topic: dict[str, tuple[list[BrokerPartition], list[BrokerPartition],
                                   dict[BrokerPartition, list[int]]]] = {}
        rand = self._rng.random
        partitioner = self._partitioner
        for i in todo:
            topic, key = messages[i][0], messages[i][1]
            info = per_topic.get(topic)
            if info is None:
                every, available = self._targets(topic)
                info = per_topic[topic] = (every, available, {})
            every, available, routed = info
            if not every:
                last_error[i] = NoBrokersAvailableError(f"no live broker is known for {topic!r}")
                continue
            if key is None:
                n = len(available)
                target = available[int(rand() * n)] if n > 1 else available[0]
            else:
                try:
                    index = partitioner(key, len(every))
                    if type(index) is not int or not 0 <= index < len(every):
                        raise ValueError(f"partitioner returned {index!r} for {len(every)} partitions")
                except Exception as exc:
                    error = PartitionerError(f"cannot partition key {key!r}: {exc}")
                    error.__cause__ = exc
                    results[i] = SendResult(topic, None, None, error=error)
                    continue
                target = every[index]
            bucket = routed.get(target)
            if bucket is None:
                routed[target] = [i]
            else:
                bucket.append(i)
        by_broker: dict[int, list[tuple[str, int, list[int]]]] = {}
        for topic, (_every, _available, routed) in per_topic.items():
            for target, indices in routed.items():
                by_broker.setdefault(target.broker_id, []).append((topic, target.partition, indices))
        return by_broker

    async def _send_to_broker(self, broker_id: int, parts: list[tuple[str, int, list[int]]],
                              messages: Sequence[_Message], results: list[SendResult | None],
                              last_error: dict) -> None:
        """One request to ``broker_id``; fills ``results`` (or ``last_error`` for a retry)."""
        assert self._pool is not None
        config = self.config
        payloads = [[messages[i][2] for i in indices] for _, _, indices in parts]
        try:
            conn = await self._pool.get(broker_id)  # backs off by itself when it cannot connect
        except BrokerConnectionError as exc:
            for _, _, indices in parts:
                for i in indices:
                    last_error[i] = exc
            return
        try:
            encoded = [encode_part(p, config.codec_for(topic), config.max_message_size, config.gzip_level)
                       for p, (topic, _, _) in zip(payloads, parts)]
            self.requests_sent += 1
            if config.acks == 0:
                if len(parts) == 1:
                    await conn.produce(parts[0][0], parts[0][1], encoded[0].data)
                else:
                    await conn.multiproduce([ProducePart(t, p, e.data) for (t, p, _), e in zip(parts, encoded)])
                acked = None
            else:
                acked = await conn.produce_acked(
                    [ProducePart(t, p, e.data) for (t, p, _), e in zip(parts, encoded)],
                    acks=config.acks, timeout_ms=int(config.ack_timeout_s * 1000))
        except ExtensionNotSupported as exc:
            # A plain 0.7 broker closes at once on PRODUCE_ACKED, but so does a broker
            # that dies just then: only a second time in a row on a new connection
            # (a dead one refuses the connect) is taken as a plain 0.7 broker.
            strikes = self._extension_strikes[broker_id] = self._extension_strikes.get(broker_id, 0) + 1
            if strikes < 2:
                await self._pool.failed(broker_id, conn)
                for _, _, indices in parts:
                    for i in indices:
                        last_error[i] = exc
                return
            error = AcksNotSupportedError(
                f"broker {broker_id} is a plain 0.7 broker without PRODUCE_ACKED; use acks=0 ({exc})")
            for topic, partition, indices in parts:
                for i in indices:
                    results[i] = SendResult(topic, broker_id, partition, error=error)
            return
        except (BrokerError, LocalProtocolError) as exc:
            # A top-level error code, or a request the protocol cannot express:
            # sending it again would not help.
            error = ProducerError(f"broker {broker_id} could not take the request: {exc}")
            error.__cause__ = exc
            for topic, partition, indices in parts:
                for i in indices:
                    results[i] = SendResult(topic, broker_id, partition, error=error)
            return
        except BrokerConnectionError as exc:
            await self._pool.failed(broker_id, conn)
            log.info("broker %d failed (%s); %d message(s) to retry", broker_id, exc,
                     sum(len(ix) for _, _, ix in parts))
            for _, _, indices in parts:
                for i in indices:
                    last_error[i] = exc
            return
        self._pool.succeeded(broker_id)
        self._extension_strikes.pop(broker_id, None)
        if acked is None:
            for topic, partition, indices in parts:
                shared = SendResult(topic, broker_id, partition)  # acks 0: nothing more is known
                for i in indices:
                    results[i] = shared
            return
        for (topic, partition, indices), part_payloads, enc, answer in zip(parts, payloads, encoded, acked):
            if answer.error == ErrorCode.NO_ERROR:
                offsets = enc.message_offsets(part_payloads, answer.base_offset)
                for i, (offset, next_offset) in zip(indices, offsets):
                    results[i] = SendResult(topic, broker_id, answer.partition, offset, next_offset)
                continue
            error = BrokerRejectedError(answer.error, topic, broker_id, partition)
            for i in indices:
                if answer.error in _RETRIABLE_CODES:
                    last_error[i] = error
                else:
                    results[i] = SendResult(topic, broker_id, partition, error=error)
