"""Which operation on which resource each Kafka api needs (docs/protocol.md §18.3, the table).

One entry per api of ``trikafka.kafka.apis``: the checks its handler asks the
authorizer for, each naming the resource type it applies to and the error a
denial answers.  An api absent from the table (ApiVersions) is never checked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from kio.schema.errors import ErrorCode

from trikafka.kafka.apis import KafkaApi

from .model import Operation, ResourceType

TOPIC_DENIED = ErrorCode.topic_authorization_failed  # 29
GROUP_DENIED = ErrorCode.group_authorization_failed  # 30
CLUSTER_DENIED = ErrorCode.cluster_authorization_failed  # 31
TRANSACTIONAL_ID_DENIED = ErrorCode.transactional_id_authorization_failed  # 53


@dataclass(frozen=True)
class Need:
    """``operation`` on a resource of ``resource_type``; ``or_cluster``: the same operation on the
    Cluster also suffices (CreateTopics, auto-creation); ``denied``: what a refusal answers."""

    operation: Operation
    resource_type: ResourceType
    denied: ErrorCode
    or_cluster: bool = False


def _topic(operation: Operation, *, or_cluster: bool = False) -> Need:
    return Need(operation, ResourceType.TOPIC, TOPIC_DENIED, or_cluster)


def _group(operation: Operation) -> Need:
    return Need(operation, ResourceType.GROUP, GROUP_DENIED)


def _transactional_id(operation: Operation) -> Need:
    return Need(operation, ResourceType.TRANSACTIONAL_ID, TRANSACTIONAL_ID_DENIED)


def _cluster(operation: Operation) -> Need:
    return Need(operation, ResourceType.CLUSTER, CLUSTER_DENIED)


# The checks of each api, by resource type: a handler asks for the api and the resource type it
# names (a topic, a group), and the table says which operation that takes.
API_NEEDS: Mapping[KafkaApi, Mapping[ResourceType, Need]] = {
    api: {need.resource_type: need for need in needs} for api, needs in {
        KafkaApi.PRODUCE: (_topic(Operation.WRITE),
                           Need(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, TRANSACTIONAL_ID_DENIED)),
        KafkaApi.FETCH: (_topic(Operation.READ),),
        KafkaApi.LIST_OFFSETS: (_topic(Operation.DESCRIBE),),
        KafkaApi.METADATA: (_topic(Operation.DESCRIBE),),
        KafkaApi.OFFSET_COMMIT: (_group(Operation.READ), _topic(Operation.READ)),
        KafkaApi.OFFSET_FETCH: (_group(Operation.DESCRIBE), _topic(Operation.DESCRIBE)),
        KafkaApi.FIND_COORDINATOR: (_group(Operation.DESCRIBE),
                                    Need(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, TRANSACTIONAL_ID_DENIED)),
        KafkaApi.JOIN_GROUP: (_group(Operation.READ),),
        KafkaApi.HEARTBEAT: (_group(Operation.READ),),
        KafkaApi.LEAVE_GROUP: (_group(Operation.READ),),
        KafkaApi.SYNC_GROUP: (_group(Operation.READ),),
        KafkaApi.DESCRIBE_GROUPS: (_group(Operation.DESCRIBE),),
        KafkaApi.LIST_GROUPS: (_group(Operation.DESCRIBE), _cluster(Operation.DESCRIBE)),
        KafkaApi.CREATE_TOPICS: (_topic(Operation.CREATE, or_cluster=True),),
        KafkaApi.DELETE_TOPICS: (_topic(Operation.DELETE),),
        KafkaApi.DELETE_RECORDS: (_topic(Operation.DELETE),),
        KafkaApi.DESCRIBE_LOG_DIRS: (_cluster(Operation.DESCRIBE),),
        KafkaApi.DESCRIBE_TOPIC_PARTITIONS: (_topic(Operation.DESCRIBE),),
        KafkaApi.ELECT_LEADERS: (_cluster(Operation.ALTER),),
        KafkaApi.ALTER_PARTITION_REASSIGNMENTS: (_cluster(Operation.ALTER),),
        KafkaApi.LIST_PARTITION_REASSIGNMENTS: (_cluster(Operation.DESCRIBE),),
        KafkaApi.ALTER_REPLICA_LOG_DIRS: (_cluster(Operation.ALTER),),
        KafkaApi.OFFSET_FOR_LEADER_EPOCH: (_topic(Operation.DESCRIBE),),
        KafkaApi.DESCRIBE_CONFIGS: (_topic(Operation.DESCRIBE_CONFIGS), _cluster(Operation.DESCRIBE_CONFIGS)),
        KafkaApi.ALTER_CONFIGS: (_topic(Operation.ALTER_CONFIGS), _cluster(Operation.ALTER_CONFIGS)),
        KafkaApi.INCREMENTAL_ALTER_CONFIGS: (_topic(Operation.ALTER_CONFIGS), _cluster(Operation.ALTER_CONFIGS)),
        KafkaApi.CREATE_PARTITIONS: (_topic(Operation.ALTER),),
        KafkaApi.DELETE_GROUPS: (_group(Operation.DELETE),),
        KafkaApi.OFFSET_DELETE: (_group(Operation.DELETE), _topic(Operation.READ)),
        KafkaApi.DESCRIBE_CLUSTER: (_cluster(Operation.DESCRIBE),),
        KafkaApi.DESCRIBE_ACLS: (_cluster(Operation.DESCRIBE),),
        KafkaApi.CREATE_ACLS: (_cluster(Operation.ALTER),),
        KafkaApi.DELETE_ACLS: (_cluster(Operation.ALTER),),
        KafkaApi.DESCRIBE_USER_SCRAM_CREDENTIALS: (_cluster(Operation.DESCRIBE),),
        KafkaApi.ALTER_USER_SCRAM_CREDENTIALS: (_cluster(Operation.ALTER),),
        KafkaApi.DESCRIBE_CLIENT_QUOTAS: (_cluster(Operation.DESCRIBE_CONFIGS),),
        KafkaApi.ALTER_CLIENT_QUOTAS: (_cluster(Operation.ALTER_CONFIGS),),
        KafkaApi.INIT_PRODUCER_ID: (_cluster(Operation.IDEMPOTENT_WRITE),
                                    Need(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, TRANSACTIONAL_ID_DENIED)),
        KafkaApi.ADD_PARTITIONS_TO_TXN: (_transactional_id(Operation.WRITE), _topic(Operation.WRITE),
                                         _cluster(Operation.CLUSTER_ACTION)),  # v4: brokers' calls
        KafkaApi.ADD_OFFSETS_TO_TXN: (_transactional_id(Operation.WRITE), _group(Operation.READ)),
        KafkaApi.END_TXN: (_transactional_id(Operation.WRITE),),
        KafkaApi.TXN_OFFSET_COMMIT: (_transactional_id(Operation.WRITE), _group(Operation.READ),
                                     _topic(Operation.READ)),
        KafkaApi.WRITE_TXN_MARKERS: (_cluster(Operation.CLUSTER_ACTION),),
        KafkaApi.DESCRIBE_TRANSACTIONS: (_transactional_id(Operation.DESCRIBE),),
        KafkaApi.LIST_TRANSACTIONS: (_transactional_id(Operation.DESCRIBE),),
        KafkaApi.DESCRIBE_PRODUCERS: (_topic(Operation.READ),),
        KafkaApi.CONSUMER_GROUP_HEARTBEAT: (_group(Operation.READ), _topic(Operation.DESCRIBE)),
        KafkaApi.CONSUMER_GROUP_DESCRIBE: (_group(Operation.DESCRIBE),),
    }.items()
}
# Auto-creation by Metadata (§16.5) is CreateTopics' check.
AUTO_CREATE = API_NEEDS[KafkaApi.CREATE_TOPICS][ResourceType.TOPIC]
