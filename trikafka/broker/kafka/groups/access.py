"""The group apis' authorization (docs/protocol.md §18.3): the table's check, then the coordinator."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from trikafka.kafka.apis import KafkaApi

from ..acl.model import CLUSTER_NAME, ResourceType
from ..needs import Authorizing, GroupApis
from .state import OffsetsPartition


def group_denied(service: Authorizing, api: KafkaApi, group_id: str) -> ErrorCode | None:
    """The error that refuses ``api`` on the group (``GROUP_AUTHORIZATION_FAILED``), or None."""
    return service.authorizer.denied(api, group_id, ResourceType.GROUP)


def lists_every_group(service: Authorizing, api: KafkaApi) -> bool:
    """Whether the principal may see every group (Describe on the Cluster), so ListGroups filters none."""
    return service.authorizer.denied(api, CLUSTER_NAME, ResourceType.CLUSTER) is None


def topic_denied(service: Authorizing, api: KafkaApi, topic: str) -> ErrorCode | None:
    """The error that refuses ``api`` on a topic it names (``TOPIC_AUTHORIZATION_FAILED``), or None."""
    return service.authorizer.denied(api, topic, ResourceType.TOPIC)


async def group_partition(service: GroupApis, api: KafkaApi, group_id: str) -> OffsetsPartition | ErrorCode:
    """The offsets partition holding ``group_id``, or the error answering ``api``: the principal's
    denial first, then the coordinator's (not coordinator, loading)."""
    denied = group_denied(service, api, group_id)
    if denied is not None:
        return denied
    return await service.groups.partition_of(group_id)
