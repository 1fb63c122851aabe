"""The broker's ZooKeeper side (spec §8.2): registration values byte for
byte, topics at startup and on creation, re-registration after session expiry
and after a ZooKeeper restart, refusal of a duplicate id, deregistration.

The first group runs the broker's registration service on both coordinators
(``zk_harness``: the fake and the real server); the second runs whole brokers
(``serve`` with ``enable_zookeeper``) against the real server.
"""

from __future__ import annotations

import functools
import socket
import threading
import time

import pytest
import trio

from tests.helpers.broker_testing import produce_acked
from tests.helpers.registry import wait_for_value
from tests.helpers.zookeeper_server import expire_session
from trikafka.broker import BrokerConfig, serve
from trikafka.broker.config import published_host
from trikafka.broker.zookeeper import private_zookeeper_dir, run_broker_zookeeper
from trikafka.log.manager import LogManager
from trikafka.zk import DuplicateBrokerIdError, KazooZooKeeperClient, SessionState, parse_broker_registration

WAIT_S = 15.0
HOST = "127.0.0.1"
BROKER_PORT = 9999  # what the registration advertises in the harness tests (nothing listens)


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


def broker_config(tmp_path, **changes) -> BrokerConfig:
    settings = dict(broker_id=3, host=HOST, port=0, log_dir=str(tmp_path / "logs"), num_partitions=2,
                    topic_partition_count_map={"big": 8}, num_threads=1, graceful_shutdown_timeout_s=2.0)
    settings.update(changes)
    return BrokerConfig(**settings)


def open_logs(config: BrokerConfig, *topics: str) -> LogManager:
    logs = LogManager(config.log_dir, config.log_config(), partitions=config.partitions)
    logs.open()
    for topic in topics:
        logs.get_or_create(topic, 0)
    return logs


def assert_id_value(data: bytes, port: int, after_ms: int, before_ms: int) -> None:
    """``<host>-<millis>:<host>:<port>`` with the millis taken during registration."""
    creator, host, port_text = data.decode().split(":")
    creator_host, millis = creator.rsplit("-", 1)
    assert data == f"{HOST}-{millis}:{HOST}:{port}".encode()
    assert (creator_host, host, port_text) == (HOST, HOST, str(port))
    assert after_ms <= int(millis) <= before_ms


# -- the registration service, on both coordinators -------------------------------------


async def test_startup_registers_the_id_and_every_topic_on_disk(zk_harness, zk_clock, tmp_path):
    config = broker_config(tmp_path)
    logs = open_logs(config, "old", "big")
    async with zk_harness.client() as zk, zk_harness.client() as observer, trio.open_nursery() as nursery:
        before = wall_ms()
        state = await nursery.start(functools.partial(run_broker_zookeeper, config, logs, BROKER_PORT,
                                                      coordinator=zk))
        after = wall_ms()
        data, stat = await observer.get("/brokers/ids/3")
        assert_id_value(data, BROKER_PORT, before, after)
        assert stat.ephemeral_owner == zk.session_id
        assert await observer.children("/brokers/topics") == ["big", "old"]
        assert (await observer.get("/brokers/topics/old/3"))[0] == b"2"  # num.partitions
        assert (await observer.get("/brokers/topics/big/3"))[0] == b"8"  # topic.partition.count.map
        for parent in ("/brokers", "/brokers/ids", "/brokers/topics", "/brokers/topics/old"):
            parent_data, parent_stat = await observer.get(parent)
            assert (parent_data, parent_stat.ephemeral_owner) == (b"", 0)  # §8.1: persistent, empty
        assert state.registration.value == data
        nursery.cancel_scope.cancel()
    logs.close()


