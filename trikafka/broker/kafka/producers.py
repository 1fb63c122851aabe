"""DescribeProducers (docs/protocol.md §19.2.2): a partition's producer state, as its leader keeps it."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.types import ProducerId
from kio.static.primitive import i32, i64

from trikafka.kafka.apis import KafkaApi
from trikafka.kafka.framing import Request
from trikafka.log.producer_state import ProducerStates

from .needs import PartitionReads
from .entities import NO_THROTTLE, Reply

NO_LEADER_EPOCH = -1  # DescribeProducers names no leader epoch: any current one serves
UNKNOWN = -1  # Kafka's "not known" of a sequence, time, coordinator epoch or offset


async def describe_producers(service: PartitionReads, request: Request) -> Any:
    reply = Reply(request.api_key, request.api_version)
    body: Any = request.body  # Any: this api's request class at the request's version
    topics = []
    for topic in body.topics:
        denied = service.authorizer.denied(KafkaApi.DESCRIBE_PRODUCERS, topic.name)
        partitions = []
        for index in topic.partition_indexes:
            view = denied if denied is not None else await service.read_view(topic.name, index, NO_LEADER_EPOCH)
            if isinstance(view, ErrorCode):
                partitions.append(reply.nested("PartitionResponse", partition_index=index, error_code=view,
                                               error_message=None, active_producers=()))
            else:
                partitions.append(reply.nested("PartitionResponse", partition_index=index,
                                               error_code=ErrorCode.none, error_message=None,
                                               active_producers=_active(reply, view.log.producers)))
        topics.append(reply.nested("TopicResponse", name=topic.name, partitions=tuple(partitions)))
    return reply.response(throttle_time=NO_THROTTLE, topics=tuple(topics))


def _active(reply: Reply, states: ProducerStates) -> tuple[Any, ...]:
    """Each producer of the state, by id (§19.2.2)."""
    return tuple(
        reply.nested("ProducerState", producer_id=ProducerId(producer_id), producer_epoch=i32(entry.epoch),
                     last_sequence=i32(entry.batches[-1].last_seq if entry.batches else UNKNOWN),
                     last_timestamp=i64(entry.last_timestamp_ms), coordinator_epoch=i32(entry.coordinator_epoch),
                     current_txn_start_offset=i64(states.open_transactions.get(producer_id, UNKNOWN)))
        for producer_id, entry in sorted(states.entries.items()))
