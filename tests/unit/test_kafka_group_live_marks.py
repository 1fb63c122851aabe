"""The live Kafka group marks (docs/protocol.md §17.7): ``/trikafka/kafka-groups/<g>`` exists exactly
while a group this broker coordinates has members, follows a new ZooKeeper session, and takes over
a mark its previous coordinator left."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import trio

from tests.helpers.registry import wait_for_value
from trikafka.broker.kafka.groups.consumer_group import Heartbeat
from trikafka.broker.kafka.groups.group import Group
from trikafka.broker.kafka.groups.live_marks import LiveGroupMarks
from trikafka.testing import FakeZooKeeperClient
from trikafka.zk import kafka_groups

MARK = "/trikafka/kafka-groups/g"


class _Groups:
    """What the marks read of one ``__consumer_offsets`` partition: group id -> member ids."""

    def __init__(self) -> None:
        self.groups: dict[str, Any] = {}

    def members(self, group_id: str, *member_ids: str) -> None:
        self.groups[group_id] = SimpleNamespace(has_members=bool(member_ids))


async def _marked(zk: FakeZooKeeperClient, present: bool) -> Any:
    return await wait_for_value(zk, MARK, lambda value: (value is not None) == present)


async def test_a_mark_exists_while_the_group_has_members_and_follows_the_session(autojump_clock):
    groups = _Groups()
    async with FakeZooKeeperClient() as zk, trio.open_nursery() as nursery:
        marks = LiveGroupMarks(zk, 7, lambda: [groups])  # type: ignore[list-item]
        nursery.start_soon(marks.run)
        groups.members("g", "m1")
        groups.members("empty")
        marks.changed()
        data, stat = await _marked(zk, True)
        assert kafka_groups.decode_mark(data) == 7 and stat.ephemeral_owner == zk.session_id
        assert await zk.exists("/trikafka/kafka-groups/empty") is None
        assert await kafka_groups.coordinator_of_live_group(zk, "g") == 7

        zk.expire()  # the ephemeral goes with the session; the new session writes it again
        data, stat = await _marked(zk, True)
        assert stat.ephemeral_owner == zk.session_id

        groups.members("g")  # the last member left
        marks.changed()
        await _marked(zk, False)
        assert await kafka_groups.coordinator_of_live_group(zk, "g") is None
        nursery.cancel_scope.cancel()


async def test_the_new_coordinator_takes_the_mark_over_and_the_old_one_leaves_it(autojump_clock):
    async with FakeZooKeeperClient() as old_zk, FakeZooKeeperClient(old_zk.server) as new_zk:
        await kafka_groups.mark(old_zk, "g", 1)
        await kafka_groups.mark(new_zk, "g", 2)
        data, stat = await new_zk.get(MARK)
        assert kafka_groups.decode_mark(data) == 2 and stat.ephemeral_owner == new_zk.session_id
        await kafka_groups.unmark(old_zk, "g")  # the old coordinator drops the group late
        assert await kafka_groups.coordinator_of_live_group(new_zk, "g") == 2


def test_a_consumer_protocol_group_with_members_is_live():
    group = Group("c")
    group.consumer_or_new().heartbeat(0, Heartbeat("m1", 0, subscribed_topic_names=("t",)), {})
    partition = SimpleNamespace(groups={"c": group, "empty": Group("empty")})
    marks = LiveGroupMarks(FakeZooKeeperClient(), 7, lambda: [partition])  # type: ignore[list-item]
    assert marks.live() == {"c"}


def test_group_ids_that_cannot_be_znodes_have_no_mark():
    assert kafka_groups.mark_path("a/b") is None
    assert kafka_groups.mark_path("ok") == MARK.replace("/g", "/ok")
