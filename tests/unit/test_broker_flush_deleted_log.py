"""A topic deleted while its log waits for its flush deadline: the deadline finds nothing to flush.

librdkafka's 0098_consumer_txn deletes each topic seconds after producing to it; all three brokers of
its cluster stopped at the next flush deadline ("LogClosedError: ... is closed" from the flusher).
"""

from __future__ import annotations

import trio

from tests.helpers.broker_testing import make_config, memory_client, messages
from trikafka.testing import FakeFileSystem, start_in_memory
from trikafka.wire import ProducePart, ProduceRequest

INTERVAL_S = 0.1


async def test_a_deleted_topic_s_pending_flush_deadline_does_not_stop_the_broker(nursery, tmp_path, autojump_clock):
    config = make_config(tmp_path, log_flush_interval=100_000, num_partitions=1,
                         log_default_flush_interval_ms=int(INTERVAL_S * 1000)).replace(log_dir="/data")
    broker = await start_in_memory(nursery, config, FakeFileSystem(seed=1))
    client = await memory_client(broker)
    await client.send(ProduceRequest(ProducePart("t", 0, messages(b"unflushed"))))
    await client.offsets("t", 0, -1)  # handled in order: appended now, its deadline pending
    log = broker.log_manager.get("t", 0)
    assert log is not None and log.flushing.unflushed_messages == 1

    assert await broker.engine.directory.delete_topic_logs("t") == 1
    await trio.sleep(10 * INTERVAL_S)  # past the deadline: a flush of the closed log would crash the nursery

    await client.send(ProduceRequest(ProducePart("u", 0, messages(b"after"))))
    assert await client.offsets("u", 0, -1) != []  # the broker still serves
