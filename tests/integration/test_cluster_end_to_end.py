"""A two-broker cluster end to end: real ``trikafka serve`` processes registered in
the real ZooKeeper (spec §8.2), a producer that finds them there (§8.5),
and the command-line tools on top.

Each test gets its own chroot on the shared ZooKeeper server, so the brokers
of different tests never see each other.  Every child process is killed by
PID when its ``async with`` ends, whatever happened.
"""

from __future__ import annotations

import contextlib
import random
import signal
import subprocess
from collections import Counter, defaultdict
from typing import AsyncIterator, Callable

import pytest
import trio

from tests.helpers.fault_proxy import FaultMode
from tests.helpers.zk_brokers import PARTITIONS_PER_BROKER, BrokerProcess, broker_process
from tests.helpers.zookeeper_server import open_zookeeper_proxy
from trikafka.broker import BrokerConfig, serve
from trikafka.client import connect
from trikafka.producer import BrokerPartition, HashPartitioner, Producer
from trikafka.wire import ErrorCode, OffsetsRequest, iter_messages
from trikafka.zk import KazooZooKeeperClient, parse_broker_registration
from trikafka.zk.server_setup import free_port

from tests.helpers.broker_testing import RawClient, child_process

pytestmark = pytest.mark.zookeeper

HOST = "127.0.0.1"
# Every (broker, partition) of a topic both brokers registered, in §8.5 order.
ALL_PARTITIONS = [BrokerPartition(b, p) for b in (1, 2) for p in range(PARTITIONS_PER_BROKER)]
WAIT_S = 20.0  # bound on waiting for ZooKeeper watches and flushes; a hang fails instead of stalling
FETCH_MAX_BYTES = 4 * 1024 * 1024
ENTRY_OVERHEAD_BYTES = 10  # a plain magic-1 entry: 4 (size) + 1 (magic) + 1 (attributes) + 4 (crc)


@contextlib.asynccontextmanager
async def two_brokers(tmp_path, zk_connect: str) -> AsyncIterator[dict[int, BrokerProcess]]:
    """Brokers 1 and 2, started side by side, both serving (so both registered)."""
    async with broker_process(tmp_path, zk_connect, 1) as one, broker_process(tmp_path, zk_connect, 2) as two:
        for broker in (one, two):
            await broker.wait_ready()
        yield {1: one, 2: two}


@contextlib.asynccontextmanager
async def observer(zk_connect: str) -> AsyncIterator[KazooZooKeeperClient]:
    async with KazooZooKeeperClient(zk_connect, ensure_chroot=False) as zk:
        yield zk


async def wait_for_znode(zk: KazooZooKeeperClient, path: str, predicate: Callable) -> object:
    """The first watch value (``(data, stat)`` or None) at ``path`` satisfying ``predicate``."""
    with trio.fail_after(WAIT_S):
        async for value in zk.watch_data(path):
            if predicate(value):
                return value
    raise AssertionError(f"the watch on {path} ended")


async def wait_for_children(zk: KazooZooKeeperClient, path: str, expected: set[str]) -> None:
    with trio.fail_after(WAIT_S):
        async for children in zk.watch_children(path):
            if set(children or ()) == expected:
                return
    raise AssertionError(f"the watch on {path} ended")


async def wait_for_view(producer: Producer, predicate: Callable[[], bool]) -> None:
    """Wait until the producer's ZooKeeper view satisfies ``predicate``."""
    view = producer.discovery.view
    with trio.fail_after(WAIT_S):
        while not predicate():
            await view.wait_changed(view.version)


async def read_log(port: int, topic: str, partition: int) -> bytes:
    """Everything visible in one partition of the broker on ``port``."""
    async with await connect(HOST, port) as conn:
        result = await conn.fetch(topic, partition, 0, FETCH_MAX_BYTES)
    assert result.error == ErrorCode.NO_ERROR, result.error
    assert len(result.data) < FETCH_MAX_BYTES  # the whole log, not a cut
    return result.data


async def read_logs(ports: dict[int, int], topics) -> dict[tuple[str, int, int], bytes]:
    """``(topic, broker, partition) -> bytes`` for every partition of both brokers."""
    return {(topic, broker_id, partition): await read_log(port, topic, partition)
            for topic in topics for broker_id, port in ports.items() for partition in range(PARTITIONS_PER_BROKER)}


