"""Unit tests for the pure producer partitioners (spec §8.5, §14.2).

The Java values below were produced once with OpenJDK 17 (``String.hashCode``,
``Arrays.hashCode(byte[])``, ``Long.hashCode``, ``Math.abs(h) % n``).
"""

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trikafka.producer.partitioner import (
    BrokerPartition,
    DefaultPartitioner07,
    HashPartitioner,
    InvalidPartitionError,
    RandomPartitioner,
    choose_partition,
    hash_index,
    java_bytes_hash,
    java_hash,
    java_string_hash,
    producer_partitions,
)

# (string, hashCode, Math.abs(h) % 3 in Java, Math.abs(h) % 8 in Java); None = Java
# yields a negative index (Integer.MIN_VALUE) and its producer throws.
JAVA_STRINGS = [
    ("", 0, 0, 0),
    ("a", 97, 1, 1),
    ("hello", 99162322, 1, 2),
    ("Hello World", -862545276, 0, 4),
    ("polygenelubricants", -2147483648, None, 0),
    ("GydZG_", -2147483648, None, 0),
    ("DESIGNING WORKHOUSES", -2147483648, None, 0),
    ("topic-key-17", -255477070, 1, 6),
    ("\u00e9t\u00e9", 227742, 0, 6),
    ("\U0001f600x", 54959989, 1, 5),  # surrogate pair: two UTF-16 units
    ("user:42", -147170163, 0, 3),
]


@pytest.mark.parametrize("s, h, mod3, mod8", JAVA_STRINGS)
def test_java_string_hash_and_index(s, h, mod3, mod8):
    assert java_string_hash(s) == h
    assert java_hash(s) == h
    assert HashPartitioner()(s, 8) == mod8
    if mod3 is not None:
        assert HashPartitioner()(s, 3) == mod3


def test_min_value_hash_uses_true_absolute_value():
    assert java_string_hash("polygenelubricants") == -(2**31)
    # Java: abs(MIN_VALUE) % 8 == 0; we agree wherever Java gives a valid index.
    for n in (1, 2, 4, 8, 1024):
        assert hash_index(-(2**31), n) == 0
    # Java would produce -2 (and throw); we use 2**31 % 3 == 2, in range.
    assert hash_index(-(2**31), 3) == 2
    assert all(0 <= hash_index(-(2**31), n) < n for n in range(1, 200))


@pytest.mark.parametrize(
    "data, h",
    [(b"", 1), (b"\x00", 31), (b"\x01\x02\x03", 30817), (b"\xff\x80\x7f", 24989), (b"hello", 127791473)],
)
def test_java_bytes_hash(data, h):
    assert java_bytes_hash(data) == h
    assert java_hash(bytearray(data)) == h
    assert java_hash(memoryview(data)) == h


@pytest.mark.parametrize(
    "key, h",
    [
        (0, 0),
        (-1, -1),  # fits an int: Integer.hashCode
        (2**31 - 1, 2**31 - 1),
        (1 << 32, 1),  # Long.hashCode from here on
        (123456789012345, -2045923535),
        (-(2**63), -(2**31)),
        (2147483648, -(2**31)),
        (-2147483649, -(2**31)),
    ],
)
def test_java_int_hash(key, h):
    assert java_hash(key) == h


@pytest.mark.parametrize("key", [True, 1.5, None, object(), 2**63, ("a",)])
def test_java_hash_rejects_other_types(key):
    with pytest.raises(TypeError):
        java_hash(key)


def _reference_string_hash(s):
    """Independent formula: sum(u_i * 31**(n-1-i)) over UTF-16 units, wrapped to int32."""
    raw = s.encode("utf-16-le", "surrogatepass")
    units = [raw[i] | raw[i + 1] << 8 for i in range(0, len(raw), 2)]
    total = sum(u * 31 ** (len(units) - 1 - i) for i, u in enumerate(units)) % 2**32
    return total - 2**32 if total >= 2**31 else total


@given(st.text(max_size=40))
def test_string_hash_matches_reference_formula(s):
    assert java_string_hash(s) == _reference_string_hash(s)


@given(st.one_of(st.text(), st.binary(), st.integers(-(2**63), 2**63 - 1)), st.integers(1, 10_000))
def test_hash_partitioner_always_in_range(key, n):
    index = HashPartitioner()(key, n)
    assert 0 <= index < n
    assert HashPartitioner()(key, n) == index


def test_hash_partitioner_needs_a_key_and_partitions():
    with pytest.raises(TypeError):
        HashPartitioner()(None, 3)
    with pytest.raises(InvalidPartitionError):
        HashPartitioner()("k", 0)


def test_random_partitioner_is_injectable_and_covers_all():
    a = RandomPartitioner(random.Random(7))
    b = RandomPartitioner(random.Random(7))
    first = [a("ignored", 5) for _ in range(200)]
    assert first == [b(None, 5) for _ in range(200)]
    assert set(first) == {0, 1, 2, 3, 4}
    with pytest.raises(InvalidPartitionError):
        a(None, 0)


def test_default_partitioner_random_without_key_hash_with_key():
    expected_rng = random.Random(3)
    p = DefaultPartitioner07(random.Random(3))
    assert [p(None, 10) for _ in range(20)] == [expected_rng.randrange(10) for _ in range(20)]
    assert p("hello", 8) == 2


def test_producer_partitions_numeric_order():
    result = producer_partitions({10: 2, 2: 1, 1: 3}, live_broker_ids=[1, 2, 10])
    assert result == [(1, 0), (1, 1), (1, 2), (2, 0), (10, 0), (10, 1)]
    assert all(isinstance(bp, BrokerPartition) for bp in result)
    assert result[4].broker_id == 10 and result[4].partition == 0


def test_producer_partitions_uses_topic_registry_not_liveness():
    # 0.7 reads /brokers/topics/<T>/*; a broker missing from /brokers/ids still counts.
    assert producer_partitions({3: 1}, live_broker_ids=[]) == [(3, 0)]
    assert producer_partitions({"3": 2}, live_broker_ids=[1]) == [(3, 0), (3, 1)]


def test_producer_partitions_fall_back_to_partition_zero_of_live_brokers():
    assert producer_partitions({}, live_broker_ids=[5, 1, 10, 5]) == [(1, 0), (5, 0), (10, 0)]
    assert producer_partitions({4: 0}, live_broker_ids=[2]) == [(2, 0)]
    assert producer_partitions({}, live_broker_ids=[]) == []


PARTS = [BrokerPartition(1, 0), BrokerPartition(1, 1), BrokerPartition(2, 0)]


def test_choose_partition_routes_keys():
    assert choose_partition(PARTS, "hello", HashPartitioner(), RandomPartitioner()) == PARTS[99162322 % 3]
    # A None key always goes to the random partitioner, whatever the partitioner.
    assert choose_partition(PARTS, None, HashPartitioner(), lambda key, n: n - 1) == PARTS[2]
    assert choose_partition(PARTS, b"x", lambda key, n: 1, RandomPartitioner()) == PARTS[1]


@pytest.mark.parametrize("bad", [-1, 3, 1.0, True, None])
def test_choose_partition_rejects_bad_indexes(bad):
    with pytest.raises(InvalidPartitionError, match="valid range"):
        choose_partition(PARTS, "k", lambda key, n: bad, RandomPartitioner())


def test_choose_partition_without_partitions():
    with pytest.raises(InvalidPartitionError, match="no partitions"):
        choose_partition([], "k", HashPartitioner(), RandomPartitioner())
