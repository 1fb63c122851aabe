"""Transaction markers on partitions (docs/protocol.md §19.6).

``MarkerWriter.write_markers`` appends a COMMIT or ABORT marker to each named
partition this broker leads, with acks -1, and answers each partition's
error; the WriteTxnMarkers api (27) serves it to coordinators on other
brokers.  ``RoutedMarkers`` is what a transaction coordinator (§19.5) calls:
each partition goes to its leader, here or through WriteTxnMarkers.  A
partition whose leader cannot take the marker answers an error (its leader
moved, the peer is unreachable); the coordinator asks again.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Protocol, Sequence

import trio
from kio.schema.errors import ErrorCode
from kio.schema.types import ProducerId, TopicName
from kio.schema.write_txn_markers.v1.request import (WritableTxnMarker, WritableTxnMarkerTopic,
                                                      WriteTxnMarkersRequest)
from kio.static.primitive import i16, i32

from trikafka.kafka.apis import KafkaApi
from trikafka.kafka.framing import Request
from trikafka.kafka.markers import build_marker

from ..engine.engine import ACKS_ALL, Engine, PartitionWrite
from ..engine.errors import EngineError
from ..seams import AppendResult, KafkaAppend
from .needs import MarkerApis, PartitionLookup, PeerReach
from .entities import Reply
from .errors import kafka_error, refused_set_error
from .peer_call import PeerCallError, peer_call

logger = logging.getLogger(__name__)

MARKER_ACK_TIMEOUT_S = 30.0  # how long a marker waits for the ISR before it answers REQUEST_TIMED_OUT

TopicPartition = tuple[str, int]
# Called once a marker is acknowledged: (topic, partition, producer id, commit, marker offset).
MarkerListener = Callable[[str, int, int, bool, int], None]


class MarkerHost(PartitionLookup, Protocol):
    """What ``MarkerWriter`` needs of its broker: the partitions, the engine's append, the clock."""

    @property
    def engine(self) -> Engine: ...

    @property
    def clock_ms(self) -> Callable[[], int]: ...


class MarkerRoutes(PeerReach, Protocol):
    """What ``RoutedMarkers`` needs of its broker: the other brokers, and each partition's leader."""

    @property
    def engine(self) -> Engine: ...  # its topic admin names a partition's leader


