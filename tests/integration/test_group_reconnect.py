"""The group consumer after a dropped ZooKeeper connection: is its consumer id still its own?

A process whose connection dropped (a long pause, a network cut) can come back
with its session alive while a newer process with the same consumer id took
over its registration and partitions meanwhile.  The watch that tells it may
arrive after the reconnect, so delivery waits for a read of the ids node:
otherwise the old process could hand out a message of a partition its
successor is already reading (the simulation's ``member-twin`` fault).
"""

from __future__ import annotations

import pytest
import trio

from tests.helpers.group_members import WAIT_S, member, one_broker, take
from tests.helpers.group_world import FakeBackend, GroupWorld, group_config
from trikafka.group import ConsumerIdTakenOver, GroupConsumer


async def test_a_reconnected_consumer_whose_id_was_taken_over_hands_out_nothing(autojump_clock):
    async with GroupWorld.open(FakeBackend()) as world:
        await one_broker(world, partitions=1)
        await world.produce("t", 0, 0, 5)
        zk = await world.backend.open_coordinator()
        try:
            old = GroupConsumer(zk, world.group, {"t": 1}, consumer_id="c1", config=group_config())

            async def no_watch() -> None:  # only the reconnect gate may stop it in this test
                await trio.sleep_forever()

            old._membership.watch_registration = no_watch
            async with old:
                assert await old.wait_settled(WAIT_S)
                await take(old, 2)  # three more are fetched and waiting
                zk.disconnect()
                async with member(world, {"t": 1}, "c1") as successor:
                    assert successor.owned == {("t", "0-0")}
                    zk.reconnect()  # within the session timeout: the old session lives on
                    with pytest.raises(ConsumerIdTakenOver), trio.fail_after(WAIT_S):
                        message = await old.__anext__()
                        pytest.fail(f"the old process handed out offset {message.offset} of its successor's partition")
                    assert old.owned == frozenset()
        finally:
            await zk.aclose()


async def test_a_reconnected_consumer_that_kept_its_id_goes_on(autojump_clock):
    async with GroupWorld.open(FakeBackend()) as world:
        await one_broker(world, partitions=1)
        await world.produce("t", 0, 0, 5)
        zk = await world.backend.open_coordinator()
        try:
            async with member(world, {"t": 1}, "c1", coordinator=zk) as consumer:
                first = await take(consumer, 2)
                zk.disconnect()
                zk.reconnect()
                rest = await take(consumer, 3)
                assert [m.offset for m in first + rest] == sorted({m.offset for m in first + rest})
                assert [m.payload for m in first + rest] == world.produced[("t", "0-0")]
        finally:
            await zk.aclose()
