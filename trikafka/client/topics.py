"""How many partitions a topic has on a broker: METADATA, or the FETCH probe on 0.7.

docs/protocol.md §9.4.  A trikafka broker answers METADATA.  A plain 0.7
broker closes the connection on it (``ExtensionNotSupported``); the client then
reconnects and probes: FETCH answers WrongPartition (3) exactly for partitions
outside ``[0, partitions(topic))`` and Unknown (-1) for a name the broker
rejects, and a MULTIFETCH part of ``maxSize`` 0 reads nothing and creates
nothing, so a batch of such parts asks about many partitions at once.

The decisions live in the I/O-free ``PartitionProbe`` and ``counts_from_*``
helpers; ``partition_counts`` (Trio) and the blocking Spark client
(``trikafka.spark.blocking_client.partition_counts``) only move the bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

from trikafka.wire import ErrorCode, FetchPart, Metadata

from .errors import ExtensionNotSupported

if TYPE_CHECKING:
    from .connection import Connection

PROBE_BATCH = 64  # partitions asked about per MULTIFETCH
MAX_PROBED_PARTITIONS = 4096  # the probe stops here: no 0.7 setup has more


@dataclass(frozen=True, slots=True)
class TopicPartitions:
    """What a broker says about one topic.

    ``count`` is its partition count (0 when ``error`` is not 0).  ``error`` is
    NO_ERROR, INVALID_TOPIC (the broker rejects the name) or UNKNOWN_TOPIC
    (METADATA only).  ``exists`` is None after a probe: a 0.7 broker gives every
    valid name ``num.partitions`` partitions, so it cannot say.  ``kafka_format``
    comes from ``kafka_format_partitions`` (always False from a plain 0.7 broker).
    """

    topic: str
    count: int
    error: ErrorCode = ErrorCode.NO_ERROR
    exists: bool | None = True
    kafka_format: bool = False  # some partition is Kafka-format (§16.6): 0.7 requests cannot read or write it


@dataclass(frozen=True, slots=True)
class PartitionCounts:
    """Partition counts of the topics asked, and what else the broker told (METADATA only)."""

    topics: Mapping[str, TopicPartitions]
    metadata: Metadata | None  # None: a plain 0.7 broker, counts from the probe

    @property
    def max_message_size(self) -> int | None:
        """The broker's ``max.message.size``, when it answered METADATA."""
        return self.metadata.max_message_size if self.metadata is not None else None


class PartitionProbe:
    """The FETCH probe for one topic, without I/O.

    Loop: send a MULTIFETCH of ``parts()``, give the per-part error codes to
    ``feed``; stop when ``result`` is not None.
    """

    def __init__(self, topic: str, *, batch: int = PROBE_BATCH, limit: int = MAX_PROBED_PARTITIONS):
        self.topic = topic
        self._batch = batch
        self._limit = limit
        self._first = 0
        self.result: TopicPartitions | None = None

    def parts(self) -> list[FetchPart]:
        """The next batch: partitions from the first not yet asked, offset 0, maxSize 0."""
        assert self.result is None, "the probe is finished"
        last = min(self._first + self._batch, self._limit)
        return [FetchPart(self.topic, p, 0, 0) for p in range(self._first, last)]

    def feed(self, errors: Sequence[ErrorCode]) -> None:
        """Record the error codes the broker answered for ``parts()``, in order."""
        for offset, code in enumerate(errors):
            if code == ErrorCode.UNKNOWN:  # the broker rejects the name (FETCH row 1)
                self.result = TopicPartitions(self.topic, 0, ErrorCode.INVALID_TOPIC, exists=False)
                return
            if code == ErrorCode.WRONG_PARTITION:
                self.result = TopicPartitions(self.topic, self._first + offset, exists=None)
                return
        self._first += len(errors)
        if self._first >= self._limit:
            self.result = TopicPartitions(self.topic, self._limit, exists=None)


def counts_from_metadata(metadata: Metadata, topics: Iterable[str]) -> PartitionCounts:
    """``PartitionCounts`` from a METADATA answer (all its topics when ``topics`` is empty)."""
    wanted = list(topics) or [t.topic for t in metadata.topics]
    found: dict[str, TopicPartitions] = {}
    for name in wanted:
        record = metadata.topic(name)
        if record is None or record.error != ErrorCode.NO_ERROR:
            error = record.error if record is not None else ErrorCode.UNKNOWN_TOPIC
            found[name] = TopicPartitions(name, 0, error, exists=False)
        else:
            found[name] = TopicPartitions(name, record.partition_count)
    return PartitionCounts(found, metadata)


async def kafka_format_partitions(conn: Connection, partitions: Iterable[tuple[str, int]]) -> set[tuple[str, int]]:
    """The ``(topic, partition)`` pairs of ``partitions`` that are Kafka-format (docs/protocol.md §16.6).

    One MULTIFETCH of ``maxSize`` 0 parts at offset 0: a Kafka-format partition answers
    WrongFormat (27), any other part reads nothing and creates nothing (§9.4's probe), and
    unlike OFFSETS, which closes the connection on a Kafka-format partition, it keeps the
    connection usable.
    """
    parts = [FetchPart(topic, partition, 0, 0) for topic, partition in partitions]
    if not parts:
        return set()
    results = await conn.multifetch(parts)
    return {(part.topic, part.partition) for part, result in zip(parts, results)
            if result.error == ErrorCode.WRONG_FORMAT}


async def probe_partition_count(conn: Connection, topic: str) -> TopicPartitions:
    """The FETCH probe over ``conn`` (works against any 0.7 broker)."""
    probe = PartitionProbe(topic)
    while probe.result is None:
        results = await conn.multifetch(probe.parts())
        probe.feed([r.error for r in results])
    return probe.result


async def partition_counts(host: str, port: int, topics: Iterable[str] = (), *, formats: bool = False,
                           **connect_kwargs) -> PartitionCounts:
    """Partition counts of ``topics`` on the broker at ``host:port``.

    METADATA first; against a plain 0.7 broker, a new connection and the FETCH
    probe.  With no ``topics``, METADATA lists every topic; a 0.7 broker cannot
    list topics, so then the answer is empty and ``metadata`` is None.  With
    ``formats``, each topic's ``kafka_format`` is asked too (``kafka_format_partitions``).
    """
    from .connection import connect  # here: the probe's values above serve blocking readers without Trio

    topics = list(topics)
    try:
        async with await connect(host, port, **connect_kwargs) as conn:
            counts = counts_from_metadata(await conn.metadata(topics), topics)
            if formats:
                kafka = {topic for topic, _partition in await kafka_format_partitions(
                    conn, [(t.topic, p) for t in counts.topics.values() for p in range(t.count)])}
                counts = PartitionCounts({name: replace(t, kafka_format=name in kafka)
                                          for name, t in counts.topics.items()}, counts.metadata)
            return counts
    except ExtensionNotSupported:
        pass
    found = {}
    async with await connect(host, port, **connect_kwargs) as conn:
        for topic in topics:
            found[topic] = await probe_partition_count(conn, topic)
    return PartitionCounts(found, None)
