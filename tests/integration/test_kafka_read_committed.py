"""read_committed on the Kafka listener (docs/protocol.md §19.6, §19.7): transactional batches and
markers on a partition, the last stable offset, and other people's read_committed consumers.

The transaction coordinator (§19.5) is stood in for by a verifier that admits every transactional
Produce, and its markers are sent with WriteTxnMarkers as a coordinator sends them: what is checked
here is the partition's side alone.
"""

from __future__ import annotations

import subprocess
from typing import Iterator

import pytest
from kio.schema.errors import ErrorCode

from tests.helpers.kafka_clients import create_topic, read_with_confluent, read_with_kafka_python
from tests.helpers.kafka_wire import (init_producer_id, list_offset, produce_records, produce_transactional,
                                      write_txn_marker)
from trikafka.kafka.batch import TRANSACTIONAL
from trikafka.kafka.records import build_batch
from trikafka.testing import running_kafka_broker
from trikafka.testing.kafka_broker import RunningKafkaBroker

LATEST = -1
READ_COMMITTED = 1


class _AdmitEvery:
    """Stands in for the transaction coordinator's KIP-890 check (§19.6)."""

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int, topic: str,
                     partition: int) -> ErrorCode:
        return ErrorCode.none


@pytest.fixture(scope="module")
def kafka() -> Iterator[RunningKafkaBroker]:
    with running_kafka_broker(num_partitions=1) as running:
        running.broker.kafka.verifier = _AdmitEvery()
        yield running


def _txn(producer_id: int, seq: int, *values: bytes) -> bytes:
    return build_batch(list(values), producer_id=producer_id, producer_epoch=0, base_sequence=seq,
                       control_attributes=TRANSACTIONAL)


@pytest.fixture(scope="module")
def one_aborted(kafka: RunningKafkaBroker) -> str:
    """Topic ``rc``: A's transaction [a0, a1] committed, B's [b0] aborted, a plain p0 between; the
    offsets and the LSO are checked on the way."""
    bootstrap, topic = kafka.bootstrap, "rc"
    create_topic(bootstrap, topic)
    a, b = init_producer_id(bootstrap)[1], init_producer_id(bootstrap)[1]
    assert produce_transactional(bootstrap, "tx-a", topic, 0, _txn(a, 0, b"a0", b"a1")) == (ErrorCode.none, 0)
    assert produce_transactional(bootstrap, "tx-b", topic, 0, _txn(b, 0, b"b0")) == (ErrorCode.none, 2)
    assert produce_records(bootstrap, topic, 0, build_batch([b"p0"])) == (ErrorCode.none, 3)
    assert list_offset(bootstrap, topic, 0, LATEST, isolation_level=READ_COMMITTED) == 0  # A is open
    assert write_txn_marker(bootstrap, a, 0, True, topic, 0) == ErrorCode.none  # offset 4
    assert list_offset(bootstrap, topic, 0, LATEST, isolation_level=READ_COMMITTED) == 2  # B is open
    assert list_offset(bootstrap, topic, 0, LATEST) == 5
    assert write_txn_marker(bootstrap, b, 0, False, topic, 0) == ErrorCode.none  # offset 5
    assert list_offset(bootstrap, topic, 0, LATEST, isolation_level=READ_COMMITTED) == 6
    assert write_txn_marker(bootstrap, b, 0, False, topic, 0) == ErrorCode.none  # a retried marker: harmless
    return topic


def test_librdkafka_read_committed_skips_the_aborted_transaction(kafka: RunningKafkaBroker, one_aborted: str):
    seen = read_with_confluent(kafka.bootstrap, one_aborted, 1, 3, **{"isolation.level": "read_committed"})
    assert [(s.offset, s.value) for s in seen] == [(0, b"a0"), (1, b"a1"), (3, b"p0")]
    seen = read_with_confluent(kafka.bootstrap, one_aborted, 1, 4, **{"isolation.level": "read_uncommitted"})
    assert [(s.offset, s.value) for s in seen] == [(0, b"a0"), (1, b"a1"), (2, b"b0"), (3, b"p0")]


def test_kafka_python_read_committed_skips_the_aborted_transaction(kafka: RunningKafkaBroker, one_aborted: str):
    seen = read_with_kafka_python(kafka.bootstrap, one_aborted, 1, 3, isolation_level="read_committed")
    assert [(s.offset, s.value) for s in seen] == [(0, b"a0"), (1, b"a1"), (3, b"p0")]


def test_kcat_read_committed_skips_the_aborted_transaction(kafka: RunningKafkaBroker, one_aborted: str):
    out = subprocess.run(["kcat", "-C", "-b", kafka.bootstrap, "-t", one_aborted, "-o", "beginning", "-e", "-q",
                          "-X", "isolation.level=read_committed", "-f", "%o %s\\n"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.splitlines() == ["0 a0", "1 a1", "3 p0"]


def test_a_consumer_reads_nothing_of_an_open_transaction(kafka: RunningKafkaBroker):
    bootstrap, topic = kafka.bootstrap, "rc-open"
    create_topic(bootstrap, topic)
    pid = init_producer_id(bootstrap)[1]
    assert produce_records(bootstrap, topic, 0, build_batch([b"before"])) == (ErrorCode.none, 0)
    assert produce_transactional(bootstrap, "tx-open", topic, 0, _txn(pid, 0, b"open")) == (ErrorCode.none, 1)
    assert produce_records(bootstrap, topic, 0, build_batch([b"after"])) == (ErrorCode.none, 2)
    out = subprocess.run(["kcat", "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-q",
                          "-X", "isolation.level=read_committed", "-f", "%o %s\\n"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.splitlines() == ["0 before"]  # the LSO (1) holds "after" back until the transaction ends
    assert write_txn_marker(bootstrap, pid, 0, True, topic, 0) == ErrorCode.none
    seen = read_with_confluent(bootstrap, topic, 1, 3, **{"isolation.level": "read_committed"})
    assert [s.value for s in seen] == [b"before", b"open", b"after"]


def test_trikafkas_consumer_and_cli_read_committed(kafka: RunningKafkaBroker, one_aborted: str):
    import trio

    from tests.helpers.cli import cli
    from trikafka.client.kafka import KafkaClient
    from trikafka.client.kafka.consumer import PartitionConsumer

    async def read(read_committed: bool) -> list[tuple[int, bytes | None]]:
        async with KafkaClient(kafka.bootstrap) as client:
            async with PartitionConsumer(client, one_aborted, 0, 0, read_committed=read_committed,
                                         max_wait_s=0.1) as consumer:
                seen = []
                while consumer.position is None or consumer.position < 6:  # past both markers
                    seen += [(r.offset, r.value) for r in await consumer.fetch()]
                return seen

    assert trio.run(read, True) == [(0, b"a0"), (1, b"a1"), (3, b"p0")]
    assert trio.run(read, False) == [(0, b"a0"), (1, b"a1"), (2, b"b0"), (3, b"p0")]  # markers are no records
    status, out, err = trio.run(cli, "consume", one_aborted, "--kafka", kafka.bootstrap, "--read-committed",
                                "--exit-at-end", "-f", "%o %s\\n")
    assert (status, out.splitlines()) == (0, ["0 a0", "1 a1", "3 p0"]), err
