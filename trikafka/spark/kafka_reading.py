"""Planning and reading Kafka-format partitions for the source's Kafka mode (docs/protocol.md §16.6, §19.6).

The driver side (``KafkaPlanner``) asks Metadata for the topics and leaders
and ListOffsets for each partition's earliest offset and its end: at
``read_committed`` (isolation level 1) the last stable offset, else the high
watermark.  A task (``read_range``) fetches ``[start, end)`` of one partition
from its leader at the same isolation level and yields Arrow record batches:
control batches are never rows, aborted transactions' records are skipped
(``trikafka.kafka.read_committed``), and because offsets have gaps
(markers, aborted records, compaction) a read ends when its fetch position
reaches ``end``, never after a count of rows.
"""

from __future__ import annotations

import datetime
import logging
import re
from dataclasses import dataclass
from typing import Any, Iterator

from kio.schema.errors import ErrorCode

from trikafka.client.errors import BrokerProtocolError
from trikafka.client.kafka import schema
from trikafka.client.kafka.client import ClusterMetadata, _cluster_metadata
from trikafka.client.kafka.errors import KafkaOffsetOutOfRange, check
from trikafka.client.addresses import parse_broker_addresses
from trikafka.kafka.apis import KafkaApi
from trikafka.kafka.batch import CONTROL
from trikafka.kafka.read_committed import committed_batches
from trikafka.kafka.records import decode_batches

from .kafka_connection import BlockingKafkaConnection
from .kafka_options import EARLIEST, LATEST, READ_COMMITTED, KafkaSourceOptions, OffsetsOption, TopicPartition
from .options import OptionError

log = logging.getLogger("trikafka.spark")
INTERNAL_TOPIC = re.compile(r"__.*")  # __consumer_offsets, __transaction_state: never matched by a pattern
_FETCH_MAX_WAIT = datetime.timedelta(milliseconds=100)
_ROWS_PER_BATCH = 10_000


class KafkaPlanningError(RuntimeError):
    """The Kafka cluster cannot answer what the plan needs (a missing topic or partition, lost data)."""


@dataclass(frozen=True, slots=True)
class KafkaRange:
    """One partition's offsets ``[start, end)`` and its leader's Kafka listener when planned."""

    topic: str
    partition: int
    start: int
    end: int
    host: str
    port: int


