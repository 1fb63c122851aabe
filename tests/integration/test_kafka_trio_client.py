"""trikafka's Trio client of the Kafka protocol against the real broker (docs/protocol.md §16).

One broker (``running_kafka_broker``) serves the module; each test uses its
own topics.  The cross-client tests run kafka-python and confluent-kafka in a
worker thread, beside the Trio loop of the test.
"""

from __future__ import annotations

import functools
import signal
import socket
import subprocess
from typing import Iterator

import pytest
import trio

from tests.helpers.broker_testing import child_process, serve_process
from tests.helpers.kafka_clients import create_topic, read_partition, read_with_confluent, read_with_kafka_python
from trikafka.client.kafka import (EARLIEST, LATEST, MAX_TIMESTAMP, BrokerNode, KafkaAdmin, KafkaClient,
                                   KafkaOffsetOutOfRange, KafkaProducer, KafkaResponseError, NewTopic,
                                   PartitionConsumer, PendingRecord, key_partition)
from trikafka.client.kafka.connection import KafkaConnection
from trikafka.kafka.apis import KafkaApi
from trikafka.kafka.compression import Compression
from trikafka.kafka.records import Record
from trikafka.testing import running_kafka_broker
from trikafka.testing.kafka_broker import RunningKafkaBroker


@pytest.fixture(scope="module")
def kafka() -> Iterator[RunningKafkaBroker]:
    with running_kafka_broker(num_partitions=1) as running:
        yield running


async def _create(client: KafkaClient, topic: str, partitions: int, **configs: str) -> None:
    errors = await KafkaAdmin(client).create_topics([NewTopic(topic, partitions, configs=configs)])
    assert errors == {topic: None}


@pytest.mark.parametrize("codec", list(Compression))
@pytest.mark.parametrize("acks", [1, -1])
async def test_round_trip_with_keys_headers_and_every_codec(kafka: RunningKafkaBroker, codec: Compression,
                                                           acks: int) -> None:
    topic = f"trio-{codec.name.lower()}-{acks}"
    async with KafkaClient(kafka.bootstrap) as client:
        await _create(client, topic, 1)
        sent = [(f"k{i % 5}".encode() if i % 4 else None, f"value-{i}".encode() * (1 + i % 3),
                 (("n", str(i).encode()), ("empty", None)), 1_700_000_000_000 + i) for i in range(100)]
        offsets: list[tuple[int, int]] = []
        async with KafkaProducer.open(client, acks=acks, compression=codec, linger_s=0.01) as producer:
            async def send(key: bytes | None, value: bytes, headers: tuple, timestamp_ms: int) -> None:
                offsets.append(await producer.send(topic, value, key=key, headers=headers,
                                                   timestamp_ms=timestamp_ms))
            async with trio.open_nursery() as nursery:
                for item in sent:
                    nursery.start_soon(send, *item)
        assert sorted(offsets) == [(0, i) for i in range(100)]  # one partition, dense offsets
        records = await read_partition(client, topic, 0, 100)
    # Every value is unique: each record read back is the one sent with that value.
    assert {r.value: (r.key, r.headers, r.timestamp_ms) for r in records} == {
        value: (key, headers, timestamp_ms) for key, value, headers, timestamp_ms in sent}
    assert [r.offset for r in records] == list(range(100))


async def test_submitted_records_keep_their_order_across_many_batches(kafka: RunningKafkaBroker) -> None:
    topic = "trio-order"
    async with KafkaClient(kafka.bootstrap) as client:
        await _create(client, topic, 1)
        async with KafkaProducer.open(client, acks=1, batch_max_bytes=300) as producer:
            pending = [await producer.submit(topic, b"%04d" % i) for i in range(300)]
            delivered = [await p.delivered() for p in pending]
        assert delivered == [(0, i) for i in range(300)]
        records = await read_partition(client, topic, 0, 300)
    assert [r.value for r in records] == [b"%04d" % i for i in range(300)]


