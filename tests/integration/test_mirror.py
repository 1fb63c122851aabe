"""Mirroring between two clusters, each with its own ZooKeeper and ``trikafka serve``
brokers (docs/protocol.md §13): the mirror SIGKILLed mid-stream and restarted loses
nothing and repeats only its uncommitted tail, which the audit reports; compressed
sets arrive byte for byte."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
from collections import defaultdict
from typing import AsyncIterator

import pytest
import trio

from trikafka.client import SimpleConsumer
from trikafka.mirror import MirrorConfig, MirrorStats, run_mirror
from trikafka.mirror.audit import read_topic
from trikafka.mirror.topics import live_brokers
from trikafka.producer import Producer
from trikafka.wire import Codec
from trikafka.wire.envelope import decode_envelope
from trikafka.zk import KazooZooKeeperClient, paths
from trikafka.zk.errors import NoNodeError

from tests.helpers.broker_testing import child_process
from tests.helpers.zk_brokers import broker_process

pytestmark = pytest.mark.zookeeper

TOPIC = "clicks"
GROUP = "trikafka-mirror"
WAIT_S = 60.0  # bound on every wait for the other processes; a hang fails instead of stalling
POLL_S = 0.1


@contextlib.asynccontextmanager
async def cluster(tmp_path, zk_connect: str, name: str) -> AsyncIterator[None]:
    """One ``trikafka serve`` broker (2 partitions per topic) registered in ``zk_connect``."""
    (tmp_path / name).mkdir()
    async with broker_process(tmp_path / name, zk_connect, 1) as broker:
        await broker.wait_ready()
        yield


async def partitions_of(zk_connect: str, topic: str) -> dict[int, list]:
    """``{partition: [ConsumedMessage, ...]}`` of ``topic`` on a cluster, as of now."""
    held: dict[int, list] = defaultdict(list)
    async with KazooZooKeeperClient(zk_connect) as zk:
        async for _broker, partition, message in read_topic(zk, topic):
            held[partition].append(message)
    return held


async def wait_for_distinct(zk_connect: str, topic: str, at_least: int) -> None:
    """Poll until the cluster holds ``at_least`` distinct enveloped messages of ``topic``."""
    with trio.fail_after(WAIT_S):
        while True:
            held = await partitions_of(zk_connect, topic)
            envelopes = [decode_envelope(m.payload) for ms in held.values() for m in ms]
            if len({(e.producer_id, e.sequence) for e in envelopes}) >= at_least:
                return
            await trio.sleep(POLL_S)


def mirror_args(source: str, target: str) -> list[str]:
    return ["mirror", "--source-zookeeper", source, "--target-zookeeper", target, "--whitelist", TOPIC,
            "--consumer-id", "m1", "--commit-interval-ms", "100"]


async def committed_offsets(zk_connect: str) -> dict[int, int]:
    async with KazooZooKeeperClient(zk_connect) as zk:
        offsets = {}
        for partition in range(2):
            try:
                data, _stat = await zk.get(paths.consumer_offset(GROUP, TOPIC, 1, partition))
            except NoNodeError:
                continue
            offsets[partition] = int(data)
        return offsets


async def wait_committed(zk_connect: str, ends: dict[int, int]) -> None:
    """Poll until the mirror's group committed at least ``ends`` on the source."""
    with trio.fail_after(WAIT_S):
        while True:
            committed = await committed_offsets(zk_connect)
            if all(committed.get(p, 0) >= end for p, end in ends.items()):
                return
            await trio.sleep(POLL_S)


