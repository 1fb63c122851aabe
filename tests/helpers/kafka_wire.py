"""One Kafka-protocol request over a plain socket, with trikafka's codec (docs/protocol.md §16.2).

For tests that check an answer byte-level clients hide (they retry or log it).
"""

from __future__ import annotations

import socket
import struct
from typing import Any

from kio.schema.errors import ErrorCode

from trikafka.kafka.framing import decode_response, encode_request

TIMEOUT_S = 10.0


def exchange(bootstrap: str, api_key: int, version: int, body: Any, *, correlation_id: int = 7,
             client_id: str = "trikafka-test") -> Any:
    """Send ``body`` as one request to ``host:port``; the decoded response body."""
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=TIMEOUT_S) as sock:
        sock.sendall(encode_request(api_key, version, correlation_id, client_id, body))
        got, response = receive_answer(sock, api_key, version)
    assert got == correlation_id, (got, correlation_id)
    return response


def receive_answer(sock: socket.socket, api_key: int, version: int) -> tuple[int, Any]:
    """The next answer on ``sock``: (correlation id, decoded body)."""
    size = struct.unpack(">i", _read(sock, 4))[0]
    return decode_response(api_key, version, _read(sock, size))


def pipeline(bootstrap: str, requests: list[tuple[int, int, Any]]) -> list[tuple[int, Any]]:
    """Send every (api key, version, body) in one write, correlation ids 1, 2, ...; the
    (correlation id, body) of each answer in the order the broker sent them."""
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=TIMEOUT_S) as sock:
        sock.sendall(b"".join(encode_request(api, version, i, "trikafka-test", body)
                              for i, (api, version, body) in enumerate(requests, 1)))
        answers = []
        for api, version, _ in requests:
            answers.append(receive_answer(sock, api, version))
    return answers


def _read(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} of {n} bytes")
        data += chunk
    return bytes(data)


def init_producer_id(bootstrap: str, *, producer_id: int = -1, epoch: int = -1,
                     transactional_id: str | None = None) -> tuple[ErrorCode, int, int]:
    """InitProducerId v4 (docs/protocol.md §19.1): (error, producer id, epoch)."""
    import datetime

    from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
    from kio.schema.types import ProducerId, TransactionalId
    from kio.static.primitive import i16

    answer = exchange(bootstrap, 22, 4, InitProducerIdRequest(
        transactional_id=None if transactional_id is None else TransactionalId(transactional_id),
        transaction_timeout=datetime.timedelta(seconds=60), producer_id=ProducerId(producer_id),
        producer_epoch=i16(epoch)))
    return answer.error_code, int(answer.producer_id), int(answer.producer_epoch)


def produce_records(bootstrap: str, topic: str, partition: int, records: bytes, *, acks: int = -1,
                    transactional_id: str | None = None) -> tuple[ErrorCode, int]:
    """Produce v9 of one partition's ``records`` (a transaction's with ``transactional_id``): (error,
    base offset)."""
    import datetime

    from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
    from kio.schema.types import TransactionalId
    from kio.static.primitive import i16, i32

    answer = exchange(bootstrap, 0, 9, ProduceRequest(
        transactional_id=None if transactional_id is None else TransactionalId(transactional_id), acks=i16(acks),
        timeout=datetime.timedelta(seconds=10), topic_data=(TopicProduceData(name=topic, partition_data=(
            PartitionProduceData(index=i32(partition), records=records),)),)))
    part = answer.responses[0].partition_responses[0]
    return part.error_code, int(part.base_offset)


def write_txn_marker(bootstrap: str, producer_id: int, epoch: int, commit: bool, topic: str,
                     partition: int, *, coordinator_epoch: int = 0) -> ErrorCode:
    """WriteTxnMarkers v1 (§19.6) of one marker on one partition: its error."""
    from kio.schema.types import ProducerId, TopicName
    from kio.schema.write_txn_markers.v1.request import (WritableTxnMarker, WritableTxnMarkerTopic,
                                                          WriteTxnMarkersRequest)
    from kio.static.primitive import i16, i32

    answer = exchange(bootstrap, 27, 1, WriteTxnMarkersRequest(markers=(WritableTxnMarker(
        producer_id=ProducerId(producer_id), producer_epoch=i16(epoch), transaction_result=commit,
        topics=(WritableTxnMarkerTopic(name=TopicName(topic), partition_indexes=(i32(partition),)),),
        coordinator_epoch=i32(coordinator_epoch)),)))
    return answer.markers[0].topics[0].partitions[0].error_code


def list_offset(bootstrap: str, topic: str, partition: int, timestamp: int, *, isolation_level: int = 0) -> int:
    """ListOffsets v7 of one partition (-1 latest, -2 earliest): the offset it answers."""
    return list_offset_answer(bootstrap, topic, partition, timestamp, isolation_level=isolation_level)[1]


