"""The simulated group coordinator of the Kafka-groups world (docs/simulation.md), over the real ``Group``.

``SimCoordinator`` answers one broker's group requests as the Trio side does
(``membership_api.py``, ``membership.py``, ``offsets_api.py``,
``coordinator.py``), calling the real sans-I/O state machine
(``OffsetsPartition``, ``Group``): ``check_commit`` before a commit is
written, the metadata written before a SyncGroup is answered, a JoinGroup or
SyncGroup that waits held in a slot the group's ``Effects`` fill, timers at
the group's ``next_deadline_ms``.  Every state change is written as
``__consumer_offsets`` records (the real ``group_records`` encoding) to a
``ReplicatedLog``: a record counts once every live replica has it (the ISR,
docs/protocol.md §17.3), and it is applied only then.  A coordinator built
after a failover loads the group from the committed records alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

from kio.schema.errors import ErrorCode

from trikafka.broker.kafka.groups.effects import Effects
from trikafka.broker.kafka.groups.group import Group, GroupSettings
from trikafka.broker.kafka.groups.member import NO_DEADLINE, JoinAnswer, SyncAnswer
from trikafka.broker.kafka.groups.membership import WAIT_MARGIN_S
from trikafka.broker.kafka.groups.state import OffsetsPartition
from trikafka.kafka.consumer_protocol import PROTOCOL_TYPE
from trikafka.kafka.group_records import (GroupKey, OffsetKey, OffsetValue, RecordKey, RecordValue, decode_record,
                                          encode_key, encode_value)

from .determinism import Trace

Records = Sequence[tuple[RecordKey, RecordValue | None]]
Written = Callable[[int], None]  # called with the log offset of a write's first record once it is committed
Reply = Callable[[object], None]  # sends an answer back to the member (object: the answer of its request kind)
CLIENT_HOST = "/sim"
NO_OFFSET = -1
MS_PER_S = 1000


class LogClock(Protocol):
    """What a ``ReplicatedLog`` needs of a world: its clock and its replication delays."""

    now_ms: int

    def at(self, when_ms: int, callback: Callable[..., None], *args: Any) -> None: ...
    def replication_delay_ms(self) -> int: ...


class GroupWorld(Protocol):
    """What the coordinator and the members see of the world (``kafka_groups.KafkaGroupsWorld``)."""

    now_ms: int
    group_id: str
    topic: str
    partitions: int
    log_ends: list[int]
    trace: Trace

    def at(self, when_ms: int, callback: Callable[..., None], *args: Any) -> None:
        """Call ``callback(*args)`` at ``when_ms`` (Any: each callback's own arguments)."""

    def wall_ms(self) -> int: ...
    def replication_delay_ms(self) -> int: ...
    def label(self, member_id: str) -> str: ...
    def committed(self, group: Group, partitions: list[int]) -> None: ...
    def send(self, member: Any, kind: str, request: object, answered: Callable[[object], None]) -> None:
        """Send ``member``'s request (Any: a ``kafka_members.SimMember``, which imports this module)."""

    def name_member(self, member_id: str, name: str) -> None: ...
    def owns(self, member: Any, generation: int, partitions: tuple[int, ...]) -> None: ...
    def consumed(self, member: Any, partition: int, start: int, end: int) -> None: ...
    def acknowledged(self, member: Any, generation: int, offsets: dict[int, int]) -> None: ...


@dataclass
class ReplicatedLog:
    """A coordinator's partition (``__consumer_offsets``, ``__transaction_state``): records appended by
    the leader, committed once the replicas have them (in log order), truncated to the committed end
    when the leader crashes.  ``append`` takes group records; ``append_encoded`` any encoded ones."""

    entries: list[tuple[bytes, bytes | None]] = field(default_factory=list)
    committed: int = 0  # records below are on every in-sync replica
    leader_epoch: int = 0
    waiting: list[tuple[int, Written, int]] = field(default_factory=list)  # (end, callback, first offset)
    last_commit_ms: int = 0  # a later write never commits before an earlier one

    def append(self, records: Records, world: LogClock, written: Written) -> None:
        self.append_encoded([(encode_key(key), encode_value(value)) for key, value in records], world, written)

    def append_encoded(self, entries: Sequence[tuple[bytes, bytes | None]], world: LogClock,
                       written: Written) -> None:
        first = len(self.entries)
        self.entries += entries
        end, epoch = len(self.entries), self.leader_epoch
        self.last_commit_ms = max(self.last_commit_ms, world.now_ms + world.replication_delay_ms())
        self.waiting.append((end, written, first))
        world.at(self.last_commit_ms, lambda: self._replicated(end, epoch))

    def _replicated(self, end: int, epoch: int) -> None:
        if epoch != self.leader_epoch:
            return  # the leader that wrote it crashed first: the record went with it
        self.committed = max(self.committed, end)
        done = [w for w in self.waiting if w[0] <= self.committed]
        self.waiting = [w for w in self.waiting if w[0] > self.committed]
        for _end, written, first in done:
            written(first)

    def crash_leader(self) -> int:
        """The leader died: what it had not replicated is lost; the number of records lost."""
        lost = len(self.entries) - self.committed
        del self.entries[self.committed:]
        self.waiting.clear()
        self.leader_epoch += 1
        return lost

    def committed_entries(self) -> list[tuple[bytes, bytes | None]]:
        """The encoded records every in-sync replica has, in log order."""
        return self.entries[:self.committed]

    def committed_records(self) -> list[tuple[RecordKey, RecordValue | None, int]]:
        return [(*decode_record(key, value), offset) for offset, (key, value) in enumerate(self.entries[:self.committed])]


@dataclass(frozen=True)
class JoinRequest:
    member_id: str
    client_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]


