"""``trikafka transactions`` (docs/protocol.md §19.5.4) on librdkafka's transactional producer: the
list with its filters, one open transaction in detail, the same after its commit, and an unknown
id as one line and exit status 1."""

from __future__ import annotations

import functools
import uuid
from typing import Iterator

import pytest
import trio

from tests.helpers.cli import cli
from tests.helpers.kafka_clients import CLIENT_TIMEOUT_S, create_topic
from tests.helpers.kafka_transactions import confluent_transactional_producer
from trikafka.cli.transactions import LIST_HEADER
from trikafka.testing import running_kafka_broker
from trikafka.testing.kafka_broker import RunningKafkaBroker


@pytest.fixture(scope="module")
def kafka() -> Iterator[RunningKafkaBroker]:
    with running_kafka_broker(transaction_state_log_num_partitions=3) as running:
        yield running


def _open_transaction(bootstrap: str, transactional_id: str):
    producer = confluent_transactional_producer(bootstrap, transactional_id)
    producer.begin_transaction()
    producer.produce("cli-txn", value=b"a", partition=0)
    producer.produce("cli-txn", value=b"b", partition=1)
    producer.flush(CLIENT_TIMEOUT_S)
    return producer


async def test_transactions_lists_describes_and_refuses_an_unknown_id(kafka):
    bootstrap = kafka.bootstrap
    await trio.to_thread.run_sync(functools.partial(create_topic, bootstrap, "cli-txn", partitions=2))
    tid = f"cli-{uuid.uuid4().hex[:6]}"
    producer = await trio.to_thread.run_sync(_open_transaction, bootstrap, tid)

    status, out, err = await cli("transactions", "--kafka", bootstrap)
    assert status == 0, err
    listed = out.splitlines()
    assert listed[0] == LIST_HEADER
    (row,) = [line.split("\t") for line in listed[1:] if line.startswith(tid + "\t")]
    producer_id = row[1]
    assert row[2] == "Ongoing"
    status, out, _ = await cli("transactions", "--kafka", bootstrap, "--state", "CompleteCommit")
    assert status == 0 and tid not in out
    status, out, _ = await cli("transactions", "--kafka", bootstrap, "--producer-id", producer_id)
    assert status == 0 and out.splitlines()[1:] == [f"{tid}\t{producer_id}\tOngoing"]

    status, out, err = await cli("transactions", tid, "--kafka", bootstrap)
    assert status == 0, err
    head, *partitions = out.splitlines()
    assert head.startswith(f"transactional id {tid}: Ongoing, producer {producer_id} epoch 0, timeout 60000 ms, "
                           "started 20")
    assert partitions == ["topic\tpartition", "cli-txn\t0", "cli-txn\t1"]

    await trio.to_thread.run_sync(producer.commit_transaction, CLIENT_TIMEOUT_S)
    with trio.fail_after(CLIENT_TIMEOUT_S):
        while "CompleteCommit" not in (await cli("transactions", tid, "--kafka", bootstrap))[1]:
            await trio.sleep(0.05)  # the markers are being written (§19.5.5)

    status, out, err = await cli("transactions", "nobody", "--kafka", bootstrap)
    assert (status, out) == (1, "")
    assert err.strip() == "trikafka: transactional id nobody: TRANSACTIONAL_ID_NOT_FOUND (105)"
