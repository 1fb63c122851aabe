"""The Kafka listener in ZooKeeper mode (docs/protocol.md §16.1, §16.4, §16.7).

* peers: every broker's Kafka port, from the ``kafka_port`` field of its
  ``/trikafka/brokers/<id>`` (written by replication's membership);
* the cluster id in ``/trikafka/cluster-id``, created by the first broker
  that needs it;
* CreateTopics: a replicated topic (§12.12.2) with ``record.format=v2``;
  DeleteTopics and CreatePartitions change its znodes (§16.4).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
from types import MappingProxyType
from typing import Awaitable, Callable, Iterator, Mapping

import trio
from kio.schema.errors import ErrorCode

from trikafka.wire.metadata import BrokerAddress
from trikafka.zk import paths
from trikafka.zk.client import ZooKeeperClient
from trikafka.zk.errors import ZooKeeperClientError, NodeExistsError, NoNodeError
from trikafka.zk.registry import live_brokers
from trikafka.zk.replication_store import (TopicExistsError, add_assigned_partitions, create_assigned_topic,
                                          delete_replicated_topic)
from trikafka.zk.replication_values import TopicAssignment
from trikafka.zk.topic_config_store import update_topic_config

from ..replication.assignment import AssignmentError, assign_replicas
from ..replication.reassign import cancel_reassignment, start_reassignment
from .cluster import new_cluster_id
from .topics import TopicError


logger = logging.getLogger(__name__)

# An exception -> the Kafka error it answers and its message (None: the exception's own).
Refusals = Mapping[type[Exception], tuple[ErrorCode, str | None]]
NO_REFUSALS: Refusals = MappingProxyType({})


@contextlib.contextmanager
def as_topic_errors(refusals: Refusals = NO_REFUSALS) -> Iterator[None]:
    """Raise what the body raises as ``TopicError``, Kafka's answer: an exception of ``refusals`` (the
    first class that matches, in order) as its code, any other ZooKeeper failure UNKNOWN_SERVER_ERROR;
    a ``TopicError`` passes."""
    try:
        yield
    except TopicError:
        raise
    except Exception as exc:
        refusal = next((r for kind, r in refusals.items() if isinstance(exc, kind)), None)
        if refusal is not None:
            raise TopicError(refusal[0], str(exc) if refusal[1] is None else refusal[1]) from None
        if isinstance(exc, ZooKeeperClientError):
            raise TopicError(ErrorCode.unknown_server_error, f"ZooKeeper: {exc}") from None
        raise


def _not_replicated(topic: str) -> tuple[ErrorCode, str]:
    """DeleteTopics and CreatePartitions of a topic without replication znodes."""
    return ErrorCode.invalid_request, (f"{topic!r} is not a replicated topic: a 0.7 topic's partitions "
                                       f"live on each broker separately")


CLUSTER_ID_PATH = f"{paths.TRIKAFKA}/cluster-id"


async def zookeeper_cluster_id(zk: ZooKeeperClient) -> str:
    """The cluster's id in ZooKeeper, made by the first broker that asks (§16.7)."""
    try:
        await zk.create(CLUSTER_ID_PATH, new_cluster_id().encode(), makepath=True)
    except NodeExistsError:
        pass
    return (await zk.get(CLUSTER_ID_PATH))[0].decode()