def assert_each_result_names_its_message(logs, sent) -> None:
    """``sent``: (topic, payload, SendResult) of acknowledged sends; the offsets must hold them."""
    for topic, payload, result in sent:
        log = logs[(topic, result.broker_id, result.partition)]
        [message] = list(iter_messages(log[result.offset:result.next_offset], result.offset))
        assert message.payload == payload, (topic, result)


def assert_logs_hold_exactly(logs, sent) -> None:
    """Each partition holds exactly the payloads routed to it, in send order (nothing lost or doubled)."""
    routed: dict[tuple[str, int, int], list[bytes]] = defaultdict(list)
    for topic, payload, result in sent:
        routed[(topic, result.broker_id, result.partition)].append(payload)
    for where, log in logs.items():
        assert [m.payload for m in iter_messages(log)] == routed.get(where, []), where


def assert_keyed_routing(keys, results, partitions) -> None:
    """A keyed message goes to ``partitions[abs(java_hash(key)) % n]`` (§8.5)."""
    hash_partitioner = HashPartitioner()
    for key, result in zip(keys, results):
        expected = partitions[hash_partitioner(key, len(partitions))]
        assert (result.broker_id, result.partition) == expected, key


# --------------------------------------------------------------------------- from Trio code


async def test_producer_finds_both_brokers_through_zookeeper_with_acks_minus_1_and_0(
        tmp_path, zk_chroot, no_kazoo_thread_leaks):
    topics = ["clicks", "views", "orders"]
    async with two_brokers(tmp_path, zk_chroot) as brokers:
        ports = {broker_id: b.port for broker_id, b in brokers.items()}
        acked: list = []  # (topic, payload, SendResult)
        async with Producer(zk_connect=zk_chroot, acks=-1, rng=random.Random(7)) as producer:
            assert producer.discovery.view.brokers == {1: (HOST, ports[1]), 2: (HOST, ports[2])}
            # Nobody has registered these topics yet: partition 0 of every live broker (§8.5).
            for topic in topics:
                payloads = [f"{topic} first {i}".encode() for i in range(20)]
                results = await producer.send_batch(topic, payloads)
                assert {(r.broker_id, r.partition) for r in results} == {(1, 0), (2, 0)}
                acked += [(topic, p, r) for p, r in zip(payloads, results)]
            # Creating the logs made each broker register the topic (§8.2): 2 x 2 partitions now.
            for topic in topics:
                await wait_for_view(producer, lambda: producer.discovery.partitions(topic) == ALL_PARTITIONS)
            for topic in topics:
                keys = [f"user-{i % 23}" for i in range(60)]
                payloads = [f"{topic} keyed {i}".encode() for i in range(60)]
                results = await producer.send_batch(topic, payloads, keys)
                assert_keyed_routing(keys, results, ALL_PARTITIONS)
                acked += [(topic, p, r) for p, r in zip(payloads, results)]
            records = [(topics[i % 3], f"{topics[i % 3]} unkeyed {i}".encode()) for i in range(120)]
            results = await producer.send_many(records)
            acked += [(topic, p, r) for (topic, p), r in zip(records, results)]
        assert all(r.ok and r.offset is not None for _t, _p, r in acked)
        assert {(r.broker_id, r.partition) for _t, _p, r in acked} == set(ALL_PARTITIONS)  # both brokers
        logs = await read_logs(ports, topics)
        assert_each_result_names_its_message(logs, acked)
        assert_logs_hold_exactly(logs, acked)

        unacked: list = []
        async with Producer(zk_connect=zk_chroot, acks=0, rng=random.Random(8)) as producer:
            for topic in topics:
                await producer.discovery.ensure_topic(topic)
                assert producer.discovery.partitions(topic) == ALL_PARTITIONS
                keys = [f"user-{i % 23}" for i in range(40)]
                payloads = [f"{topic} fire-and-forget {i}".encode() for i in range(40)]
                results = await producer.send_batch(topic, payloads, keys)
                assert all(r.ok and r.offset is None for r in results)  # nobody answers acks=0
                assert_keyed_routing(keys, results, ALL_PARTITIONS)
                unacked += [(topic, p, r) for p, r in zip(payloads, results)]
                payloads = [f"{topic} fire-and-forget unkeyed {i}".encode() for i in range(40)]
                results = await producer.send_batch(topic, payloads)
                unacked += [(topic, p, r) for p, r in zip(payloads, results)]
        assert {r.broker_id for _t, _p, r in unacked} == {1, 2}
        # Unanswered sends become visible with the next timer flush.
        expected_total = len(acked) + len(unacked)
        with trio.fail_after(WAIT_S):
            while sum(len(list(iter_messages(log))) for log in logs.values()) < expected_total:
                await trio.sleep(0.05)
                logs = await read_logs(ports, topics)
        assert_each_result_names_its_message(logs, acked)
        assert_logs_hold_exactly(logs, acked + unacked)
        for broker in brokers.values():
            await broker.stop()


