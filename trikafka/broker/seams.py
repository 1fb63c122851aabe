"""What the broker's request path depends on, as ``typing.Protocol``s.

The engine (``engine/``), the 0.7 request handler, the replicated
partitions (``replication/``) and the flusher are written against
these, not against the classes that implement them (``trikafka.log.Log``,
``LogManager``, ``FlushScheduler``, ``Replication``), so a
test can hand any of them a small fake and mypy checks both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable, Mapping, Protocol, Sequence, Sized

from trikafka.log.config import LogConfig
from trikafka.log.epochs import EpochFile
from trikafka.log.flushing import Flushing
from trikafka.log.kafka_offsets import KafkaOffsets
from trikafka.log.log import AppendResult, Log
from trikafka.log.passes import Passes
from trikafka.log.producer_state import ProducerStates
from trikafka.log.record_format import OffsetAssignment
from trikafka.log.segment_list import SegmentView
from trikafka.log.truncation import Truncation
from trikafka.log.verification_guard import VerificationGuard
from trikafka.wire.metadata import BrokerAddress
from trikafka.wire.replication import EpochEndOffsetRequest, ReplicaFetchRequest
from trikafka.wire.responses import Chunk, ChunkSequence, FileRegion

from .engine.errors import EngineError
from .engine.metadata import TopicView
from .replication.isr import LeaderPartition

if TYPE_CHECKING:
    from trikafka.log.fs import FileSystem
    from trikafka.zk.replication_values import PartitionState, TopicAssignment

# How a blocking call leaves the event loop: ``await run_blocking(fn)`` runs ``fn()`` in a
# worker thread (tests: inline) and returns what it returns.  The broker hands it many kinds
# of ``fn`` (log loads, fsyncs, stats, unlinks), so the result stays ``Any``.
RunBlocking = Callable[..., Awaitable[Any]]

__all__ = ["AppendResult", "RunBlocking", "BrokerLog", "LogDirectory", "Flusher", "Replica", "Replicas"]


@dataclass(frozen=True, slots=True)
class KafkaAppend:
    """A Kafka-protocol append (§16.6): the leader numbers the batches; ``append_time_ms``
    is set under ``message.timestamp.type=LogAppendTime``; ``transactional``: a verified
    transaction's batches, ``markers``: the leader's own transaction markers (§19.6);
    ``guard``: the verification guard of the check that admitted the transaction (§19.5.7)."""

    append_time_ms: int | None = None
    transactional: bool = False
    markers: bool = False
    guard: VerificationGuard | None = None

    def assignment(self, leader_epoch: int) -> OffsetAssignment:
        """How the leader of ``leader_epoch`` numbers and admits these batches."""
        return OffsetAssignment(leader_epoch, self.append_time_ms, self.transactional, self.markers, self.guard)


class BrokerLog(Protocol):
    """One partition's log as the broker appends to, reads, flushes, rolls and truncates it (``Log``)."""

    topic: str
    partition: int
    dir_path: str
    config: LogConfig
    crc_checked_from: int | None
    cleanable_end: Callable[[], int] | None

    @property
    def start_offset(self) -> int: ...

    @property
    def visible_end(self) -> int: ...

    @property
    def end_offset(self) -> int: ...

    @property
    def record_format(self) -> str: ...  # "0.7" or "v2" (docs/protocol.md §16.6)

    @property
    def segments(self) -> SegmentView: ...

    @property
    def flush_in_flight(self) -> bool: ...

    @property
    def passes(self) -> Passes: ...  # background passes' leases; retired by a deletion (docs/protocol.md §16.4)

    @property
    def cleaning(self) -> bool: ...

    @property
    def flushing(self) -> Flushing: ...  # flush and roll tickets (docs/protocol.md §7.2)

    @property
    def truncation(self) -> Truncation: ...  # begin, complete, busy (docs/protocol.md §12.11)

    def append(self, data: bytes | bytearray | memoryview, *, assign: OffsetAssignment | None = None) -> AppendResult: ...

    @property
    def kafka_offsets(self) -> KafkaOffsets: ...

    @property
    def producers(self) -> ProducerStates: ...

    def expire_producers(self) -> list[int]: ...  # producer.id.expiration.ms (docs/protocol.md §19.2.1)

    def roll_due(self) -> bool: ...

    def read(self, offset: int, max_bytes: int, *, end: int | None = None) -> FileRegion | ChunkSequence | None: ...

    def offsets_before(self, time_ms: int, max_offsets: int, now_ms: int | None = None) -> list[int]: ...

    def add_visible_listener(self, callback: Callable[[BrokerLog], None]) -> None: ...

    def add_dirty_listener(self, callback: Callable[[BrokerLog], None]) -> None: ...

    def add_idle_listener(self, callback: Callable[[BrokerLog], None]) -> None: ...


