"""Compaction through the broker: keyed producer, the cleaner service, a keyed consumer."""

from __future__ import annotations

import pytest
import trio

from tests.helpers.broker_testing import make_config
from trikafka.broker import serve
from trikafka.broker.cleaner import compaction_policy
from trikafka.broker.config import ConfigError
from trikafka.broker.config_sources import from_mapping
from trikafka.client import SimpleConsumer
from trikafka.producer import Producer
from trikafka.wire.keyed import iter_keyed_messages


async def read_keyed(port: int, topic: str) -> list:
    async with SimpleConsumer(("127.0.0.1", port), topic, 0) as consumer:
        end = await consumer.latest()
        out = []
        if end == 0:
            return out
        async for message in consumer.messages(0, decode=iter_keyed_messages):
            out.append(message)
            if consumer.next_offset == end:
                return out


async def test_keyed_producer_cleaner_and_keyed_consumer(nursery, tmp_path):
    config = make_config(tmp_path, log_file_size=2000, topic_cleanup_policy_map={"kv": "compact"},
                         log_cleaner_backoff_ms=10, min_cleanable_dirty_ratio=0.01, log_flush_interval=1)
    broker = await nursery.start(serve, config)
    expected: dict[bytes, bytes | None] = {}
    sent_at: dict[int, tuple[bytes, bytes | None]] = {}  # offset -> (key, value) as acknowledged
    async with Producer(brokers=f"127.0.0.1:{broker.port}", acks=-1, keyed_topics={"kv"}) as producer:
        for round_ in range(20):
            keys = [b"user-%d" % k for k in range(8)]
            values = [None if (k == 3 and round_ == 19) else b"round %02d of user %d" % (round_, k) for k in range(8)]
            results = await producer.send_batch("kv", values, keys=keys)
            sent_at.update({r.offset: kv for r, kv in zip(results, zip(keys, values))})
            await producer.send_batch("plain", [b"x" * 30] * 8)
            expected.update(zip(keys, values))
        with pytest.raises(TypeError):
            await producer.send("kv", b"a value without a key")
    with trio.fail_after(30):
        while not any(r.topic == "kv" and r.segments for r in broker.cleaner.results):
            await broker.cleaner.pass_done.wait()
    after = await read_keyed(broker.port, "kv")
    assert len(after) < len(sent_at)
    for m in after:  # every retained message at the offset its acknowledgement named
        assert sent_at[m.offset] == (m.key, None if m.tombstone else m.value)
    final = {m.key: None if m.tombstone else m.value for m in after}
    assert final == expected
    assert all(r.topic == "kv" for r in broker.cleaner.results)  # "plain" keeps the delete policy only
    assert len(await read_keyed(broker.port, "plain")) == 160


def test_cleanup_settings_parse_per_topic():
    config = from_mapping({"topic.cleanup.policy.map": "a:compact,b:compact+delete",
                           "log.cleaner.backoff.ms": "5", "min.cleanable.dirty.ratio": "0.2",
                           "topic.delete.retention.ms.map": "a:100", "log.cleaner.io.max.bytes.per.second": "1e6"})
    a, b, c = (compaction_policy(config, t) for t in "abc")
    assert (a.compact, a.delete, a.delete_retention_ms) == (True, False, 100)
    assert (b.compact, b.delete) == (True, True) and (c.compact, c.delete) == (False, True)
    assert config.log_cleaner_backoff_ms == 5 and config.min_cleanable_dirty_ratio == 0.2
    with pytest.raises(ConfigError):
        from_mapping({"log.cleanup.policy": "shred"})
    with pytest.raises(ConfigError):
        from_mapping({"min.cleanable.dirty.ratio": "2"})
