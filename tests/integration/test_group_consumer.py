"""Named scenarios for the group consumer, on the fake ZooKeeper (mock clock) and the real server.

Each test states one promise of trikafka/group/consumer.py: the registry as
0.7 leaves it, fenced commits, silence while SUSPENDED, taking over our own
stale ephemerals, coalesced rebalances, topic filters that follow new topics,
``autooffset.reset``, a clean hand-over, and compressed wrappers.
"""

from __future__ import annotations

from typing import AsyncIterator

import pytest
import trio

from tests.helpers.group_members import WAIT_S, member, one_broker, take
from tests.helpers.group_world import FAKE_SESSION_TIMEOUT_S, FakeBackend, GroupWorld, group_config, open_kazoo_world
from trikafka.client import ACKS_FLUSHED, OffsetOutOfRange, connect
from trikafka.group import ConsumerIdTakenOver, GroupConsumer, GroupMessage, blacklist, whitelist
from trikafka.wire import Codec, ErrorCode, ProducePart, build_message_set, iter_messages
from trikafka.zk import SessionState


@pytest.fixture
async def world(zk_backend: str | None, zk_clock, tmp_path, request) -> AsyncIterator[GroupWorld]:
    if zk_backend is None:
        async with GroupWorld.open(FakeBackend()) as opened:
            yield opened
    else:
        server = request.getfixturevalue("zookeeper_server")
        async with open_kazoo_world(zk_backend, server.connect_string, str(tmp_path)) as opened:
            yield opened


async def nothing_within(consumer: GroupConsumer, timeout_s: float) -> bool:
    with trio.move_on_after(timeout_s):
        await consumer.__anext__()
        return False
    return True


async def registry(world: GroupWorld, path: str) -> bytes | None:
    return await world._get(f"/consumers/{world.group}/{path}")


async def children(world: GroupWorld, path: str) -> list[str]:
    return sorted(await world._children(f"/consumers/{world.group}/{path}"))


def positions(messages: list[GroupMessage]) -> dict[str, int]:
    """Partition -> next offset after the last message of it."""
    return {m.partition: m.next_offset for m in messages}


# -- the registry as 0.7 leaves it -------------------------------------------------------


async def test_registry_values_are_exactly_0_7s(world):
    await one_broker(world)
    for part in range(2):
        await world.produce("t", 0, part, 3)
    async with member(world, {"t": 2}, "c1") as consumer:
        assert consumer.consumer_id == "g_c1"
        assert await children(world, "ids") == ["g_c1"]
        assert await registry(world, "ids/g_c1") == b'{ "t": 2 }'
        # Two threads, two partitions: the sorted partitions go to the sorted thread ids.
        assert await registry(world, "owners/t/0-0") == b"g_c1-0"
        assert await registry(world, "owners/t/0-1") == b"g_c1-1"
        messages = await take(consumer, 6)
        assert await consumer.commit()
        for partition, offset in positions(messages).items():
            assert await registry(world, f"offsets/t/{partition}") == str(offset).encode()
    # A clean close deregisters and releases; the offsets stay for the next member.
    assert await children(world, "ids") == []
    assert await children(world, "owners/t") == []
    assert await children(world, "offsets/t") == ["0-0", "0-1"]


@pytest.mark.parametrize("subscription, value", [
    (whitelist(" 't.*' "), b"*1*t.*"),  # trimmed, quotes stripped, as Kafka normalizes
    (whitelist("t1, t2"), b"*1*t1|t2"),
    (blacklist("x.*"), b"!1!x.*"),
])
async def test_filter_registrations_are_exactly_0_7s(world, subscription, value):
    await one_broker(world, "t1")
    async with member(world, subscription, "c1") as consumer:
        assert await registry(world, "ids/g_c1") == value
        assert {topic for topic, _ in consumer.owned} == {"t1"}


# -- fenced commits ----------------------------------------------------------------------


async def _registry_session(world: GroupWorld, path: str) -> int:
    stat = await world.admin.exists(f"/consumers/{world.group}/{path}")
    assert stat is not None, path
    return stat.ephemeral_owner


