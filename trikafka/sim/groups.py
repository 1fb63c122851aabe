"""Group consumers in the simulated world, and the promises they are held to.

Three members (consumer ids ``m0``, ``m1``, ``m2``) of group ``sim`` read the
replicated topic through the real ``GroupConsumer``, each on its own fake
ZooKeeper session, with a short autocommit interval.  A member runs as a
series of *incarnations* (processes); a supervisor starts a new one when one
ends.  Their faults:

* ``member-crash``: the process dies (its ZooKeeper client goes silent, its
  session expires later); after a while a new process with the same consumer
  id starts, perhaps while the old session still holds its nodes;
* ``member-pause``: the process freezes (nothing handed to the application
  is processed, its ZooKeeper connection drops); past the session timeout the
  group moves its partitions on without it;
* ``member-twin``: the process freezes and, believing it dead, an operator
  starts a second one with the same consumer id; the first then wakes up and
  must stop without delivering or committing anything more (the consumer's
  "own stale ephemerals" rule).

``GroupLedger`` checks, as messages are handed out and offsets are written:

5. **Group ownership never overlaps**: a partition's hand-outs come in
   *stints* (one incarnation, one consumer generation); a stint never hands
   out a message after another stint of that partition has.
6. **A consumer sees each partition in offset order**: within a stint each
   message starts where the one before it ended.
7. **Committed offsets only move forward**: every write of a group offset
   node is at least the largest value written before.  (No reset is
   documented for this world: consumers read only committed bytes.)

and promise 4 for them at the end: every message handed out is, at its offset,
in the healed partition.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import trio

from trikafka.group import GroupConfig, GroupConsumer
from trikafka.group.errors import ConsumerIdTakenOver
from trikafka.wire import iter_messages
from trikafka.zk import paths
from trikafka.zk.registry_values import decode_offset

from .checker import Violation

GROUP = "sim"
MEMBERS = 3
SESSION_TIMEOUT_S = 3.0
RESTART_AFTER_ERROR_S = 1.0
TWIN_TAKEOVER_WAIT_S = 10.0  # for a woken twin to notice its successor, before it is stopped the hard way
CONFIG = GroupConfig(autooffset_reset="smallest", fetch_wait_max_ms=1000, autocommit_interval_s=0.5,
                     rebalance_backoff_s=0.5, zk_session_timeout_s=SESSION_TIMEOUT_S, socket_timeout_s=5.0,
                     connect_timeout_s=2.0, fetcher_backoff_s=0.2, close_timeout_s=2.0)

Stint = tuple[str, int]  # (incarnation name, consumer generation)


@dataclass
class GroupLedger:
    """What the group handed out and committed, checked as it happens."""

    delivered: dict[tuple[int, int], bytes] = field(default_factory=dict)  # (partition, offset) -> payload
    current: dict[int, Stint] = field(default_factory=dict)  # partition -> the stint handing it out now
    ended: dict[int, set[Stint]] = field(default_factory=dict)
    next_offset: dict[Stint, dict[int, int]] = field(default_factory=dict)
    committed: dict[str, int] = field(default_factory=dict)  # offsets node path -> largest value written

    def deliver(self, stint: Stint, partition: int, offset: int, next_offset: int,
                payload: bytes) -> Violation | None:
        current = self.current.get(partition)
        if current != stint:
            if stint in self.ended.setdefault(partition, set()):
                return Violation("group ownership never overlaps", f"partition {partition}: {stint[0]} "
                                 f"(generation {stint[1]}) handed out offset {offset} after "
                                 f"{current[0] if current else 'a later stint'} had")
            if current is not None:
                self.ended[partition].add(current)
            self.current[partition] = stint
        expected = self.next_offset.setdefault(stint, {}).get(partition)
        if expected is not None and offset != expected:
            return Violation("a consumer sees each partition in offset order", f"partition {partition}: "
                             f"{stint[0]} handed out offset {offset} after a message that ended at {expected}")
        self.next_offset[stint][partition] = next_offset
        known = self.delivered.setdefault((partition, offset), payload)
        if known != payload:
            return Violation("consumers never see a message that vanished",
                             f"partition {partition} offset {offset}: the group was handed two different messages")
        return None

    def wrote(self, path: str, value: bytes) -> Violation | None:
        offset = decode_offset(value)
        if offset is None:
            return None
        largest = self.committed.get(path, -1)
        if offset < largest:
            return Violation("committed offsets only move forward", f"{path} went from {largest} back to {offset}")
        self.committed[path] = offset
        return None

    def check_end(self, leader_logs: dict[int, bytes]) -> Violation | None:
        """Promise 4 for the group: each handed-out message is in the healed partition at its offset."""
        stored = {p: {m.offset: m.payload for m in iter_messages(data, 0)} for p, data in leader_logs.items()}
        for (partition, offset), payload in sorted(self.delivered.items()):
            if stored[partition].get(offset) != payload:
                return Violation("consumers never see a message that vanished",
                                 f"partition {partition}: the message the group read at offset {offset} is gone")
        return None


@dataclass
class Incarnation:
    """One process of a member."""

    name: str
    zk: Any
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    paused: trio.Event | None = None
    ended: trio.Event = field(default_factory=trio.Event)


class GroupMembers:
    """The group's members in one world: their processes, faults and ledger."""

    def __init__(self, world: Any, topic: str):
        self.world, self.topic = world, topic
        self.ledger = GroupLedger()
        self.live: dict[int, Incarnation | None] = {m: None for m in range(MEMBERS)}
        self.counts = [0] * MEMBERS
        self.busy: set[int] = set()
        self._nursery: trio.Nursery | None = None
        self._offsets_prefix = paths.consumer_offsets(GROUP, topic) + "/"

    async def run(self) -> None:
        """Run the members until cancelled (their incarnations live in this task's nursery)."""
        self.world.cluster.zookeeper.write_listeners.append(self._on_write)
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for member in range(MEMBERS):
                self._start(member)
            await trio.sleep_forever()

    def _on_write(self, path: str, value: bytes) -> None:
        if path.startswith(self._offsets_prefix):
            self.world.trace.add(f"group offset {path[len(self._offsets_prefix):]} = {bytes(value).decode(errors='replace')}")
            self.world.fail(self.ledger.wrote(path, value))

    def _start(self, member: int) -> Incarnation:
        self.counts[member] += 1
        name = f"m{member}.{self.counts[member]}"
        incarnation = Incarnation(name, self.world.cluster.coordinator(session_timeout_s=SESSION_TIMEOUT_S))
        self.live[member] = incarnation
        assert self._nursery is not None, "members start inside run()"
        self._nursery.start_soon(self._run_incarnation, member, incarnation)
        return incarnation

    async def _run_incarnation(self, member: int, me: Incarnation) -> None:
        outcome = "stopped"
        try:
            with me.scope:
                async with me.zk, GroupConsumer(me.zk, GROUP, {self.topic: 1}, consumer_id=f"m{member}",
                                                config=CONFIG, open_stream=self.world.cluster.open_stream) as consumer:
                    self.world.trace.add(f"member {me.name} joined")
                    async for message in consumer:
                        self.world.trace.add(f"member {me.name} p{message.part} @{message.offset}")
                        self.world.fail(self.ledger.deliver((me.name, consumer.generation), message.part,
                                                            message.offset, message.next_offset, message.payload))
                        while me.paused is not None:  # a frozen process: what it holds waits with it
                            await me.paused.wait()
        except Exception as exc:  # (a crash's closed ZooKeeper client may fail its tasks too)
            if _holds(exc, ConsumerIdTakenOver):
                outcome = "stopped: its consumer id was taken over"
            elif self.live[member] is me:  # the process failed; its supervisor starts another
                outcome = f"failed: {type(exc).__name__}"
        me.ended.set()
        self.world.trace.add(f"member {me.name} {outcome}")
        if outcome.startswith("failed"):
            await trio.sleep(RESTART_AFTER_ERROR_S)
            if self.live[member] is me:
                self._start(member)

    # ----------------------------------------------------------------- faults

    async def fault(self, fault: str, member: int, duration_s: float) -> None:
        """Inject ``fault`` into ``member`` for ``duration_s`` (one fault per member at a time)."""
        me = self.live[member]
        if me is None or member in self.busy:
            return
        self.busy.add(member)
        self.world.trace.add(f"fault {fault} member {me.name} for {duration_s:.3f} s")
        try:
            if fault == "member-crash":
                self.live[member] = None
                me.zk.crash()
                me.scope.cancel()
                await trio.sleep(duration_s)
                self._start(member)
            elif fault == "member-pause":
                await self._frozen(me, duration_s)
            elif fault == "member-twin":  # frozen, but woken before its session expires
                frozen_s = min(duration_s, SESSION_TIMEOUT_S / 2)
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._frozen, me, frozen_s)
                    await trio.sleep(0)
                    successor = self._start(member)
                    self.world.trace.add(f"member {successor.name} started beside {me.name}")
                with trio.move_on_after(TWIN_TAKEOVER_WAIT_S):
                    await me.ended.wait()
                if not me.ended.is_set():
                    self.world.trace.add(f"member {me.name} still running beside its successor: stopped")
                    me.zk.crash()
                    me.scope.cancel()
        finally:
            self.busy.discard(member)
        self.world.trace.add(f"healed {fault} member {member}")

    async def _frozen(self, me: Incarnation, duration_s: float) -> None:
        me.paused = trio.Event()
        me.zk.sever(reconnect_after_s=duration_s)
        try:
            await trio.sleep(duration_s)
        finally:
            paused, me.paused = me.paused, None
            paused.set()


def _holds(exc: BaseException, kind: type) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return exc.subgroup(kind) is not None
    return isinstance(exc, kind)
