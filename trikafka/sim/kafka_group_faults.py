"""The Kafka-groups world's faults: one entry per kind in ``FAULT_TABLE`` (docs/simulation.md).

The nemesis (``kafka_groups.KafkaGroupsWorld``) draws the kind from the
seed's ``fault`` stream and the member, the moment and the duration from
streams of their own, so a kind added here changes which kinds later rounds
draw and nothing else.
"""

from __future__ import annotations

from typing import Callable, Protocol

from .determinism import Trace
from .event_world import EventFault
from .kafka_members import SimMember

MESSAGE_DELAY_MS = 4000  # a delayed member's request waits up to this much more


class GroupFaultTarget(Protocol):
    """What a fault sees of the world (``kafka_groups.KafkaGroupsWorld``, which imports this table)."""

    now_ms: int
    trace: Trace
    members: list[SimMember]
    frozen: set[int]  # members paused right now
    down: set[int]  # brokers killed right now

    def at(self, when_ms: int, callback: Callable[[], None]) -> None: ...
    def start_member(self, slot: int) -> None: ...
    def failover(self, duration_ms: int) -> None: ...


KafkaGroupFault = EventFault[GroupFaultTarget]  # one kind of fault of this world (event_world.EventFault)


def _member_crash(world: GroupFaultTarget, slot: int, duration_ms: int) -> None:
    """The member's process dies silently; a new one (a new member id) starts after ``duration_ms``."""
    member = world.members[slot]
    member.crash()
    world.trace.add(f"fault member-crash {member.name}, back in {duration_ms} ms")
    world.at(world.now_ms + duration_ms, lambda: world.start_member(slot))


def _member_pause(world: GroupFaultTarget, slot: int, duration_ms: int) -> None:
    """The member freezes; past its session timeout it wakes up a zombie of an old generation."""
    member = world.members[slot]
    member.pause()
    world.frozen.add(slot)
    world.trace.add(f"fault member-pause {member.name} for {duration_ms} ms")

    def wake() -> None:
        world.frozen.discard(slot)
        if member.alive:
            world.trace.add(f"healed member-pause {member.name}")
            member.wake()

    world.at(world.now_ms + duration_ms, wake)


def _member_restart(world: GroupFaultTarget, slot: int, duration_ms: int) -> None:
    """The member closes cleanly (commits, LeaveGroup); a new process starts after ``duration_ms``."""
    member = world.members[slot]
    world.trace.add(f"fault member-restart {member.name}, back in {duration_ms} ms")
    member.close()
    world.at(world.now_ms + duration_ms, lambda: world.start_member(slot))


def _coordinator_failover(world: GroupFaultTarget, _slot: int, duration_ms: int) -> None:
    """The coordinator's broker is SIGKILLed: an in-sync replica leads, loads the group, serves it."""
    if world.down:
        return  # one broker crash at a time: a commit survives any single broker's crash
    world.failover(duration_ms)


def _message_delay(world: GroupFaultTarget, slot: int, duration_ms: int) -> None:
    """The member's requests take up to ``MESSAGE_DELAY_MS`` longer, for ``duration_ms``."""
    member = world.members[slot]
    member.delayed_until_ms = world.now_ms + duration_ms
    world.trace.add(f"fault message-delay {member.name} for {duration_ms} ms")


FAULT_TABLE: dict[str, KafkaGroupFault] = {f.name: f for f in (
    KafkaGroupFault("member-crash", _member_crash, (200, 6000)),
    KafkaGroupFault("member-pause", _member_pause, (500, 9000)),
    KafkaGroupFault("member-restart", _member_restart, (200, 3000)),
    KafkaGroupFault("coordinator-failover", _coordinator_failover, (500, 5000)),
    KafkaGroupFault("message-delay", _message_delay, (500, 5000)),
)}
FAULTS = tuple(FAULT_TABLE)


def parse_faults(text: str) -> tuple[str, ...]:
    """``member-pause,message-delay`` -> the fault names; ValueError naming an unknown one (as
    ``faults.parse_faults`` does for the cluster world's table)."""
    return parse_fault_names(text, FAULTS)


def parse_fault_names(text: str, known: tuple[str, ...]) -> tuple[str, ...]:
    """``a,b`` -> the names, each one of ``known`` (a world's fault table); ValueError naming an unknown one."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise ValueError(f"unknown fault {unknown[0] if unknown else text!r} (known: {', '.join(known)})")
    return names