async def test_on_delivery_hears_each_record_as_its_batch_is_answered(kafka: RunningKafkaBroker) -> None:
    """``submit(..., on_delivery=f)`` calls ``f(pending)`` once the record's batch is answered (no task
    awaits it); ``pending.result()`` is then its (partition, offset), or raises the batch's error."""
    topic = "trio-on-delivery"
    async with KafkaClient(kafka.bootstrap) as client:
        await _create(client, topic, 1, **{"max.message.bytes": "2000"})
        heard: list[PendingRecord] = []
        async with KafkaProducer.open(client, acks=1, batch_max_bytes=300) as producer:
            pending = [await producer.submit(topic, b"%04d" % i, on_delivery=heard.append) for i in range(50)]
            with pytest.raises(RuntimeError, match="not answered yet"):
                pending[-1].result()
            await producer.flush()
            too_large = await producer.submit(topic, b"x" * 4000, on_delivery=heard.append)
        assert heard[:50] == pending and [p.result() for p in pending] == [(0, i) for i in range(50)]
        assert heard[50:] == [too_large]
        with pytest.raises(KafkaResponseError):
            too_large.result()


async def test_batches_linger_in_one_task_whatever_their_number(kafka: RunningKafkaBroker) -> None:
    """Each batch goes out ``linger_s`` after its first record; one task lingers for every batch."""
    topic = "trio-linger"
    spawned: list[str] = []

    class Spawns(trio.abc.Instrument):
        def task_spawned(self, task: trio.lowlevel.Task) -> None:
            spawned.append(task.name)

    async with KafkaClient(kafka.bootstrap) as client:
        await _create(client, topic, 2)
        async with KafkaProducer.open(client, acks=1, linger_s=0.05) as producer:
            trio.lowlevel.add_instrument(Spawns())
            for batch in range(6):
                opened = trio.current_time()
                pending = [await producer.submit(topic, b"%d" % i, partition=i % 2) for i in range(4)]
                assert [await p.delivered() for p in pending][-2:] == [(0, 2 * batch + 1), (1, 2 * batch + 1)]
                assert trio.current_time() - opened >= 0.05
    assert sum("_linger" in name for name in spawned) == 1, spawned


async def _three_batches(client: KafkaClient, topic: str) -> None:
    """A new one-partition ``topic`` holding three record batches: offsets 0-2, 3-6, 7-11."""
    await _create(client, topic, 1)
    async with KafkaProducer.open(client, acks=1, linger_s=1.0) as producer:
        for size in (3, 4, 5):
            for i in range(size):
                await producer.submit(topic, b"%d" % i)
            await producer.flush()


async def test_batches_hand_out_each_record_batch_and_move_the_position_past_it(
        kafka: RunningKafkaBroker) -> None:
    topic = "trio-batches"
    async with KafkaClient(kafka.bootstrap) as client:
        await _three_batches(client, topic)
        async with PartitionConsumer(client, topic, 0, 1, max_wait_s=0.2) as consumer:
            seen = []
            async for batch in consumer.batches():
                seen.append([r.offset for r in batch])
                if batch[-1].offset == 6:
                    break
            assert seen == [[1, 2], [3, 4, 5, 6]]  # from offset 1: the first batch's records from 1 on
            assert consumer.position == 3  # a batch is passed when the next is asked for
            async for batch in consumer.batches():  # the rest of the fetch comes again
                assert [r.offset for r in batch] == [3, 4, 5, 6]
                break
            assert [r.offset for r in await consumer.fetch()] == [3, 4, 5, 6, 7, 8, 9, 10, 11]
            assert consumer.position == 12


