"""The api table of the Kafka-protocol listener (docs/protocol.md §16.3), sans I/O.

One ``KafkaApi`` member per api this listener serves: its key, the versions a
client may send and the first flexible version.  The request and response
bodies are Apache Kafka's own message schemas, as ``kio`` models them; the
classes of one version are loaded once and cached.

``trikafka.wire.apis.ProtocolTable`` is not reused: its ``Api`` entries carry
one request class and body codecs over 0.7's field cursor, and registering a
member writes a ``type`` attribute on that class, whereas a Kafka api has one
``kio`` class per version and ``kio`` is its codec.
"""

from __future__ import annotations

import enum
import functools

from kio.index import load_request_schema, load_response_schema
from kio.schema.api_versions.v0.response import ApiVersion as ApiVersionV0
from kio.schema.api_versions.v1.response import ApiVersion as ApiVersionV1
from kio.schema.api_versions.v2.response import ApiVersion as ApiVersionV2
from kio.schema.api_versions.v3.response import ApiVersion as ApiVersionV3
from kio.schema.api_versions.v4.response import ApiVersion as ApiVersionV4
from kio.static.primitive import i16
from kio.static.protocol import RequestPayload, ResponsePayload

ApiVersionEntry = ApiVersionV0 | ApiVersionV1 | ApiVersionV2 | ApiVersionV3 | ApiVersionV4
_API_VERSION_CLASSES: dict[int, type[ApiVersionEntry]] = {
    0: ApiVersionV0, 1: ApiVersionV1, 2: ApiVersionV2, 3: ApiVersionV3, 4: ApiVersionV4,
}