# --------------------------------------------------------------------------- from the command line


async def test_command_line_produce_through_zookeeper_then_consume_and_list(tmp_path, zk_chroot):
    sent = [f"line {i} {'x' * (i % 13)}" for i in range(400)]
    async with two_brokers(tmp_path, zk_chroot) as brokers, observer(zk_chroot) as zk:
        async with child_process("produce", "tour", "--zookeeper", zk_chroot, "--acks", "-1", "--batch", "25",
                                 stdin=subprocess.PIPE) as producer:
            await producer.send_stdin("".join(line + "\n" for line in sent).encode())
            assert await producer.wait() == 0, producer.stderr.decode(errors="replace")
        assert b"sent 400 messages to tour" in producer.stderr
        await wait_for_children(zk, "/brokers/topics/tour", {"1", "2"})  # both got some and registered it

        async with child_process("topics", "--zookeeper", zk_chroot, stdout=subprocess.PIPE) as listing:
            assert await listing.wait() == 0, listing.stderr.decode(errors="replace")
        rows = [row.split("\t") for row in bytes(listing.stdout).decode().splitlines()]
        assert rows[0] == ["topic", "partition", "broker", "start", "visible_end", "bytes"]
        listed = {(r[0], r[1], r[2]): int(r[5]) for r in rows[1:]}
        assert set(listed) == {("tour", f"{p}", f"{b}:{HOST}:{brokers[b].port}")
                               for b in (1, 2) for p in range(PARTITIONS_PER_BROKER)}
        assert sum(listed.values()) == sum(ENTRY_OVERHEAD_BYTES + len(line.encode()) for line in sent)
        # Spread over both brokers.  (Which partitions beyond 0 got lines depends on when the
        # producer saw the topic registered: before that it only knows partition 0, §8.5.)
        assert {broker.split(":")[0] for (_t, _p, broker), size in listed.items() if size > 0} == {"1", "2"}

        # One consumer per listed partition, each following until every line has arrived somewhere.
        async with contextlib.AsyncExitStack() as stack:
            consumers = {}
            for _topic, partition, broker in listed:  # broker: ID:HOST:PORT, the one address syntax
                consumers[(partition, broker)] = await stack.enter_async_context(child_process(
                    "consume", "tour", "--broker", broker, "--partition", partition, "--from", "earliest",
                    stdout=subprocess.PIPE))
            with trio.fail_after(WAIT_S):
                while sum(c.stdout.count(b"\n") for c in consumers.values()) < len(sent):
                    await trio.sleep(0.05)
            for consumer in consumers.values():
                consumer.signal(signal.SIGINT)
            for consumer in consumers.values():
                assert await consumer.wait() == 0, consumer.stderr.decode(errors="replace")
        got = {where: bytes(c.stdout).decode().splitlines() for where, c in consumers.items()}
        assert Counter(line for lines in got.values() for line in lines) == Counter(sent)  # exactly once
        for (name, broker), lines in got.items():  # and nothing is left unread in any partition
            assert sum(ENTRY_OVERHEAD_BYTES + len(line.encode()) for line in lines) == listed[("tour", name, broker)]
        for broker in brokers.values():
            await broker.stop()


# --------------------------------------------------------------------------- a broker leaves and comes back


