"""What the Kafka listener's handlers need from their broker (docs/protocol.md §16).

``KafkaService`` (``service.py``) is the one implementation; the handler
modules see only this Protocol, so they never import the service that
dispatches to them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterable, Protocol, Sequence

from kio.schema.errors import ErrorCode

from trikafka.kafka.txn_records import TxnValue
from trikafka.log.verification_guard import VerificationGuard
from trikafka.wire.metadata import BrokerAddress

from ..config import BrokerConfig
from ..engine.partition import Partition, ReadView
from .coordinator_seams import TransactionMarkers

if TYPE_CHECKING:
    from ..engine.engine import Engine
    from trikafka.kafka.group_records import RecordKey, RecordValue

    from ..credentials import CredentialStore
    from ..seams import RunBlocking
    from .acl.authorizer import Authorizer
    from .acl.model import AclSet
    from .acl.store import Edit
    from .peer_connections import PeerConnections
    from .groups.membership import CoordinatorMembership
    from .producer_id_blocks import ProducerIds
    from .groups.state import OffsetsPartition
    from .entities import ConfigRow


class TopicCreation(Protocol):
    """CreateTopics' and CreatePartitions' work (``topics.TopicService``)."""

    async def create(self, topic: str, partitions: int, replication_factor: int, settings: dict[str, str], *,
                     validate_only: bool = False) -> tuple[int, int]: ...

    async def auto_create(self, topics: list[str]) -> dict[str, ErrorCode]: ...

    async def add_partitions(self, topic: str, count: int, *, validate_only: bool) -> None: ...

    def describe(self, topic: str, keys: tuple[str, ...] | None) -> list[ConfigRow]: ...

    def check_alterable(self, topic: str, key: str) -> None: ...

    def effective(self, topic: str, settings: dict[str, str], key: str) -> str: ...

    async def alter(self, topic: str, edit: Callable[[dict[str, str]], dict[str, str]], *,
                    validate_only: bool) -> None: ...

    async def create_internal(self, topic: str, partitions: int, replication_factor: int,
                              settings: dict[str, str]) -> None: ...


class TopicRegistry(Protocol):
    """The ZooKeeper side of topic administration (``registry.KafkaRegistry``)."""

    async def create_topic(self, topic: str, partitions: int, replication_factor: int, settings: dict[str, str], *,
                           validate_only: bool) -> tuple[int, int]: ...

    async def delete_topic(self, topic: str) -> None: ...

    async def add_partitions(self, topic: str, count: int) -> None: ...

    async def has_07_consumers(self, group_id: str) -> bool: ...

    async def alter_topic_config(self, topic: str, change: Callable[[dict[str, str], bool], dict[str, str]]
                                 ) -> dict[str, str]: ...


class GroupCoordination(Protocol):
    """The group coordinator (``groups.coordinator.GroupCoordinator``, §17.3) as handlers reach it."""

    @property
    def membership(self) -> CoordinatorMembership: ...

    def loaded(self) -> list[OffsetsPartition]: ...

    async def coordinator_of(self, group_id: str) -> BrokerAddress | ErrorCode: ...

    async def clash(self, group_id: str) -> str | None: ...

    async def partition_of(self, group_id: str) -> OffsetsPartition | ErrorCode: ...

    async def write(self, groups: OffsetsPartition,
                    records: Sequence[tuple[RecordKey, RecordValue | None]]) -> ErrorCode: ...

    async def write_transactional(self, groups: OffsetsPartition, producer_id: int, producer_epoch: int,
                                  records: Sequence[tuple[RecordKey, RecordValue | None]],
                                  guard: VerificationGuard | None) -> ErrorCode: ...

    def partition_index(self, group_id: str) -> int | None: ...


class TransactionVerifier(Protocol):
    """KIP-890's check on a transactional Produce (§19.6): the coordinator's word that the partition
    is in the producer's ongoing transaction (``transactions``, §19.5)."""

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int, topic: str,
                     partition: int) -> ErrorCode:
        """NONE when the partition was added to the producer's ongoing transaction at this epoch."""


class TransactionCoordination(TransactionVerifier, Protocol):
    """The transaction coordinator as the transaction apis see it (``transactions.coordinator``, §19.5)."""

    async def coordinator_of(self, transactional_id: str) -> BrokerAddress | ErrorCode:
        """FindCoordinator key type 1: the leader of the id's ``__transaction_state`` partition."""

    async def init_producer_id(self, tid: str, timeout_ms: int,
                               expected: tuple[int, int] | None = None) -> tuple[ErrorCode, int, int]:
        """InitProducerId with a transactional id: (error, producer id, epoch)."""

    async def add_partitions(self, tid: str, producer_id: int, producer_epoch: int,
                             partitions: Iterable[tuple[str, int]]) -> ErrorCode:
        """AddPartitionsToTxn (AddOffsetsToTxn: the group's ``__consumer_offsets`` partition)."""

    async def end_transaction(self, tid: str, producer_id: int, producer_epoch: int, commit: bool) -> ErrorCode:
        """EndTxn: NONE once the decision is written."""

    async def describe(self, transactional_id: str) -> TxnValue | ErrorCode:
        """DescribeTransactions: the id's committed state, or the error it answers."""

    def listing(self) -> tuple[ErrorCode, list[tuple[str, TxnValue]]]:
        """ListTransactions: the ids coordinated here, by id, with the error of the whole answer."""


class KafkaContext(Protocol):
    """One broker as its Kafka handlers see it."""

    engine: Engine  # the partitions, topics, waiters and metrics both listeners share (broker/engine/)
    config: BrokerConfig
    clock_ms: Callable[[], int]
    broker_id: int
    cluster_id: str
    topics: TopicCreation
    registry: TopicRegistry | None
    transactions: TransactionCoordination | None  # None: no transaction coordinator (a bare test service)
    verifier: TransactionVerifier | None  # the partition side's KIP-890 check (§19.5.7); None with no coordinator
    run_blocking: RunBlocking
    authorizer: Authorizer
    peer_connections: PeerConnections  # how this broker's own calls reach other brokers (§18.5)
    credential_store: CredentialStore  # the SCRAM users (§18.2)

    @property
    def groups(self) -> GroupCoordination: ...

    @property
    def producer_ids(self) -> ProducerIds: ...

    @property
    def markers(self) -> TransactionMarkers: ...

    def kafka_brokers(self) -> list[BrokerAddress]: ...

    def controller_id(self) -> int: ...

    def topic_names(self) -> list[str]: ...

    def topic_format(self, topic: str) -> str | None: ...

    async def partition_for(self, topic: str, index: int, *, write: bool) -> Partition | ErrorCode: ...

    def log_start_offset(self, partition: Partition) -> int: ...

    async def read_view(self, topic: str, index: int, current_leader_epoch: int) -> ReadView | ErrorCode: ...

    def stored_settings(self, topic: str) -> dict[str, str]: ...

    def timestamp_type(self, topic: str) -> str: ...

    def compacts(self, topic: str) -> bool: ...

    async def delete_topic(self, topic: str) -> None: ...

    async def wait_topic_known(self, topic: str) -> None: ...

    async def wait_settings_seen(self, topic: str, settings: dict[str, str], timeout_s: float) -> None: ...

    async def read_acls(self) -> AclSet: ...

    async def update_acls(self, edit: Edit) -> AclSet: ...