async def test_a_zombie_with_our_id_cannot_commit_over_its_successor(world):
    """A process that lives on (say, after a long pause) while a newer one with
    the same consumer id took over: every fenced multi of the old one fails."""
    await one_broker(world, partitions=1)
    await world.produce("t", 0, 0, 2)
    zk = await world.backend.open_coordinator()
    try:
        zombie = GroupConsumer(zk, world.group, {"t": 1}, consumer_id="c1", config=group_config())

        async def no_watch() -> None:  # only the fence may stop it in this test
            await trio.sleep_forever()

        zombie._membership.watch_registration = no_watch
        async with zombie:
            assert await zombie.wait_settled(WAIT_S)
            first = await take(zombie, 2)
            assert await zombie.commit()
            committed = str(first[-1].next_offset).encode()
            later = await world.produce("t", 0, 0, 2)
            assert [m.payload for m in await take(zombie, 2)] == later
            async with member(world, {"t": 1}, "c1") as successor:
                assert successor.owned == {("t", "0-0")}
                for path in ("ids/g_c1", "owners/t/0-0"):
                    assert await _registry_session(world, path) == successor._zk.session_id
                with pytest.raises(ConsumerIdTakenOver):
                    await zombie.commit()
                assert await registry(world, "offsets/t/0-0") == committed
                # The successor starts at the last commit: the zombie's range comes again.
                again = await take(successor, 2)
                assert [m.payload for m in again] == later
            # The successor left (committing); the zombie's own exit must not touch
            # what is there now.
            await world.admin.create(f"/consumers/{world.group}/ids/g_c1", b"sentinel")
        assert await registry(world, "ids/g_c1") == b"sentinel"
    finally:
        await zk.aclose()
    assert await registry(world, "offsets/t/0-0") == str(again[-1].next_offset).encode()


