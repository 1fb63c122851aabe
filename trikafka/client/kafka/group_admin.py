"""Consumer groups over the Apache Kafka protocol, from the outside (docs/protocol.md §17.5–§17.8).

``GroupAdmin`` wraps a ``KafkaClient``: ``coordinator`` asks FindCoordinator,
``list_groups`` asks ListGroups of every broker (each names the groups it
coordinates), and ``describe``, ``committed`` and ``delete`` go to the group's
coordinator, found again when it answers that it no longer is one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Iterable, TypeVar

import trio
from kio.schema.errors import ErrorCode

from trikafka.kafka.apis import KafkaApi
from trikafka.kafka.consumer_protocol import (PROTOCOL_TYPE, ConsumerProtocolError, assigned, decode_assignment,
                                              decode_subscription)

from . import schema
from .client import KafkaClient
from .connection import KafkaConnection
from .errors import KafkaResponseError, check

T = TypeVar("T")
# The answers below are typed Any: each is the kio response class of the negotiated version.
KEY_TYPE_GROUP = 0
# Answers after which the coordinator must be found again (§17.3).
_MOVED = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
                    ErrorCode.coordinator_load_in_progress})


@dataclass(frozen=True)
class ListedGroup:
    """A group as ListGroups names it."""

    group_id: str
    protocol_type: str
    state: str  # "" where the broker's ListGroups version has no state


@dataclass(frozen=True)
class GroupMember:
    """A member as DescribeGroups names it; ``assignment`` and ``subscription`` decoded for a
    ``consumer`` group (topic -> partitions; topics), empty otherwise."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    subscription: tuple[str, ...]
    assignment: dict[str, list[int]]


@dataclass(frozen=True)
class GroupDescription:
    """DescribeGroups' answer for one group."""

    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[GroupMember, ...]


class GroupAdmin:
    """Group administration through ``client``."""

    def __init__(self, client: KafkaClient):
        self.client = client
        self._coordinators: dict[str, int] = {}  # group -> node id, until it moves

    async def coordinator(self, group_id: str) -> int:
        """The node id of ``group_id``'s coordinator (FindCoordinator), retried while none is ready."""
        for attempt in range(self.client.max_retries + 1):
            connection = await self.client.any_connection()
            answer: Any = await connection.request(KafkaApi.FIND_COORDINATOR, key=group_id, key_type=KEY_TYPE_GROUP,
                                              coordinator_keys=(group_id,))
            found = schema.field(answer, "coordinators", None)
            entry = found[0] if found else answer
            code = int(entry.error_code)
            if code == ErrorCode.none:
                self._coordinators[group_id] = int(entry.node_id)
                return int(entry.node_id)
            error = KafkaResponseError(code, f"coordinator of group {group_id}",
                                       schema.field(entry, "error_message"))
            if not error.retriable or attempt == self.client.max_retries:
                raise error
            await trio.sleep(self.client.retry_backoff_s * (attempt + 1))
        raise AssertionError("unreachable: the last attempt raises")

    async def list_groups(self) -> list[ListedGroup]:
        """Every group of the cluster, by id (ListGroups of each broker)."""
        await self.client.refresh_metadata()
        found: dict[str, ListedGroup] = {}
        for node_id in sorted(self.client.metadata.brokers):
            connection = await self.client.node_connection(node_id)
            answer: Any = await connection.request(KafkaApi.LIST_GROUPS, states_filter=())
            check(answer.error_code, f"groups of broker {node_id}")
            for group in answer.groups:
                found[str(group.group_id)] = ListedGroup(str(group.group_id), str(group.protocol_type),
                                                         str(schema.field(group, "group_state", "")))
        return [found[name] for name in sorted(found)]

    async def describe(self, group_id: str) -> GroupDescription:
        """The group's state, protocol and members (DescribeGroups at its coordinator)."""
        async def ask(connection: KafkaConnection) -> GroupDescription:
            answer: Any = await connection.request(KafkaApi.DESCRIBE_GROUPS, groups=(group_id,),
                                              include_authorized_operations=False)
            (group,) = answer.groups
            check(group.error_code, f"group {group_id}", schema.field(group, "error_message"))
            consumer = group.protocol_type == PROTOCOL_TYPE
            return GroupDescription(str(group.group_id), str(group.group_state), str(group.protocol_type),
                                    str(group.protocol_data),
                                    tuple(_member(m, consumer) for m in group.members))
        return await self._at_coordinator(group_id, ask)

    async def committed(self, group_id: str) -> dict[tuple[str, int], int]:
        """Every committed offset of the group: (topic, partition) -> offset (OffsetFetch of all topics)."""
        async def ask(connection: KafkaConnection) -> dict[tuple[str, int], int]:
            answer: Any = await connection.request(KafkaApi.OFFSET_FETCH, group_id=group_id, topics=None,
                                              groups=({"group_id": group_id, "topics": None},),
                                              require_stable=False)
            groups = schema.field(answer, "groups", None)
            entry = groups[0] if groups else answer
            check(entry.error_code, f"offsets of group {group_id}")
            offsets: dict[tuple[str, int], int] = {}
            for topic in entry.topics:
                for part in topic.partitions:
                    check(part.error_code, f"offset of group {group_id} in {topic.name}-{part.partition_index}")
                    if int(part.committed_offset) >= 0:
                        offsets[(str(topic.name), int(part.partition_index))] = int(part.committed_offset)
            return offsets
        return await self._at_coordinator(group_id, ask)

    async def delete(self, group_ids: Iterable[str]) -> dict[str, KafkaResponseError | None]:
        """Delete each group (DeleteGroups at its coordinator); per group, None or the error it answered
        (NON_EMPTY_GROUP while it has members)."""
        results: dict[str, KafkaResponseError | None] = {}
        for group_id in group_ids:
            async def ask(connection: KafkaConnection, group_id: str = group_id) -> None:
                answer: Any = await connection.request(KafkaApi.DELETE_GROUPS, groups_names=(group_id,))
                (result,) = answer.results
                check(result.error_code, f"group {group_id}")
            try:
                await self._at_coordinator(group_id, ask)
                results[group_id] = None
            except KafkaResponseError as exc:
                results[group_id] = exc
        return results

    async def _at_coordinator(self, group_id: str, call: Callable[[KafkaConnection], Awaitable[T]]) -> T:
        """``call`` on the coordinator's connection, finding the coordinator again when it moved."""
        for attempt in range(self.client.max_retries + 1):
            node_id = self._coordinators.get(group_id)
            if node_id is None:
                node_id = await self.coordinator(group_id)
            try:
                return await call(await self.client.node_connection(node_id))
            except KafkaResponseError as exc:
                if exc.error_code not in _MOVED or attempt == self.client.max_retries:
                    raise
            self._coordinators.pop(group_id, None)
            await trio.sleep(self.client.retry_backoff_s * (attempt + 1))
        raise AssertionError("unreachable: the last attempt raises")


def _member(member: object, consumer: bool) -> GroupMember:
    subscription: tuple[str, ...] = ()
    assignment: dict[str, list[int]] = {}
    if consumer:
        try:
            subscription = tuple(str(t) for t in decode_subscription(schema.field(member, "member_metadata")).topics)
            assignment = assigned(decode_assignment(schema.field(member, "member_assignment")))
        except ConsumerProtocolError:
            pass  # shown as nothing: a member's bytes are its client's business
    return GroupMember(str(schema.field(member, "member_id")), schema.field(member, "group_instance_id"),
                       str(schema.field(member, "client_id")), str(schema.field(member, "client_host")),
                       subscription, assignment)
