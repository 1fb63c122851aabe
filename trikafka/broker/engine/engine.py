"""``Engine``: the one object both listeners, replication and the coordinators are given.

It holds the partition directory (which ``Partition`` serves a topic-partition
here), the topic admin (lifecycle and metadata view), the waiters (wake-ups
when a partition advances) and the broker's metrics, and it owns the one
append-then-acknowledge path (``append``) that the 0.7 PRODUCE_ACKED, the
Kafka Produce, transaction markers and the coordinators' internal topics use.
Built once, in the broker's composition root (``server.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from trikafka.kafka.batch import BatchError
from trikafka.wire.errors import MessageError

from ..metrics import BrokerMetrics
from ..seams import AppendResult, KafkaAppend, Replicas
from .directory import PartitionDirectory
from .errors import EngineError
from .partition import AckWait, LocalPartition, Partition, Refused
from .topic_admin import TopicAdmin
from .waiters import AdvanceCall, VisibleEndWaiters

# Both protocols' "acknowledge once the ISR holds it" (unreplicated: once a flush made it
# visible, or under acks.all.fsync=false a Kafka-format append, §12.6): PRODUCE_ACKED's acks -1
# (§9.2) and Kafka's acks -1 (§16.4).  Other acks answer once appended.
ACKS_ALL = -1
ACKS_LEADER = 1  # answered once in the leader's log: no flush, no follower round waited for


@dataclass(frozen=True, slots=True)
class PartitionWrite:
    """One partition's records for ``Engine.append``.

    ``kafka``: v2 record batches the leader numbers (§16.6), readable at once,
    so the partition's long polls are woken.  ``client``: a client's records
    count in the broker's messages-in metrics; the broker's own (transaction
    markers, the coordinators' internal topics) do not.
    """

    partition: Partition
    records: bytes | bytearray
    kafka: KafkaAppend | None = None
    client: bool = True


# One write's outcome: its ``AppendResult`` (appended, and acknowledged when acks asked it);
# an ``EngineError`` (the partition refused it, or its acknowledgement failed or timed out);
# or the exception a bad set raised (``MessageError``, ``BatchError``: nothing appended),
# which each listener answers in its own words.
AppendOutcome = AppendResult | EngineError | MessageError | BatchError


class Appending:
    """``Engine.append_pipelined``'s writes, appended; ``acknowledged`` waits for their acks."""

    def __init__(self, waiters: VisibleEndWaiters, outcomes: list[AppendOutcome], waits: list[tuple[int, AckWait]],
                 deadline: float):
        self.outcomes = outcomes  # as appended; ``acknowledged`` replaces the parts whose acks failed
        self._waiters = waiters
        self._waits = waits
        self.deadline = deadline  # when ``acknowledged`` answers REQUEST_TIMED_OUT for what is still pending
        self._advance_call: AdvanceCall | None = None

    def when_acknowledged(self, callback: Callable[[], None]) -> bool:
        """Call ``callback()`` once every acknowledgement is met or failed (then ``acknowledged``
        returns without waiting), on the loop from the advance that settled the last one, never
        before this returns; not at the deadline (``cancel_when_acknowledged`` then).  False, with
        nothing registered, when none is pending now."""
        keys = [wait.key for _, wait in self._waits if wait.status() is None]
        if not keys:
            return False

        def advanced() -> None:
            pending = [wait.key for _, wait in self._waits if wait.status() is None]
            if pending:
                self._advance_call = self._waiters.call_on_advance(pending, advanced)
                return
            self._advance_call = None
            callback()

        self._advance_call = self._waiters.call_on_advance(keys, advanced)
        return True

    def cancel_when_acknowledged(self) -> None:
        """Drop ``when_acknowledged``'s callback, if it was not called."""
        if self._advance_call is not None:
            self._advance_call.cancel()
            self._advance_call = None

    def acknowledged_now(self) -> list[AppendOutcome] | None:
        """Every write's final outcome when no acknowledgement is pending (each met or failed at the
        append, e.g. under ``acks.all.fsync=false``, §12.6), with no wait and no checkpoint; else None."""
        statuses = [wait.status() for _, wait in self._waits]
        if None in statuses:
            return None
        return self._settled(statuses)

    async def acknowledged(self) -> list[AppendOutcome]:
        """Every write's final outcome, once each acknowledgement is met, failed or timed out
        (REQUEST_TIMED_OUT for one still pending at the deadline)."""
        return self._settled(await settle(self._waiters, [wait for _, wait in self._waits], self.deadline))

    def _settled(self, statuses: Sequence[EngineError | None]) -> list[AppendOutcome]:
        for (i, _), status in zip(self._waits, statuses):
            if status != EngineError.NO_ERROR:
                self.outcomes[i] = EngineError.REQUEST_TIMED_OUT if status is None else status
        self._waits = []
        return self.outcomes


async def settle(waiters: VisibleEndWaiters, waits: Sequence[AckWait], deadline: float) -> list[EngineError]:
    """Each wait's final status, once it is met or failed, or REQUEST_TIMED_OUT for one still pending at
    ``deadline``; woken through the one waiter table on the waits' keys (acks -1, DeleteRecords)."""
    statuses: list[EngineError | None] = [None] * len(waits)
    pending = list(range(len(waits)))
    while pending:
        for i in pending:
            statuses[i] = waits[i].status()
        pending = [i for i in pending if statuses[i] is None]
        # Not woken by shutdown: the flusher keeps running while the broker drains.
        if pending and not await waiters.wait_any([waits[i].key for i in pending], deadline, wake_on_close=False):
            for i in pending:
                statuses[i] = waits[i].status()
            break
    return [EngineError.REQUEST_TIMED_OUT if status is None else status for status in statuses]


class Engine:
    """A broker's partitions, topics, wake-ups and metrics, shared by every listener."""

    def __init__(self, *, directory: PartitionDirectory, admin: TopicAdmin, waiters: VisibleEndWaiters,
                 metrics: BrokerMetrics):
        self.directory = directory
        self.admin = admin
        self.waiters = waiters
        self.metrics = metrics

    @property
    def replicas(self) -> Replicas | None:
        """With ZooKeeper, the broker's replication: replicated topics' partitions are its (§12)."""
        return self.directory.replicas

    async def append(self, writes: Sequence[PartitionWrite], acks: int, deadline: float) -> list[AppendOutcome]:
        """Append every write in order and return once ``acks`` are met: each write's outcome.

        acks ``ACKS_ALL`` waits until the ISR (an unreplicated partition: a
        flush, unless ``acks.all.fsync`` is off, §12.6) holds every write, or
        ``deadline`` (REQUEST_TIMED_OUT).
        """
        appending = await self.append_pipelined(writes, acks, deadline)
        return await appending.acknowledged()

    async def append_pipelined(self, writes: Sequence[PartitionWrite], acks: int, deadline: float) -> Appending:
        """``append``, returning once the writes are appended; ``Appending.acknowledged`` waits.

        A listener that pipelines (the Kafka Produce, §16.2) appends the
        requests that follow before it awaits this one's acknowledgement, so
        one flush or one follower round covers them all.
        """
        outcomes: list[AppendOutcome] = []
        appended: list[tuple[int, Partition, int]] = []  # (index in outcomes, partition, next offset)
        for write in writes:
            target = write.partition
            try:
                result = await target.append(write.records, acks, kafka=write.kafka)
            except Refused as exc:
                outcomes.append(exc.error)
                continue
            except (MessageError, BatchError) as exc:
                outcomes.append(exc)
                continue
            if write.client:
                self.metrics.count_in(target.key[0], result.message_count, result.next_offset - result.base_offset)
            if write.kafka is not None and isinstance(target, LocalPartition):
                # Readable to the log end at once (unreplicated, §16.6); a replicated partition's
                # readers and acks wait for its high watermark, which wakes them when it moves.
                self.waiters.notify(target.key)
            if acks == ACKS_ALL:
                appended.append((len(outcomes), target, result.next_offset))
            outcomes.append(result)
        # Every write appended before any wait starts: one flush of a log covers all its parts.
        waits = [(i, target.ack_wait(next_offset)) for i, target, next_offset in appended]
        return Appending(self.waiters, outcomes, waits, deadline)
