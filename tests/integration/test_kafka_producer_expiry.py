"""Producer expiration on the Kafka listener (docs/protocol.md §19.2.1): the broker's periodic pass
drops the state of a producer silent for ``producer.id.expiration.ms``, and that producer, like any
new one, goes on writing."""

from __future__ import annotations

import time
from typing import Any

import trio

from tests.helpers.kafka_clients import create_topic, read_with_confluent
from trikafka.testing import running_kafka_broker
from trikafka.testing.kafka_broker import RunningKafkaBroker

TOPIC = "pid-expiry"
EXPIRATION_MS = 3_600_000  # far longer than the test: only a producer whose writes are stamped older expires
STALE_MS = 2 * EXPIRATION_MS
COUNT = 10
WAIT_S = 30.0


def _producer(bootstrap: str) -> Any:  # Any: confluent_kafka.Producer, imported with the client
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 0})


def _send(producer: Any, first: int, *, timestamp_ms: int = 0) -> None:
    """``COUNT`` records valued ``first``, ``first + 1``, ...; ``timestamp_ms`` 0: the producer's clock."""
    for n in range(first, first + COUNT):
        producer.produce(TOPIC, value=str(n).encode(), partition=0, timestamp=timestamp_ms)
        producer.flush(30)  # one batch a record: each continues the producer's sequence
    assert producer.flush(30) == 0


def _state(running: RunningKafkaBroker) -> dict[int, int]:
    """Producer id -> first sequence of its first cached batch, read on the broker's loop."""
    def read() -> dict[int, int]:
        log = running.broker.log_manager.get(TOPIC, 0)
        return {pid: entry.batches[0].first_seq for pid, entry in log.producers.entries.items()}

    return trio.from_thread.run_sync(read, trio_token=running.trio_token)  # type: ignore[no-any-return]


def _wait_for(running: RunningKafkaBroker, pids: set[int]) -> dict[int, int]:
    deadline = time.monotonic() + WAIT_S
    while set(state := _state(running)) != pids:
        assert time.monotonic() < deadline, f"producer state {state}, expected producers {pids}"
        time.sleep(0.02)  # polling a condition: the assertion above is about the condition, not the sleep
    return state


def test_a_silent_producers_state_expires_and_it_and_new_producers_go_on_writing() -> None:
    with running_kafka_broker(num_partitions=1, producer_id_expiration_ms=EXPIRATION_MS,
                              producer_id_expiration_check_interval_ms=50) as running:
        create_topic(running.bootstrap, TOPIC)
        fresh = _producer(running.bootstrap)
        _send(fresh, 0)
        (fresh_pid,) = _state(running)
        stale = _producer(running.bootstrap)
        _send(stale, COUNT, timestamp_ms=int(time.time() * 1000) - STALE_MS)
        _wait_for(running, {fresh_pid})  # the periodic pass dropped the stale producer, kept the other
        _send(stale, 2 * COUNT)  # its sequence goes on at COUNT: a producer new to the partition (§19.3)
        state = _state(running)  # an acknowledged batch is in the state
        (stale_pid,) = set(state) - {fresh_pid}
        assert state[stale_pid] >= COUNT
        _send(_producer(running.bootstrap), 3 * COUNT)
        assert len(_state(running)) == 3
        seen = read_with_confluent(running.bootstrap, TOPIC, 1, 4 * COUNT)
        assert [s.value for s in seen] == [str(n).encode() for n in range(4 * COUNT)]