class MarkerWriter:
    """Appends transaction markers to partitions this broker leads."""

    def __init__(self, service: MarkerHost, listeners: list[MarkerListener]):
        self._service = service
        self.listeners = listeners  # the group coordinator's pending offsets (§19.5)

    async def write_markers(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                            partitions: Sequence[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """Append the marker to each partition; each partition's error (NONE once the ISR holds it)."""
        service = self._service
        errors: dict[TopicPartition, ErrorCode] = {}
        writes: list[tuple[TopicPartition, PartitionWrite]] = []
        marker = build_marker(producer_id, producer_epoch, commit, coordinator_epoch, service.clock_ms())
        for topic, index in partitions:
            target = await service.partition_for(topic, index, write=True)
            if isinstance(target, ErrorCode):
                errors[(topic, index)] = target
                continue
            write = PartitionWrite(target, bytearray(marker), KafkaAppend(markers=True), client=False)
            writes.append(((topic, index), write))
        deadline = trio.current_time() + MARKER_ACK_TIMEOUT_S
        outcomes = await service.engine.append([w for _, w in writes], ACKS_ALL, deadline)
        for (where, _), outcome in zip(writes, outcomes):
            if isinstance(outcome, AppendResult):
                errors[where] = ErrorCode.none
                for listener in self.listeners:
                    listener(where[0], where[1], producer_id, commit, outcome.logical_offset)
            elif isinstance(outcome, EngineError):
                errors[where] = kafka_error(outcome)
            else:
                logger.info("marker for producer %d on %s-%d refused: %s", producer_id, *where, outcome)
                errors[where] = refused_set_error(outcome)
        return errors


async def write_txn_markers(service: MarkerApis, request: Request) -> Any:
    """WriteTxnMarkers (api 27, §19.6): a coordinator's markers for partitions led here; the whole
    request answers CLUSTER_AUTHORIZATION_FAILED without ClusterAction (§18.3)."""
    body: Any = request.body  # Any: this api's request class at the request's version
    reply = Reply(request.api_key, request.api_version)
    denied = service.authorizer.denied(KafkaApi.WRITE_TXN_MARKERS)
    results = []
    for marker in body.markers:
        partitions = [(t.name, int(p)) for t in marker.topics for p in t.partition_indexes]
        if denied is not None:
            errors = dict.fromkeys(partitions, denied)
        else:
            errors = await service.markers.write_markers(int(marker.producer_id), int(marker.producer_epoch),
                                                         bool(marker.transaction_result),
                                                         int(marker.coordinator_epoch), partitions)
        topics = tuple(reply.nested("WritableTxnMarkerTopicResult", name=t.name, partitions=tuple(
            reply.nested("WritableTxnMarkerPartitionResult", partition_index=p, error_code=errors[(t.name, int(p))])
            for p in t.partition_indexes)) for t in marker.topics)
        results.append(reply.nested("WritableTxnMarkerResult", producer_id=marker.producer_id, topics=topics))
    return reply.response(markers=tuple(results))


class RoutedMarkers:
    """Markers to each partition's leader: this broker's own through ``local``, the others' by
    WriteTxnMarkers v1 (§19.6)."""

    def __init__(self, service: MarkerRoutes, local: MarkerWriter):
        self._service = service
        self._local = local

    async def write_markers(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                            partitions: Sequence[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        service = self._service
        by_leader: dict[int, list[TopicPartition]] = {}
        for where in partitions:
            by_leader.setdefault(self._leader_of(*where), []).append(where)
        errors: dict[TopicPartition, ErrorCode] = {}
        for leader, led in by_leader.items():
            if leader == service.broker_id:
                errors.update(await self._local.write_markers(producer_id, producer_epoch, commit,
                                                              coordinator_epoch, led))
            else:
                errors.update(await self._remote(leader, producer_id, producer_epoch, commit, coordinator_epoch,
                                                 led))
        return errors

    def _leader_of(self, topic: str, index: int) -> int:
        return self._service.engine.admin.partition_leader(topic, index, self._service.broker_id)

    async def _remote(self, leader: int, producer_id: int, producer_epoch: int, commit: bool,
                      coordinator_epoch: int, led: list[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        address = next((b for b in self._service.kafka_brokers() if b.broker_id == leader), None)
        if address is None:
            return {where: ErrorCode.not_leader_or_follower for where in led}
        topics: dict[str, list[int]] = {}
        for topic, index in led:
            topics.setdefault(topic, []).append(index)
        api = KafkaApi.WRITE_TXN_MARKERS
        body = WriteTxnMarkersRequest(markers=(WritableTxnMarker(
            producer_id=ProducerId(producer_id), producer_epoch=i16(producer_epoch), transaction_result=commit,
            topics=tuple(WritableTxnMarkerTopic(name=TopicName(t), partition_indexes=tuple(i32(p) for p in ps))
                         for t, ps in topics.items()),
            coordinator_epoch=i32(coordinator_epoch)),))
        try:
            # Any: kio's response class
            answer: Any = await peer_call(self._service.peer_connections, address, api, api.max_version, body)
        except PeerCallError as exc:
            logger.info("markers for producer %d not written on broker %d: %s", producer_id, leader, exc)
            return {where: ErrorCode.network_exception for where in led}
        errors = {where: ErrorCode.unknown_server_error for where in led}
        for result in answer.markers:
            for topic_result in result.topics:
                for part in topic_result.partitions:
                    errors[(str(topic_result.name), int(part.partition_index))] = part.error_code
        return errors