async def test_mirror_sigkilled_and_restarted_loses_nothing_and_the_audit_sees_the_tail(
        tmp_path, zk_chroot, dedicated_zookeeper_server):
    source, target = zk_chroot, dedicated_zookeeper_server.connect_string
    per_round, rounds = 40, 6
    async with cluster(tmp_path, source, "source"), cluster(tmp_path, target, "target"):
        async with Producer(zk_connect=source, acks=1, audit=True, audit_window_s=0.5) as producer:
            async def produce_round(r: int) -> None:
                await producer.send_batch(TOPIC, [b"r%d-m%d" % (r, i) for i in range(per_round)],
                                          keys=range(per_round))

            # A first mirror copies round 0, commits it and stops cleanly.
            async with child_process(*mirror_args(source, target)) as first:
                await first.wait_for_stderr(b"trikafka: mirroring")
                await produce_round(0)
                await wait_for_distinct(target, TOPIC, per_round)
                await wait_committed(source, {p: ms[-1].next_offset
                                              for p, ms in (await partitions_of(source, TOPIC)).items()})
                first.signal(signal.SIGTERM)
                assert await first.wait() == 0, first.stderr.decode(errors="replace")
            # A second one never commits on its own: what it copies before its
            # SIGKILL is the uncommitted tail.
            async with child_process(*mirror_args(source, target)[:-1], "600000") as second:
                for r in (1, 2):
                    await produce_round(r)
                await wait_for_distinct(target, TOPIC, 3 * per_round)
                second.signal(signal.SIGKILL)
                assert await second.wait() == -signal.SIGKILL
            committed_at_kill = await committed_offsets(source)
            for r in range(3, rounds):
                await produce_round(r)  # while no mirror runs
            async with child_process(*mirror_args(source, target)) as third:
                await wait_for_distinct(target, TOPIC, per_round * rounds)
                third.signal(signal.SIGTERM)
                assert await third.wait() == 0, third.stderr.decode(errors="replace")
        # The producer closed: its last audit events are out.

        sent = await partitions_of(source, TOPIC)
        mirrored = await partitions_of(target, TOPIC)
        duplicates_seen: set[bytes] = set()
        assert sum(len(ms) for ms in sent.values()) == per_round * rounds
        for partition, messages in sent.items():
            payloads = [m.payload for m in messages]
            got = [m.payload for m in mirrored[partition]]
            first_seen = list(dict.fromkeys(got))
            assert first_seen == payloads  # everything, in the source partition's order
            tail = {m.payload for m in messages if m.offset >= committed_at_kill.get(partition, 0)}
            duplicated = [p for p in set(got) if got.count(p) > 1]
            assert set(duplicated) <= tail, "duplicates only from what was not committed at the kill"
            assert all(got.count(p) <= 2 for p in got)
            duplicates_seen.update(duplicated)
        # Rounds 1 and 2 were copied and never committed before the kill: they came twice.
        assert {decode_envelope(p).payload for p in duplicates_seen} == {
            b"r%d-m%d" % (r, i) for r in (1, 2) for i in range(per_round)}

        async with child_process("audit", "--zookeeper", source, "--zookeeper", target, "--json",
                                 stdout=subprocess.PIPE) as audit:
            assert await audit.wait() == 0, audit.stderr.decode(errors="replace")
        report = json.loads(bytes(audit.stdout))
        rows = report["windows"]
        assert report["missing"] == 0 and report["extra"] == 0
        assert {r["tier"] for r in rows} == {source, target}
        assert sum(r["expected"] for r in rows if r["tier"] == source) == per_round * rounds
        assert all(r["duplicated"] == 0 for r in rows if r["tier"] == source)
        target_duplicates = sum(len(ms) for ms in mirrored.values()) - per_round * rounds
        assert sum(r["duplicated"] for r in rows if r["tier"] == target) == target_duplicates

        async with child_process("groups", GROUP, "--zookeeper", source, stdout=subprocess.PIPE) as groups:
            assert await groups.wait() == 0
        lines = [line.split("\t") for line in bytes(groups.stdout).decode().splitlines()]
        lag = {row[1]: row[-1] for row in lines if row[0] == TOPIC}
        assert lag == {"1-0": "0", "1-1": "0"}


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY])
async def test_compressed_sets_pass_through_byte_identical(tmp_path, zk_chroot, dedicated_zookeeper_server,
                                                           codec):
    source, target = zk_chroot, dedicated_zookeeper_server.connect_string
    async with cluster(tmp_path, source, "source"), cluster(tmp_path, target, "target"):
        # gzip level 1: a mirror that recompressed (at the default level 6) would change the bytes
        async with Producer(zk_connect=source, acks=1, compression_codec=codec, gzip_level=1) as producer:
            for r in range(5):
                await producer.send_batch(TOPIC, [b"%d-%d " % (r, i) * 20 for i in range(30)], keys=[r] * 30)
        stats = MirrorStats()
        config = MirrorConfig([source], target, TOPIC, consumer_id="m1", acks=-1)
        async with trio.open_nursery() as nursery:
            await nursery.start(run_mirror, config, stats)
            with trio.fail_after(WAIT_S):
                while stats.total_messages < 150:
                    await trio.sleep(POLL_S)
            nursery.cancel_scope.cancel()
        async with KazooZooKeeperClient(source) as szk, KazooZooKeeperClient(target) as tzk:
            [source_address] = (await live_brokers(szk)).values()
            [target_address] = (await live_brokers(tzk)).values()
        ends = []
        for partition in range(2):
            raw = []
            for address in (source_address, target_address):
                async with SimpleConsumer(address, TOPIC, partition) as simple:
                    end = await simple.latest()
                    result = await simple.fetch(0, 1 << 20, wait=False)
                    raw.append((end, bytes(result.data)))
            assert raw[0] == raw[1]  # same log end, same bytes
            end, data = raw[0]
            assert len(data) == end  # the whole partition was compared
            assert end == 0 or data[5] & 3 == codec  # wrappers, not plain messages
            ends.append(end)
        assert any(ends)