async def test_a_created_topic_is_registered_and_shutdown_deregisters(zk_harness, zk_clock, tmp_path):
    config = broker_config(tmp_path)
    logs = open_logs(config)
    async with zk_harness.client() as zk, zk_harness.client() as observer:
        async with trio.open_nursery() as nursery:
            await nursery.start(functools.partial(run_broker_zookeeper, config, logs, BROKER_PORT, coordinator=zk))
            ids = observer.watch_children("/brokers/ids")
            with trio.fail_after(WAIT_S):
                assert await ids.__anext__() == ["3"]
            logs.get_or_create("fresh", 1)  # the LogManager's "topic created" event
            logs.get_or_create("fresh", 0)  # same topic: no second event
            data, stat = await wait_for_value(observer, "/brokers/topics/fresh/3")
            assert (data, stat.ephemeral_owner) == (b"2", zk.session_id)
            nursery.cancel_scope.cancel()
        # Graceful shutdown removed both nodes although the session lives on.
        assert zk.state.value is SessionState.CONNECTED
        with trio.fail_after(WAIT_S):
            assert await ids.__anext__() == []
        assert await observer.children("/brokers/topics/fresh") == []
    logs.close()


async def test_a_topic_created_with_more_partitions_registers_its_full_count(zk_harness, zk_clock, tmp_path):
    config = broker_config(tmp_path)  # num_partitions=2
    logs = open_logs(config)
    async with zk_harness.client() as zk, zk_harness.client() as observer:
        async with trio.open_nursery() as nursery:
            await nursery.start(functools.partial(run_broker_zookeeper, config, logs, BROKER_PORT, coordinator=zk))
            logs.create_topic("made", 6)  # what CREATE_TOPIC runs (in a worker thread)
            data, _ = await wait_for_value(observer, "/brokers/topics/made/3")
            assert data == b"6"  # 0.7 producers and consumers see all six partitions
            nursery.cancel_scope.cancel()
    logs.close()


async def test_session_expiry_re_registers_everything(zk_harness, zk_clock, tmp_path):
    config = broker_config(tmp_path)
    logs = open_logs(config, "old")
    async with zk_harness.client() as zk, zk_harness.client(direct=True) as observer, \
            trio.open_nursery() as nursery:
        state = await nursery.start(functools.partial(run_broker_zookeeper, config, logs, BROKER_PORT,
                                                      coordinator=zk))
        logs.get_or_create("later", 0)
        await wait_for_value(observer, "/brokers/topics/later/3")
        first_value, first_session = state.registration.value, zk.session_id
        await zk_harness.expire(zk)
        with trio.fail_after(WAIT_S):
            data, stat = await wait_for_value(observer, "/brokers/ids/3",
                                              lambda v: v is not None and v[1].ephemeral_owner == zk.session_id)
        assert stat.ephemeral_owner != first_session and data != first_value  # a fresh creator id (0.7)
        assert parse_broker_registration(data).port == BROKER_PORT
        for topic in ("old", "later"):
            _data, topic_stat = await wait_for_value(
                observer, f"/brokers/topics/{topic}/3", lambda v: v is not None and v[1].ephemeral_owner == zk.session_id)
            assert _data == b"2"
        # The observer can see the last node before the broker has its create's reply: wait for the
        # broker's own count, then require exactly one re-registration.
        with trio.fail_after(WAIT_S):
            await state.registration.registrations.wait_value(lambda n: n >= 2)
        assert state.registration.registrations.value == 2
        nursery.cancel_scope.cancel()
    logs.close()


async def test_a_duplicate_broker_id_is_refused_at_startup(zk_harness, zk_clock, tmp_path):
    config = broker_config(tmp_path)
    logs = open_logs(config)
    async with zk_harness.client() as other_broker, zk_harness.client() as zk:
        await other_broker.create("/brokers/ids/3", b"10.0.0.9-1:10.0.0.9:9092", ephemeral=True, makepath=True)
        async with trio.open_nursery() as nursery:
            with pytest.raises(DuplicateBrokerIdError, match="broker id 3 is in use"):
                await nursery.start(functools.partial(run_broker_zookeeper, config, logs, BROKER_PORT,
                                                      coordinator=zk))
        assert (await zk.get("/brokers/ids/3"))[0] == b"10.0.0.9-1:10.0.0.9:9092"  # left alone
    logs.close()