async def test_batches_send_the_next_fetch_ahead_and_a_seek_drops_it(
        kafka: RunningKafkaBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    topic = "trio-fetch-ahead"
    sent_ahead: list[int] = []
    request_ahead = KafkaConnection.request_ahead

    async def recording(self: KafkaConnection, api: KafkaApi, **values: object):  # type: ignore[no-untyped-def]
        sent_ahead.append(values["topics"][0]["partitions"][0]["fetch_offset"])  # type: ignore[index]
        return await request_ahead(self, api, **values)

    monkeypatch.setattr(KafkaConnection, "request_ahead", recording)
    async with KafkaClient(kafka.bootstrap) as client:
        await _three_batches(client, topic)
        # A partition_max_bytes below a batch: each fetch answers one batch (the first is always whole).
        async with PartitionConsumer(client, topic, 0, 0, max_wait_s=0.2, partition_max_bytes=1) as consumer:
            seen = []
            async for batch in consumer.batches():
                seen.append(batch.offsets)
                if len(seen) == 2:
                    break
            assert sent_ahead == [3, 7]  # each fetch's successor left before its batch was handed out
            await consumer.seek(1)  # the fetch sent ahead asked for 7: dropped
            async for batch in consumer.batches():
                seen.append(batch.offsets)
                if batch.offsets[-1] == 11:
                    break
        assert seen == [[0, 1, 2], [3, 4, 5, 6], [1, 2], [3, 4, 5, 6], [7, 8, 9, 10, 11]]
        assert sent_ahead == [3, 7, 3, 7, 12]


@pytest.mark.parametrize("max_in_flight", [1, 5])
@pytest.mark.parametrize("acks", [1, -1])
async def test_a_partitions_batches_are_pipelined_up_to_max_in_flight_and_stored_in_order(
        kafka: RunningKafkaBroker, monkeypatch: pytest.MonkeyPatch, max_in_flight: int, acks: int) -> None:
    topic = f"trio-in-flight-{max_in_flight}-{acks}"
    unanswered, most = 0, 0
    send = KafkaConnection.send
    # The answers are held from the producer until max_in_flight requests are out: how many it sends
    # before an answer comes back is then the producer's doing, not the broker's speed. A producer
    # that never pipelined would wait here for ever (the fail_after below).
    all_out = trio.Event()

    async def counting_send(self: KafkaConnection, api: KafkaApi, *args: object, **kwargs: object) -> object:
        nonlocal unanswered, most
        if api is not KafkaApi.PRODUCE:
            return await send(self, api, *args, **kwargs)  # type: ignore[arg-type]
        unanswered += 1
        most = max(most, unanswered)
        if unanswered == max_in_flight:
            all_out.set()
        try:
            answer = await send(self, api, *args, **kwargs)  # type: ignore[arg-type]
            await all_out.wait()
            return answer
        finally:
            unanswered -= 1

    async with KafkaClient(kafka.bootstrap) as client:
        await _create(client, topic, 1)
        monkeypatch.setattr(KafkaConnection, "send", counting_send)
        with trio.fail_after(30):
            async with KafkaProducer.open(client, acks=acks, batch_max_bytes=200, max_in_flight=max_in_flight,
                                          linger_s=1.0) as producer:
                pending = [await producer.submit(topic, b"%04d" % i) for i in range(500)]
            # Leaving the block flushed the last batch at once, not after its linger.
            delivered = [await p.delivered() for p in pending]
        monkeypatch.undo()
        assert delivered == [(0, i) for i in range(500)]
        assert most == max_in_flight
        records = await read_partition(client, topic, 0, 500)
    assert [r.value for r in records] == [b"%04d" % i for i in range(500)]


async def test_max_in_flight_is_bounded_by_idempotence() -> None:
    async with KafkaClient("127.0.0.1:1") as client:
        for settings in ({"max_in_flight": 6}, {"max_in_flight": 0, "acks": 1}):
            with pytest.raises(ValueError, match="max_in_flight"):
                async with KafkaProducer.open(client, **settings):  # type: ignore[arg-type]
                    pass
        async with KafkaProducer.open(client, acks=1, max_in_flight=6):
            pass


async def test_acks_zero_answers_no_offset_and_appends(kafka: RunningKafkaBroker) -> None:
    async with KafkaClient(kafka.bootstrap) as client:
        await _create(client, "trio-acks0", 1)
        async with KafkaProducer.open(client, acks=0) as producer:
            assert await producer.send("trio-acks0", b"fire") == (0, -1)
        records = await read_partition(client, "trio-acks0", 0, 1)
    assert [r.value for r in records] == [b"fire"]


async def test_a_consumer_from_an_offset_inside_a_batch_skips_the_records_before_it(kafka: RunningKafkaBroker) -> None:
    topic = "trio-inside"
    async with KafkaClient(kafka.bootstrap) as client:
        await _create(client, topic, 1)
        async with KafkaProducer.open(client, acks=1, linger_s=1.0, compression=Compression.GZIP) as producer:
            pending = [await producer.submit(topic, b"%d" % i) for i in range(10)]  # one batch, sent on flush
            await producer.flush()
            assert [await p.delivered() for p in pending] == [(0, i) for i in range(10)]
        consumer = PartitionConsumer(client, topic, 0, 7, max_wait_s=0.2)
        records = await consumer.fetch()
    assert [(r.offset, r.value) for r in records] == [(7, b"7"), (8, b"8"), (9, b"9")]
    assert consumer.position == 10 and consumer.high_watermark == 10


async def test_an_offset_out_of_range_raises_or_resets(kafka: RunningKafkaBroker) -> None:
    topic = "trio-range"
    async with KafkaClient(kafka.bootstrap) as client:
        await _create(client, topic, 1)
        async with KafkaProducer.open(client, acks=1) as producer:
            await producer.send(topic, b"only")
        with pytest.raises(KafkaOffsetOutOfRange):
            await PartitionConsumer(client, topic, 0, 50).fetch()
        resetting = PartitionConsumer(client, topic, 0, 50, reset=EARLIEST, max_wait_s=0.2)
        assert await resetting.fetch() == []
        assert resetting.position == 0
        assert [r.value for r in await resetting.fetch()] == [b"only"]


async def test_latest_reads_only_what_comes_after(kafka: RunningKafkaBroker) -> None:
    topic = "trio-latest"
    async with KafkaClient(kafka.bootstrap) as client:
        await _create(client, topic, 1)
        async with KafkaProducer.open(client, acks=1) as producer:
            await producer.send(topic, b"old")
            consumer = PartitionConsumer(client, topic, 0, LATEST, max_wait_s=0.2)
            assert await consumer.seek(LATEST) == 1
            await producer.send(topic, b"new")
        assert [(r.offset, r.value) for r in await consumer.fetch()] == [(1, b"new")]


async def test_list_offsets_by_time_and_the_ends(kafka: RunningKafkaBroker) -> None:
    topic = "trio-times"
    async with KafkaClient(kafka.bootstrap) as client:
        await _create(client, topic, 1)
        async with KafkaProducer.open(client, acks=1) as producer:
            for i in range(5):  # one batch each: the time index has one entry per batch
                await producer.send(topic, b"%d" % i, timestamp_ms=1_000_000 + 1000 * i)
        admin = KafkaAdmin(client)
        found = await admin.list_offsets(topic, {0: 1_000_000 + 2500})
        assert found[0].offset == 3
        assert (await admin.list_offsets(topic, {0: 9_000_000}))[0].offset == -1
        assert (await admin.list_offsets(topic, {0: EARLIEST}))[0].offset == 0
        assert (await admin.list_offsets(topic, {0: LATEST}))[0].offset == 5
        assert tuple((await admin.list_offsets(topic, {0: MAX_TIMESTAMP}))[0]) == (4, 1_004_000)


async def test_admin_creates_describes_and_lists(kafka: RunningKafkaBroker) -> None:
    async with KafkaClient(kafka.bootstrap) as client:
        admin = KafkaAdmin(client)
        await _create(client, "trio-admin", 3)
        again = await admin.create_topics([NewTopic("trio-admin", 3)])
        assert again["trio-admin"] is not None and again["trio-admin"].error_code == 36  # TOPIC_ALREADY_EXISTS
        configs = await admin.describe_configs("trio-admin")
        assert configs["cleanup.policy"] == ("delete", True, False)  # (value, is_default, read_only)
        assert configs["record.format"].value == "v2"
        metadata = await admin.metadata(["trio-admin"])
        assert sorted(metadata.topics["trio-admin"].partitions) == [0, 1, 2]
        assert metadata.brokers[metadata.controller_id].port == kafka.kafka_port
        assert metadata.cluster_id


async def test_keys_route_by_murmur2_across_two_partitions(kafka: RunningKafkaBroker) -> None:
    topic = "trio-keys"
    keys = [f"user-{i}".encode() for i in range(40)]
    async with KafkaClient(kafka.bootstrap) as client:
        await _create(client, topic, 2)
        async with KafkaProducer.open(client, acks=-1) as producer:
            placed = {key: (await producer.send(topic, key + b"!", key=key))[0] for key in keys}
        assert placed == {key: key_partition(key, 2) for key in keys}
        assert set(placed.values()) == {0, 1}
        for partition in (0, 1):
            mine = [k for k in keys if placed[k] == partition]
            records = await read_partition(client, topic, partition, len(mine))
            assert [r.key for r in records] == mine


async def test_a_leader_that_moved_is_found_again(kafka: RunningKafkaBroker) -> None:
    topic = "trio-moved"
    async with KafkaClient(kafka.bootstrap, retry_backoff_s=0.01) as client:
        await _create(client, topic, 2)
        await client.topic(topic)
        # The cached metadata names a leader on a port where nobody listens any more.
        with socket.socket() as closed:
            closed.bind(("127.0.0.1", 0))
            dead_port = closed.getsockname()[1]
        stale = client.metadata
        moved = {p: info.__class__(info.topic, info.partition, info.error_code, 99, info.leader_epoch,
                                   info.replicas, info.isr) for p, info in stale.topics[topic].partitions.items()}
        stale.topics[topic].partitions.update(moved)
        stale.brokers[99] = BrokerNode(99, "127.0.0.1", dead_port)
        async with KafkaProducer.open(client, acks=1) as producer:
            assert await producer.send(topic, b"x", partition=1) == (1, 0)
        assert client.metadata.topics[topic].partitions[1].leader_id == 0


async def test_a_partition_the_broker_does_not_have_fails_after_bounded_metadata_refreshes(
        kafka: RunningKafkaBroker) -> None:
    topic = "trio-bounded"
    async with KafkaClient(kafka.bootstrap, max_retries=3, retry_backoff_s=0.001) as client:
        await _create(client, topic, 1)
        refreshes = 0
        real_refresh = client.refresh_metadata

        async def counting_refresh(*args, **kwargs):  # type: ignore[no-untyped-def]
            nonlocal refreshes
            refreshes += 1
            found = await real_refresh(*args, **kwargs)
            # The cache keeps believing in a partition 5 led by broker 0, so each try reaches the broker.
            partitions = client.metadata.topics[topic].partitions
            partitions[5] = partitions[0].__class__(topic, 5, 0, 0, 0, (0,), (0,))
            return found

        client.refresh_metadata = counting_refresh  # type: ignore[method-assign]
        async with KafkaProducer.open(client, acks=1) as producer:
            with pytest.raises(KafkaResponseError) as caught:
                await producer.send(topic, b"x", partition=5)
    assert caught.value.error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION, from the broker
    assert refreshes == 1 + 3  # the first lookup, then one per retry


async def test_a_fetch_at_the_end_waits_for_the_next_record(kafka: RunningKafkaBroker) -> None:
    topic = "trio-long-poll"
    async with KafkaClient(kafka.bootstrap) as client:
        await _create(client, topic, 1)
        consumer = PartitionConsumer(client, topic, 0, LATEST, max_wait_s=30.0)
        await consumer.seek(LATEST)
        got: list[Record] = []
        async with trio.open_nursery() as nursery:
            async def fetch() -> None:
                got.extend(await consumer.fetch())

            nursery.start_soon(fetch)
            async with KafkaProducer.open(client, acks=1) as producer:
                await producer.send(topic, b"awaited")
    assert [r.value for r in got] == [b"awaited"]


async def test_an_unknown_topic_is_an_error_without_auto_creation(kafka: RunningKafkaBroker) -> None:
    async with KafkaClient(kafka.bootstrap, max_retries=1, retry_backoff_s=0.01,
                           allow_auto_topic_creation=False) as client:
        with pytest.raises(KafkaResponseError) as caught:
            await client.topic("trio-never-created")
    assert caught.value.error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION


async def test_producing_to_an_unknown_topic_creates_it_by_default(kafka: RunningKafkaBroker) -> None:
    async with KafkaClient(kafka.bootstrap, retry_backoff_s=0.01) as client:
        async with KafkaProducer.open(client, acks=1) as producer:
            assert await producer.send("trio-auto-created", b"first") == (0, 0)
        assert client.metadata.topics["trio-auto-created"].partitions[0].leader_id == 0


async def test_keyed_records_of_this_producer_land_where_kafka_python_and_librdkafka_read_them(
        kafka: RunningKafkaBroker) -> None:
    from kafka.partitioner.default import murmur2 as kafka_python_murmur2

    topic = "trio-to-others"
    keys = [f"key-{i}".encode() for i in range(30)]
    async with KafkaClient(kafka.bootstrap) as client:
        await _create(client, topic, 3)
        async with KafkaProducer.open(client, acks=1, compression=Compression.SNAPPY) as producer:
            async with trio.open_nursery() as nursery:
                for key in keys:
                    nursery.start_soon(functools.partial(producer.send, topic, b"v-" + key, key=key))
    by_kafka_python = await trio.to_thread.run_sync(read_with_kafka_python, kafka.bootstrap, topic, 3, len(keys))
    by_librdkafka = await trio.to_thread.run_sync(read_with_confluent, kafka.bootstrap, topic, 3, len(keys))
    for seen in (by_kafka_python, by_librdkafka):
        assert sorted(s.key for s in seen) == sorted(keys)
        assert all(s.partition == (kafka_python_murmur2(s.key) & 0x7FFFFFFF) % 3 for s in seen)
        assert all(s.value == b"v-" + s.key for s in seen)


async def test_records_of_other_clients_read_back_on_the_partition_of_their_key(kafka: RunningKafkaBroker) -> None:
    topic = "trio-from-others"
    keys = [f"other-{i}".encode() for i in range(30)]
    await trio.to_thread.run_sync(create_topic, kafka.bootstrap, topic, 3)

    def produce_with_kafka_python_and_librdkafka() -> None:
        from confluent_kafka import Producer as ConfluentProducer
        from kafka import KafkaProducer as KafkaPythonProducer

        producer = KafkaPythonProducer(bootstrap_servers=kafka.bootstrap, acks=1, compression_type="lz4")
        for key in keys[:15]:
            producer.send(topic, key=key, value=b"kp", headers=[("from", b"kafka-python")])
        producer.flush()
        producer.close()
        confluent = ConfluentProducer({"bootstrap.servers": kafka.bootstrap, "partitioner": "murmur2_random",
                                       "compression.type": "zstd"})
        for key in keys[15:]:
            confluent.produce(topic, key=key, value=b"ck", headers=[("from", b"librdkafka")])
        assert confluent.flush(30) == 0

    await trio.to_thread.run_sync(produce_with_kafka_python_and_librdkafka)
    async with KafkaClient(kafka.bootstrap) as client:
        counts = {p: (await KafkaAdmin(client).list_offsets(topic, {p: LATEST}))[p].offset for p in range(3)}
        seen = {p: await read_partition(client, topic, p, counts[p]) for p in range(3)}
    assert sorted(r.key for records in seen.values() for r in records if r.key) == sorted(keys)
    for partition, records in seen.items():
        assert all(key_partition(r.key, 3) == partition for r in records if r.key)
        assert all(dict(r.headers)["from"] == (b"kafka-python" if r.value == b"kp" else b"librdkafka")
                   for r in records)


async def _cli(cwd: object, *args: str, stdin: bytes | None = None) -> tuple[bytes, bytes]:
    """Run one ``trikafka`` command in ``cwd`` to a zero exit; (stdout, stderr)."""
    async with child_process(*args, cwd=cwd, stdin=None if stdin is None else subprocess.PIPE,
                             stdout=subprocess.PIPE) as child:
        if stdin is not None:
            await child.send_stdin(stdin)
        assert await child.wait() == 0, child.stderr.decode()
    return bytes(child.stdout), bytes(child.stderr)


async def test_the_cli_creates_produces_consumes_and_lists_kafka_format_topics(tmp_path) -> None:
    # Run where `serve` keeps its default data dir, so `--kafka` alone finds the listener (§7.1).
    async with serve_process(tmp_path / "trikafka-data", cwd=tmp_path) as (broker, _port):
        listener = (tmp_path / "trikafka-data" / ".trikafka-listener").read_text().splitlines()
        assert listener[1].startswith("kafka 127.0.0.1:")
        await _cli(tmp_path, "topics", "create", "cli-kt", "--partitions", "2", "--kafka")
        lines = [f"key-{i % 6}:value {i}" for i in range(40)]
        _, stderr = await _cli(tmp_path, "produce", "cli-kt", "--kafka", "--key-separator", ":", "--acks", "-1",
                               stdin="".join(f"{line}\n" for line in lines).encode())
        assert b"sent 40 records to cli-kt" in stderr
        out, _ = await _cli(tmp_path, "consume", "cli-kt", "--kafka", "--exit-at-end", "-f", "%p %o %k:%s\\n")
        rows = [row.split(b" ", 2) for row in out.splitlines()]
        assert sorted(row[2].decode() for row in rows) == sorted(lines)
        assert all(int(p) == key_partition(kv.split(b":")[0], 2) for p, _, kv in rows)
        for partition in (b"0", b"1"):  # each partition in its own order, from offset 0
            mine = [row for row in rows if row[0] == partition]
            assert [int(row[1]) for row in mine] == list(range(len(mine)))
            values = [int(row[2].split(b"value ")[1]) for row in mine]
            assert values == sorted(values)
        out, _ = await _cli(tmp_path, "topics", "--kafka", listener[1].split()[1], "cli-kt")
        table = [row.split("\t") for row in out.decode().splitlines()]
        assert table[0] == ["topic", "partition", "leader", "start", "end", "records"]
        assert sum(int(row[5]) for row in table[1:]) == 40
        out, _ = await _cli(tmp_path, "topics", "--kafka")
        assert out.decode().splitlines() == ["cli-kt\t2 partitions"]
        broker.signal(signal.SIGTERM)
        assert await broker.wait() == 0
