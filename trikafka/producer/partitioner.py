"""Pure producer-side partitioning (0.7's producer and its ``partitioner.class``).

API::

    BrokerPartition(broker_id: int, partition: int)      # NamedTuple, numeric order
    producer_partitions(topic_brokers: Mapping[int, int],
                        live_broker_ids: Iterable[int]) -> list[BrokerPartition]
    java_string_hash(s: str) -> int                      # String.hashCode, int32
    java_bytes_hash(data: bytes-like) -> int             # Arrays.hashCode(byte[]), int32
    java_hash(key: str | bytes-like | int) -> int
    hash_index(hash32: int, num_partitions: int) -> int  # abs(hash) mod n
    HashPartitioner()(key, n) -> int
    RandomPartitioner(rng: random.Random | None = None)(key, n) -> int
    DefaultPartitioner07(rng: random.Random | None = None)(key, n) -> int
    choose_partition(partitions, key, partitioner, random_partitioner) -> BrokerPartition
    InvalidPartitionError(ValueError)

A partitioner is any callable ``(key, num_partitions) -> index``.

Hashing is stable across processes (never Python's randomized ``hash()``):

* ``str`` keys use Java's ``String.hashCode`` over UTF-16 code units, so a
  string key lands on the same partition as with the 0.7 Java producer's
  ``DefaultPartitioner`` (``abs(key.hashCode) % n``).
* bytes-like keys use ``java.util.Arrays.hashCode(byte[])`` (signed bytes,
  seed 1).  A Java ``byte[]`` key has no content hash (identity), so there
  is nothing to be compatible with; this is the natural Java content hash.
* ``int`` keys use ``Integer.hashCode`` (int32 range) or ``Long.hashCode``
  (int64 range); ``bool`` and other types raise ``TypeError``.

``Integer.MIN_VALUE`` [T]: Java's ``Math.abs`` leaves it negative, so 0.7
computes ``MIN_VALUE % n``, which is 0 when ``n`` is a power of two and
otherwise negative (the Java producer then throws InvalidPartitionException).
We take the true absolute value, ``2**31 % n``: identical to Java wherever
Java succeeds, and always in range.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from trikafka.util.java_hash import java_bytes_hash, java_string_hash, to_int32

__all__ = [
    "BrokerPartition", "producer_partitions", "java_string_hash", "java_bytes_hash",
    "java_hash", "hash_index", "HashPartitioner", "RandomPartitioner",
    "DefaultPartitioner07", "choose_partition", "InvalidPartitionError", "Key", "PartitionFn",
]

# A message key: whatever the configured partitioner takes (the default hashes str,
# bytes-like and int keys; a custom one may take anything), so it cannot be narrower.
Key = Any
PartitionFn = Callable[[Key, int], int]


class InvalidPartitionError(ValueError):
    """No partitions to choose from, or a partitioner returned a bad index."""


class BrokerPartition(NamedTuple):
    """One producer target: a partition id on one broker (tuple order = numeric order)."""

    broker_id: int
    partition: int


def producer_partitions(
    topic_brokers: Mapping[int, int], live_broker_ids: Iterable[int]
) -> list[BrokerPartition]:
    """The 0.7 ZooKeeper producer's partition list for one topic.

    ``topic_brokers`` is ``{broker_id: n_partitions}`` from
    ``/brokers/topics/<T>/*``; every ``(b, p)`` with ``p < n``, ordered
    numerically by broker then partition.  When that list is empty (no broker
    registered the topic, or all with 0 partitions) the result is partition 0
    of every live broker (``/brokers/ids/*``).
    """
    registered = sorted(
        BrokerPartition(int(b), p) for b, n in topic_brokers.items() for p in range(n)
    )
    if registered:
        return registered
    return [BrokerPartition(b, 0) for b in sorted({int(b) for b in live_broker_ids})]


def java_hash(key: str | bytes | bytearray | memoryview | int) -> int:
    """The stable int32 hash used by ``HashPartitioner`` (see the module docstring)."""
    if isinstance(key, str):
        return java_string_hash(key)
    if isinstance(key, (bytes, bytearray, memoryview)):
        return java_bytes_hash(key)
    if type(key) is int:
        if -(2**31) <= key < 2**31:
            return key  # Integer.hashCode
        if -(2**63) <= key < 2**63:
            unsigned = key & 0xFFFFFFFFFFFFFFFF
            return to_int32(unsigned ^ (unsigned >> 32))  # Long.hashCode
        raise TypeError(f"int key {key} does not fit in a Java long")
    raise TypeError(f"cannot hash a key of type {type(key).__name__}; use str, bytes or int")


def hash_index(hash32: int, num_partitions: int) -> int:
    """``abs(hash32) mod num_partitions``, with ``abs(MIN_VALUE) = 2**31`` (see module doc)."""
    if num_partitions <= 0:
        raise InvalidPartitionError(f"invalid number of partitions {num_partitions}; must be > 0")
    return abs(hash32) % num_partitions


class HashPartitioner:
    """``abs(java_hash(key)) mod n``; a ``None`` key is a ``TypeError``."""

    def __call__(self, key: Key, num_partitions: int) -> int:
        if key is None:
            raise TypeError("HashPartitioner needs a key")
        return hash_index(java_hash(key), num_partitions)


class RandomPartitioner:
    """A uniformly random index from an injectable ``random.Random``; ignores the key."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng if rng is not None else random.Random()

    def __call__(self, key: Key, num_partitions: int) -> int:
        if num_partitions <= 0:
            raise InvalidPartitionError(f"invalid number of partitions {num_partitions}; must be > 0")
        return self._rng.randrange(num_partitions)


class DefaultPartitioner07:
    """0.7's ``kafka.producer.DefaultPartitioner``: random without a key, else hash."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._random = RandomPartitioner(rng)
        self._hash = HashPartitioner()

    def __call__(self, key: Key, num_partitions: int) -> int:
        return self._random(key, num_partitions) if key is None else self._hash(key, num_partitions)


def choose_partition(
    partitions: Sequence[BrokerPartition],
    key: Key,
    partitioner: PartitionFn,
    random_partitioner: PartitionFn,
) -> BrokerPartition:
    """Pick the target for one message, as 0.7's ``Producer.getPartition`` does.

    A ``None`` key always goes to ``random_partitioner`` (whatever
    ``partitioner`` is); an index that is not an int in ``[0, n)`` raises
    ``InvalidPartitionError``, as does an empty ``partitions``.
    """
    n = len(partitions)
    if n <= 0:
        raise InvalidPartitionError("no partitions to choose from")
    chooser = random_partitioner if key is None else partitioner
    index = chooser(key, n)
    if type(index) is not int or not 0 <= index < n:
        raise InvalidPartitionError(f"partitioner returned {index!r}; valid range is [0, {n - 1}]")
    return partitions[index]