async def test_mirror_rides_out_restarts_of_source_and_target_brokers(tmp_path, zk_chroot,
                                                                    dedicated_zookeeper_server):
    source, target = zk_chroot, dedicated_zookeeper_server.connect_string
    (tmp_path / "source").mkdir()
    (tmp_path / "target").mkdir()

    async def produce(r: int) -> None:
        async with Producer(zk_connect=source, acks=1, audit=True) as producer:
            await producer.send_batch(TOPIC, [b"r%d-m%d" % (r, i) for i in range(30)], keys=range(30))

    stats = MirrorStats()
    async with trio.open_nursery() as nursery:
        async with broker_process(tmp_path / "source", source, 1) as source_broker:
            await source_broker.wait_ready()
            async with broker_process(tmp_path / "target", target, 1) as target_broker:
                await target_broker.wait_ready()
                await nursery.start(run_mirror, MirrorConfig([source], target, TOPIC, consumer_id="m1"), stats)
                await produce(0)
                await wait_for_distinct(target, TOPIC, 30)
                await target_broker.stop()
            await produce(1)  # the target is down: the mirror keeps retrying
            async with broker_process(tmp_path / "target", target, 1) as target_broker:
                await target_broker.wait_ready()
                await wait_for_distinct(target, TOPIC, 60)
                await source_broker.stop()
                async with broker_process(tmp_path / "source", source, 1) as source_broker:
                    await source_broker.wait_ready()
                    await produce(2)
                    await wait_for_distinct(target, TOPIC, 90)
                    nursery.cancel_scope.cancel()
    assert stats.send_failures > 0  # it did meet the stopped target


async def test_produce_audit_from_the_command_line_then_audit_table(tmp_path, zk_chroot):
    async with cluster(tmp_path, zk_chroot, "source"):
        async with child_process("produce", TOPIC, "--zookeeper", zk_chroot, "--audit",
                                 stdin=subprocess.PIPE) as produce:
            await produce.send_stdin(b"".join(b"line %d\n" % i for i in range(25)))
            assert await produce.wait() == 0, produce.stderr.decode(errors="replace")
        await wait_for_distinct(zk_chroot, TOPIC, 25)  # visible once the broker's flush covers it
        held = await partitions_of(zk_chroot, TOPIC)
        envelopes = [decode_envelope(m.payload) for ms in held.values() for m in ms]
        assert sorted(e.payload for e in envelopes) == sorted(b"line %d" % i for i in range(25))
        with trio.fail_after(WAIT_S):  # the audit topic is registered by the broker on its own time
            while True:
                async with child_process("audit", "--zookeeper", zk_chroot, "--all",
                                         stdout=subprocess.PIPE) as audit:
                    assert await audit.wait() == 0, audit.stderr.decode(errors="replace")
                table = bytes(audit.stdout).decode()
                if TOPIC in table:
                    break
                await trio.sleep(POLL_S)
        assert table.splitlines()[0].split()[:3] == ["topic", "window", "start"]
        assert table.splitlines()[-1].endswith(": 0 missing, 0 duplicated, 0 unaccounted")
        expected = sum(int(line.split()[3]) for line in table.splitlines()[1:-1])
        assert expected == 25


async def test_several_sources_join_in_one_target(tmp_path, zk_chroot, dedicated_zookeeper_server):
    sources = [zk_chroot, dedicated_zookeeper_server.connect_string + "/source-b"]
    target = dedicated_zookeeper_server.connect_string + "/target"
    async with cluster(tmp_path, sources[0], "a"), cluster(tmp_path, sources[1], "b"), \
            cluster(tmp_path, target, "target"):
        for name, source in zip("ab", sources):
            async with Producer(zk_connect=source, acks=1, audit=True) as producer:
                await producer.send_batch(TOPIC, [b"%s-%d" % (name.encode(), i) for i in range(20)],
                                          keys=range(20))
        stats = MirrorStats()
        async with trio.open_nursery() as nursery:
            await nursery.start(run_mirror, MirrorConfig(sources, target, TOPIC, consumer_id="m1"), stats)
            await wait_for_distinct(target, TOPIC, 40)
            nursery.cancel_scope.cancel()
        assert stats.messages == {sources[0]: 20, sources[1]: 20}
        mirrored = await partitions_of(target, TOPIC)
        got = sorted(decode_envelope(m.payload).payload for ms in mirrored.values() for m in ms)
        assert got == sorted(b"%s-%d" % (n, i) for n in (b"a", b"b") for i in range(20))
        for source in sources:  # each source keeps the mirror's offsets in its own ZooKeeper
            ends = {p: ms[-1].next_offset for p, ms in (await partitions_of(source, TOPIC)).items()}
            committed = await committed_offsets(source)
            assert {p: committed.get(p, 0) for p in range(2)} == {p: ends.get(p, 0) for p in range(2)}