class SimCoordinator:
    """One broker's coordinator of the group's partition, from its load to its broker's crash."""

    def __init__(self, world: GroupWorld, broker: int, log: ReplicatedLog, settings: GroupSettings):
        self.world, self.broker, self.log = world, broker, log
        self.partition = OffsetsPartition(0, settings)
        self.alive = True
        self.loaded = False
        self._slots: dict[tuple[str, str], tuple[int, Reply]] = {}  # (member id, kind) -> (slot id, reply)
        self._next_slot = 0
        self._armed_ms = NO_DEADLINE

    def load(self) -> int:
        """Build the groups from the committed records alone (coordinator.py ``_load``); the record count."""
        records = self.log.committed_records()
        for key, value, offset in records:
            self.partition.apply(key, value, offset)
        self.partition.activate(self.world.now_ms)
        self.loaded = True
        self._arm()
        return len(records)

    def group(self) -> Group:
        return self.partition.group_or_new(self.world.group_id)

    # ----------------------------------------------------------------- requests (membership_api.py)

    def join(self, request: JoinRequest, reply: Reply) -> None:
        group = self.group()
        now = self.world.now_ms
        member_id, answer, effects = group.join(now, request.member_id, None, request.client_id, CLIENT_HOST,
                                                request.session_timeout_ms, request.rebalance_timeout_ms,
                                                PROTOCOL_TYPE, request.protocols, True)
        if answer is None:
            answer = effects.joins.pop(member_id, None)
        if answer is None:
            self._hold(member_id, "join", request.rebalance_timeout_ms, reply)
        if effects.store and answer is not None and answer.error == ErrorCode.none:
            effects.store = False  # the new member id is written before anyone is answered (KIP-345)
            ready = answer

            def stored() -> None:
                self._carry_out(group, effects)
                reply(ready)

            self._store(group, stored)
        else:
            self._carry_out(group, effects)
            if answer is not None:
                reply(answer)
        self.partition.forget_if_empty(self.world.group_id)
        self._arm()

    def sync(self, member_id: str, generation: int, assignments: dict[str, bytes], protocol: str | None,
             reply: Reply) -> None:
        group = self.partition.group(self.world.group_id)
        if group is None:
            reply(SyncAnswer(ErrorCode.unknown_member_id))
            return
        answer, effects = group.sync(self.world.now_ms, member_id, None, generation, PROTOCOL_TYPE, protocol,
                                     assignments)
        if answer is None:
            member = group.members.get(member_id)
            self._hold(member_id, "sync", member.rebalance_timeout_ms if member is not None else 0, reply)
        self._carry_out(group, effects)
        if answer is not None:
            reply(answer)
        self._arm()

    def heartbeat(self, member_id: str, generation: int, reply: Reply) -> None:
        group = self.partition.group(self.world.group_id)
        reply(ErrorCode.unknown_member_id if group is None
              else group.heartbeat(self.world.now_ms, member_id, None, generation))
        self._arm()

    def commit(self, member_id: str, generation: int, offsets: dict[int, int], reply: Reply) -> None:
        """OffsetCommit (offsets_api.py): the member's right to commit checked, then its records written."""
        group = self.group()
        refused = group.check_commit(member_id, generation, None, self.world.now_ms)
        if refused != ErrorCode.none:
            reply({p: refused for p in offsets})
            return
        topic, wall_ms = self.world.topic, self.world.wall_ms()
        records: list[tuple[RecordKey, RecordValue | None]] = [
            (OffsetKey(self.world.group_id, topic, p), OffsetValue(offset, -1, "", wall_ms))
            for p, offset in sorted(offsets.items())]
        group.offsets.pending += 1

        def written() -> None:
            group.offsets.pending -= 1
            self.partition.forget_if_empty(self.world.group_id)
            self.world.committed(group, sorted(offsets))
            reply({p: ErrorCode.none for p in offsets})

        self._write(records, written)
        self._arm()

    def fetch(self, partitions: Sequence[int]) -> dict[int, int]:
        """OffsetFetch: each partition's committed offset (-1: none)."""
        group = self.partition.group(self.world.group_id)
        found = {p: group.offsets.get((self.world.topic, p)) if group is not None else None for p in partitions}
        return {p: NO_OFFSET if c is None else c.value.offset for p, c in found.items()}

    def leave(self, member_id: str, reply: Reply) -> None:
        group = self.partition.group(self.world.group_id)
        if group is None:
            reply(ErrorCode.unknown_member_id)
            return
        (error,), effects = group.leave(self.world.now_ms, [(member_id, None)])
        self._carry_out(group, effects)
        reply(error)
        self._arm()

    # ----------------------------------------------------------------- decisions (membership.py)

    def _hold(self, member_id: str, kind: str, timeout_ms: int, reply: Reply) -> None:
        """A request whose answer an ``Effects`` brings later; past its wait it answers REBALANCE_IN_PROGRESS."""
        self._next_slot += 1
        slot = self._next_slot
        self._slots[(member_id, kind)] = (slot, reply)
        late = (JoinAnswer(ErrorCode.rebalance_in_progress, member_id) if kind == "join"
                else SyncAnswer(ErrorCode.rebalance_in_progress))
        self.world.at(self.world.now_ms + timeout_ms + int(WAIT_MARGIN_S * MS_PER_S),
                      lambda: self._answer_slot(member_id, kind, late, slot))

    def _answer_slot(self, member_id: str, kind: str, answer: JoinAnswer | SyncAnswer, slot: int = -1) -> None:
        held = self._slots.get((member_id, kind))
        if held is None or not self.alive or (slot >= 0 and held[0] != slot):
            return
        del self._slots[(member_id, kind)]
        held[1](answer)

    def _carry_out(self, group: Group, effects: Effects) -> None:
        if effects.rebalanced:
            self.world.trace.add(f"coordinator {self.broker}: generation {group.generation}, "
                                 f"{len(group.members)} members")
        for member_id in effects.expired:
            self.world.trace.add(f"coordinator {self.broker}: {self.world.label(member_id)} removed by its deadline")
        for kind, answers in (("join", effects.joins), ("sync", effects.syncs)):
            for member_id, answer in answers.items():
                self._answer_slot(member_id, kind, answer)
        if effects.store:
            self._store(group, lambda: None)

    def _store(self, group: Group, then: Callable[[], None]) -> None:
        """Write the group's metadata as it is now; once committed, tell the group (``Group.stored``)."""
        generation = group.generation
        value = group.metadata_value(self.world.wall_ms())

        def written() -> None:
            self._carry_out(group, group.stored(self.world.now_ms, generation, ErrorCode.none))
            then()
            self._arm()

        self._write([(GroupKey(group.group_id), value)], written)

    def _write(self, records: Records, done: Callable[[], None]) -> None:
        """Append ``records``; once committed, apply them to the partition (coordinator.py ``write``)."""
        def written(first: int) -> None:
            if not self.alive:
                return
            for i, (key, value) in enumerate(records):
                self.partition.apply(key, value, first + i)
            done()

        self.log.append(records, self.world, written)

    # ----------------------------------------------------------------- timers

    def _arm(self) -> None:
        """Fire the groups' deadlines: one timer at the earliest (membership.py ``_run_timers``)."""
        deadlines = [d for g in self.partition.groups.values() if (d := g.next_deadline_ms()) != NO_DEADLINE]
        if not deadlines or not self.alive:
            return
        wake_ms = min(deadlines) + 1
        if self._armed_ms != NO_DEADLINE and self._armed_ms <= wake_ms:
            return
        self._armed_ms = wake_ms
        self.world.at(wake_ms, self._fire)

    def _fire(self) -> None:
        if not self.alive or self.world.now_ms < self._armed_ms:
            return
        self._armed_ms = NO_DEADLINE
        now = self.world.now_ms
        for group in list(self.partition.groups.values()):
            deadline = group.next_deadline_ms()
            if deadline != NO_DEADLINE and deadline <= now:
                self._carry_out(group, group.tick(now))
        self._arm()
