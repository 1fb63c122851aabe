"""DescribeTransactions and ListTransactions (docs/protocol.md §19.5.4): what the coordinator
holds of each transactional id, for operators' tools; each id needs Describe (§18.3)."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.types import TopicName, TransactionalId
from kio.static.primitive import i16, i32, i64

from trikafka.kafka.framing import Request
from trikafka.kafka.txn_records import TxnValue, state_named

from ..acl.model import ResourceType
from ..needs import TransactionApis
from ..entities import NO_THROTTLE, Reply, kio_time
from ..producer_ids import ONE_MS

NO_PRODUCER_ID = -1
# kio's time fields hold no negative time, so "no transaction started" (Kafka's -1) is the epoch.
NOT_STARTED = datetime.datetime.fromtimestamp(0, tz=datetime.timezone.utc)


async def describe_transactions(service: TransactionApis, request: Request) -> Any:
    """DescribeTransactions v0: each id's state at its coordinator, or the id's error."""
    reply = Reply(request.api_key, request.api_version)
    body: Any = request.body  # Any: this api's request class at the request's version
    states = []
    for tid in body.transactional_ids:
        found: TxnValue | ErrorCode
        if (denied := service.authorizer.denied(request.api, tid, ResourceType.TRANSACTIONAL_ID)) is not None:
            found = denied
        elif service.transactions is None:
            found = ErrorCode.coordinator_not_available
        else:
            found = await service.transactions.describe(tid)
        states.append(_described(reply, tid, found))
    return reply.response(throttle_time=NO_THROTTLE, transaction_states=tuple(states))


def _described(reply: Reply, tid: str, found: TxnValue | ErrorCode) -> Any:
    if isinstance(found, ErrorCode):
        return reply.nested("TransactionState", error_code=found, transactional_id=TransactionalId(tid),
                            transaction_state="", transaction_timeout=0 * ONE_MS, transaction_start_time=NOT_STARTED,
                            producer_id=i64(NO_PRODUCER_ID), producer_epoch=i16(-1), topics=())
    by_topic: dict[str, list[int]] = {}
    for topic, index in found.partitions:
        by_topic.setdefault(topic, []).append(index)
    return reply.nested(
        "TransactionState", error_code=ErrorCode.none, transactional_id=TransactionalId(tid),
        transaction_state=found.state.kafka_name, transaction_timeout=found.timeout_ms * ONE_MS,
        transaction_start_time=kio_time(found.start_timestamp_ms) or NOT_STARTED, producer_id=i64(found.producer_id),
        producer_epoch=i16(found.producer_epoch),
        topics=tuple(reply.nested("TopicData", topic=TopicName(topic), partitions=tuple(i32(i) for i in indexes))
                     for topic, indexes in by_topic.items()))


def list_transactions(service: TransactionApis, request: Request) -> Any:
    """ListTransactions v0: the ids this broker coordinates, filtered by state and producer id."""
    reply = Reply(request.api_key, request.api_version)
    body: Any = request.body  # Any: this api's request class at the request's version
    named = {name: state_named(name) for name in body.state_filters}
    wanted_states = {state for state in named.values() if state is not None}
    unknown = tuple(name for name, state in named.items() if state is None)
    wanted_producers = set(body.producer_id_filters)
    error, listed = (ErrorCode.coordinator_not_available, []) if service.transactions is None \
        else service.transactions.listing()
    kept = [(tid, value) for tid, value in listed
            if (not named or value.state in wanted_states)
            and (not wanted_producers or value.producer_id in wanted_producers)
            and service.authorizer.denied(request.api, tid, ResourceType.TRANSACTIONAL_ID) is None]
    return reply.response(throttle_time=NO_THROTTLE, error_code=error, unknown_state_filters=unknown,
                          transaction_states=tuple(
                              reply.nested("TransactionState", transactional_id=TransactionalId(tid),
                                           producer_id=i64(value.producer_id),
                                           transaction_state=value.state.kafka_name)
                              for tid, value in kept))
