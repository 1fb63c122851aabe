"""Hypothesis properties of the 0.7 rebalance assignment (spec §8.3).

The oracle below re-implements 0.7's ``ZookeeperConsumerConnector.rebalance``
loop in a deliberately different shape: a ``compareTo``-style comparator over
UTF-16 code units (not a sort key), the per-thread ``indexOf`` lookup, and an
index-by-index copy loop, exactly as the Scala code is written.
"""

import functools

from hypothesis import given
from hypothesis import strategies as st

from trikafka.group.assign import (
    assign_group,
    assign_topic,
    consumer_assignment,
    partition_owners,
    topic_partitions,
)
from trikafka.group.registry import StaticTopicCount, WildcardTopicCount, whitelist

# ---------------------------------------------------------------- oracle


def _utf16_units(s):
    units = []
    for ch in s:
        code = ord(ch)
        if code > 0xFFFF:
            code -= 0x10000
            units += [0xD800 + (code >> 10), 0xDC00 + (code & 0x3FF)]
        else:
            units.append(code)
    return units


def _java_compare_to(a, b):
    """java.lang.String.compareTo: first differing code unit, else length difference."""
    ua, ub = _utf16_units(a), _utf16_units(b)
    for x, y in zip(ua, ub):
        if x != y:
            return x - y
    return len(ua) - len(ub)


_java_sorted = functools.partial(sorted, key=functools.cmp_to_key(_java_compare_to))


def oracle_rebalance(my_threads, cur_consumers, cur_partitions):
    """0.7's loop for one topic: my thread id -> list of partitions."""
    cur_consumers = _java_sorted(cur_consumers)
    cur_partitions = _java_sorted(cur_partitions)
    n_parts_per_consumer = len(cur_partitions) // len(cur_consumers)
    n_consumers_with_extra_part = len(cur_partitions) % len(cur_consumers)
    out = {}
    for thread_id in my_threads:
        my_position = cur_consumers.index(thread_id)
        start_part = n_parts_per_consumer * my_position + min(my_position, n_consumers_with_extra_part)
        n_parts = n_parts_per_consumer + (0 if my_position + 1 > n_consumers_with_extra_part else 1)
        out[thread_id] = []
        for i in range(start_part, start_part + n_parts):
            out[thread_id].append(cur_partitions[i])
    return out


def oracle_partitions(brokers):
    part_list = []
    for broker, n_parts in brokers.items():
        for part in range(n_parts):
            part_list.insert(0, str(broker) + "-" + str(part))
    return _java_sorted(part_list)


# ---------------------------------------------------------------- strategies

# Small alphabets so that prefixes, "-" and digits collide often; one astral
# and one high-BMP character exercise the UTF-16 ordering.
_id_chars = st.sampled_from(list("ab12-_") + ["\ufffd", "\U0001f600"])
consumer_ids = st.text(_id_chars, min_size=1, max_size=6)
brokers = st.dictionaries(st.integers(0, 25), st.integers(0, 13), max_size=5)
thread_lists = st.lists(st.text(_id_chars, min_size=1, max_size=8), unique=True, max_size=30)


@st.composite
def groups(draw):
    """(topic_counts, broker_topics) for a group over topics t0..t3."""
    topics = [f"t{i}" for i in range(4)]
    broker_topics = {t: draw(brokers) for t in topics if draw(st.booleans())}
    members = draw(st.dictionaries(consumer_ids, st.none(), min_size=1, max_size=6))
    topic_counts = {}
    for consumer_id in members:
        if draw(st.booleans()):
            subscribed = draw(st.lists(st.sampled_from(topics), min_size=1, max_size=3, unique=True))
            topic_counts[consumer_id] = StaticTopicCount({t: draw(st.integers(1, 4)) for t in subscribed})
        else:
            regex = draw(st.sampled_from(["t.*", "t[01]", "t2|t3", "x"]))
            topic_counts[consumer_id] = WildcardTopicCount(whitelist(regex), draw(st.integers(1, 3)))
    return topic_counts, broker_topics


