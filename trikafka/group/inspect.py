"""What a consumer group looks like now: members, owners, committed offsets, log ends, lag.

The registry part (``describe_group``) reads ZooKeeper only; ``measure_lag``
asks each partition's broker for its visible end with OFFSETS (docs/protocol.md §5.5); a
partition of a replicated topic (named ``<p>``, docs/protocol.md §12.9) asks
its current leader.
This is what 0.7's ``ConsumerOffsetChecker`` printed, as data.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from trikafka.client import ClientError, LeaderDirectory, connect, latest_offset
from trikafka.zk import paths
from trikafka.zk.client import ZooKeeperClient
from trikafka.zk.errors import NoNodeError
from trikafka.zk.registry_values import parse_broker_registration, parse_partition_count
from trikafka.zk.replication_store import read_assignment
from trikafka.zk.replication_values import ReplicationValueError

from .registry import (
    RegistryValueError,
    TopicCount,
    decode_offset,
    decode_owner,
    decode_topic_count,
    parse_partition_name,
)


@dataclass(frozen=True, slots=True)
class PartitionLag:
    """One partition of a topic the group consumes (or has consumed)."""

    topic: str
    partition: str  # "<broker>-<partition>"
    owner: str | None  # owning thread id, None when nobody owns it
    committed: int | None  # committed next offset, None when nothing was committed
    log_end: int | None = None  # visible end at the broker, None when unknown
    error: str | None = None  # why log_end is unknown

    @property
    def lag_bytes(self) -> int | None:
        """Bytes between the committed offset and the visible end (0.7 offsets are bytes)."""
        if self.log_end is None:
            return None
        return self.log_end - (self.committed or 0)


@dataclass(frozen=True, slots=True)
class GroupLagReport:
    group: str
    members: dict[str, TopicCount | str]  # consumer id -> subscription (or why it is unreadable)
    partitions: list[PartitionLag] = field(default_factory=list)


async def list_groups(zk: ZooKeeperClient) -> dict[str, int]:
    """Every group under ``/consumers`` with its number of live members."""
    try:
        groups = await zk.children(paths.CONSUMERS)
    except NoNodeError:
        return {}
    result = {}
    for group in groups:
        try:
            result[group] = len(await zk.children(paths.consumer_ids(group)))
        except NoNodeError:
            result[group] = 0
    return result


async def _children(zk: ZooKeeperClient, path: str) -> list[str]:
    try:
        return await zk.children(path)
    except NoNodeError:
        return []


async def _get(zk: ZooKeeperClient, path: str) -> bytes | None:
    try:
        data, _stat = await zk.get(path)
        return data
    except NoNodeError:
        return None


async def describe_group(zk: ZooKeeperClient, group: str) -> GroupLagReport:
    """Members and, for every topic the group subscribes to, owns or has offsets for,
    each registered partition's owner and committed offset."""
    base = paths.consumer_group(group)
    members: dict[str, TopicCount | str] = {}
    for member in await _children(zk, paths.consumer_ids(group)):
        data = await _get(zk, f"{base}/ids/{member}")
        if data is None:
            continue
        try:
            members[member] = decode_topic_count(data)
        except RegistryValueError as exc:
            members[member] = f"unreadable: {exc}"
    broker_topics = await _children(zk, paths.broker_topics())
    topics = set(await _children(zk, f"{base}/owners")) | set(await _children(zk, f"{base}/offsets"))
    for subscription in members.values():
        if not isinstance(subscription, str):
            topics |= set(subscription.streams_per_topic(broker_topics))
    partitions = []
    for topic in sorted(topics):
        names = set(await _children(zk, f"{base}/owners/{topic}"))
        names |= set(await _children(zk, f"{base}/offsets/{topic}"))
        for broker in await _children(zk, f"{paths.BROKER_TOPICS}/{topic}"):
            count = await _get(zk, f"{paths.BROKER_TOPICS}/{topic}/{broker}")
            try:
                names |= {f"{broker}-{p}" for p in range(parse_partition_count(count or b""))}
            except ValueError:
                continue
        try:
            assignment = await read_assignment(zk, topic)
        except ReplicationValueError:
            assignment = None
        if assignment is not None:
            names |= {paths.partition_name(None, p) for p in range(len(assignment.replicas))}
        for name in sorted(names, key=_partition_sort_key):
            owner = await _get(zk, f"{base}/owners/{topic}/{name}")
            offset = await _get(zk, f"{base}/offsets/{topic}/{name}")
            partitions.append(PartitionLag(
                topic, name, None if owner is None else decode_owner(owner),
                None if offset is None else decode_offset(offset)))
    return GroupLagReport(group, members, partitions)


