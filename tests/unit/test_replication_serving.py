"""A replicated partition serving clients (§12.6): a consumer's fetch reads up to the high watermark,
writes and OFFSETS go only where a replica is, and an acks -1 wait ends with its leader."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from trikafka.broker.engine.errors import EngineError
from trikafka.broker.engine.partition import Refused
from trikafka.broker.replication import serving
from trikafka.wire import FetchPart
from trikafka.zk.replication_values import PartitionState


class StubLog:
    start_offset = 100
    end_offset = 500

    def read(self, offset, max_bytes, *, end):
        return ("region", offset, min(end - offset, max_bytes))


def manager_with(high_watermark, *, leading=True):
    hosted = SimpleNamespace(key=("t", 0), log=StubLog(), consumer_end=lambda: high_watermark,
                             leader=object() if leading else None)
    return SimpleNamespace(hosted={("t", 0): hosted}, states={})


def fetch(manager, part):
    """A consumer's fetch part, asked of the replicated topic's partition as the request handler asks it."""
    return serving.partition(manager, part.topic, part.partition).fetch(part.offset, part.max_bytes)


def test_a_replica_serves_consumers_up_to_its_high_watermark():
    assert fetch(manager_with(300), FetchPart("t", 0, 200, 1000)) == (EngineError.NO_ERROR, ("region", 200, 100))
    assert fetch(manager_with(300), FetchPart("t", 0, 300, 1000)) == (EngineError.NO_ERROR, None)


def test_an_offset_above_the_high_watermark_within_the_log_waits_instead_of_resetting():
    # Committed on a previous leader, not yet here: empty, no error (docs/protocol.md §12.6).
    for offset in (301, 450, 500):
        assert fetch(manager_with(300), FetchPart("t", 0, offset, 1000)) == (EngineError.NO_ERROR, None)


def test_only_offsets_outside_the_log_are_out_of_range():
    for offset in (99, 501):
        assert fetch(manager_with(300), FetchPart("t", 0, offset, 1000)) == (EngineError.OFFSET_OUT_OF_RANGE, None)


def test_past_its_log_end_a_replica_that_does_not_lead_sends_the_consumer_to_the_leader():
    # Its log may be behind (catching up, or a lost tail after a power cut): only the leader can tell.
    follower = manager_with(300, leading=False)
    assert fetch(follower, FetchPart("t", 0, 501, 1000)) == (EngineError.NOT_LEADER_FOR_PARTITION, None)
    assert fetch(follower, FetchPart("t", 0, 99, 1000)) == (EngineError.OFFSET_OUT_OF_RANGE, None)
    assert fetch(follower, FetchPart("t", 0, 450, 1000)) == (EngineError.NO_ERROR, None)
    assert fetch(follower, FetchPart("t", 0, 200, 1000)) == (EngineError.NO_ERROR, ("region", 200, 100))


async def test_a_broker_without_a_replica_sends_every_client_elsewhere():
    led_elsewhere = SimpleNamespace(hosted={}, states={("t", 0): PartitionState(2, 5, (2, 3), 1)})
    partition = serving.partition(led_elsewhere, "t", 0)
    assert partition.fetch(0, 1000) == (EngineError.NOT_LEADER_FOR_PARTITION, None)
    with pytest.raises(Refused) as refused:
        await partition.append(b"", 1)
    assert refused.value.error == EngineError.NOT_LEADER_FOR_PARTITION
    with pytest.raises(Refused):  # OFFSETS has no error code: the handler closes the connection
        await partition.offsets(-1, 1, read=None)
    leaderless = SimpleNamespace(hosted={}, states={})
    with pytest.raises(Refused) as refused:
        await serving.partition(leaderless, "t", 0).append(b"", 1)
    assert refused.value.error == EngineError.LEADER_NOT_AVAILABLE


async def test_a_replica_answers_offsets_no_later_than_its_committed_end():
    async def read(log):
        return [450, 400, 100]

    answer = await serving.partition(manager_with(300), "t", 0).offsets(-1, 3, read)
    assert answer == [300, 100]


def test_an_acks_all_wait_ends_when_its_leader_stops_leading():
    outcomes = {}
    leader = SimpleNamespace(commit_status=lambda end: outcomes.get(end))
    manager = manager_with(300)
    hosted = manager.hosted[("t", 0)]
    hosted.leader = leader
    wait = serving.partition(manager, "t", 0).ack_wait(400)
    assert wait.key == ("t", 0) and wait.status() is None
    outcomes[400] = EngineError.NO_ERROR
    assert wait.status() == EngineError.NO_ERROR
    hosted.leader = SimpleNamespace(commit_status=leader.commit_status)  # a new term, even if it commits
    assert wait.status() == EngineError.NOT_LEADER_FOR_PARTITION