def list_offset_answer(bootstrap: str, topic: str, partition: int, timestamp: int, *,
                       isolation_level: int = 0) -> tuple[ErrorCode, int]:
    """ListOffsets v7 of one partition (-1 latest, -2 earliest): (error, offset)."""
    from kio.schema.list_offsets.v7.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
    from kio.schema.types import BrokerId, TopicName
    from kio.static.primitive import i8, i32, i64

    answer = exchange(bootstrap, 2, 7, ListOffsetsRequest(
        replica_id=BrokerId(-1), isolation_level=i8(isolation_level), topics=(ListOffsetsTopic(
            name=TopicName(topic), partitions=(ListOffsetsPartition(
                partition_index=i32(partition), current_leader_epoch=i32(-1), timestamp=i64(timestamp)),)),)))
    found = answer.topics[0].partitions[0]
    return ErrorCode(found.error_code), int(found.offset)


def fetch_once(bootstrap: str, topic: str, partition: int, offset: int) -> tuple[ErrorCode, int, bytes]:
    """Fetch v4 of one partition at ``offset``, answered at once (no wait): (error, high watermark, records)."""
    from datetime import timedelta

    from kio.schema.fetch.v4.request import FetchPartition, FetchRequest, FetchTopic
    from kio.schema.types import BrokerId, TopicName
    from kio.static.primitive import i8, i32, i64

    answer = exchange(bootstrap, 1, 4, FetchRequest(
        replica_id=BrokerId(-1), max_wait=timedelta(0), min_bytes=i32(1), max_bytes=i32(1 << 20),
        isolation_level=i8(0), topics=(FetchTopic(topic=TopicName(topic), partitions=(FetchPartition(
            partition=i32(partition), fetch_offset=i64(offset), partition_max_bytes=i32(1 << 20)),)),)))
    found = answer.responses[0].partitions[0]
    return found.error_code, int(found.high_watermark), bytes(found.records or b"")


def produce_transactional(bootstrap: str, transactional_id: str, topic: str, partition: int,
                          records: bytes) -> tuple[ErrorCode, int]:
    """Produce v9 (acks -1) of one partition's transactional ``records``: (error, base offset)."""
    return produce_records(bootstrap, topic, partition, records, transactional_id=transactional_id)


# Errors a transaction coordinator answers while it cannot decide yet (§19.5.4): a client retries them.
COORDINATOR_RETRIABLE = frozenset({ErrorCode.coordinator_not_available, ErrorCode.coordinator_load_in_progress,
                                   ErrorCode.concurrent_transactions})
RETRY_FOR_S = 30.0


def retry_while_retriable(call: Any) -> Any:
    """``call()`` again while its answer (an ErrorCode, a tuple whose first item is one, or a dict
    whose first value is one) is in ``COORDINATOR_RETRIABLE``, for up to ``RETRY_FOR_S``; its last
    answer."""
    import time

    deadline = time.monotonic() + RETRY_FOR_S
    while True:
        answer = call()
        error = answer[0] if isinstance(answer, tuple) else next(iter(answer.values())) \
            if isinstance(answer, dict) else answer
        if error not in COORDINATOR_RETRIABLE or time.monotonic() > deadline:
            return answer
        time.sleep(0.05)


def find_coordinator(bootstrap: str, key: str, *, key_type: int) -> tuple[ErrorCode, int, int]:
    """FindCoordinator v4 of ``key`` (key type 0: a group, §17.3; 1: a transactional id, §19.5.1):
    (error, node id, port)."""
    from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
    from kio.static.primitive import i8

    found = exchange(bootstrap, 10, 4, FindCoordinatorRequest(key_type=i8(key_type), coordinator_keys=(key,)))
    coordinator = found.coordinators[0]
    return coordinator.error_code, int(coordinator.node_id), int(coordinator.port)


def find_transaction_coordinator(bootstrap: str, transactional_id: str) -> tuple[ErrorCode, int, int]:
    """FindCoordinator v4 of key type 1 (§19.5.1): (error, node id, port)."""
    return find_coordinator(bootstrap, transactional_id, key_type=1)


def init_transactional(bootstrap: str, transactional_id: str) -> tuple[ErrorCode, int, int]:
    """What a transactional producer does first: find its coordinator, then InitProducerId with its
    id, each retried as a client retries (§19.5.4): (error, producer id, epoch)."""
    retry_while_retriable(lambda: find_transaction_coordinator(bootstrap, transactional_id))
    return retry_while_retriable(lambda: init_producer_id(bootstrap, transactional_id=transactional_id))


