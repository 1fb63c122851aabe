"""What a send reports: ``SendResult`` (per message), ``Delivery`` (its async handle),
``DeliveryFailedError``, and the producer's running counts, ``SendStats``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generator, Sequence

import trio

from .errors import ProducerError


@dataclass(frozen=True, slots=True)
class SendResult:
    """The outcome of one message.

    ``broker_id``/``partition`` say where it went (``partition`` is the one the
    broker chose when the producer sent -1, if the broker said so; with
    ``acks=0`` and -1 it stays -1).  With ``acks`` 1 or -1, ``offset`` is the
    byte offset of the message's entry (of the wrapper for compressed
    messages, which share it, docs/protocol.md §4) and ``next_offset`` the offset after
    that entry.  With ``acks=0`` both are ``None``: nobody answered.
    ``error`` is set, and the other fields are best known values, when the
    message was not delivered.
    """

    topic: str
    broker_id: int | None
    partition: int | None
    offset: int | None = None
    next_offset: int | None = None
    error: ProducerError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def raise_for_error(self) -> "SendResult":
        """Return ``self``, or raise its error."""
        if self.error is not None:
            raise self.error
        return self


@dataclass(slots=True)
class SendStats:
    """Counts of one producer: messages delivered and failed for good, requests sent (retries too)."""

    messages_sent: int = 0
    messages_failed: int = 0
    requests_sent: int = 0


class Delivery:
    """The handle ``send`` returns in both modes; ``await d.result()`` (or ``await d``) once sent.

    In sync mode it is already resolved when ``send`` returns; in async mode it
    resolves when the batch holding the message is answered.  Kept small on
    purpose: one is made per message on the hot path.
    """

    __slots__ = ("topic", "_result", "_event", "observed")

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self._result: SendResult | None = None
        self._event: trio.Event | None = None  # made only if somebody waits
        self.observed = False  # somebody looked at the outcome (close() reports the rest)

    @classmethod
    def resolved(cls, result: SendResult) -> "Delivery":
        """A delivery whose outcome is already known (sync mode)."""
        delivery = cls(result.topic)
        delivery._result = result
        return delivery

    @property
    def done(self) -> bool:
        return self._result is not None

    def resolve(self, result: SendResult) -> None:
        """Producer-internal: record the outcome and wake waiters (first outcome wins)."""
        if self._result is None:
            self._result = result
            if self._event is not None:
                self._event.set()

    def peek(self) -> SendResult | None:
        """The outcome if known (marks it observed), else ``None``."""
        if self._result is not None:
            self.observed = True
        return self._result

    async def wait(self) -> SendResult:
        """Wait for the outcome and return it, failed or not (marks it observed)."""
        if self._result is None:
            if self._event is None:
                self._event = trio.Event()
            await self._event.wait()
        else:
            await trio.lowlevel.checkpoint()
        self.observed = True
        assert self._result is not None
        return self._result

    async def result(self) -> SendResult:
        """Wait for the outcome; return it, or raise its error."""
        return (await self.wait()).raise_for_error()

    def __await__(self) -> Generator[Any, None, SendResult]:  # yields whatever Trio's scheduler takes
        """``await delivery`` is ``await delivery.result()``."""
        return self.result().__await__()

    def __repr__(self) -> str:
        return f"<Delivery {self.topic} {self._result!r}>"


class DeliveryFailedError(ProducerError):
    """Some messages of a batch (``send_batch``) or of the async queue were not delivered.

    ``results`` holds the failed ``SendResult``s (each with ``.error``);
    ``failed_count`` counts them all even when ``results`` keeps only a sample.
    ``all_results`` (``send_batch`` in sync mode) holds every message's result, in order.
    """

    def __init__(self, msg: str, results: Sequence[SendResult], failed_count: int | None = None, *,
                 all_results: Sequence[SendResult] | None = None):
        self.results = list(results)
        self.all_results = None if all_results is None else list(all_results)
        self.failed_count = len(self.results) if failed_count is None else failed_count
        first = next((r.error for r in self.results if r.error is not None), None)
        super().__init__(f"{msg}: {self.failed_count} message(s) not delivered"
                         + (f"; first error: {first}" if first is not None else ""))
