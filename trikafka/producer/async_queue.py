"""The async path (``producer.type=async``): the queue, backpressure, the sender task.

A sender task dispatches ``batch_size`` messages as soon as that many are
queued, or whatever is queued once the oldest has waited ``queue_time_s``.
At most ``queue_size`` messages are queued or in flight; ``put`` waits for
room beyond that (with ``enqueue_timeout_s`` it gives up with
``QueueFullError``).  One batch is in flight at a time, so messages of one
partition stay in order unless a retry re-routes them.
"""

from __future__ import annotations

from typing import Awaitable, Callable, Sequence

import trio

from .config import ProducerConfig
from .errors import ProducerClosedError, QueueFullError
from .partitioner import Key
from .results import Delivery, SendResult, SendStats
from .routing import Message

_checkpoint_if_cancelled = trio.lowlevel.checkpoint_if_cancelled
_cancel_shielded_checkpoint = trio.lowlevel.cancel_shielded_checkpoint
_PRUNE_FAILED_AT = 10_000

# Sends a batch and gives one result per message, in order (``Dispatcher.deliver``).
Deliver = Callable[[Sequence[Message]], Awaitable[list[SendResult]]]


class SendQueue:
    """Queued messages and the one task that sends them in batches through ``deliver``.

    ``check_open`` raises if the producer no longer takes messages (a ``put``
    waiting for room calls it each time room may have come).  Failures are
    counted in ``stats`` and kept until ``unobserved_failures`` reports them.
    """

    def __init__(self, config: ProducerConfig, deliver: Deliver, *, check_open: Callable[[], None],
                 stats: SendStats) -> None:
        self._deliver = deliver
        self._check_open = check_open
        self._stats = stats
        self._batch_size = config.batch_size
        self._queue_size = config.queue_size
        self._queue_time_s = config.queue_time_s
        self._enqueue_timeout_s = config.enqueue_timeout_s
        self._pending: list[Message] = []
        self._first_queued_at = 0.0
        self.occupancy = 0  # messages queued + in flight
        self._wake_sender = trio.Event()
        self._progress = trio.lowlevel.ParkingLot()  # occupancy went down
        self._flush_requests = 0
        self._in_flight: list[Message] = []
        self._sender_scope = trio.CancelScope()
        self._sender_done = trio.Event()
        self._failed: list[Delivery] = []

    async def put(self, topic: str, key: Key, payload: bytes) -> Delivery:
        """Queue a checked payload; returns its ``Delivery`` (the producer's hot path).

        It always checks for cancellation but yields to the scheduler only when
        a batch is full or the queue is: a loop of puts lets the sender run once
        per batch.
        """
        if self.occupancy >= self._queue_size:
            await self._wait_for_room()
        else:
            await _checkpoint_if_cancelled()
        delivery = Delivery(topic)
        pending = self._pending
        if not pending:
            self._first_queued_at = trio.current_time()
            self._wake_sender.set()  # start the queue_time clock
        pending.append((topic, key, payload, delivery))
        self.occupancy += 1
        if len(pending) >= self._batch_size:
            self._wake_sender.set()
            # Let the sender run now: it has a full batch (cancellation was already
            # checked above, so this needs no second cancellation point).
            await _cancel_shielded_checkpoint()
        return delivery

    async def _wait_for_room(self) -> None:
        timeout_s = self._enqueue_timeout_s
        with trio.move_on_after(float("inf") if timeout_s is None else timeout_s):
            while self.occupancy >= self._queue_size:
                self._check_open()
                await self._progress.park()
            return
        raise QueueFullError(f"{self.occupancy} messages queued or in flight (queue_size "
                             f"{self._queue_size}) for {timeout_s} s")

    async def flush(self) -> None:
        """Wait until every queued message is delivered or failed."""
        self._flush_requests += 1
        self._wake_sender.set()
        try:
            while self.occupancy > 0:
                await self._progress.park()
        finally:
            self._flush_requests -= 1

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The sender task (``nursery.start``); ``drain`` stops it."""
        try:
            with self._sender_scope:
                task_status.started()
                await self._send_batches()
        finally:
            self._sender_done.set()

    async def _send_batches(self) -> None:
        batch_size = self._batch_size
        while True:
            pending = self._pending
            if not pending:
                self._wake_sender = trio.Event()
                await self._wake_sender.wait()
                continue
            if len(pending) < batch_size and not self._flush_requests:
                deadline = self._first_queued_at + self._queue_time_s
                if trio.current_time() < deadline:
                    self._wake_sender = trio.Event()
                    with trio.move_on_at(deadline):
                        await self._wake_sender.wait()
                    continue
            batch = pending[:batch_size]
            del pending[:batch_size]
            # What is left keeps the old deadline: each of those messages came
            # no earlier than the first one did, so none waits past queue_time_s.
            self._in_flight = batch
            results = await self._deliver(batch)
            self._in_flight = []
            self._finish_batch(batch, results)

    async def drain(self, *, graceful: bool) -> None:
        """Stop the sender and deliver what is left (the caller bounds the time).

        ``graceful``: flush as usual first.  Otherwise (unwinding an exception,
        maybe a Cancelled that also hit the sender mid-batch) the interrupted
        batch and the queue are delivered from here.  An interrupted batch may
        have partly reached a broker before, so it can be duplicated, never
        silently dropped.
        """
        if graceful:
            await self.flush()
        self._sender_scope.cancel()
        await self._sender_done.wait()
        leftovers = [m for m in self._in_flight if m[3] is not None and not m[3].done] + self._pending
        self._in_flight, self._pending = leftovers, []
        for start in range(0, len(leftovers), self._batch_size):
            batch = leftovers[start:start + self._batch_size]
            self._finish_batch(batch, await self._deliver(batch))
        self._in_flight = []

    def _finish_batch(self, batch: list[Message], results: list[SendResult]) -> None:
        for message, result in zip(batch, results):
            delivery = message[3]
            if delivery is not None:
                delivery.resolve(result)
                if result.error is not None:
                    self._failed.append(delivery)
        if len(self._failed) > _PRUNE_FAILED_AT:
            # Failures somebody already looked at need no report at close.
            self._failed = [d for d in self._failed if not d.observed]
        self.occupancy -= len(batch)
        self._progress.unpark_all()

    def close(self) -> None:
        """The producer closed: whatever the sender had not finished fails; waiters wake."""
        closed = ProducerClosedError("the producer closed before this message was delivered")
        for message in self._in_flight + self._pending:
            delivery = message[3]
            if delivery is not None and not delivery.done:
                delivery.resolve(SendResult(message[0], None, None, error=closed))
                self._failed.append(delivery)
                self._stats.messages_failed += 1
        self._in_flight, self._pending = [], []
        self.occupancy = 0
        self._progress.unpark_all()

    def unobserved_failures(self) -> list[Delivery]:
        """Failed deliveries nobody looked at (through ``result()``/``wait()``/``peek()``)."""
        return [d for d in self._failed if not d.observed]


__all__ = ["Deliver", "SendQueue"]
