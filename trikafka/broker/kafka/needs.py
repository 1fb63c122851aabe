"""What each family of Kafka handlers needs of its broker (docs/protocol.md §16, docs/architecture.md).

A handler's first parameter is typed with the narrowest Protocol here that has what it reads:
``PartitionWrites`` for Produce, ``PartitionReads`` for Fetch and the offset apis,
``ClusterApis`` for Metadata, ``TopicAdministration`` for the topic and config apis,
``GroupApis``, ``TransactionApis``, ``MarkerApis``, ``AclApis``, ``ScramApis``.  Each is made of
the small collaborator Protocols below it (the verifier, the group and transaction coordinators,
the topic creation) and the ``Authorizing`` every handler shares.  ``KafkaService``
(``service.py``) satisfies them all; the type check proves it where the api table names each
handler, so a handler that reaches past its Protocol fails ``scripts/typecheck``.  A new handler
takes the Protocol of its family, or a new one here made of the members it reads.
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
    from ..dynamic_config import BrokerSettings
    from ..entity_configs import EntityConfigStore
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

    async def reassign(self, topic: str, partition: int, target: tuple[int, ...]) -> None: ...

    async def cancel_reassignment(self, topic: str, partition: int) -> None: ...

    async def ask_unclean_election(self, topic: str, partition: int) -> None: ...

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


class Authorizing(Protocol):
    """What every handler checks a request against (§18.3)."""

    @property
    def authorizer(self) -> Authorizer: ...


class PartitionLookup(Protocol):
    """A partition a Kafka request names, as the engine holds it (§16.4, §16.6)."""

    def topic_format(self, topic: str) -> str | None:
        """``"v2"``, ``"0.7"``, or None for a topic this broker does not know."""

    def partition_count(self, topic: str) -> int | None:
        """``topic``'s partition count, None for a topic this broker does not know."""

    async def partition_for(self, topic: str, index: int, *, write: bool) -> Partition | ErrorCode:
        """The partition, or the Kafka error that answers a request naming it."""


class PeerReach(Protocol):
    """This broker's calls to the others (§18.5): who is who, and the connections to them."""

    @property
    def broker_id(self) -> int: ...

    @property
    def peer_connections(self) -> PeerConnections: ...

    def kafka_brokers(self) -> list[BrokerAddress]: ...


class PartitionReads(Authorizing, Protocol):
    """Fetch, ListOffsets, OffsetForLeaderEpoch, DescribeProducers: a partition's read view, the
    engine's waiters and metrics, a worker thread for the segment reads."""

    @property
    def engine(self) -> Engine: ...

    @property
    def run_blocking(self) -> RunBlocking: ...

    async def read_view(self, topic: str, index: int, current_leader_epoch: int) -> ReadView | ErrorCode: ...


class PartitionWrites(Authorizing, PartitionLookup, Protocol):
    """Produce: the engine's append, the KIP-890 verifier, the topic's timestamp type and policy."""

    @property
    def engine(self) -> Engine: ...

    @property
    def clock_ms(self) -> Callable[[], int]: ...

    @property
    def verifier(self) -> TransactionVerifier | None: ...

    def log_start_offset(self, partition: Partition) -> int: ...

    def timestamp_type(self, topic: str) -> str: ...

    def compacts(self, topic: str) -> bool: ...


class ClusterApis(Authorizing, Protocol):
    """ApiVersions, Metadata, DescribeCluster: the brokers, the cluster id, the topics known here,
    and Metadata's auto-creation (§16.5)."""

    @property
    def broker_id(self) -> int: ...

    @property
    def cluster_id(self) -> str: ...

    @property
    def engine(self) -> Engine: ...  # its topic admin describes a topic (engine/metadata.py)

    @property
    def topics(self) -> TopicCreation: ...

    def kafka_brokers(self) -> list[BrokerAddress]: ...

    def controller_id(self) -> int: ...

    def topic_names(self) -> list[str]: ...

    def topic_format(self, topic: str) -> str | None: ...


class TopicAdministration(Authorizing, Protocol):
    """CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs, Alter*Configs."""

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def topics(self) -> TopicCreation: ...

    def topic_format(self, topic: str) -> str | None: ...

    async def delete_topic(self, topic: str) -> None: ...


class GroupApis(Authorizing, PartitionLookup, Protocol):
    """FindCoordinator, the group membership, offset and admin apis, TxnOffsetCommit (§17, §19.5.4)."""

    @property
    def groups(self) -> GroupCoordination: ...

    @property
    def transactions(self) -> TransactionCoordination | None: ...  # FindCoordinator of a transactional id

    @property
    def verifier(self) -> TransactionVerifier | None: ...

    @property
    def clock_ms(self) -> Callable[[], int]: ...


class ConsumerGroupApis(GroupApis, Protocol):
    """ConsumerGroupHeartbeat, ConsumerGroupDescribe (§17.9): the group apis, and the topics a
    subscription names (the broker's settings, its topic admin, the topics it knows)."""

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def engine(self) -> Engine: ...

    def topic_names(self) -> list[str]: ...


class TransactionApis(Authorizing, PartitionLookup, Protocol):
    """InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, DescribeTransactions,
    ListTransactions (§19.5)."""

    @property
    def transactions(self) -> TransactionCoordination | None: ...

    @property
    def groups(self) -> GroupCoordination: ...  # AddOffsetsToTxn: the group's offsets partition

    @property
    def producer_ids(self) -> ProducerIds: ...


class MarkerApis(Authorizing, Protocol):
    """WriteTxnMarkers (§19.6)."""

    @property
    def markers(self) -> TransactionMarkers: ...


class AclApis(Authorizing, Protocol):
    """DescribeAcls, CreateAcls, DeleteAcls (§18.3)."""

    async def read_acls(self) -> AclSet: ...

    async def update_acls(self, edit: Edit) -> AclSet: ...


class ConfigsHost(TopicAdministration, Protocol):
    """The configs apis' broker: its topics, and its entities and dynamic settings (§20.1, §20.4)."""

    @property
    def broker_id(self) -> int: ...

    @property
    def entity_configs(self) -> EntityConfigStore: ...

    @property
    def broker_settings(self) -> BrokerSettings: ...


class ScramApis(Authorizing, Protocol):
    """DescribeUserScramCredentials, AlterUserScramCredentials (§18.2)."""

    @property
    def credential_store(self) -> CredentialStore: ...
