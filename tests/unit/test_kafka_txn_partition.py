"""The transactional ids of one ``__transaction_state`` partition (§19.5.3, §19.5.6): the last
record wins, and what a coordinator owes its ids after a load and as time passes."""

from __future__ import annotations

from dataclasses import replace

from kio.schema.errors import ErrorCode

from trikafka.broker.config import BrokerConfig
from trikafka.broker.kafka.groups.placement import group_partition
from trikafka.broker.kafka.transactions.machine import Write
from trikafka.broker.kafka.transactions.placement import transaction_partition, transaction_topic_spec
from trikafka.broker.kafka.transactions.state import TxnPartition
from trikafka.kafka.txn_records import TxnKey, TxnState, TxnValue

NOW = 1_000_000
ONGOING = TxnValue(7, 2, 60_000, TxnState.ONGOING, (("out", 0),), NOW - 10, NOW - 10)


def test_the_last_record_of_an_id_wins_and_a_tombstone_removes_it():
    part = TxnPartition(3, coordinator_epoch=5)
    part.apply(TxnKey("a"), replace(ONGOING, state=TxnState.EMPTY, partitions=()))
    part.apply(TxnKey("a"), ONGOING)
    assert part.value("a") == ONGOING
    part.apply(TxnKey("a"), None)
    assert part.value("a") is None


def test_after_a_load_prepared_ids_need_markers_and_a_fence_becomes_its_abort():
    part = TxnPartition(0, 1)
    part.apply(TxnKey("c"), replace(ONGOING, state=TxnState.PREPARE_COMMIT))
    part.apply(TxnKey("f"), replace(ONGOING, state=TxnState.PREPARE_EPOCH_FENCE))
    part.apply(TxnKey("o"), ONGOING)
    part.apply(TxnKey("d"), replace(ONGOING, state=TxnState.COMPLETE_ABORT, partitions=()))
    assert part.undecided_markers() == ["c"]
    assert part.rewrites_after_load(NOW) == [
        ("f", Write(replace(ONGOING, state=TxnState.PREPARE_ABORT, last_update_timestamp_ms=NOW)))]


def test_expired_transactions_and_the_next_deadline():
    part = TxnPartition(0, 1)
    part.apply(TxnKey("late"), ONGOING)
    part.apply(TxnKey("later"), replace(ONGOING, start_timestamp_ms=NOW))
    assert part.next_deadline_ms() == ONGOING.start_timestamp_ms + ONGOING.timeout_ms
    at = ONGOING.start_timestamp_ms + ONGOING.timeout_ms
    assert [tid for tid, _ in part.expired(at)] == ["late"]
    part.writing.add("late")
    assert part.expired(at) == []
    assert TxnPartition(0, 1).next_deadline_ms() is None


def test_verification_reads_the_ids_state():
    part = TxnPartition(0, 1)
    part.apply(TxnKey("a"), ONGOING)
    assert part.verify("a", 7, 2, "out", 0) == ErrorCode.none
    assert part.verify("a", 7, 2, "out", 1) == ErrorCode.invalid_txn_state
    assert part.verify("b", 7, 2, "out", 0) == ErrorCode.invalid_producer_id_mapping


def test_transaction_state_is_placed_and_set_up_as_kafka_does():
    spec = transaction_topic_spec(BrokerConfig(log_dir="unused"))
    assert (spec.name, spec.partitions, spec.replication_factor, spec.segment_bytes) == \
        ("__transaction_state", 50, 3, 100 << 20)
    assert spec.settings(3) == {"cleanup.policy": "compact", "segment.bytes": str(100 << 20),
                                "min.insync.replicas": "2"}
    assert "min.insync.replicas" not in spec.settings(1)
    # Kafka's abs(String.hashCode) % 50: "my-txn" hashes to -1061187895.
    assert transaction_partition("my-txn", 50) == (-1061187895 & 0x7FFFFFFF) % 50
    assert transaction_partition("g", 50) == group_partition("g", 50)