class KafkaApi(enum.IntEnum):
    """The apis of §16.3; a member's int is its ``api_key``.

    ``min_version .. max_version`` are the versions clients use, the range
    ApiVersions names; ``flexible_from`` the first that uses flexible encoding
    (compact fields, tagged fields, request header v2, §16.2).
    ``broker_max_version`` (``max_version`` unless the entry says otherwise)
    is the highest version the listener accepts: above ``max_version`` for a
    version only brokers send each other, not advertised because a client
    that saw it would infer a newer Kafka than §16.3's (AddPartitionsToTxn v4,
    §19.5.7).
    """

    min_version: int
    max_version: int
    flexible_from: int
    broker_max_version: int

    def __new__(cls, key: int, min_version: int, max_version: int, flexible_from: int,
                broker_max_version: int | None = None) -> KafkaApi:
        member = int.__new__(cls, key)
        member._value_ = key
        member.min_version = min_version
        member.max_version = max_version
        member.flexible_from = flexible_from
        member.broker_max_version = max_version if broker_max_version is None else broker_max_version
        return member

    # name = (key, min_version, max_version, flexible_from[, broker_max_version])
    PRODUCE = (0, 3, 9, 9)
    FETCH = (1, 4, 12, 12)
    LIST_OFFSETS = (2, 1, 7, 6)
    METADATA = (3, 0, 12, 9)
    OFFSET_COMMIT = (8, 2, 9, 8)
    OFFSET_FETCH = (9, 1, 9, 6)
    FIND_COORDINATOR = (10, 0, 4, 3)
    JOIN_GROUP = (11, 0, 7, 6)
    HEARTBEAT = (12, 0, 4, 4)
    LEAVE_GROUP = (13, 0, 4, 4)
    SYNC_GROUP = (14, 0, 5, 4)
    DESCRIBE_GROUPS = (15, 0, 5, 5)
    LIST_GROUPS = (16, 0, 5, 3)
    SASL_HANDSHAKE = (17, 0, 1, 2)
    API_VERSIONS = (18, 0, 4, 3)
    CREATE_TOPICS = (19, 2, 7, 5)
    DELETE_TOPICS = (20, 1, 6, 4)
    DELETE_RECORDS = (21, 0, 2, 2)
    INIT_PRODUCER_ID = (22, 0, 4, 2)
    ADD_PARTITIONS_TO_TXN = (24, 0, 3, 3, 4)  # v4: brokers' verify_only calls (§19.5.7)
    ADD_OFFSETS_TO_TXN = (25, 0, 3, 3)
    END_TXN = (26, 0, 3, 3)
    WRITE_TXN_MARKERS = (27, 1, 1, 1)
    TXN_OFFSET_COMMIT = (28, 0, 3, 3)
    OFFSET_FOR_LEADER_EPOCH = (23, 2, 4, 4)
    DESCRIBE_ACLS = (29, 1, 2, 2)
    CREATE_ACLS = (30, 1, 2, 2)
    DELETE_ACLS = (31, 1, 2, 2)
    DESCRIBE_CONFIGS = (32, 1, 4, 4)
    ALTER_CONFIGS = (33, 0, 2, 2)
    ALTER_REPLICA_LOG_DIRS = (34, 1, 2, 2)
    DESCRIBE_LOG_DIRS = (35, 1, 4, 2)
    SASL_AUTHENTICATE = (36, 0, 2, 2)
    CREATE_PARTITIONS = (37, 0, 3, 2)
    DELETE_GROUPS = (42, 0, 2, 2)
    ELECT_LEADERS = (43, 0, 2, 2)
    INCREMENTAL_ALTER_CONFIGS = (44, 0, 1, 1)
    ALTER_PARTITION_REASSIGNMENTS = (45, 0, 0, 0)
    LIST_PARTITION_REASSIGNMENTS = (46, 0, 0, 0)
    OFFSET_DELETE = (47, 0, 0, 1)
    DESCRIBE_CLIENT_QUOTAS = (48, 0, 1, 1)
    ALTER_CLIENT_QUOTAS = (49, 0, 1, 1)
    DESCRIBE_USER_SCRAM_CREDENTIALS = (50, 0, 0, 0)
    ALTER_USER_SCRAM_CREDENTIALS = (51, 0, 0, 0)
    DESCRIBE_PRODUCERS = (61, 0, 0, 0)
    DESCRIBE_CLUSTER = (60, 0, 1, 0)
    DESCRIBE_TRANSACTIONS = (65, 0, 0, 0)
    LIST_TRANSACTIONS = (66, 0, 0, 0)
    CONSUMER_GROUP_HEARTBEAT = (68, 0, 1, 0)
    CONSUMER_GROUP_DESCRIBE = (69, 0, 1, 0)
    DESCRIBE_TOPIC_PARTITIONS = (75, 0, 0, 0)

    @property
    def label(self) -> str:
        """The api's name as Kafka spells it (``ListOffsets``), for logs and metrics."""
        return "".join(word.capitalize() for word in self.name.split("_"))

    def supports(self, version: int) -> bool:
        """Whether the listener accepts ``version`` of this api (a client's, or a broker's own)."""
        return self.min_version <= version <= self.broker_max_version

    def flexible(self, version: int) -> bool:
        """Whether ``version`` of this api uses flexible encoding."""
        return version >= self.flexible_from

    def request_class(self, version: int) -> type[RequestPayload]:
        """The ``kio`` class of this api's request body at a served ``version``."""
        self._check(version)
        return _request_class(int(self), version)

    def response_class(self, version: int) -> type[ResponsePayload]:
        """The ``kio`` class of this api's response body at a served ``version``."""
        self._check(version)
        return _response_class(int(self), version)

    def _check(self, version: int) -> None:
        if not self.supports(version):
            raise ValueError(f"{self.label} v{version} is not served (v{self.min_version}-v{self.broker_max_version})")


KRAFT_ONLY = ("a KRaft controller's or quorum's api, sent by brokers and controllers, not clients; "
              "trikafka's brokers coordinate through ZooKeeper (§8, §12)")
_SHARE = "share groups (KIP-932) are not built"
_TOKENS = "delegation tokens (KIP-48) are not built"
_STREAMS = "the Streams group protocol (KIP-1071) is not built; Kafka Streams uses classic groups"

