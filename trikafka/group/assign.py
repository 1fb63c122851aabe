"""The 0.7.1/0.7.2 rebalance assignment as pure functions (docs/protocol.md §8.3).

API::

    java_string_key(s: str) -> bytes
        Sort key giving Java ``String.compareTo`` order (UTF-16 code units).
    topic_partitions(brokers: Mapping[int | str | None, int]) -> list[str]
        ``{broker_id: n_partitions}`` (the children of ``/brokers/topics/T`` and
        their values) -> every ``"b-p"``, sorted as strings.
    assign_topic(partitions: Iterable[str], consumer_threads: Iterable[str])
        -> dict[str, list[str]]
        One topic: every thread id (in sorted order) -> its partitions.
    assign_group(topic_counts: Mapping[str, TopicCount],
                 broker_topics: Mapping[str, Mapping[int | str | None, int]])
        -> dict[str, dict[str, list[str]]]
        The whole group: topic -> thread id -> partitions, for every topic any
        member subscribes to.
    consumer_assignment(consumer_id, topic_counts, broker_topics)
        -> dict[str, dict[str, list[str]]]
        What one consumer claims: only its own threads, for the topics of its
        own registry value (0.7's ``mine``).
    partition_owners(assignment) -> dict[str, dict[str, str]]
        Inverts an assignment: topic -> partition name -> owning thread id.

``topic_counts`` is ``{consumer_id: TopicCount}`` decoded from every child of
``/consumers/<g>/ids``; ``broker_topics`` maps **every** child of
``/brokers/topics`` (wildcards are expanded against these names) to its
``{broker_id: n_partitions}`` (possibly empty).

The algorithm, exactly as 0.7: both lists are sorted as strings (so
``"1-10" < "1-2"`` and ``"10-0" < "2-0"``); with ``P`` partitions and ``C``
threads each thread gets ``P div C`` consecutive partitions and the **first**
``P mod C`` threads one more.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TypeVar

from .registry import TopicCount

__all__ = [
    "java_string_key", "topic_partitions", "assign_topic", "assign_group",
    "consumer_assignment", "partition_owners",
]

Assignment = dict[str, dict[str, list[str]]]
# A broker id as ``/brokers/topics/<t>`` children give it (int or its decimal str),
# or None for a replicated topic; one mapping holds one kind.
BrokerKey = TypeVar("BrokerKey", bound=int | str | None)


def java_string_key(s: str) -> bytes:
    """Sort key for Java ``String.compareTo``: UTF-16 code units, compared unsigned.

    Big-endian UTF-16 bytes compare exactly like the code units; this differs
    from Python's code point order only for characters above U+FFFF.
    """
    return s.encode("utf-16-be", "surrogatepass")


def _sorted_unique(items: Iterable[str], what: str) -> list[str]:
    result = sorted(items, key=java_string_key)
    for left, right in zip(result, result[1:]):
        if left == right:
            raise ValueError(f"duplicate {what} {left!r}")
    return result


def topic_partitions(brokers: Mapping[BrokerKey, int]) -> list[str]:
    """Every ``"<broker>-<p>"`` for ``p < n``, sorted as strings (0.7 ``getPartitionsForTopics``).

    A replicated topic is ``{None: n}``: its partitions are named ``"<p>"`` (docs/protocol.md §12.9).
    """
    names = [f"{broker}-{p}" if broker is not None else str(p) for broker, n in brokers.items() for p in range(n)]
    return _sorted_unique(names, "partition")


def assign_topic(partitions: Iterable[str], consumer_threads: Iterable[str]) -> dict[str, list[str]]:
    """Assign one topic's partitions to the threads subscribing to it.

    Both inputs are sorted here (as Java strings); duplicates are a
    ``ValueError``.  Every thread appears in the result, in sorted order,
    with an empty list when it gets nothing.
    """
    parts = _sorted_unique(partitions, "partition")
    threads = _sorted_unique(consumer_threads, "consumer thread id")
    if not threads:
        return {}
    per_thread, with_extra = divmod(len(parts), len(threads))
    result: dict[str, list[str]] = {}
    for pos, thread in enumerate(threads):
        start = per_thread * pos + min(pos, with_extra)
        count = per_thread + (1 if pos < with_extra else 0)
        result[thread] = parts[start:start + count]
    return result


def _threads_per_topic(
    topic_counts: Mapping[str, TopicCount], broker_topics: Mapping[str, Mapping[BrokerKey, int]]
) -> dict[str, list[str]]:
    """0.7 ``getConsumersPerTopic``: topic -> thread ids of every member (unsorted)."""
    per_topic: dict[str, list[str]] = {}
    for consumer_id, topic_count in topic_counts.items():
        for topic, ids in topic_count.thread_ids_per_topic(consumer_id, broker_topics).items():
            per_topic.setdefault(topic, []).extend(ids)
    return per_topic


def assign_group(
    topic_counts: Mapping[str, TopicCount], broker_topics: Mapping[str, Mapping[BrokerKey, int]]
) -> Assignment:
    """The whole group's assignment: topic -> thread id -> partition names.

    A subscribed topic missing from ``broker_topics`` has no partitions, so
    its threads get empty lists.
    """
    return {
        topic: assign_topic(topic_partitions(broker_topics.get(topic, {})), threads)
        for topic, threads in _threads_per_topic(topic_counts, broker_topics).items()
    }


def consumer_assignment(
    consumer_id: str,
    topic_counts: Mapping[str, TopicCount],
    broker_topics: Mapping[str, Mapping[BrokerKey, int]],
) -> Assignment:
    """What ``consumer_id`` claims in this rebalance: its own threads only.

    Raises ``KeyError`` when ``consumer_id`` is not among ``topic_counts``
    (0.7 fails the attempt when its own registry node cannot be read).
    """
    if consumer_id not in topic_counts:
        raise KeyError(f"consumer {consumer_id!r} is not registered in the group")
    mine = topic_counts[consumer_id].thread_ids_per_topic(consumer_id, broker_topics)
    group = assign_group(topic_counts, broker_topics)
    return {topic: {t: group[topic][t] for t in threads} for topic, threads in mine.items()}


def partition_owners(assignment: Mapping[str, Mapping[str, Iterable[str]]]) -> dict[str, dict[str, str]]:
    """Invert an assignment: topic -> partition name -> owning thread id.

    Raises ``ValueError`` if a partition has two owners (never the case for
    ``assign_group`` output).
    """
    owners: dict[str, dict[str, str]] = {}
    for topic, per_thread in assignment.items():
        topic_owners = owners.setdefault(topic, {})
        for thread, parts in per_thread.items():
            for part in parts:
                if topic_owners.setdefault(part, thread) != thread:
                    raise ValueError(f"{topic}/{part} owned by {topic_owners[part]!r} and {thread!r}")
    return owners
