"""The transaction coordinator's apis (docs/protocol.md §19.5.4): AddPartitionsToTxn,
AddOffsetsToTxn and EndTxn; each checks its ACLs (§18.3) and asks the coordinator.

TxnOffsetCommit goes to the group coordinator (``groups.txn_offsets_api``);
InitProducerId with a transactional id and FindCoordinator of key type 1
reach the coordinator from their own handlers.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.types import TopicName
from kio.static.primitive import i32

from trikafka.kafka.apis import KafkaApi
from trikafka.kafka.framing import Request
from trikafka.kafka.group_records import OFFSETS_TOPIC

from ..acl.model import ResourceType
from ..needs import TransactionApis
from ..entities import NO_THROTTLE, Reply

# The first version of each api that may answer PRODUCER_FENCED (KIP-588); older ones get
# INVALID_PRODUCER_EPOCH instead (§19.5.4).
PRODUCER_FENCED_FROM: dict[KafkaApi, int] = {
    KafkaApi.INIT_PRODUCER_ID: 4,
    KafkaApi.ADD_PARTITIONS_TO_TXN: 2,
    KafkaApi.ADD_OFFSETS_TO_TXN: 2,
    KafkaApi.END_TXN: 2,
    KafkaApi.TXN_OFFSET_COMMIT: 4,  # past the served v3: always INVALID_PRODUCER_EPOCH
}


FIRST_BATCHED_VERSION = 4  # AddPartitionsToTxn v4: batched transactions, verify_only (KIP-890)


def for_version(error: ErrorCode, api: KafkaApi, version: int) -> ErrorCode:
    """``error`` as ``version`` of ``api`` may answer it (PRODUCER_FENCED before KIP-588)."""
    if error == ErrorCode.producer_fenced and version < PRODUCER_FENCED_FROM.get(api, 0):
        return ErrorCode.invalid_producer_epoch
    return error


def _transactional_id_denied(service: TransactionApis, api: KafkaApi, transactional_id: str) -> ErrorCode | None:
    return service.authorizer.denied(api, transactional_id, ResourceType.TRANSACTIONAL_ID)


async def add_partitions_to_txn(service: TransactionApis, request: Request) -> Any:
    """AddPartitionsToTxn (§19.5.4): every partition joins the transaction, or none does; v4 (brokers'
    calls) answers per transaction, and a ``verify_only`` one only checks its partitions (§19.5.7)."""
    reply = Reply(request.api_key, request.api_version)
    body: Any = request.body  # Any: this api's request class at the request's version
    if request.api_version >= FIRST_BATCHED_VERSION:
        return await _add_partitions_batched(service, request, reply, body)
    asked = [(str(t.name), int(p)) for t in body.v3_and_below_topics for p in t.partitions]
    errors = await _add_partitions(service, request, body.v3_and_below_transactional_id,
                                   body.v3_and_below_producer_id, body.v3_and_below_producer_epoch, asked)
    return reply.response(throttle_time=NO_THROTTLE,
                          results_by_topic_v3_and_below=_topic_results(reply, asked, errors))


def _topic_results(reply: Reply, asked: list[tuple[str, int]], errors: dict[tuple[str, int], ErrorCode]) -> Any:
    """The per-topic results of ``asked`` (Any: a tuple of kio's result class at the reply's version)."""
    by_topic: dict[str, list[int]] = {}
    for topic, index in asked:
        by_topic.setdefault(topic, []).append(index)
    return tuple(
        reply.nested("AddPartitionsToTxnTopicResult", name=TopicName(topic), results_by_partition=tuple(
            reply.nested("AddPartitionsToTxnPartitionResult", partition_index=i32(index),
                         partition_error_code=errors[(topic, index)]) for index in indexes))
        for topic, indexes in by_topic.items())


async def _add_partitions_batched(service: TransactionApis, request: Request, reply: Reply, body: Any) -> Any:
    """AddPartitionsToTxn v4: each transaction verified (``verify_only``) or added as v3 adds."""
    if (denied := service.authorizer.denied(request.api, resource_type=ResourceType.CLUSTER)) is not None:
        return reply.response(throttle_time=NO_THROTTLE, error_code=denied, results_by_transaction=())
    results = []
    for txn in body.transactions:
        asked = [(str(t.name), int(p)) for t in txn.topics for p in t.partitions]
        if txn.verify_only:
            errors = await _verify_partitions(service, txn.transactional_id, txn.producer_id, txn.producer_epoch,
                                              asked)
        else:
            errors = await _add_partitions(service, request, txn.transactional_id, txn.producer_id,
                                           txn.producer_epoch, asked)
        results.append(reply.nested("AddPartitionsToTxnResult", transactional_id=txn.transactional_id,
                                    topic_results=_topic_results(reply, asked, errors)))
    return reply.response(throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                          results_by_transaction=tuple(results))


async def _verify_partitions(service: TransactionApis, transactional_id: str, producer_id: int, producer_epoch: int,
                             asked: list[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
    """Each partition as this broker's coordinator verifies it (§19.5.7); nothing is added."""
    coordinator = service.transactions
    if coordinator is None:
        return {key: ErrorCode.coordinator_not_available for key in asked}
    return {(topic, index): await coordinator.verify(transactional_id, producer_id, producer_epoch, topic, index)
            for topic, index in asked}