class LogDirectory(Protocol):
    """The broker's logs and topic counts (``LogManager``)."""

    log_dir: str
    fs: FileSystem
    clock_ms: Callable[[], int]
    recovered: bool | None

    def get(self, topic: str, partition: int) -> BrokerLog | None: ...

    def logs(self) -> Sequence[BrokerLog]: ...

    def topics(self) -> Iterable[str]: ...

    def check_partition(self, topic: str, partition: int) -> None: ...

    # A log is made (in a worker thread) and then added: the same concrete ``Log`` both ways.
    def make_log(self, topic: str, partition: int) -> Log: ...

    def add(self, log: Log) -> None: ...

    def partitions_for(self, topic: str) -> int: ...

    def configured_partitions(self, topic: str) -> int: ...

    def raise_partition_count(self, topic: str, partitions: int) -> None: ...

    def config_for(self, topic: str) -> LogConfig: ...

    def remove_topic(self, topic: str) -> list[Log]: ...

    def delete_log(self, log: Log) -> None: ...

    def override_topic_config(self, topic: str, config: LogConfig | None) -> None: ...


class Flusher(Protocol):
    """Flushes, rolls and truncations off the loop (``FlushScheduler``, docs/protocol.md §7.2)."""

    @property
    def log_clock_ms(self) -> Callable[[], int]: ...

    def track(self, log: BrokerLog) -> None: ...

    def request_flush(self, log: BrokerLog) -> None: ...

    async def flush(self, log: BrokerLog) -> None: ...

    def restructuring(self, log: BrokerLog) -> bool: ...

    async def roll_if_due(self, log: BrokerLog) -> None: ...

    async def truncate(self, log: BrokerLog, offset: int) -> None: ...


class Replica(Protocol):
    """This broker's replica of one replicated partition, as clients' requests use it (``HostedPartition``)."""

    @property
    def role(self) -> str: ...

    @property
    def key(self) -> tuple[str, int]: ...

    @property
    def log(self) -> BrokerLog: ...

    @property
    def leader(self) -> LeaderPartition | None: ...

    def consumer_end(self) -> int: ...

    def check_acks_all(self) -> EngineError: ...

    @property
    def leader_epoch(self) -> int: ...

    @property
    def epochs(self) -> EpochFile: ...

    async def append_as_leader(self, messages: bytes | bytearray, *, kafka: KafkaAppend | None = None) -> AppendResult: ...

    async def replica_fetch(self, request: ReplicaFetchRequest) -> list[Chunk]: ...

    def epoch_end_offset(self, request: EpochEndOffsetRequest) -> bytes: ...

    def log_start_moved(self) -> None: ...  # DeleteRecords moved the leader's log start: tell the followers now


class Replicas(Protocol):
    """This broker's replicated topics and the replicas it holds (``replication.view.ReplicationView``, §12)."""

    @property
    def topics(self) -> Mapping[str, TopicAssignment]: ...

    @property
    def states(self) -> Mapping[tuple[str, int], PartitionState]: ...

    @property
    def hosted(self) -> Mapping[tuple[str, int], Replica]: ...

    def is_replicated(self, topic: str) -> bool: ...

    def partition_count(self, topic: str) -> int | None: ...

    def topic_metadata(self, topic: str) -> TopicView | None: ...

    def peers(self) -> list[BrokerAddress]: ...


class ConnectionCounts(Protocol):
    """A processor, as the metrics count its connections (``processor.Processor``)."""

    @property
    def connections(self) -> Sized: ...

    @property
    def connections_served(self) -> int: ...


class ElectionCount(Protocol):
    """The controller's counters, as the metrics read them."""

    @property
    def elections(self) -> int: ...


class ControllerStatus(Protocol):
    """The controller, as the metrics read it (``replication.controller.Controller``)."""

    @property
    def active(self) -> bool: ...

    @property
    def stats(self) -> ElectionCount: ...


class ReplicationStatus(Protocol):
    """This broker's replication, as the metrics read it (``replication.manager.Replication``)."""

    @property
    def hosted(self) -> Mapping[tuple[str, int], Replica]: ...

    @property
    def states(self) -> Mapping[tuple[str, int], PartitionState]: ...

    @property
    def isr_changes(self) -> int: ...

    @property
    def controller(self) -> ControllerStatus: ...