async def test_this_brokers_own_leftover_registration_is_waited_out(zk_harness, zk_clock, tmp_path, caplog):
    """Restart after SIGKILL: the old session still holds the id with our host and
    port; the broker waits for it to go instead of exiting, then registers."""
    config = broker_config(tmp_path)
    logs = open_logs(config)
    leftover = f"{HOST}-1:{await published_host(config)}:{BROKER_PORT}".encode()
    async with zk_harness.client() as zk, trio.open_nursery() as outer:
        previous_run_done = trio.Event()

        async def previous_run():  # the crashed run's session, still alive on the server
            async with zk_harness.client() as old:
                await old.create("/brokers/ids/3", leftover, ephemeral=True, makepath=True)
                registered.set()
                await previous_run_done.wait()

        registered = trio.Event()
        outer.start_soon(previous_run)
        await registered.wait()
        async with trio.open_nursery() as nursery:
            starting = trio.Event()

            async def start_broker():
                starting.set()
                await nursery.start(functools.partial(run_broker_zookeeper, config, logs, BROKER_PORT,
                                                      coordinator=zk))

            nursery.start_soon(start_broker)
            await starting.wait()
            with trio.fail_after(WAIT_S):  # the broker found the leftover and is waiting on it
                while "previous session" not in caplog.text:
                    await trio.sleep(0.01)
            assert (await zk.get("/brokers/ids/3"))[0] == leftover
            previous_run_done.set()  # the old session ends: its ephemeral goes
            data, stat = await wait_for_value(zk, "/brokers/ids/3",
                                              lambda v: v is not None and v[1].ephemeral_owner == zk.session_id)
            assert parse_broker_registration(data).port == BROKER_PORT and data != leftover
            nursery.cancel_scope.cancel()
    logs.close()


async def test_published_host_and_private_dir_follow_the_config(tmp_path, monkeypatch):
    assert await published_host(BrokerConfig(host="127.0.0.1")) == "127.0.0.1"
    assert await published_host(BrokerConfig(host="0.0.0.0", hostname="broker7.example")) == "broker7.example"
    lookups = []
    real_lookup = socket.gethostbyname

    def checked_lookup(name):  # a resolver may block for seconds: never on the event loop's thread
        lookups.append(threading.current_thread() is threading.main_thread())
        return real_lookup(name)

    monkeypatch.setattr(socket, "gethostbyname", checked_lookup)
    wildcard = await published_host(BrokerConfig(host="0.0.0.0"))
    assert wildcard not in ("", "0.0.0.0") and ":" not in wildcard
    assert lookups == [False]
    logs = tmp_path / "data" / "logs"
    assert private_zookeeper_dir(BrokerConfig(log_dir=str(logs))) == tmp_path / "data" / "logs-zookeeper"
    assert private_zookeeper_dir(BrokerConfig(private_zookeeper_dir=str(tmp_path / "z"))) == tmp_path / "z"


# -- whole brokers on the real server ----------------------------------------------------


@pytest.mark.zookeeper
async def test_a_broker_registers_on_startup_watches_see_it_and_shutdown_removes_it(
        zk_chroot, tmp_path, no_kazoo_thread_leaks):
    config = broker_config(tmp_path, enable_zookeeper=True, zk_connect=zk_chroot, zk_sessiontimeout_ms=4000)
    open_logs(config, "on-disk").close()
    async with KazooZooKeeperClient(zk_chroot) as observer:
        ids = observer.watch_children("/brokers/ids")
        with trio.fail_after(WAIT_S):
            assert await ids.__anext__() is None
        async with trio.open_nursery() as nursery:
            before = wall_ms()
            broker = await nursery.start(serve, config)
            after = wall_ms()
            with trio.fail_after(WAIT_S):  # the watch fires into Trio
                assert await ids.__anext__() == ["3"]
            data, stat = await observer.get("/brokers/ids/3")
            assert_id_value(data, broker.port, before, after)
            assert stat.ephemeral_owner == broker.zookeeper.coordinator.session_id
            assert (await observer.get("/brokers/topics/on-disk/3"))[0] == b"2"
            await produce_acked(broker.port, "produced", 1, b"hello")
            assert (await wait_for_value(observer, "/brokers/topics/produced/3"))[0] == b"2"
            await produce_acked(broker.port, "big", 7, b"hello")
            assert (await wait_for_value(observer, "/brokers/topics/big/3"))[0] == b"8"
            broker.shutdown()
        with trio.fail_after(WAIT_S):
            assert await ids.__anext__() == []
        assert await observer.children("/brokers/topics/produced") == []


