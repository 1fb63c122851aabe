"""DeleteRecords (docs/protocol.md §16.4): a partition's leader moves its log start offset up.

The new start is held in memory at once (Fetch, ListOffsets and retention see
it) and stored in the partition directory (§16.6); followers take it from the
leader's REPLICA_FETCH answers and report theirs in their next fetch
(§12.4.1). A partition is answered once every replica in its ISR holds the
new start, or REQUEST_TIMED_OUT at the request's timeout.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import trio

from kio.schema.errors import ErrorCode

from trikafka.kafka.apis import KafkaApi
from trikafka.kafka.framing import Request

from ..engine.partition import ReadView
from .entities import NO_THROTTLE, Reply

if TYPE_CHECKING:
    from ..seams import RunBlocking
    from .acl.authorizer import Authorizer

HIGH_WATERMARK = -1  # the offset that asks to delete every record below the high watermark
ANY_LEADER_EPOCH = -1
NO_LOW_WATERMARK = -1  # an error's answer


class LogStartMover(Protocol):
    """What DeleteRecords needs of its broker: the ACL check, the leader's view of a partition, a worker
    thread for the store, and the wait for the ISR."""

    authorizer: Authorizer
    run_blocking: RunBlocking

    async def read_view(self, topic: str, index: int, current_leader_epoch: int) -> ReadView | ErrorCode: ...

    async def isr_log_start(self, topic: str, index: int, offset: int, deadline: float) -> ErrorCode: ...


async def delete_records(service: LogStartMover, request: Request) -> Any:
    reply = Reply(request.api_key, request.api_version)
    body: Any = request.body  # Any: this api's request class at the request's version
    deadline = trio.current_time() + max(0.0, body.timeout.total_seconds())
    topics = []
    for topic in body.topics:
        denied = service.authorizer.denied(KafkaApi.DELETE_RECORDS, topic.name)
        partitions = []
        for part in topic.partitions:
            error, low = (denied, NO_LOW_WATERMARK) if denied is not None else await _delete_below(
                service, topic.name, part.partition_index, part.offset, deadline)
            partitions.append(reply.nested("DeleteRecordsPartitionResult", partition_index=part.partition_index,
                                           low_watermark=low, error_code=error))
        topics.append(reply.nested("DeleteRecordsTopicResult", name=topic.name, partitions=tuple(partitions)))
    return reply.response(throttle_time=NO_THROTTLE, topics=tuple(topics))


async def _delete_below(service: LogStartMover, topic: str, index: int, offset: int,
                        deadline: float) -> tuple[ErrorCode, int]:
    """(error, the log start offset afterwards) of one partition, once its ISR holds it (§16.4)."""
    view = await service.read_view(topic, index, ANY_LEADER_EPOCH)
    if isinstance(view, ErrorCode):
        return view, NO_LOW_WATERMARK
    offsets = view.log.kafka_offsets
    hw = offsets.offset_at(view.end)
    target = hw if offset == HIGH_WATERMARK else offset
    if not 0 <= target <= hw:
        return ErrorCode.offset_out_of_range, NO_LOW_WATERMARK
    # The store writes into the partition directory: a pass that a deletion waits for (§16.4).
    lease = view.log.passes.take()
    if lease is None:
        return ErrorCode.unknown_topic_or_partition, NO_LOW_WATERMARK  # being deleted
    with lease:
        if offsets.log_start.raise_to(target):
            await service.run_blocking(offsets.log_start.store)
    start = offsets.start_offset
    error = await service.isr_log_start(topic, index, start, deadline)
    return (error, start) if error == ErrorCode.none else (error, NO_LOW_WATERMARK)