class KafkaPlanner:
    """The driver's view of a Kafka-protocol cluster: topics, leaders, offsets; ``with`` closes it."""

    def __init__(self, options: KafkaSourceOptions):
        self.options = options
        self._connections: dict[tuple[str, int], BlockingKafkaConnection] = {}
        self.metadata = ClusterMetadata(None, -1, {}, {})

    def __enter__(self) -> KafkaPlanner:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        connections, self._connections = list(self._connections.values()), {}
        for connection in connections:
            connection.close()

    def _connection(self, host: str, port: int) -> BlockingKafkaConnection:
        found = self._connections.get((host, port))
        if found is None:
            found = self._connections[(host, port)] = BlockingKafkaConnection(
                host, port, timeout_s=self.options.timeout_s)
        return found

    def _any_connection(self) -> BlockingKafkaConnection:
        errors = []
        for address in parse_broker_addresses(self.options.bootstrap):
            try:
                return self._connection(address.host, address.port)
            except ConnectionError as exc:
                errors.append(str(exc))
        raise KafkaPlanningError(f"no bootstrap broker reachable: {'; '.join(errors)}")

    def refresh(self) -> ClusterMetadata:
        """Ask Metadata for every topic (not creating any) and keep the answer."""
        answer = self._any_connection().request(
            KafkaApi.METADATA, topics=None, allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False, include_topic_authorized_operations=False)
        self.metadata = _cluster_metadata(answer)
        return self.metadata

    def partitions(self, *, require: bool) -> list[TopicPartition]:
        """The partitions the options select; with ``require``, a named topic or partition that
        does not exist (or a pattern matching nothing) is a ``KafkaPlanningError``."""
        topics = self.refresh().topics
        options = self.options
        if options.assign:
            missing = [f"{t}-{p}" for t, p in options.assign if p not in getattr(topics.get(t), "partitions", {})]
            if missing and require:
                raise KafkaPlanningError(f"assigned partitions do not exist: {', '.join(missing)}")
            return [tp for tp in options.assign if f"{tp[0]}-{tp[1]}" not in missing]
        if options.topic_pattern is not None:
            names = [t for t in topics if not INTERNAL_TOPIC.fullmatch(t) and options.selects(t)]
            if not names and require:
                raise KafkaPlanningError(f"no topic matches subscribePattern {options.topic_pattern!r}")
        else:
            names = list(options.topics)
            missing = [t for t in names if t not in topics or topics[t].error_code != ErrorCode.none]
            if missing and require:
                raise KafkaPlanningError(f"topics do not exist: {', '.join(missing)}")
            names = [t for t in names if t not in missing]
        return sorted((t, p) for t in names for p in topics[t].partitions)

    def leader(self, tp: TopicPartition) -> tuple[str, int]:
        """The host and Kafka port of ``tp``'s leader in the last Metadata answer."""
        info = self.metadata.topics[tp[0]].partitions.get(tp[1]) if tp[0] in self.metadata.topics else None
        node = None if info is None else self.metadata.brokers.get(info.leader_id)
        if node is None:
            raise KafkaPlanningError(f"{tp[0]}-{tp[1]} has no leader")
        return node.host, node.port

    def list_offsets(self, tps: list[TopicPartition], timestamp: int) -> dict[TopicPartition, int]:
        """``EARLIEST`` or ``LATEST`` (the last stable offset at read_committed) of each partition."""
        return {tp: list_offset(self._connection(*self.leader(tp)), self.options.isolation_level, tp, timestamp)
                for tp in tps}

    def resolve(self, spec: OffsetsOption, tps: list[TopicPartition], name: str) -> dict[TopicPartition, int]:
        """Each partition's offset under ``spec``, -2/-1 resolved; an explicit offset below the log
        start is data loss (an error with ``failOnDataLoss``, else the log start)."""
        explicit = dict(spec.explicit)
        if spec.is_explicit:
            missing = [f"{t}-{p}" for t, p in tps if (t, p) not in explicit]
            if missing:
                raise OptionError(f"{name} names specific offsets, so it must name every partition read; "
                                  f"missing: {', '.join(missing)}")
        wanted = {tp: explicit.get(tp, spec.default) for tp in tps}
        earliest = self.list_offsets(tps, EARLIEST)
        latest = self.list_offsets([tp for tp, o in wanted.items() if o != EARLIEST], LATEST)
        resolved: dict[TopicPartition, int] = {}
        for tp, offset in wanted.items():
            if offset == EARLIEST:
                resolved[tp] = earliest[tp]
            elif offset == LATEST:
                resolved[tp] = latest[tp]
            else:
                resolved[tp] = self._within(tp, offset, earliest[tp], latest[tp])
        return resolved

    def _within(self, tp: TopicPartition, offset: int, earliest: int, latest: int) -> int:
        if offset < earliest:
            message = f"{tp[0]}-{tp[1]}: offset {offset} was deleted (the log starts at {earliest})"
            if self.options.fail_on_data_loss:
                raise KafkaPlanningError(message + "; set failOnDataLoss=false to read from the log start")
            log.warning("%s; reading from the log start", message)
            return earliest
        return min(offset, latest) if offset > latest else offset

    def ranges(self, start: dict[TopicPartition, int], end: dict[TopicPartition, int]) -> list[KafkaRange]:
        """One range per partition with data between ``start`` and ``end``, at its leader."""
        ranges = []
        for tp in sorted(end):
            first = start.get(tp, end[tp])
            if end[tp] > first:
                host, port = self.leader(tp)
                ranges.append(KafkaRange(tp[0], tp[1], first, end[tp], host, port))
        return ranges


