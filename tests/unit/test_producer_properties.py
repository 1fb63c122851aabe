"""Random schedules of sends, flushes and broker deaths against the async producer.

Invariants, whatever the schedule:

* every message gets exactly one outcome by the time the producer closes;
* with acks 1/-1, a message reported delivered is in the log its result names,
  at its offset (nothing acked is lost or misplaced);
* a keyed message is only ever delivered to the partition its key hashes to
  (the static partition list never changes);
* no more than ``queue_size`` messages are ever queued or in flight;
* close raises ``DeliveryFailedError`` exactly when some failure went unobserved.
"""

from __future__ import annotations

import random

import trio
import trio.testing
from hypothesis import event, given
from hypothesis import strategies as st

from trikafka.producer import DeliveryFailedError, Producer
from trikafka.producer.partitioner import hash_index, java_hash
from trikafka.testing import open_cluster
from trikafka.wire import iter_messages

BROKERS = [(0, "b0", 9092), (1, "b1", 9092), (2, "b2", 9092)]
PARTITIONS = 2



def _operation(draw_kind: int, key: str | None, size: int, broker: int, sleep_s: float) -> tuple:
    """Map a 0-99 draw to an operation: 70% sends, then sleeps, kills, revives, flushes."""
    if draw_kind < 70:
        return ("send", key, size)
    if draw_kind < 80:
        return ("sleep", sleep_s)
    if draw_kind < 85:
        return ("kill", broker)
    if draw_kind < 90:
        return ("revive", broker)
    return ("flush",)


operations = st.lists(
    st.builds(_operation, st.integers(0, 99), st.one_of(st.none(), st.sampled_from(["k1", "k2", "k3"])),
              st.integers(0, 60), st.integers(0, 2), st.sampled_from([0.001, 0.05, 0.3, 2.0])),
    min_size=10,
    max_size=80,
)


@given(ops=operations, acks=st.sampled_from([1, -1]), batch_size=st.integers(1, 8),
       queue_size=st.integers(1, 12), codec=st.sampled_from(["none", "gzip"]), seed=st.integers(0, 2**16))
def test_random_schedules_keep_the_delivery_invariants(ops, acks, batch_size, queue_size, codec, seed):
    trio.run(_run_schedule, ops, acks, batch_size, queue_size, codec, seed,
             clock=trio.testing.MockClock(autojump_threshold=0))


async def _run_schedule(ops, acks, batch_size, queue_size, codec, seed):
    async with open_cluster(0, enable_zookeeper=False) as cluster:
        brokers = {b: await cluster.add(address=(host, port), num_partitions=PARTITIONS) for b, host, port in BROKERS}
        producer = Producer(brokers=BROKERS, partitions_per_broker=PARTITIONS, producer_type="async", acks=acks,
                            batch_size=batch_size, queue_size=queue_size, queue_time_s=0.1, num_retries=2,
                            retry_backoff_s=0.05, reconnect_backoff_s=0.05, compression_codec=codec,
                            connector=cluster.connector, rng=random.Random(seed), close_timeout_s=60)
        sent: list[tuple[bytes, str | None, object]] = []
        unobserved_failure_raised = False
        try:
            async with producer:
                for n, op in enumerate(ops):
                    if op[0] == "send":
                        payload = b"%d:" % n + b"x" * op[2]
                        delivery = await producer.send("t", payload, key=op[1])
                        assert producer._queue.occupancy <= queue_size
                        sent.append((payload, op[1], delivery))
                    elif op[0] == "kill":
                        await cluster.network.kill(*BROKERS[op[1]][1:])
                    elif op[0] == "revive":
                        cluster.network.revive(*BROKERS[op[1]][1:])
                    elif op[0] == "sleep":
                        await trio.sleep(op[1])
                    else:
                        await producer.flush()
        except DeliveryFailedError:
            unobserved_failure_raised = True

    results = [delivery.peek() for _, _, delivery in sent]
    event(f"delivered: {sum(1 for r in results if r is not None and r.ok) // 10 * 10}+ of {len(results) // 10 * 10}+")

    assert all(r is not None for r in results)
    assert unobserved_failure_raised == any(not r.ok for r in results)
    targets = [(b, p) for b, _, _ in BROKERS for p in range(PARTITIONS)]
    for (payload, key, _), result in zip(sent, results):
        if not result.ok:
            continue
        log = brokers[result.broker_id].stored("t", result.partition)
        entry = [m.payload for m in iter_messages(log[result.offset:result.next_offset], result.offset)]
        # plain: the entry is the message; compressed: the wrapper holds it (§4)
        assert entry == [payload] if codec == "none" else payload in entry
        if key is not None:
            assert (result.broker_id, result.partition) == targets[hash_index(java_hash(key), len(targets))]
