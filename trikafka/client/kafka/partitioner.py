"""Which partition a record goes to: Kafka's default partitioner for keyed records.

A keyed record goes to ``(murmur2(key) & 0x7fffffff) % partitions``, as the
Java client's and librdkafka's ``murmur2_random`` partitioners put it, so
records with one key land in one partition whichever client produced them.
A record without a key takes the topic's partitions in turn.
"""

from __future__ import annotations

import itertools

_SEED = 0x9747B28C
_M = 0x5BD1E995
_R = 24
_MASK32 = 0xFFFFFFFF
_POSITIVE = 0x7FFFFFFF


def murmur2(data: bytes) -> int:
    """MurmurHash2 (32 bit, Kafka's seed) of ``data`` as an unsigned 32-bit integer."""
    length = len(data)
    h = (_SEED ^ length) & _MASK32
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * _M) & _MASK32
        k ^= k >> _R
        k = (k * _M) & _MASK32
        h = ((h * _M) & _MASK32) ^ k
    tail = data[whole:]
    if len(tail) == 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if tail:
        h ^= tail[0]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h


def key_partition(key: bytes, partitions: int) -> int:
    """The partition of a keyed record among ``partitions`` (Kafka's default)."""
    return (murmur2(key) & _POSITIVE) % partitions


class DefaultPartitioner:
    """Keyed records by ``key_partition``; records without a key round robin, per topic."""

    def __init__(self) -> None:
        self._turns: dict[str, itertools.count[int]] = {}

    def partition(self, topic: str, key: bytes | None, partitions: int) -> int:
        """The partition of one record of ``topic`` with ``key`` among ``partitions``."""
        if key is not None:
            return key_partition(key, partitions)
        return next(self._turns.setdefault(topic, itertools.count())) % partitions
