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


def exchange(bootstrap: str, api_key: int, version: int, body: Any, *, correlation_id: int = 7) -> Any:
    """Send ``body`` as one request to ``host:port``; the decoded response body."""
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=TIMEOUT_S) as sock:
        sock.sendall(encode_request(api_key, version, correlation_id, "trikafka-test", body))
        size = struct.unpack(">i", _read(sock, 4))[0]
        got, response = decode_response(api_key, version, _read(sock, size))
    assert got == correlation_id, (got, correlation_id)
    return response


def pipeline(bootstrap: str, requests: list[tuple[int, int, Any]]) -> list[tuple[int, Any]]:
    """Send every (api key, version, body) in one write, correlation ids 1, 2, ...; the
    (correlation id, body) of each answer in the order the broker sent them."""
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=TIMEOUT_S) as sock:
        sock.sendall(b"".join(encode_request(api, version, i, "trikafka-test", body)
                              for i, (api, version, body) in enumerate(requests, 1)))
        answers = []
        for api, version, _ in requests:
            size = struct.unpack(">i", _read(sock, 4))[0]
            answers.append(decode_response(api, version, _read(sock, size)))
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


def produce_records(bootstrap: str, topic: str, partition: int, records: bytes, *, acks: int = -1) -> tuple[ErrorCode, int]:
    """Produce v9 of one partition's ``records``: (error, base offset)."""
    import datetime

    from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
    from kio.static.primitive import i16, i32

    answer = exchange(bootstrap, 0, 9, ProduceRequest(acks=i16(acks), timeout=datetime.timedelta(seconds=10),
                                                      topic_data=(TopicProduceData(name=topic, partition_data=(
                                                          PartitionProduceData(index=i32(partition),
                                                                               records=records),)),)))
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
    from kio.schema.list_offsets.v7.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
    from kio.schema.types import BrokerId, TopicName
    from kio.static.primitive import i8, i32, i64

    answer = exchange(bootstrap, 2, 7, ListOffsetsRequest(
        replica_id=BrokerId(-1), isolation_level=i8(isolation_level), topics=(ListOffsetsTopic(
            name=TopicName(topic), partitions=(ListOffsetsPartition(
                partition_index=i32(partition), current_leader_epoch=i32(-1), timestamp=i64(timestamp)),)),)))
    return int(answer.topics[0].partitions[0].offset)


def produce_transactional(bootstrap: str, transactional_id: str, topic: str, partition: int,
                          records: bytes) -> tuple[ErrorCode, int]:
    """Produce v9 (acks -1) of one partition's transactional ``records``: (error, base offset)."""
    import datetime

    from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
    from kio.schema.types import TransactionalId
    from kio.static.primitive import i16, i32

    answer = exchange(bootstrap, 0, 9, ProduceRequest(
        transactional_id=TransactionalId(transactional_id), acks=i16(-1), timeout=datetime.timedelta(seconds=10),
        topic_data=(TopicProduceData(name=topic, partition_data=(
            PartitionProduceData(index=i32(partition), records=records),)),)))
    part = answer.responses[0].partition_responses[0]
    return part.error_code, int(part.base_offset)