class KafkaRegistry:
    """One broker's view of the other brokers' Kafka listeners, and its topic creation."""

    def __init__(self, zk: ZooKeeperClient, wait_topic_known: Callable[[str], Awaitable[None]], *,
                 default_replication_factor: int = 1):
        self._wait_topic_known = wait_topic_known  # a created topic is answered once this broker sees it
        # default.replication.factor: a -1 factor's, capped at the live brokers (§16.4)
        self._default_factor = default_replication_factor
        self._zk = zk
        self._peers: dict[int, BrokerAddress] = {}

    def peers(self) -> list[BrokerAddress]:
        return sorted(self._peers.values())

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Keep the peers' Kafka addresses current until cancelled."""
        started = False
        await self._zk.ensure_path(paths.REPLICATION_BROKERS)
        async for children in self._zk.watch_children(paths.REPLICATION_BROKERS):
            found: dict[int, BrokerAddress] = {}
            for child in children or ():
                address = await self._read(child)
                if address is not None:
                    found[address.broker_id] = address
            self._peers = found
            if not started:
                task_status.started()
                started = True

    async def _read(self, child: str) -> BrokerAddress | None:
        try:
            broker_id = int(child)
            data, _ = await self._zk.get(paths.replication_broker(broker_id))
            fields = json.loads(data)
            kafka_port = fields.get("kafka_port")
            if not isinstance(kafka_port, int):
                return None
            return BrokerAddress(broker_id, str(fields["host"]), kafka_port)
        except (ValueError, KeyError, TypeError, NoNodeError):
            return None

    async def create_topic(self, topic: str, partitions: int, replication_factor: int, settings: dict[str, str], *,
                           validate_only: bool) -> tuple[int, int]:
        live = await live_brokers(self._zk)
        factor = min(self._default_factor, len(live)) if replication_factor == -1 else replication_factor
        with as_topic_errors({AssignmentError: (ErrorCode.invalid_replication_factor, None)}):
            replicas = assign_replicas(set(live), partitions, factor)
        if validate_only:
            return partitions, factor
        with as_topic_errors({TopicExistsError: (ErrorCode.topic_already_exists, f"topic {topic!r} already exists")}):
            await create_assigned_topic(self._zk, topic, TopicAssignment(replicas, settings))
        logger.info("created Kafka-format topic %s: %d partitions, replication factor %d", topic, partitions, factor)
        await self._wait_topic_known(topic)
        return partitions, factor

    async def alter_topic_config(self, topic: str, change: Callable[[dict[str, str], bool], dict[str, str]]
                                 ) -> dict[str, str]:
        """Alter*Configs in ZooKeeper mode (§16.4): the topic's settings become ``change(current, replicated)``
        by the versioned write `trikafka topics alter` does; every broker's watch applies them.  The
        settings written; ``change`` may raise TopicError to give up."""
        with as_topic_errors():
            return (await update_topic_config(self._zk, topic, change)).config

    async def reassign(self, topic: str, partition: int, target: tuple[int, ...]) -> None:
        """AlterPartitionReassignments of one partition (§16.4): the move `trikafka topics reassign`
        starts (§12.12.3); raises TopicError with Kafka's error."""
        with as_topic_errors({AssignmentError: (ErrorCode.invalid_replica_assignment, None)}):
            started = await start_reassignment(self._zk, topic, partition, target)
        if started is None:
            raise TopicError(ErrorCode.invalid_request, f"{topic!r} is not a replicated topic")
        if started[1]:
            logger.info("%s-%d: moving to %s", topic, partition, list(target))

    async def cancel_reassignment(self, topic: str, partition: int) -> None:
        """AlterPartitionReassignments' cancel of one partition (§16.4, §12.12.3); raises TopicError with
        Kafka's error (NO_REASSIGNMENT_IN_PROGRESS when it is not moving)."""
        with as_topic_errors({AssignmentError: (ErrorCode.invalid_request, None)}):
            undone = await cancel_reassignment(self._zk, topic, partition)
        if undone is None:
            raise TopicError(ErrorCode.invalid_request, f"{topic!r} is not a replicated topic")
        if not undone:
            raise TopicError(ErrorCode.no_reassignment_in_progress, f"{topic}-{partition} is not moving")
        logger.info("%s-%d: move cancelled", topic, partition)

    async def ask_unclean_election(self, topic: str, partition: int) -> None:
        """ElectLeaders' unclean election of one partition (§16.4): the request znode the controller
        answers (§12.7); raises TopicError if ZooKeeper fails."""
        # NodeExistsError: asked already; the controller's next pass answers both.
        with as_topic_errors(), contextlib.suppress(NodeExistsError):
            await self._zk.create(paths.unclean_election(topic, partition), b"", makepath=True)

    async def has_07_consumers(self, group_id: str) -> bool:
        """Whether 0.7 consumers of ``group_id`` are registered under ``/consumers/<group>/ids`` (§17.7)."""
        try:
            path = paths.consumer_ids(group_id)
        except ValueError:  # a group id 0.7 cannot register (a '/' in it, ...)
            return False
        try:
            return bool(await self._zk.children(path))
        except (NoNodeError, ZooKeeperClientError):
            return False

    async def delete_topic(self, topic: str) -> None:
        """DeleteTopics in ZooKeeper mode (§16.4): the topic's znodes go in one transaction; every
        broker deletes its own logs once its watch sees them gone."""
        with as_topic_errors({NoNodeError: _not_replicated(topic)}):
            await delete_replicated_topic(self._zk, topic)
        logger.info("deleted Kafka-format topic %s", topic)

    async def add_partitions(self, topic: str, count: int) -> None:
        """CreatePartitions in ZooKeeper mode (§16.4): the new partitions' replicas by §12.12.2's round
        robin at the topic's replication factor, written with their first states in one transaction."""
        live = await live_brokers(self._zk)

        def grow(current: TopicAssignment) -> TopicAssignment:
            old = len(current.replicas)
            if count <= old:
                raise TopicError(ErrorCode.invalid_partitions, f"{topic!r} has {old} partitions; the count can "
                                                                f"only grow")
            factor = len(current.replicas[0]) if current.replicas else min(self._default_factor, len(live))
            planned = assign_replicas(set(live), count, factor)
            return dataclasses.replace(current, replicas=current.replicas + planned[old:])

        with as_topic_errors({NoNodeError: _not_replicated(topic),
                              AssignmentError: (ErrorCode.invalid_replication_factor, None)}):
            await add_assigned_partitions(self._zk, topic, grow)
        logger.info("topic %s grown to %d partitions", topic, count)
