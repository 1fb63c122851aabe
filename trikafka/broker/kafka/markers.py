"""Transaction markers on the partitions this broker leads (docs/protocol.md §19.6).

``MarkerWriter.write_markers`` appends a COMMIT or ABORT marker to each named
partition as its leader, with acks -1, and answers each partition's error: the
transaction coordinator (§19.5) calls it for partitions led here, and the
WriteTxnMarkers api (27) for partitions a coordinator on another broker sends.
A partition this broker does not lead answers NOT_LEADER_OR_FOLLOWER; the
coordinator asks again.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Sequence

import trio
from kio.schema.errors import ErrorCode

from trikafka.kafka.batch import BatchError
from trikafka.kafka.framing import Request
from trikafka.kafka.markers import build_marker
from trikafka.wire.errors import ErrorCode as EngineError

from ..partition import Refused
from ..seams import KafkaAppend
from .context import KafkaContext
from .entities import NO_THROTTLE, Reply
from .errors import BATCH_TO_KAFKA, kafka_error

logger = logging.getLogger(__name__)

MARKER_ACK_TIMEOUT_S = 30.0  # how long a marker waits for the ISR before it answers REQUEST_TIMED_OUT

TopicPartition = tuple[str, int]
# Called once a marker is acknowledged: (topic, partition, producer id, commit, marker offset).
MarkerListener = Callable[[str, int, int, bool, int], None]


class MarkerWriter:
    """Appends transaction markers to partitions this broker leads."""

    def __init__(self, service: KafkaContext):
        self._service = service
        self.listeners: list[MarkerListener] = []  # the group coordinator's pending offsets (§19.5)

    async def write_markers(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                            partitions: Sequence[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """Append the marker to each partition; each partition's error (NONE once the ISR holds it)."""
        service = self._service
        errors: dict[TopicPartition, ErrorCode] = {}
        waits = []
        marker = build_marker(producer_id, producer_epoch, commit, coordinator_epoch, service.clock_ms())
        for topic, index in partitions:
            target = await service.partition_for(topic, index, write=True)
            if isinstance(target, ErrorCode):
                errors[(topic, index)] = target
                continue
            try:
                result = await target.append(bytearray(marker), -1, kafka=KafkaAppend(markers=True))
            except Refused as exc:
                errors[(topic, index)] = kafka_error(exc.error)
                continue
            except BatchError as exc:
                logger.info("marker for producer %d on %s-%d refused: %s", producer_id, topic, index, exc)
                errors[(topic, index)] = BATCH_TO_KAFKA[exc.kind]
                continue
            service.appended(topic, index)
            waits.append(((topic, index), result.logical_offset, target.ack_wait(result.next_offset)))
        deadline = trio.current_time() + MARKER_ACK_TIMEOUT_S
        statuses = await service.handler.wait_acks([w for _, _, w in waits], deadline)
        for (where, offset, _), status in zip(waits, statuses):
            errors[where] = ErrorCode.none if status == EngineError.NO_ERROR else kafka_error(status)
            if status == EngineError.NO_ERROR:
                for listener in self.listeners:
                    listener(where[0], where[1], producer_id, commit, offset)
        return errors


async def write_txn_markers(service: KafkaContext, request: Request) -> Any:
    """WriteTxnMarkers (api 27, §19.6): a coordinator's markers for partitions led here."""
    body: Any = request.body  # Any: this api's request class at the request's version
    reply = Reply(request.api_key, request.api_version)
    results = []
    for marker in body.markers:
        partitions = [(t.name, int(p)) for t in marker.topics for p in t.partition_indexes]
        errors = await service.markers.write_markers(int(marker.producer_id), int(marker.producer_epoch),
                                                     bool(marker.transaction_result), int(marker.coordinator_epoch),
                                                     partitions)
        topics = tuple(reply.nested("WritableTxnMarkerTopicResult", name=t.name, partitions=tuple(
            reply.nested("WritableTxnMarkerPartitionResult", partition_index=p, error_code=errors[(t.name, int(p))])
            for p in t.partition_indexes)) for t in marker.topics)
        results.append(reply.nested("WritableTxnMarkerResult", producer_id=marker.producer_id, topics=topics))
    return reply.response(markers=tuple(results))
