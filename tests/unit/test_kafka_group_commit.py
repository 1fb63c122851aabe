"""The Trio group consumer's commit (docs/protocol.md §17.8)."""

import pytest
import trio
from kio.schema.errors import ErrorCode

from trikafka.client.kafka.errors import KafkaResponseError
from trikafka.client.kafka.group import KafkaGroupConsumer
from trikafka.client.kafka.group_offsets import TopicPartition
from trikafka.client.kafka.membership import GroupMembership, Phase


def test_a_commit_while_the_coordinator_is_unknown_raises_instead_of_returning():
    # The Kafka world's seed 67 (30 s): a member between coordinators committed (in-1, 30), was told
    # nothing of it, and the group later read back its earlier commit of 23.
    consumer = KafkaGroupConsumer("127.0.0.1:1", "readers", ["in"], enable_auto_commit=False)
    consumer.consumed[TopicPartition("in", 1)] = 30
    assert consumer.membership.coordinator is None

    with pytest.raises(KafkaResponseError) as raised:
        trio.run(consumer.commit)
    assert raised.value.error_code == ErrorCode.coordinator_not_available


def test_a_commit_with_nothing_consumed_needs_no_coordinator():
    consumer = KafkaGroupConsumer("127.0.0.1:1", "readers", ["in"], enable_auto_commit=False)
    trio.run(consumer.commit)


def test_a_member_that_leaves_while_its_leader_assignment_is_computed_drops_it():
    # The Kafka world's seed 1041 (60 s): a copier's group leader fetched partition counts for its
    # assignment while its consumer closed (leave); the driver then handed the assignment to a
    # membership in phase LEAVE and failed with RuntimeError instead of leaving.
    consumer = KafkaGroupConsumer("127.0.0.1:1", "copiers", ["in"], enable_auto_commit=False)
    m = consumer.membership
    assert isinstance(m, GroupMembership)
    m.phase = Phase.ASSIGN

    async def assign_while_leaving(membership):
        membership.leave()  # (no coordinator known: the member is LEFT at once)
        return {}

    consumer._assign = assign_while_leaving  # type: ignore[method-assign]
    trio.run(consumer._drive)
    assert m.phase is Phase.LEFT and m.error is None
