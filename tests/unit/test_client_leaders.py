"""The leader cache (pure) and the retry classification of error codes (docs/protocol.md §9.4, §12.5)."""

from __future__ import annotations

import pytest
import trio

from trikafka.client import LeaderCache, LeaderDirectory, LeaderNotAvailableError
from trikafka.client.errors import BrokerConnectionError
from trikafka.wire import (
    NO_LEADER,
    BrokerAddress,
    ErrorCode,
    Metadata,
    PartitionMetadata,
    TopicMetadata,
    is_retriable,
    needs_leader_refresh,
)

BROKERS = (BrokerAddress(1, "h1", 1), BrokerAddress(2, "h2", 2), BrokerAddress(3, "h3", 3))


def answer(topics, brokers=BROKERS) -> Metadata:
    return Metadata(1_000_000, tuple(brokers), tuple(topics))


def replicated(topic: str, *leaders: tuple[int, int]) -> TopicMetadata:
    """A replicated topic: partition p led by leaders[p] = (leader, epoch), replicas 1, 2, 3."""
    return TopicMetadata(topic, tuple(
        PartitionMetadata(p, leader, epoch, (1, 2, 3), (1, 2, 3),
                          ErrorCode.NO_ERROR if leader != NO_LEADER else ErrorCode.LEADER_NOT_AVAILABLE)
        for p, (leader, epoch) in enumerate(leaders)))


def plain(topic: str, broker: int, count: int) -> TopicMetadata:
    return TopicMetadata(topic, tuple(PartitionMetadata(p, broker, 0, (broker,), (broker,)) for p in range(count)))


def test_replicated_topic_leaders_and_addresses():
    cache = LeaderCache()
    cache.learn(answer([replicated("t", (2, 5), (3, 1))]))
    assert cache.replicated("t") is True
    assert cache.partition_count("t") == 2
    assert cache.leader("t", 0) == 2 and cache.leader_address("t", 0) == ("h2", 2)
    assert cache.leaders("t") == [(2, 0), (3, 1)]
    assert not cache.missing_leaders(["t"])


def test_unreplicated_topic_is_recognised_and_never_routed_by_leader():
    cache = LeaderCache()
    cache.learn(answer([plain("old", 1, 4)]))
    assert cache.replicated("old") is False
    assert cache.partition_count("old") is None
    assert cache.leader("old", 0) is None
    assert not cache.missing_leaders(["old"])
    assert cache.replicated("never-asked") is None


def test_an_older_epoch_never_replaces_a_newer_leader():
    cache = LeaderCache()
    cache.learn(answer([replicated("t", (3, 7))]))
    cache.learn(answer([replicated("t", (2, 6))], brokers=(BROKERS[1], BROKERS[0], BROKERS[2])))
    assert cache.leader("t", 0) == 3
    cache.learn(answer([replicated("t", (1, 8))]))
    assert cache.leader("t", 0) == 1


def test_invalidate_forgets_the_leader_until_metadata_names_one():
    cache = LeaderCache()
    cache.learn(answer([replicated("t", (2, 4))]))
    version = cache.version
    cache.invalidate("t", 0)
    assert cache.leader("t", 0) is None and cache.version > version
    assert cache.missing_leaders(["t"])
    cache.learn(answer([replicated("t", (2, 4))]))  # the same epoch again: the leader comes back
    assert cache.leader("t", 0) == 2


def test_no_leader_and_unknown_address_count_as_missing():
    cache = LeaderCache()
    cache.learn(answer([replicated("t", (NO_LEADER, 3), (9, 3))]))
    assert cache.leaders("t") == [(NO_LEADER, 0), (NO_LEADER, 1)]  # broker 9 has no known address
    assert cache.missing_leaders(["t"])


def test_mark_replicated_from_the_registry_and_from_a_not_leader_answer():
    cache = LeaderCache()
    cache.learn(answer([plain("t", 1, 2)]))
    cache.mark_replicated("t", 3)
    assert cache.replicated("t") is True and cache.partition_count("t") == 3
    assert cache.leaders("t") == [(NO_LEADER, 0), (NO_LEADER, 1), (NO_LEADER, 2)]
    other = LeaderCache()
    other.invalidate("u", 1)  # NOT_LEADER_FOR_PARTITION: only replicated partitions say that
    assert other.replicated("u") is True


def test_unknown_topic_answers_teach_nothing():
    cache = LeaderCache()
    cache.learn(answer([TopicMetadata("t", (), ErrorCode.UNKNOWN_TOPIC)]))
    assert cache.replicated("t") is None


@pytest.mark.parametrize("code", [ErrorCode.NOT_LEADER_FOR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE,
                                  ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH])
def test_leader_changes_are_retried_after_a_refresh(code):
    assert needs_leader_refresh(code) and is_retriable(code)
    assert needs_leader_refresh(int(code))


@pytest.mark.parametrize("code", [ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                                  ErrorCode.REQUEST_TIMED_OUT, ErrorCode.WRONG_PARTITION])
def test_acks_all_errors_are_retried_where_they_are(code):
    assert is_retriable(code) and not needs_leader_refresh(code)


@pytest.mark.parametrize("code", [ErrorCode.NO_ERROR, ErrorCode.INVALID_MESSAGE, ErrorCode.MESSAGE_SIZE_TOO_LARGE,
                                  ErrorCode.INVALID_TOPIC, ErrorCode.OFFSET_OUT_OF_RANGE, ErrorCode.NOT_REPLICA,
                                  ErrorCode.UNKNOWN])
def test_final_errors_are_not_retried(code):
    assert not is_retriable(code) and not needs_leader_refresh(code)


def test_an_unknown_wire_value_is_not_retried():
    assert not is_retriable(999) and not needs_leader_refresh(-7)


class _FakeConnection:
    def __init__(self, metadata: Metadata):
        self._metadata = metadata

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        return None

    async def metadata(self, topics):
        await trio.lowlevel.checkpoint()
        return self._metadata


async def test_directory_waits_out_a_failover_with_a_bounded_backoff(autojump_clock):
    answers = [answer([replicated("t", (NO_LEADER, 1))])] * 4 + [answer([replicated("t", (3, 2))])]
    asked: list[float] = []

    async def connector(host, port, **_):
        asked.append(trio.current_time())
        if host == "dead":
            raise BrokerConnectionError("refused")
        return _FakeConnection(answers[min(len(asked) // 2, len(answers) - 1)])

    directory = LeaderDirectory([("dead", 9), ("h1", 1)], connector=connector,
                                backoff_min_s=0.1, backoff_max_s=0.4)
    assert await directory.leader_address("t", 0) == ("h3", 3)
    gaps = [b - a for a, b in zip(asked, asked[1:]) if b - a > 0]
    assert gaps and max(gaps) <= 0.4  # bounded
    assert len(asked) < 20  # no busy loop


async def test_directory_gives_up_after_the_time_allowed(autojump_clock):
    async def connector(host, port, **_):
        return _FakeConnection(answer([replicated("t", (NO_LEADER, 1))]))

    directory = LeaderDirectory([("h1", 1)], connector=connector, backoff_max_s=0.5)
    with pytest.raises(LeaderNotAvailableError):
        await directory.leader_address("t", 0, timeout_s=3.0)
    assert directory.refreshes <= 3.0 / 0.05 + 1