# Every other api of Apache Kafka 4.1 (the apis kio models), by key: its name as Kafka spells it
# and why this listener does not serve it (§16.3's second table).  Invariant: its keys and
# KafkaApi's are disjoint and together every key kio knows.
NOT_SERVED: dict[int, tuple[str, str]] = {
    38: ("CreateDelegationToken", "delegation tokens (KIP-48) are not built; SCRAM and PLAIN are (§18.2)"),
    39: ("RenewDelegationToken", _TOKENS),
    40: ("ExpireDelegationToken", _TOKENS),
    41: ("DescribeDelegationToken", _TOKENS),
    52: ("Vote", KRAFT_ONLY),
    53: ("BeginQuorumEpoch", KRAFT_ONLY),
    54: ("EndQuorumEpoch", KRAFT_ONLY),
    55: ("DescribeQuorum", "there is no KRaft quorum: the cluster's metadata lives in ZooKeeper (§8, §12)"),
    56: ("AlterPartition", KRAFT_ONLY),
    57: ("UpdateFeatures", "no feature flags (KIP-584): each release serves the fixed table above"),
    58: ("Envelope", KRAFT_ONLY),
    59: ("FetchSnapshot", KRAFT_ONLY),
    62: ("BrokerRegistration", KRAFT_ONLY),
    63: ("BrokerHeartbeat", KRAFT_ONLY),
    64: ("UnregisterBroker", "brokers register in ZooKeeper, and a stopped broker's node goes with its session (§8)"),
    67: ("AllocateProducerIds", "brokers take blocks of producer ids from ZooKeeper (§19.1)"),
    70: ("ControllerRegistration", KRAFT_ONLY),
    71: ("GetTelemetrySubscriptions", "client metrics (KIP-714) are not built; clients take the api's absence as no subscription"),
    72: ("PushTelemetry", "client metrics (KIP-714) are not built"),
    73: ("AssignReplicasToDirs", KRAFT_ONLY),
    74: ("ListConfigResources", "not yet: client-metrics resources are not built"),
    76: ("ShareGroupHeartbeat", _SHARE),
    77: ("ShareGroupDescribe", _SHARE),
    78: ("ShareFetch", _SHARE),
    79: ("ShareAcknowledge", _SHARE),
    80: ("AddRaftVoter", KRAFT_ONLY),
    81: ("RemoveRaftVoter", KRAFT_ONLY),
    82: ("UpdateRaftVoter", KRAFT_ONLY),
    83: ("InitializeShareGroupState", _SHARE),
    84: ("ReadShareGroupState", _SHARE),
    85: ("WriteShareGroupState", _SHARE),
    86: ("DeleteShareGroupState", _SHARE),
    87: ("ReadShareGroupStateSummary", _SHARE),
    88: ("StreamsGroupHeartbeat", _STREAMS),
    89: ("StreamsGroupDescribe", _STREAMS),
    90: ("DescribeShareGroupOffsets", _SHARE),
    91: ("AlterShareGroupOffsets", _SHARE),
    92: ("DeleteShareGroupOffsets", _SHARE),
}


def lookup(api_key: int) -> KafkaApi | None:
    """The table's entry for ``api_key``, None for an api this listener does not serve."""
    return _BY_KEY.get(api_key)


_BY_KEY: dict[int, KafkaApi] = {int(api): api for api in KafkaApi}


def api_versions_entries(version: int) -> tuple[ApiVersionEntry, ...]:
    """The table as the ``api_keys`` of an ApiVersions response of ``version`` (0-4), by key: each
    api's ``min_version .. max_version`` (brokers' own versions are not named)."""
    return _api_versions_entries(version)


@functools.cache
def _api_versions_entries(version: int) -> tuple[ApiVersionEntry, ...]:
    entry = _API_VERSION_CLASSES[version]
    return tuple(entry(api_key=i16(int(api)), min_version=i16(api.min_version),
                       max_version=i16(api.max_version))
                 for api in KafkaApi)


@functools.cache
def _request_class(api_key: int, version: int) -> type[RequestPayload]:
    return load_request_schema(api_key, version)


@functools.cache
def _response_class(api_key: int, version: int) -> type[ResponsePayload]:
    return load_response_schema(api_key, version)
