"""The marks of live Kafka groups in ZooKeeper (docs/protocol.md §17.7).

The marks are derived from the groups this broker coordinates: a group with
members has one, any other group none.  A change to any group only wakes the
one task that compares what the groups say with what it has written and
applies the difference in order, so a join and a leave in quick succession
can never land in ZooKeeper the wrong way round.  A new ZooKeeper session
(its ephemerals gone) makes the task write every mark again.
"""

from __future__ import annotations

import logging
from typing import Callable, Iterable

import trio

from trikafka.zk import kafka_groups
from trikafka.zk.client import ZooKeeperClient
from trikafka.zk.errors import ZooKeeperClientError

from .state import OffsetsPartition

logger = logging.getLogger(__name__)

# After a ZooKeeper error the task tries again this much later (a change wakes it sooner).
RETRY_S = 1.0


class LiveGroupMarks:
    """Keeps ``/trikafka/kafka-groups/<g>`` equal to this broker's groups that have members."""

    def __init__(self, zk: ZooKeeperClient, broker_id: int, loaded: Callable[[], Iterable[OffsetsPartition]]):
        self._zk = zk
        self._broker_id = broker_id
        self._loaded = loaded
        self._written: set[str] = set()
        self._session = -1
        self._wake = trio.Event()

    def changed(self) -> None:
        """A group may have gained its first member or lost its last: compare again."""
        self._wake.set()

    def live(self) -> set[str]:
        """The groups that must have a mark now."""
        return {group_id for groups in self._loaded() for group_id, group in groups.groups.items()
                if group.has_members}

    async def run(self) -> None:
        """Apply the difference after every change, until cancelled."""
        while True:
            self._wake = trio.Event()
            try:
                await self._apply()
            except ZooKeeperClientError as exc:
                logger.warning("live Kafka group marks not written (ZooKeeper: %s); trying again", exc)
                with trio.move_on_after(RETRY_S):
                    await self._wake.wait()
                continue
            async with trio.open_nursery() as nursery:
                async def session_changed() -> None:
                    await self._zk.session_generation.wait_value(lambda g: g != self._session)
                    nursery.cancel_scope.cancel()

                nursery.start_soon(session_changed)
                await self._wake.wait()
                nursery.cancel_scope.cancel()

    async def _apply(self) -> None:
        session = self._zk.session_generation.value
        if session != self._session:
            self._written.clear()  # the ephemerals of the old session are gone with it
            self._session = session
        live = self.live()
        for group_id in sorted(live - self._written):
            await kafka_groups.mark(self._zk, group_id, self._broker_id)
            self._written.add(group_id)
        for group_id in sorted(self._written - live):
            await kafka_groups.unmark(self._zk, group_id)
            self._written.discard(group_id)