async def test_a_stopped_broker_deregisters_and_gets_traffic_again_after_a_restart(
        tmp_path, zk_chroot, no_kazoo_thread_leaks):
    async with two_brokers(tmp_path, zk_chroot) as brokers, observer(zk_chroot) as zk:
        first_registration, _stat = await zk.get("/brokers/ids/2")
        sent: list = []  # (topic, payload, SendResult)

        async def send(producer: Producer, label: str, count: int) -> list:
            payloads = [f"{label} {i}".encode() for i in range(count)]
            results = await producer.send_batch("t", payloads)
            sent.extend(("t", p, r) for p, r in zip(payloads, results))
            return results

        async with Producer(zk_connect=zk_chroot, acks=-1, rng=random.Random(3)) as producer:
            view = producer.discovery.view
            await send(producer, "warm-up", 20)
            await wait_for_view(producer, lambda: producer.discovery.partitions("t") == ALL_PARTITIONS)
            assert {r.broker_id for r in await send(producer, "both", 100)} == {1, 2}

            await brokers[2].stop()
            # Graceful shutdown removed the registration (no waiting for a session timeout).
            assert await zk.exists("/brokers/ids/2") is None
            await wait_for_view(producer, lambda: 2 not in view.brokers)
            assert producer.discovery.partitions("t") == ALL_PARTITIONS[:PARTITIONS_PER_BROKER]
            assert {r.broker_id for r in await send(producer, "one left", 100)} == {1}

            async with broker_process(tmp_path, zk_chroot, 2) as restarted:
                new_port = await restarted.wait_ready()
                data, _stat = await wait_for_znode(zk, "/brokers/ids/2", lambda v: v is not None)
                assert data != first_registration  # a new registration: new creation time, new port
                registered = parse_broker_registration(data)
                assert (registered.host, registered.port) == (HOST, new_port)
                await wait_for_view(producer, lambda: view.brokers.get(2) == (HOST, new_port)
                                    and producer.discovery.partitions("t") == ALL_PARTITIONS)
                assert {r.broker_id for r in await send(producer, "back", 100)} == {1, 2}
                assert all(r.ok for _t, _p, r in sent)

                logs = await read_logs({1: brokers[1].port, 2: new_port}, ["t"])
                assert_each_result_names_its_message(logs, sent)
                assert_logs_hold_exactly(logs, sent)
                await restarted.stop()
                assert await zk.exists("/brokers/ids/2") is None
        await brokers[1].stop()


# --------------------------------------------------------------------------- registered before serving


async def test_a_broker_answers_no_request_before_it_is_registered(tmp_path, zk_chroot, no_kazoo_thread_leaks):
    """§8.2: listening first, then registered, and only then serving.  ZooKeeper is
    held back by a proxy while a client is already connected and waiting."""
    chroot = zk_chroot[zk_chroot.index("/"):]
    port = free_port()  # known in advance: the client must connect before serve() reports
    async with open_zookeeper_proxy(zk_chroot) as proxy, observer(zk_chroot) as zk, \
            trio.open_nursery() as nursery:
        proxy.set_mode(FaultMode.STALL)  # the broker's session request waits in the proxy
        config = BrokerConfig(broker_id=7, host=HOST, port=port, log_dir=str(tmp_path / "logs"), num_threads=1,
                              enable_zookeeper=True, zk_connect=proxy.connect_string + chroot,
                              graceful_shutdown_timeout_s=2.0)
        brokers: list = []

        async def run_broker() -> None:
            brokers.append(await nursery.start(serve, config))

        nursery.start_soon(run_broker)
        with trio.fail_after(WAIT_S):
            while True:  # the listening socket exists before anything else happens
                try:
                    client = RawClient(await trio.open_tcp_stream(HOST, port))
                    break
                except OSError:
                    await trio.sleep(0.01)
        try:
            await client.send(OffsetsRequest("t", 0, -1, 1))
            with trio.move_on_after(0.5):  # time enough for a broker that serves early to answer
                frame = await client.receive_frame()
                raise AssertionError(f"answered {frame!r} before registering in ZooKeeper")
            assert await zk.exists("/brokers/ids/7") is None
            proxy.set_mode(FaultMode.FORWARD)
            frame = await client.receive_frame()
            assert frame.error_code == ErrorCode.NO_ERROR
            assert await zk.exists("/brokers/ids/7") is not None  # it was registered before it answered
        finally:
            await client.aclose()
        with trio.fail_after(WAIT_S):
            while not brokers:
                await trio.sleep(0.01)
        assert brokers[0].port == port
        brokers[0].shutdown()