def read_range(options: KafkaSourceOptions, planned: KafkaRange) -> Iterator[Any]:
    """A task body: the rows of ``planned`` as Arrow RecordBatches (Any: pyarrow's, untyped)."""
    from .kafka_columns import KafkaBatchBuilder

    builder = KafkaBatchBuilder(planned.topic, planned.partition, options.include_headers)
    position = planned.start
    with BlockingKafkaConnection(planned.host, planned.port, timeout_s=options.timeout_s) as conn:
        while position < planned.end:
            try:
                data, aborted, available_end = _fetch(conn, options, planned, position)
            except KafkaOffsetOutOfRange:
                position = _after_lost_data(conn, options, planned, position)
                continue
            batches = list(decode_batches(data))
            if not batches:
                if available_end <= position:
                    raise KafkaPlanningError(f"{planned.topic}-{planned.partition} ends at {available_end}, "
                                        f"before the planned end {planned.end} (the log was truncated)")
                continue  # the leader's long poll ended before data reached the reader
            kept = committed_batches(batches, aborted) if options.isolation_level == READ_COMMITTED else \
                (b for b in batches if not b[0].attributes & CONTROL)
            rows = [(header, record) for header, records in kept for record in records
                    if position <= record.offset < planned.end]
            # Every batch (control, aborted, compacted-away offsets) moves the position past it.
            position = max(position, batches[-1][0].next_offset)
            for first in range(0, len(rows), _ROWS_PER_BATCH):
                yield builder.build(rows[first:first + _ROWS_PER_BATCH])


def _fetch(conn: BlockingKafkaConnection, options: KafkaSourceOptions, planned: KafkaRange,
           position: int) -> tuple[bytes, list[tuple[int, int]], int]:
    """One Fetch at ``position``: its records, aborted transactions, and the end a reader
    at this isolation level may reach (the last stable offset or the high watermark)."""
    answer = conn.request(
        KafkaApi.FETCH, replica_id=-1, max_wait=_FETCH_MAX_WAIT, min_bytes=1,
        max_bytes=options.partition_fetch_bytes, isolation_level=options.isolation_level, session_id=0,
        session_epoch=-1, forgotten_topics_data=(), rack_id="",
        topics=[{"topic": planned.topic, "partitions": [{
            "partition": planned.partition, "fetch_offset": position, "current_leader_epoch": -1,
            "log_start_offset": -1, "last_fetched_epoch": -1,
            "partition_max_bytes": options.partition_fetch_bytes}]}])
    for topic_answer in schema.field(answer, "responses", ()):
        for part in topic_answer.partitions:
            if int(part.partition_index) != planned.partition:
                continue
            if part.error_code == ErrorCode.offset_out_of_range:
                raise KafkaOffsetOutOfRange(planned.topic, planned.partition, position)
            check(part.error_code, f"fetch from {planned.topic}-{planned.partition}")
            aborted = [(int(a.producer_id), int(a.first_offset)) for a in part.aborted_transactions or ()]
            end = int(part.last_stable_offset) if options.isolation_level == READ_COMMITTED and \
                int(part.last_stable_offset) >= 0 else int(part.high_watermark)
            return bytes(part.records or b""), aborted, end
    raise BrokerProtocolError(f"the Fetch answer does not name {planned.topic}-{planned.partition}")


def _after_lost_data(conn: BlockingKafkaConnection, options: KafkaSourceOptions, planned: KafkaRange,
                     position: int) -> int:
    """Where a read goes on after retention deleted ``position``: the log start, unless
    ``failOnDataLoss`` (then an error)."""
    message = f"{planned.topic}-{planned.partition}: offset {position} is no longer in the log"
    if options.fail_on_data_loss:
        raise KafkaPlanningError(message + "; set failOnDataLoss=false to skip lost data")
    offset = list_offset(conn, options.isolation_level, (planned.topic, planned.partition), EARLIEST)
    log.warning("%s; going on at %d", message, offset)
    return max(position, offset)


def list_offset(conn: BlockingKafkaConnection, isolation_level: int, tp: TopicPartition, timestamp: int) -> int:
    """ListOffsets of one partition at its leader: ``EARLIEST``, or ``LATEST`` (at isolation level 1
    the last stable offset, §19.6)."""
    answer = conn.request(
        KafkaApi.LIST_OFFSETS, replica_id=-1, isolation_level=isolation_level,
        topics=[{"name": tp[0], "partitions": [{"partition_index": tp[1], "timestamp": timestamp,
                                               "current_leader_epoch": -1}]}])
    for topic_answer in schema.field(answer, "topics", ()):
        for part in topic_answer.partitions:
            if int(part.partition_index) == tp[1]:
                check(part.error_code, f"list offsets of {tp[0]}-{tp[1]}")
                return int(part.offset)
    raise BrokerProtocolError(f"the ListOffsets answer does not name {tp[0]}-{tp[1]}")
