"""The transactions world's faults: one entry per kind in ``FAULT_TABLE`` (docs/simulation.md, "Transactions").

The nemesis (``txn_world.TransactionsWorld``) draws the kind from the seed's ``fault`` stream and
the victim, the moment and the duration from streams of their own, as the Kafka-groups world does.
A victim is a number: faults on a client take it modulo the clients, faults on a partition modulo
the partitions.
"""

from __future__ import annotations

from typing import Callable, Protocol

from .determinism import Trace
from .event_world import EventFault
from .kafka_group_faults import parse_fault_names
from .txn_cluster import SimPartition
from .txn_clients import SimClient, SimCopier

REQUEST_DELAY_MS = 4000  # a delayed client's request waits up to this much more


class TxnFaultTarget(Protocol):
    """What a fault sees of the world (``txn_world.TransactionsWorld``, which imports this table)."""

    now_ms: int
    trace: Trace
    clients: list[SimClient]  # the copiers, then the idempotent producer
    copiers: list[SimCopier]
    partitions: list[SimPartition]  # the output partitions, then each copier's offsets partition

    def at(self, when_ms: int, callback: Callable[[], None]) -> None: ...
    def restart_copier(self, source: int, zombie: bool) -> None: ...
    def coordinator_failover(self, duration_ms: int) -> None: ...


TxnFault = EventFault[TxnFaultTarget]  # one kind of fault of this world (event_world.EventFault)


def _partition_failover(world: TxnFaultTarget, victim: int, duration_ms: int) -> None:
    """A partition's leader is SIGKILLed: what it had not replicated is lost, an in-sync replica leads
    after ``duration_ms`` (NOT_LEADER_OR_FOLLOWER meanwhile) with its producer state rebuilt from its log."""
    partition = world.partitions[victim % len(world.partitions)]
    if partition.electing:
        return
    lost = partition.crash_leader()
    partition.electing = True
    world.trace.add(f"fault partition-failover {partition.name}: {lost} batches lost, leader epoch "
                    f"{partition.leader_epoch} in {duration_ms} ms")

    def elected() -> None:
        partition.electing = False
        world.trace.add(f"healed {partition.name}: leader at epoch {partition.leader_epoch}")

    world.at(world.now_ms + duration_ms, elected)


def _coordinator_failover(world: TxnFaultTarget, _victim: int, duration_ms: int) -> None:
    """The transaction coordinator's broker is SIGKILLed: a replica loads ``__transaction_state``."""
    world.coordinator_failover(duration_ms)


def _lost_answers(world: TxnFaultTarget, victim: int, duration_ms: int) -> None:
    """A client's answers are lost for ``duration_ms``: it retries what the brokers already did."""
    client = world.clients[victim % len(world.clients)]
    client.losing_until_ms = world.now_ms + duration_ms
    world.trace.add(f"fault lost-answers {client.name} for {duration_ms} ms")


def _request_delay(world: TxnFaultTarget, victim: int, duration_ms: int) -> None:
    """A client's requests take up to ``REQUEST_DELAY_MS`` longer for ``duration_ms``: they land after
    the client gave up on them (a delayed Produce or EndTxn)."""
    client = world.clients[victim % len(world.clients)]
    client.delayed_until_ms = world.now_ms + duration_ms
    world.trace.add(f"fault request-delay {client.name} for {duration_ms} ms")


def _producer_crash(world: TxnFaultTarget, victim: int, duration_ms: int) -> None:
    """A copier's process dies; its next incarnation (the same transactional id) starts after ``duration_ms``."""
    copier = world.copiers[victim % len(world.copiers)]
    if copier.stopped or copier.frozen:
        return
    copier.crash()
    world.trace.add(f"fault producer-crash {copier.name}, next in {duration_ms} ms")
    world.at(world.now_ms + duration_ms, lambda: world.restart_copier(copier.source, False))


def _zombie(world: TxnFaultTarget, victim: int, duration_ms: int) -> None:
    """A copier freezes and its next incarnation starts at once; the old one wakes after ``duration_ms``
    a zombie with the older epoch, and carries on until it is fenced."""
    copier = _freeze(world, "zombie", victim, duration_ms)
    if copier is not None:
        world.restart_copier(copier.source, True)


def _txn_timeout(world: TxnFaultTarget, victim: int, duration_ms: int) -> None:
    """A copier freezes past its transaction timeout: the coordinator aborts its transaction."""
    _freeze(world, "txn-timeout", victim, duration_ms)


def _freeze(world: TxnFaultTarget, fault: str, victim: int, duration_ms: int) -> SimCopier | None:
    """Freeze a running copier for ``duration_ms``; the copier, or None when none runs in that slot."""
    copier = world.copiers[victim % len(world.copiers)]
    if copier.stopped or copier.frozen:
        return None
    copier.freeze()
    world.trace.add(f"fault {fault} {copier.name} frozen for {duration_ms} ms")

    def wake() -> None:
        world.trace.add(f"{copier.name} wakes from {fault}")
        copier.wake()

    world.at(world.now_ms + duration_ms, wake)
    return copier


FAULT_TABLE: dict[str, TxnFault] = {f.name: f for f in (
    TxnFault("partition-failover", _partition_failover, (50, 800)),
    TxnFault("coordinator-failover", _coordinator_failover, (300, 3000)),
    TxnFault("lost-answers", _lost_answers, (200, 2000)),
    TxnFault("request-delay", _request_delay, (500, 3000)),
    TxnFault("producer-crash", _producer_crash, (100, 2000)),
    TxnFault("zombie", _zombie, (500, 5000)),
    TxnFault("txn-timeout", _txn_timeout, (3500, 6000)),
)}
FAULTS = tuple(FAULT_TABLE)


def parse_faults(text: str) -> tuple[str, ...]:
    """``zombie,txn-timeout`` -> the fault names; ValueError naming an unknown one."""
    return parse_fault_names(text, FAULTS)
