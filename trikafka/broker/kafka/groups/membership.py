"""The Trio side of group membership (docs/protocol.md §17.4): answers that wait, timers, writes.

``Group`` (``group.py``) decides; this class carries its decisions out:

* a JoinGroup or SyncGroup whose answer is not ready waits on a slot that
  the ``Effects`` of a later call (another member's join, the leader's
  assignment written, a timer) fill;
* a group's metadata is written (§17.3) when a decision asks for it; a
  SyncGroup is answered only once the assignment is committed;
* one task fires the groups' deadlines (sessions, rebalance and initial-delay
  ends), sleeping until the earliest one or until a request changes a group.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Awaitable, Callable, Iterable, Sequence

import trio
from kio.schema.errors import ErrorCode

from trikafka.kafka.group_records import GroupValue, RecordKey, RecordValue

from .effects import Effects
from .group import Group
from .member import NO_DEADLINE, JoinAnswer, SyncAnswer
from .state import OffsetsPartition

logger = logging.getLogger(__name__)

# A JoinGroup or SyncGroup waits at most this much longer than its rebalance timeout: the
# group's own deadlines answer it before then, unless its partition is dropped unanswered.
WAIT_MARGIN_S = 5.0

_SlotKey = tuple[str, str, str]  # (group id, member id, "join" | "sync")


@dataclass(slots=True)
class _Slot:
    done: trio.Event
    answer: JoinAnswer | SyncAnswer | None = None


def _nothing() -> None:
    pass


class CoordinatorMembership:
    """Carries out the groups' decisions for one broker's coordinator."""

    def __init__(self, write: Callable[[OffsetsPartition, GroupValue, str], Awaitable[ErrorCode]],
                 loaded: Callable[[], Iterable[OffsetsPartition]], wall_ms: Callable[[], int],
                 write_records: Callable[[OffsetsPartition, Sequence[tuple[RecordKey, RecordValue | None]]],
                                         Awaitable[ErrorCode]] | None = None,
                 on_change: Callable[[], None] = _nothing):
        self._write = write
        self._write_records = write_records  # a consumer group's records (§17.9)
        self._loaded = loaded
        self._wall_ms = wall_ms
        self._slots: dict[_SlotKey, _Slot] = {}
        self._wake = trio.Event()
        self._nursery: trio.Nursery | None = None
        self.rebalances = 0  # completed rebalances, for the metrics (§17.6)
        # Called whenever a group may have changed: the live-group marks (§17.7) compare again.
        self._on_change = on_change

    @staticmethod
    def now_ms() -> int:
        """The groups' clock: Trio's monotonic time in ms."""
        return int(trio.current_time() * 1000)

    def start(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery
        nursery.start_soon(self._run_timers)

    # ----------------------------------------------------------------- requests

    async def join(self, groups: OffsetsPartition, group: Group, member_id: str, answer: JoinAnswer | None,
                   effects: Effects, timeout_ms: int) -> JoinAnswer:
        """The JoinGroup answer for ``member_id``: ready, or once the rebalance completes."""
        if answer is None:
            answer = effects.joins.pop(member_id, None)
        slot = None
        if answer is None:
            slot = self._slots[(group.group_id, member_id, "join")] = _Slot(trio.Event())
        if effects.store and answer is not None and answer.error == ErrorCode.none:
            effects.store = False
            error = await self.store(groups, group)
            if error != ErrorCode.none:
                answer = JoinAnswer(error, member_id)
        await self.carry_out(groups, group, effects)
        if slot is None:
            assert answer is not None
            return answer
        found = await self._wait((group.group_id, member_id, "join"), slot, timeout_ms)
        assert found is None or isinstance(found, JoinAnswer)
        return found or JoinAnswer(ErrorCode.rebalance_in_progress, member_id)

    async def sync(self, groups: OffsetsPartition, group: Group, member_id: str, answer: SyncAnswer | None,
                   effects: Effects, timeout_ms: int) -> SyncAnswer:
        """The SyncGroup answer for ``member_id``: ready, or once the assignment is written."""
        if answer is not None:
            await self.carry_out(groups, group, effects)
            return answer
        key = (group.group_id, member_id, "sync")
        slot = self._slots[key] = _Slot(trio.Event())
        await self.carry_out(groups, group, effects)
        found = await self._wait(key, slot, timeout_ms)
        assert found is None or isinstance(found, SyncAnswer)
        return found or SyncAnswer(ErrorCode.rebalance_in_progress)

    async def _wait(self, key: _SlotKey, slot: _Slot, timeout_ms: int) -> JoinAnswer | SyncAnswer | None:
        try:
            with trio.move_on_after(timeout_ms / 1000 + WAIT_MARGIN_S):
                await slot.done.wait()
            return slot.answer
        finally:
            if self._slots.get(key) is slot:
                del self._slots[key]

    # ----------------------------------------------------------------- decisions

    async def carry_out(self, groups: OffsetsPartition, group: Group, effects: Effects) -> None:
        """Answer the waiting requests ``effects`` names; write the metadata when asked (a SyncGroup's
        answers come from that write's outcome)."""
        self.poke()
        self._count(group, effects)
        self._answer(group.group_id, effects)
        if effects.store:
            await self.store(groups, group)

    def carry_out_soon(self, groups: OffsetsPartition, group: Group, effects: Effects) -> None:
        """As ``carry_out``, from a timer: a write runs in the background (no request waits on it)."""
        self._on_change()
        self._count(group, effects)
        self._answer(group.group_id, effects)
        if effects.store and self._nursery is not None:
            self._nursery.start_soon(self.store, groups, group)
        if effects.consumer_changed and self._nursery is not None:
            self._nursery.start_soon(self.store_consumer, groups, group)

    async def store_consumer(self, groups: OffsetsPartition, group: Group) -> ErrorCode:
        """Write the records that make the log say what the group's consumer-protocol state says
        (§17.9); nothing when it says that already."""
        consumer = group.consumer
        if consumer is None or self._write_records is None:
            return ErrorCode.none
        records, view = consumer.changes()
        if not records:
            return ErrorCode.none
        error = await self._write_records(groups, records)
        if error == ErrorCode.none:
            consumer.written(view)
        else:
            logger.info("group %s: consumer group records not written: %s", group.group_id, error.name)
        return error

    async def store(self, groups: OffsetsPartition, group: Group) -> ErrorCode:
        """Write the group's metadata as it is now, then tell the group how the write ended."""
        generation = group.generation
        value = group.metadata_value(self._wall_ms())
        error = await self._write(groups, value, group.group_id)
        effects = group.stored(self.now_ms(), generation, error)
        if error != ErrorCode.none:
            logger.info("group %s: metadata of generation %d not written: %s", group.group_id, generation,
                        error.name)
        self.carry_out_soon(groups, group, effects)
        return error

    def _count(self, group: Group, effects: Effects) -> None:
        if effects.rebalanced:
            self.rebalances += 1
            logger.info("group %s: generation %d, %d members, protocol %s", group.group_id, group.generation,
                        len(group.members), group.protocol)
        for member_id in effects.expired:
            logger.info("group %s: member %s removed: its session or the rebalance timed out", group.group_id,
                        member_id)

    def _answer(self, group_id: str, effects: Effects) -> None:
        for kind, answers in (("join", effects.joins), ("sync", effects.syncs)):
            for member_id, answer in answers.items():
                slot = self._slots.get((group_id, member_id, kind))
                if slot is not None and not slot.done.is_set():
                    slot.answer = answer
                    slot.done.set()

    def drop(self, groups: OffsetsPartition) -> None:
        """The partition is no longer this broker's: its waiting requests answer NOT_COORDINATOR."""
        self._on_change()
        for (group_id, member_id, kind), slot in list(self._slots.items()):
            if group_id in groups.groups and not slot.done.is_set():
                slot.answer = (JoinAnswer(ErrorCode.not_coordinator, member_id) if kind == "join"
                               else SyncAnswer(ErrorCode.not_coordinator))
                slot.done.set()

    # ----------------------------------------------------------------- timers

    def poke(self) -> None:
        """A group changed: its deadlines may be earlier than the timer task's sleep."""
        self._wake.set()
        self._on_change()

    async def _run_timers(self) -> None:
        while True:
            deadlines = [d for groups in self._loaded() for group in groups.groups.values()
                         if (d := group.next_deadline_ms()) != NO_DEADLINE]
            wake_at_s = (min(deadlines) + 1) / 1000 if deadlines else math.inf
            with trio.move_on_at(wake_at_s):
                await self._wake.wait()
            self._wake = trio.Event()
            now_ms = self.now_ms()
            for groups in list(self._loaded()):
                for group in list(groups.groups.values()):
                    deadline = group.next_deadline_ms()
                    if deadline != NO_DEADLINE and deadline <= now_ms:
                        self.carry_out_soon(groups, group, group.tick(now_ms))
