"""``Engine``: the one object both listeners, replication and the coordinators are given.

It holds the partition directory (which ``Partition`` serves a topic-partition
here), the topic admin (lifecycle and metadata view), the waiters (wake-ups
when a partition advances) and the broker's metrics, and it owns the one
append-then-acknowledge wait (``wait_acks``) that the 0.7 PRODUCE_ACKED, the
Kafka Produce, transaction markers and the coordinators' internal topics use.
Built once, in the broker's composition root (``server.py``).
"""

from __future__ import annotations

from ..metrics import BrokerMetrics
from ..seams import Replicas
from .directory import PartitionDirectory
from .errors import EngineError
from .partition import AckWait
from .topic_admin import TopicAdmin
from .waiters import VisibleEndWaiters


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
        """With ZooKeeper, the replica manager: replicated topics' partitions are its (§12)."""
        return self.directory.replicas

    async def wait_acks(self, waits: list[AckWait], deadline: float) -> list[EngineError]:
        """Wait for every acknowledgement: each one's final status, in order.

        NO_ERROR, the error a wait ended with, or REQUEST_TIMED_OUT for one still
        pending at ``deadline``.
        """
        statuses: list[EngineError | None] = [None] * len(waits)
        pending = list(enumerate(waits))
        while True:
            still = []
            for i, wait in pending:
                status = wait.status()
                if status is None:
                    still.append((i, wait))
                else:
                    statuses[i] = status
            pending = still
            if not pending:
                break
            # Not woken by shutdown: the flusher keeps running while the broker drains.
            if not await self.waiters.wait_any([wait.key for _, wait in pending], deadline, wake_on_close=False):
                for i, wait in pending:
                    statuses[i] = wait.status()
                break
        return [EngineError.REQUEST_TIMED_OUT if s is None else s for s in statuses]