@pytest.mark.zookeeper
async def test_a_broker_whose_session_expires_re_registers(zk_chroot, zookeeper_server, tmp_path,
                                                           no_kazoo_thread_leaks):
    config = broker_config(tmp_path, enable_zookeeper=True, zk_connect=zk_chroot, zk_sessiontimeout_ms=4000)
    async with KazooZooKeeperClient(zk_chroot) as observer, trio.open_nursery() as nursery:
        broker = await nursery.start(serve, config)
        await produce_acked(broker.port, "t", 0, b"x")
        await wait_for_value(observer, "/brokers/topics/t/3")
        broker_zk = broker.zookeeper.coordinator
        old_value = (await observer.get("/brokers/ids/3"))[0]
        # The duplicate-session trick: a real server-side expiry.
        await expire_session(broker_zk, zookeeper_server.connect_string)
        new_session = broker_zk.session_id
        data, _ = await wait_for_value(observer, "/brokers/ids/3",
                                       lambda v: v is not None and v[1].ephemeral_owner == new_session)
        assert data != old_value and parse_broker_registration(data).port == broker.port
        await wait_for_value(observer, "/brokers/topics/t/3",
                             lambda v: v is not None and v[1].ephemeral_owner == new_session)
        await produce_acked(broker.port, "after-expiry", 0, b"y")
        await wait_for_value(observer, "/brokers/topics/after-expiry/3")
        broker.shutdown()


@pytest.mark.zookeeper
async def test_zookeeper_restarted_under_load(dedicated_zookeeper_server, tmp_path, no_kazoo_thread_leaks):
    """Kill the server while a producer keeps writing, create a topic during the
    outage, start the server again: the broker is registered with every topic."""
    server = dedicated_zookeeper_server
    config = broker_config(tmp_path, enable_zookeeper=True, zk_connect=server.connect_string + "/kafka",
                           zk_sessiontimeout_ms=2000)
    sent = 0
    async with trio.open_nursery() as nursery:
        broker = await nursery.start(serve, config)
        load_done, load_stopped = trio.Event(), trio.Event()

        async def keep_producing():
            nonlocal sent
            while not load_done.is_set():
                await produce_acked(broker.port, "load", sent % 2, b"m%d" % sent)
                sent += 1
            load_stopped.set()

        nursery.start_soon(keep_producing)
        await trio.sleep(0.2)
        server.stop()  # SIGKILL
        with trio.fail_after(WAIT_S):
            await broker.zookeeper.coordinator.state.wait_value(lambda s: s is not SessionState.CONNECTED)
        await produce_acked(broker.port, "during-outage", 0, b"z")
        sent_during_outage = sent
        server.spawn()  # same port and data; on this (main) thread for PDEATHSIG
        await server.wait_ready()
        async with KazooZooKeeperClient(server.connect_string + "/kafka") as observer:
            data, _ = await wait_for_value(observer, "/brokers/ids/3")
            assert parse_broker_registration(data).port == broker.port
            for topic in ("load", "during-outage"):
                assert (await wait_for_value(observer, f"/brokers/topics/{topic}/3"))[0] == b"2"
        load_done.set()
        await load_stopped.wait()
        assert sent > sent_during_outage > 0  # the broker served throughout
        broker.shutdown()
