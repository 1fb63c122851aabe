"""The Spark source over a compacted topic (docs/protocol.md §11.3): padding is skipped, rows are kept.

A fetch that starts at or inside a padding run is answered with one
synthesized padding entry for the rest of the run, followed by up to the
fetch size of the log, so the answer can be larger than the fetch asked for.
The promise checked: a task reads exactly the messages a 0.7 reader finds in
the stored log (retained messages at their original offsets), over TCP and
with short-circuit reads, whatever its fetch size.  A real in-process broker
on the real file system, cleaned until nothing is dirty (the cleaner's passes
run by the test, so the log holds still while it is read); the task body in a
worker thread, as in a Spark task.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import trio

from trikafka.log.fs import OsFileSystem
from trikafka.spark.blocking_client import BrokerConnection
from trikafka.testing.broker import open_broker
from trikafka.wire import ErrorCode, ProducePart, iter_messages
from trikafka.wire.keyed import build_keyed_set

pytest.importorskip("pyarrow")


async def test_a_task_reads_a_compacted_topic_as_a_0_7_reader_would(tmp_path: Path) -> None:
    from trikafka.spark.offsets import PartitionKey
    from trikafka.spark.options import parse_options
    from trikafka.spark.planning import PartitionRange
    from trikafka.spark.tasks import RangePartition, read_partition

    async with open_broker(fs=OsFileSystem(), clock_ms=lambda: int(time.time() * 1000),  # the files' mtime clock
                           log_dir=str(tmp_path / "data"), unix_socket_path=str(tmp_path / "b.sock"),
                           log_file_size=8_000, topic_cleanup_policy_map={"kv": "compact"}, log_cleaner_enable=False,
                           min_cleanable_dirty_ratio=0.01, log_flush_interval=1) as broker:
        def produce() -> None:
            with BrokerConnection(broker.host, broker.port) as conn:
                for round_ in range(100):  # 4 keys, each overwritten 100 times: long padding runs
                    pairs = [(b"key-%d" % k, b"%02d" % round_ * (50 + 40 * k)) for k in range(4)]
                    (result,) = conn.produce_acked([ProducePart("kv", 0, build_keyed_set(pairs))])
                    assert result.error == ErrorCode.NO_ERROR

        await trio.to_thread.run_sync(produce)
        passes = 0
        while await broker.broker.cleaner.clean_once() is not None:  # clean until nothing is dirty
            passes += 1
        assert passes
        stored = broker.stored("kv", 0)
        expected = [(m.offset, m.next_offset, m.payload) for m in iter_messages(stored, 0)]
        assert 0 < len(expected) < 400  # the cleaner removed entries

        def read(short_circuit: str, fetch_size: int) -> list[tuple[int, int, bytes]]:
            options = parse_options({"brokers": f"0:{broker.host}:{broker.port}", "topics": "kv",
                                     "brokerSockets": f"0={tmp_path / 'b.sock'}", "fetchSize": str(fetch_size),
                                     "shortCircuit": short_circuit})
            with BrokerConnection(broker.host, broker.port) as conn:
                end = conn.visible_end("kv", 0)
            planned = PartitionRange(PartitionKey("kv", 0, 0), broker.host, broker.port, 0, end)
            return [row for batch in read_partition(options, RangePartition(planned))
                    for row in zip(batch.column("offset").to_pylist(), batch.column("next_offset").to_pylist(),
                                   batch.column("payload").to_pylist())]

        for short_circuit in ("false", "true"):
            for fetch_size in (300, 1000, 4096, 1 << 20):
                rows = await trio.to_thread.run_sync(read, short_circuit, fetch_size)
                assert rows == expected, (short_circuit, fetch_size)