async def _add_partitions(service: TransactionApis, request: Request, transactional_id: str, producer_id: int,
                          producer_epoch: int, asked: list[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
    """Each partition's error: a refusal of one leaves the others OPERATION_NOT_ATTEMPTED (§19.5.4)."""
    api = request.api
    if (denied := _transactional_id_denied(service, api, transactional_id)) is not None:
        return {key: denied for key in asked}
    refused: dict[tuple[str, int], ErrorCode] = {}
    for topic, index in asked:
        if (denied := service.authorizer.denied(api, topic, ResourceType.TOPIC)) is not None:
            refused[(topic, index)] = denied
        elif not _partition_exists(service, topic, index):
            refused[(topic, index)] = ErrorCode.unknown_topic_or_partition
    if refused:
        return {key: refused.get(key, ErrorCode.operation_not_attempted) for key in asked}
    coordinator = service.transactions
    if coordinator is None:
        return {key: ErrorCode.coordinator_not_available for key in asked}
    error = await coordinator.add_partitions(transactional_id, producer_id, producer_epoch, asked)
    return {key: for_version(error, api, request.api_version) for key in asked}


def _partition_exists(service: TransactionApis, topic: str, index: int) -> bool:
    count = service.partition_count(topic)
    return count is not None and 0 <= index < count


async def add_offsets_to_txn(service: TransactionApis, request: Request) -> Any:
    """AddOffsetsToTxn (§19.5.4): the group's ``__consumer_offsets`` partition joins the transaction."""
    reply = Reply(request.api_key, request.api_version)
    body: Any = request.body  # Any: this api's request class at the request's version
    return reply.response(throttle_time=NO_THROTTLE, error_code=await _add_offsets(service, request, body))


async def _add_offsets(service: TransactionApis, request: Request, body: Any) -> ErrorCode:
    api = request.api
    if (denied := _transactional_id_denied(service, api, body.transactional_id)) is not None:
        return denied
    if (denied := service.authorizer.denied(api, body.group_id, ResourceType.GROUP)) is not None:
        return denied
    coordinator = service.transactions
    if coordinator is None:
        return ErrorCode.coordinator_not_available
    # The group coordinator's lookup creates __consumer_offsets on first need (§17.1).
    located = await service.groups.coordinator_of(body.group_id)
    index = service.groups.partition_index(body.group_id)
    if isinstance(located, ErrorCode) or index is None:
        return ErrorCode.coordinator_not_available
    error = await coordinator.add_partitions(body.transactional_id, body.producer_id, body.producer_epoch,
                                             [(OFFSETS_TOPIC, index)])
    return for_version(error, api, request.api_version)


async def end_txn(service: TransactionApis, request: Request) -> Any:
    """EndTxn (§19.5.4): commit or abort, answered once the decision is written."""
    reply = Reply(request.api_key, request.api_version)
    body: Any = request.body  # Any: this api's request class at the request's version
    coordinator = service.transactions
    if (denied := _transactional_id_denied(service, request.api, body.transactional_id)) is not None:
        error = denied
    elif coordinator is None:
        error = ErrorCode.coordinator_not_available
    else:
        error = for_version(await coordinator.end_transaction(body.transactional_id, body.producer_id,
                                                              body.producer_epoch, body.committed),
                            request.api, request.api_version)
    return reply.response(throttle_time=NO_THROTTLE, error_code=error)