def _partition_sort_key(name: str) -> tuple[float, float | str]:
    try:
        broker, part = parse_partition_name(name)
    except RegistryValueError:
        return (float("inf"), name)
    return (-1 if broker is None else broker, part)


async def measure_lag(zk: ZooKeeperClient, description: GroupLagReport,
                      connect_timeout_s: float = 5.0) -> GroupLagReport:
    """The description with each partition's visible end asked from its broker."""
    addresses: dict[int, tuple[str, int] | str] = {}
    for state in description.partitions:
        try:
            broker_id, _part = parse_partition_name(state.partition)
        except RegistryValueError:
            continue
        if broker_id is not None and broker_id not in addresses:
            data = await _get(zk, paths.broker_id(broker_id))
            try:
                info = parse_broker_registration(data) if data is not None else None
            except ValueError as exc:
                addresses[broker_id] = f"bad registration: {exc}"
                continue
            addresses[broker_id] = (info.host, info.port) if info else "broker not registered"
    by_broker: dict[int, list[int]] = {}
    replicated: list[int] = []
    for index, state in enumerate(description.partitions):
        try:
            broker_id, _part = parse_partition_name(state.partition)
        except RegistryValueError:
            continue
        if broker_id is None:
            replicated.append(index)
        else:
            by_broker.setdefault(broker_id, []).append(index)
    partitions = list(description.partitions)
    if replicated:
        await _replicated_lag(zk, partitions, replicated, connect_timeout_s)
    for broker_id, indexes in by_broker.items():
        address = addresses.get(broker_id)
        if not isinstance(address, tuple):
            for i in indexes:
                partitions[i] = replace(partitions[i], error=str(address))
            continue
        try:
            async with await connect(*address, connect_timeout_s=connect_timeout_s,
                                     request_timeout_s=connect_timeout_s) as conn:
                for i in indexes:
                    _broker, part = parse_partition_name(partitions[i].partition)
                    try:
                        end = await latest_offset(conn, partitions[i].topic, part)
                        partitions[i] = replace(partitions[i], log_end=end)
                    except ClientError as exc:
                        partitions[i] = replace(partitions[i], error=str(exc))
        except (ClientError, OSError) as exc:
            for i in indexes:
                partitions[i] = replace(partitions[i], error=f"broker {broker_id}: {exc}")
    return replace(description, partitions=partitions)


async def _replicated_lag(zk: ZooKeeperClient, partitions: list[PartitionLag], indexes: list[int],
                          timeout_s: float) -> None:
    """Log ends of replicated partitions, asked of each one's current leader (METADATA first)."""
    bootstrap = []
    for child in await _children(zk, paths.BROKER_IDS):
        data = await _get(zk, f"{paths.BROKER_IDS}/{child}")
        try:
            info = parse_broker_registration(data) if data is not None else None
        except ValueError:
            continue
        if info is not None:
            bootstrap.append((info.host, info.port))
    leaders = LeaderDirectory(bootstrap, connect_kwargs=dict(connect_timeout_s=timeout_s, request_timeout_s=timeout_s))
    for i in indexes:
        topic, (_none, part) = partitions[i].topic, parse_partition_name(partitions[i].partition)
        try:
            address = await leaders.leader_address(topic, part, timeout_s=timeout_s)
            async with await connect(*address, connect_timeout_s=timeout_s, request_timeout_s=timeout_s) as conn:
                partitions[i] = replace(partitions[i], log_end=await latest_offset(conn, topic, part))
        except (ClientError, OSError) as exc:
            partitions[i] = replace(partitions[i], error=f"leader of {topic}-{part}: {exc}")
