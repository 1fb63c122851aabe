"""Planted bugs: known-bad behaviours a simulation must catch (docs/simulation.md).

Each plant swaps one decision of the real code for a wrong one, for the
duration of one run, by replacing a module attribute the broker looks up at
call time; production code carries no switch.  ``planted(name)`` is the
context manager; ``PLANTS`` names them.
"""

from __future__ import annotations

import contextlib
import inspect
from typing import Iterator

from kio.schema.errors import ErrorCode as KafkaError

from trikafka.broker.kafka.groups.group import Group
from trikafka.broker.kafka.transactions import machine
from trikafka.broker.kafka.transactions.coordinator import TransactionCoordinator
from trikafka.broker.kafka.transactions.machine import Write
from trikafka.broker.kafka.transactions.state import TxnPartition
from trikafka.broker.replication import controller, election, fetcher, hosted, isr
from trikafka.group import commits
from trikafka.log import producer_state
from trikafka.log.producer_state import ProducerStates
from trikafka.kafka.txn_records import TxnState
from trikafka.zk.ops import CheckOp
from trikafka.broker.engine.errors import EngineError
from trikafka.broker.engine.partition import ReadView

from .names import KAFKA_PLANT_NAMES, PLANT_NAMES


async def _truncate_to_high_watermark(log, link) -> int:
    # KIP-101's bug: cut to the HW this replica knew instead of asking the leader where epochs end.
    target = min(log._hosted.high_watermark, log.end_offset)
    await log.truncate_to(target)
    return log.end_offset


def _commit_at_once(self, required_end: int) -> EngineError | None:
    # Acknowledge acks -1 once the leader appended, before the ISR has the bytes.
    return EngineError.NO_ERROR


def _elect_any_live_replica(state, replicas, cluster, config, controller_epoch):
    # Unclean election with unclean.leader.election.enable=false: any live replica may lead.
    decided = election.elect(state, replicas, cluster, config, controller_epoch)
    if decided is not None and decided.leader == election.NO_LEADER:
        live = [r for r in replicas if r in cluster.live and r not in cluster.shutting_down]
        if live:
            return election.PartitionState(live[0], decided.leader_epoch, (live[0],), controller_epoch)
    return decided


async def _lead_without_recording_the_epoch(self, state) -> None:
    # A new leader that skips its epoch-file record: followers then truncate by a wrong history.
    real_assign = self.epochs.assign
    self.epochs.assign = lambda epoch, start_offset: True
    try:
        await _REAL_BECOME_LEADER(self, state)
    finally:
        self.epochs.assign = real_assign


def _check_nothing(path: str, version: int = -1) -> CheckOp:
    # A group commit's fence (its own registration, the owner nodes it holds) checks only the root:
    # a member that lost its session or its partitions still writes offsets.
    return CheckOp("/", -1)


def _accept_any_generation(self: Group, member_id: str, generation: int, instance_id: str | None,
                           now_ms: int = -1) -> KafkaError:
    # An OffsetCommit from a member of an older generation, or one the group removed, is written:
    # a zombie that slept through its session commits the position it held.
    refused = _REAL_CHECK_COMMIT(self, member_id, generation, instance_id, now_ms)
    return KafkaError.none if refused in (KafkaError.illegal_generation, KafkaError.unknown_member_id) else refused


def _lso_at_high_watermark(self: ProducerStates, high_watermark: int) -> int:
    # The LSO ignores open transactions: read_committed reads a transaction before its decision.
    return high_watermark


def _fold_nothing(cls: type[ProducerStates], segments: object) -> ProducerStates:
    # A new leader (or a recovering log) starts with no producer state: a retry of a batch it holds
    # is appended again.
    return cls()


def _accept_duplicates(entry, header, where):
    # A retried batch the producer state knows (its answer was lost) is appended again.
    duplicate = _REAL_VERDICT(entry, header, where)
    del duplicate
    return None


def _accept_fenced_epochs(entry, header, where):
    # A batch of a producer epoch older than the one the partition knows (a fenced zombie) is appended.
    if 0 <= header.producer_epoch < entry.epoch:
        return None
    return _REAL_VERDICT(entry, header, where)


async def _markers_before_durable(self, part, tid: str, write: Write):
    # The markers of a decision are written before the decision itself is committed to
    # __transaction_state: a decision lost with its coordinator leaves markers of a transaction
    # the next coordinator decides otherwise.
    value = write.value
    if value is not None and machine.needs_markers(value):
        await self._markers.write_markers(value.producer_id, value.producer_epoch,
                                          value.state == TxnState.PREPARE_COMMIT, part.coordinator_epoch,
                                          list(value.partitions))
    return await _REAL_COORDINATOR_COMMIT(self, part, tid, write)


async def _serve_unloaded(self: TransactionCoordinator, index: int, view: ReadView) -> TxnPartition:
    # A transaction-log partition this broker now leads serves before its records are read: the ids
    # it coordinates look new (InitProducerId hands out a new producer id, leaving the old one's
    # transaction open), and what the previous coordinator decided but did not mark is never finished.
    return TxnPartition(index, view.leader_epoch)


_REAL_VERDICT = producer_state._verdict
_REAL_COORDINATOR_COMMIT = TransactionCoordinator._commit
_REAL_BECOME_LEADER = hosted.HostedPartition._become_leader
_REAL_CHECK_COMMIT = Group.check_commit

# name -> (object, attribute, the wrong value)
PLANTS = {
    "truncate-to-hw": (fetcher, "truncate_by_epoch", _truncate_to_high_watermark),
    "ack-before-isr": (isr.LeaderPartition, "commit_status", _commit_at_once),
    "unclean-election": (controller, "elect", _elect_any_live_replica),
    "unrecorded-epoch": (hosted.HostedPartition, "_become_leader", _lead_without_recording_the_epoch),
    "fenced-commit": (commits, "CheckOp", _check_nothing),
    "stale-generation-commit": (Group, "check_commit", _accept_any_generation),
    "lso-ignores-open": (ProducerStates, "last_stable_offset", _lso_at_high_watermark),
    "dup-after-failover": (ProducerStates, "fold", classmethod(_fold_nothing)),
    "duplicate-sequence-accepted": (producer_state, "_verdict", _accept_duplicates),
    "fenced-epoch-accepted": (producer_state, "_verdict", _accept_fenced_epochs),
    "markers-before-durable": (TransactionCoordinator, "_commit", _markers_before_durable),
    # (bound when a coordinator is built: the plant is in place before the run's brokers start)
    "coordinator-serves-unloaded": (TransactionCoordinator, "_load", _serve_unloaded),
}


assert sorted(PLANTS) == sorted(set(PLANT_NAMES + KAFKA_PLANT_NAMES)), "trikafka.sim.names lists every plant"


@contextlib.contextmanager
def planted(name: str | None) -> Iterator[None]:
    """Run the block with the planted bug ``name`` (None: the code as it is)."""
    if name is None:
        yield
        return
    target, attribute, wrong = PLANTS[name]
    real = inspect.getattr_static(target, attribute)  # as stored: a classmethod stays one
    setattr(target, attribute, wrong)
    try:
        yield
    finally:
        setattr(target, attribute, real)