def add_partitions_to_txn(bootstrap: str, transactional_id: str, producer_id: int, epoch: int,
                          partitions: list[tuple[str, int]], *, version: int = 3,
                          verify_only: bool = False) -> dict[tuple[str, int], ErrorCode]:
    """AddPartitionsToTxn (§19.5.4): each partition's error.  From v4 (brokers' form) the request
    carries one transaction with ``verify_only``; an error of the whole v4 request is every
    partition's."""
    from kio.index import load_payload_module
    from kio.schema.types import ProducerId, TopicName, TransactionalId
    from kio.static.constants import EntityType
    from kio.static.primitive import i16, i32

    module = load_payload_module(24, version, EntityType.request)
    by_topic: dict[str, list[int]] = {}
    for topic, index in partitions:
        by_topic.setdefault(topic, []).append(index)
    topics = tuple(module.AddPartitionsToTxnTopic(name=TopicName(t), partitions=tuple(map(i32, ps)))
                   for t, ps in by_topic.items())
    if version >= 4:
        answer = exchange(bootstrap, 24, version, module.AddPartitionsToTxnRequest(transactions=(
            module.AddPartitionsToTxnTransaction(
                transactional_id=TransactionalId(transactional_id), producer_id=ProducerId(producer_id),
                producer_epoch=i16(epoch), verify_only=verify_only, topics=topics),)))
        if answer.error_code != ErrorCode.none:
            return {key: answer.error_code for key in partitions}
        return {(str(t.name), int(p.partition_index)): p.partition_error_code
                for result in answer.results_by_transaction for t in result.topic_results
                for p in t.results_by_partition}
    answer = exchange(bootstrap, 24, version, module.AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=TransactionalId(transactional_id),
        v3_and_below_producer_id=ProducerId(producer_id), v3_and_below_producer_epoch=i16(epoch),
        v3_and_below_topics=topics))
    return {(str(t.name), int(p.partition_index)): p.partition_error_code
            for t in answer.results_by_topic_v3_and_below for p in t.results_by_partition}


def add_offsets_to_txn(bootstrap: str, transactional_id: str, producer_id: int, epoch: int,
                       group_id: str) -> ErrorCode:
    """AddOffsetsToTxn v3 (§19.5.4): its error."""
    from kio.schema.add_offsets_to_txn.v3.request import AddOffsetsToTxnRequest
    from kio.schema.types import GroupId, ProducerId, TransactionalId
    from kio.static.primitive import i16

    return exchange(bootstrap, 25, 3, AddOffsetsToTxnRequest(
        transactional_id=TransactionalId(transactional_id), producer_id=ProducerId(producer_id),
        producer_epoch=i16(epoch), group_id=GroupId(group_id))).error_code


def end_txn(bootstrap: str, transactional_id: str, producer_id: int, epoch: int, commit: bool, *,
            version: int = 3) -> ErrorCode:
    """EndTxn (v0-v3, §19.5.4): its error."""
    from kio.index import load_request_schema
    from kio.schema.types import ProducerId, TransactionalId
    from kio.static.primitive import i16

    return exchange(bootstrap, 26, version, load_request_schema(26, version)(
        transactional_id=TransactionalId(transactional_id), producer_id=ProducerId(producer_id),
        producer_epoch=i16(epoch), committed=commit)).error_code


def txn_offset_commit(bootstrap: str, transactional_id: str, producer_id: int, epoch: int, group_id: str,
                      topic: str, offsets: dict[int, int]) -> dict[int, ErrorCode]:
    """TxnOffsetCommit v3 of one topic's ``{partition: offset}``, no member check (§19.5.4): each
    partition's error."""
    from kio.schema.txn_offset_commit.v3.request import (TxnOffsetCommitRequest, TxnOffsetCommitRequestPartition,
                                                         TxnOffsetCommitRequestTopic)
    from kio.schema.types import GroupId, ProducerId, TopicName, TransactionalId
    from kio.static.primitive import i16, i32, i64

    answer = exchange(bootstrap, 28, 3, TxnOffsetCommitRequest(
        transactional_id=TransactionalId(transactional_id), group_id=GroupId(group_id),
        producer_id=ProducerId(producer_id), producer_epoch=i16(epoch), generation_id=i32(-1), member_id="",
        group_instance_id=None, topics=(TxnOffsetCommitRequestTopic(name=TopicName(topic), partitions=tuple(
            TxnOffsetCommitRequestPartition(partition_index=i32(p), committed_offset=i64(o),
                                            committed_leader_epoch=i32(-1), committed_metadata=None)
            for p, o in offsets.items())),)))
    return {int(p.partition_index): p.error_code for p in answer.topics[0].partitions}


def fetch_stable_offsets(bootstrap: str, group_id: str, topic: str, partitions: list[int]) -> dict[int, tuple[int, ErrorCode]]:
    """OffsetFetch v8 with ``require_stable`` of one group's partitions of ``topic`` (§17.5, §19.5.4):
    each partition's (committed offset, error)."""
    from kio.schema.offset_fetch.v8.request import (OffsetFetchRequest, OffsetFetchRequestGroup,
                                                    OffsetFetchRequestTopics)
    from kio.schema.types import GroupId, TopicName
    from kio.static.primitive import i32

    answer = exchange(bootstrap, 9, 8, OffsetFetchRequest(groups=(OffsetFetchRequestGroup(
        group_id=GroupId(group_id), topics=(OffsetFetchRequestTopics(
            name=TopicName(topic), partition_indexes=tuple(map(i32, partitions))),)),), require_stable=True))
    return {int(p.partition_index): (int(p.committed_offset), p.error_code)
            for p in answer.groups[0].topics[0].partitions}