async def test_a_zombie_with_our_id_stops_when_a_newer_process_takes_over(world):
    await one_broker(world)
    await world.produce("t", 0, 0, 1)
    stopped: list[BaseException] = []

    async def old_process(*, task_status=trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with member(world, {"t": 1}, "c1") as old:
                await take(old, 1)
                task_status.started()
                await trio.sleep_forever()
        except ConsumerIdTakenOver as exc:
            stopped.append(exc)

    async with trio.open_nursery() as nursery:
        await nursery.start(old_process)
        async with member(world, {"t": 1}, "c1") as new:
            with trio.fail_after(WAIT_S):
                while not stopped:
                    await trio.sleep(0.01)
            # The old process left nothing behind and took nothing of the new one's.
            assert new.owned == {("t", "0-0"), ("t", "0-1")}
            for path in ("ids/g_c1", "owners/t/0-0", "owners/t/0-1"):
                assert await _registry_session(world, path) == new._zk.session_id
            await world.produce("t", 0, 1, 1)
            assert sorted(m.partition for m in await take(new, 2)) == ["0-0", "0-1"]


# -- silence while SUSPENDED (fake ZooKeeper: the test cuts the connection) -------------------


async def test_nothing_is_delivered_while_the_session_is_suspended(autojump_clock):
    async with GroupWorld.open(FakeBackend()) as world:
        await one_broker(world, partitions=1)
        await world.produce("t", 0, 0, 5)
        zk = await world.backend.open_coordinator()
        try:
            async with member(world, {"t": 1}, "c1", coordinator=zk) as consumer:
                await take(consumer, 2)  # three more are fetched and waiting
                zk.disconnect()
                assert zk.state.value is SessionState.SUSPENDED
                await world.produce("t", 0, 0, 3)
                # Within the session timeout the session may still live, or be
                # taken over: nothing may be handed out meanwhile, not even
                # what was fetched before.
                assert await nothing_within(consumer, FAKE_SESSION_TIMEOUT_S / 2)
                zk.reconnect()
                resumed = await take(consumer, 6)
                assert [m.payload for m in resumed] == world.produced[("t", "0-0")][2:]
        finally:
            await zk.aclose()


# -- our own stale ephemerals ------------------------------------------------------------


async def test_a_restart_takes_over_nodes_left_by_its_own_earlier_session(world):
    await one_broker(world)
    await world.produce("t", 0, 1, 1)
    # A live session (never expiring while this test runs) holds what our earlier
    # process left: the ids node and an owner node under our own thread id.
    ghost = await world.backend.open_coordinator()
    try:
        await ghost.ensure_path(f"/consumers/{world.group}/owners/t")
        await ghost.ensure_path(f"/consumers/{world.group}/ids")
        await ghost.create(f"/consumers/{world.group}/ids/g_c1", b'{ "t": 1 }', ephemeral=True)
        await ghost.create(f"/consumers/{world.group}/owners/t/0-0", b"g_c1-0", ephemeral=True)
        ghost_session = ghost.session_id
        async with member(world, {"t": 1}, "c1") as consumer:
            assert consumer.owned == {("t", "0-0"), ("t", "0-1")}
            for path in ("ids/g_c1", "owners/t/0-0", "owners/t/0-1"):
                stat = await world.admin.exists(f"/consumers/{world.group}/{path}")
                assert stat.ephemeral_owner == consumer._zk.session_id, path
            assert (await take(consumer, 1))[0].partition == "0-1"
            # Taken over, not waited out: the ghost's session is the one it had and is still alive.
            assert ghost.session_id == ghost_session
            assert await ghost.exists(f"/consumers/{world.group}/ids") is not None
    finally:
        await ghost.aclose()


async def test_an_owner_node_of_another_live_member_is_not_taken(world):
    await one_broker(world, partitions=1)
    other = await world.backend.open_coordinator()
    try:
        await other.ensure_path(f"/consumers/{world.group}/owners/t")
        await other.create(f"/consumers/{world.group}/owners/t/0-0", b"g_other-0", ephemeral=True)
        zk = await world.backend.open_coordinator()
        try:
            consumer = GroupConsumer(zk, world.group, {"t": 1}, consumer_id="c1",
                                     config=group_config(rebalance_retries_max=1000, rebalance_backoff_s=0.1))
            async with consumer:
                assert not await consumer.wait_settled(2.0)
                assert consumer.owned == frozenset()
                assert await registry(world, "owners/t/0-0") == b"g_other-0"
                # Once the other member lets go, the claim goes through.
                await other.delete(f"/consumers/{world.group}/owners/t/0-0")
                assert await consumer.wait_settled(WAIT_S)
                assert consumer.owned == {("t", "0-0")}
        finally:
            await zk.aclose()
    finally:
        await other.aclose()


# -- coalescing --------------------------------------------------------------------------


async def _rebalances_for_a_burst(coalesce_s: float) -> int:
    async with GroupWorld.open(FakeBackend()) as world:
        await one_broker(world, "t0")
        async with member(world, whitelist("t.*"), "c1", rebalance_coalesce_s=coalesce_s) as consumer:
            before = consumer.rebalances
            for n in range(1, 9):  # eight topics appear at once
                await world.add_topic(f"t{n}")
            assert await consumer.wait_settled(WAIT_S)
            assert {topic for topic, _ in consumer.owned} == {f"t{n}" for n in range(9)}
            return consumer.rebalances - before


async def test_a_burst_of_watch_events_makes_one_rebalance(autojump_clock):
    coalesced = await _rebalances_for_a_burst(0.05)
    assert coalesced == 1
    # The same burst without a coalescing window rebalances more often: the bound is real.
    assert await _rebalances_for_a_burst(0.0) > coalesced


# -- topic filters -----------------------------------------------------------------------


async def test_a_whitelist_follows_new_topics_and_a_blacklist_keeps_out(world):
    await one_broker(world, "logs-a", partitions=1)
    await world.produce("logs-a", 0, 0, 1)
    async with member(world, whitelist("logs-.*"), "w") as logs, \
            member(world, blacklist("logs-.*"), "b") as others:
        assert [m.topic for m in await take(logs, 1)] == ["logs-a"]
        await world.add_topic("logs-b")
        await world.add_topic("metrics")
        assert await logs.wait_settled(WAIT_S) and await others.wait_settled(WAIT_S)
        assert {t for t, _ in logs.owned} == {"logs-a", "logs-b"}
        assert {t for t, _ in others.owned} == {"metrics"}
        await world.produce("logs-b", 0, 0, 2)
        await world.produce("metrics", 0, 0, 1)
        assert [m.topic for m in await take(logs, 2)] == ["logs-b", "logs-b"]
        assert [m.topic for m in await take(others, 1)] == ["metrics"]
        assert await nothing_within(logs, 0.5)


# -- autooffset.reset --------------------------------------------------------------------


async def test_smallest_reads_the_backlog(world):
    await one_broker(world, partitions=1)
    old = await world.produce("t", 0, 0, 3)
    async with member(world, {"t": 1}, "c1", autooffset_reset="smallest") as consumer:
        messages = await take(consumer, 3)
        assert [m.payload for m in messages] == old
        assert messages[0].offset == 0


async def test_largest_skips_the_backlog(world):
    await one_broker(world, partitions=1)
    await world.produce("t", 0, 0, 3)
    async with member(world, {"t": 1}, "c1", autooffset_reset="largest") as consumer:
        assert await nothing_within(consumer, 0.5)
        new = await world.produce("t", 0, 0, 2)
        assert [m.payload for m in await take(consumer, 2)] == new


async def test_another_policy_raises_instead_of_guessing(world):
    await one_broker(world, partitions=1)
    await world.produce("t", 0, 0, 1)
    with pytest.raises(OffsetOutOfRange):
        async with member(world, {"t": 1}, "c1", autooffset_reset="none") as consumer:
            await take(consumer, 1)


async def test_a_committed_offset_past_the_log_end_is_reset(world):
    await one_broker(world, partitions=1)
    old = await world.produce("t", 0, 0, 2)
    await world.admin.ensure_path(f"/consumers/{world.group}/offsets/t")
    await world.admin.create(f"/consumers/{world.group}/offsets/t/0-0", b"999999")
    async with member(world, {"t": 1}, "c1", autooffset_reset="smallest") as consumer:
        assert [m.payload for m in await take(consumer, 2)] == old
        assert await consumer.commit()
    assert await registry(world, "offsets/t/0-0") == str(await _log_end(world)).encode()


async def _log_end(world: GroupWorld) -> int:
    slot = world.brokers[0]
    connection = await connect("127.0.0.1", slot.port)
    async with connection:
        (latest,) = await connection.offsets("t", 0, -1, 1)
        return latest


# -- clean hand-over ---------------------------------------------------------------------


async def test_a_clean_close_hands_over_exactly_where_it_stopped(world):
    await one_broker(world, partitions=1)
    payloads = await world.produce("t", 0, 0, 6)
    async with member(world, {"t": 1}, "first") as first:
        got = await take(first, 4)
    # The close committed the position (autocommit is off in these tests).
    assert await registry(world, "offsets/t/0-0") == str(got[-1].next_offset).encode()
    async with member(world, {"t": 1}, "second") as second:
        rest = await take(second, 2)
        assert [m.payload for m in got + rest] == payloads
        assert await nothing_within(second, 0.5)


# -- compressed wrappers -----------------------------------------------------------------


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY])
async def test_compressed_wrappers_are_unpacked_with_0_7_offsets(world, codec):
    await one_broker(world, partitions=1)
    inner = [b"one", b"two", b"three"]
    sets = [build_message_set([b"plain"]), build_message_set(inner, codec=codec), build_message_set([b"tail"])]
    connection = await connect("127.0.0.1", world.brokers[0].port)
    async with connection:
        for message_set in sets:
            (result,) = await connection.produce_acked([ProducePart("t", 0, message_set)], acks=ACKS_FLUSHED)
            assert result.error == ErrorCode.NO_ERROR
    wrapper_start = len(sets[0])
    wrapper_end = wrapper_start + len(sets[1])
    async with member(world, {"t": 1}, "c1") as consumer:
        messages = await take(consumer, 5)
    assert [m.payload for m in messages] == [b"plain", *inner, b"tail"]
    # Spec §4: inner messages report the wrapper's start, the last one its end.
    assert [m.next_offset for m in messages[1:4]] == [wrapper_start, wrapper_start, wrapper_end]
    assert all(m.offset == wrapper_start for m in messages[1:4])
    assert messages[-1].next_offset == wrapper_end + len(sets[2])


# -- whole batches, acknowledged (what a mirror uses) ------------------------------------


async def test_batches_commit_only_what_was_acknowledged(world):
    await one_broker(world, partitions=1)
    payloads = await world.produce("t", 0, 0, 3)
    async with member(world, {"t": 1}, "c1") as consumer:
        with trio.fail_after(WAIT_S):
            batch = await consumer.next_batch()
        assert (batch.topic, batch.partition, batch.offset, batch.count) == ("t", "0-0", 0, 3)
        assert [m.payload for m in iter_messages(batch.message_set, batch.offset)] == payloads
        assert batch.next_offset == len(batch.message_set)
        assert await consumer.commit()
        assert await registry(world, "offsets/t/0-0") == b"0"  # handed out, not acknowledged
        consumer.acknowledge(batch)
        assert await consumer.commit()
        assert await registry(world, "offsets/t/0-0") == str(batch.next_offset).encode()
        await world.produce("t", 0, 0, 2)
        with trio.fail_after(WAIT_S):
            second = await consumer.next_batch()
        assert (second.offset, second.count) == (batch.next_offset, 2)
    # Left with the second batch unacknowledged: the final commit stops at its start.
    assert await registry(world, "offsets/t/0-0") == str(second.offset).encode()
