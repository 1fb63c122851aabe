"""The async path: queue, backpressure, the sender task that dispatches batches."""

from __future__ import annotations

from typing import Any

import trio


from .errors import ProducerError, QueueFullError
from .results import Delivery, SendResult
from .routing import _Message

_checkpoint_if_cancelled = trio.lowlevel.checkpoint_if_cancelled
_cancel_shielded_checkpoint = trio.lowlevel.cancel_shielded_checkpoint
_PRUNE_FAILED_AT = 10_000


class AsyncQueue:
    """``producer.type=async``: messages queued, sent by one task in batches.

    Part of ``Producer``: the state it uses is set up in ``Producer.__init__``.
    """

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