# ---------------------------------------------------------------- properties


@given(brokers, thread_lists)
def test_matches_oracle(brokers_map, threads):
    partitions = topic_partitions(brokers_map)
    assert partitions == oracle_partitions(brokers_map)
    if threads:
        assert assign_topic(partitions, threads) == oracle_rebalance(threads, threads, partitions)


@given(brokers, thread_lists.filter(bool))
def test_every_partition_exactly_once_in_order(brokers_map, threads):
    partitions = topic_partitions(brokers_map)
    result = assign_topic(partitions, threads)
    assert sorted(result) == sorted(threads)
    # Contiguous slices, in thread order, that concatenate to the sorted list.
    assert [p for parts in result.values() for p in parts] == partitions


@given(brokers, thread_lists.filter(bool))
def test_balanced_and_first_threads_get_the_extra(brokers_map, threads):
    partitions = topic_partitions(brokers_map)
    sizes = [len(parts) for parts in assign_topic(partitions, threads).values()]
    base, extra = divmod(len(partitions), len(threads))
    assert max(sizes) - min(sizes) <= 1
    assert sizes == [base + 1] * extra + [base] * (len(threads) - extra)


@given(brokers, thread_lists, st.randoms(use_true_random=False))
def test_deterministic_whatever_the_input_order(brokers_map, threads, rnd):
    partitions = topic_partitions(brokers_map)
    shuffled_parts, shuffled_threads = partitions[:], threads[:]
    rnd.shuffle(shuffled_parts)
    rnd.shuffle(shuffled_threads)
    first = assign_topic(partitions, threads)
    second = assign_topic(shuffled_parts, shuffled_threads)
    assert first == second and list(first) == list(second)
    shuffled_brokers = dict(rnd.sample(list(brokers_map.items()), len(brokers_map)))
    assert topic_partitions(shuffled_brokers) == partitions


@given(groups())
def test_group_matches_oracle_and_members_agree(group):
    topic_counts, broker_topics = group
    result = assign_group(topic_counts, broker_topics)
    per_topic = {}
    for consumer_id, tc in topic_counts.items():
        for topic, k in tc.streams_per_topic(broker_topics).items():
            per_topic.setdefault(topic, []).extend(f"{consumer_id}-{i}" for i in range(k))
    assert set(result) == set(per_topic)
    for topic, threads in per_topic.items():
        partitions = oracle_partitions(broker_topics.get(topic, {}))
        assert result[topic] == oracle_rebalance(_java_sorted(threads), threads, partitions)
    # Each member computing only its own slice claims disjoint partitions
    # which together cover every partition of every subscribed topic.
    claimed = {}
    for consumer_id in topic_counts:
        for topic, per_thread in consumer_assignment(consumer_id, topic_counts, broker_topics).items():
            for thread, parts in per_thread.items():
                assert thread.rsplit("-", 1)[0] == consumer_id
                for part in parts:
                    assert (topic, part) not in claimed
                    claimed[(topic, part)] = thread
    owners = partition_owners(result)
    assert claimed == {(t, p): owner for t, parts in owners.items() for p, owner in parts.items()}
    for topic in per_topic:
        assert set(owners[topic]) == set(oracle_partitions(broker_topics.get(topic, {})))


def test_oracle_agrees_on_a_handmade_case():
    # Guards the oracle itself, so a shared mistake cannot hide.
    threads = ["b-0", "a-1", "a-0"]
    partitions = oracle_partitions({2: 1, 10: 2, 1: 1})
    assert partitions == ["1-0", "10-0", "10-1", "2-0"]
    assert oracle_rebalance(["a-1"], threads, partitions) == {"a-1": ["10-1"]}
    assert oracle_rebalance(["a-0", "b-0"], threads, partitions) == {"a-0": ["1-0", "10-0"], "b-0": ["2-0"]}
