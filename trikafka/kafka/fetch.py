"""The Fetch response, v4-v12, written by hand so that records go out by sendfile (docs/protocol.md §16.4).

``kio`` would need every partition's records in memory; here each partition's
records are any object with a length (the broker's file regions), placed
as-is in the returned chunk list between the bytes around them.  Version 12
is flexible (compact strings, arrays and bytes; tagged fields, none written).

Fields by version: ``error_code`` and ``session_id`` from v7,
``log_start_offset`` from v5, ``preferred_read_replica`` from v11.  A
partition's aborted transactions (producer id, first offset) are listed for
read_committed readers (§19.7).
"""

from __future__ import annotations

import struct
from typing import NamedTuple, Sequence, Sized

from .apis import KafkaApi
from .framing import SIZE_PREFIX_BYTES, response_header
from .varint import uvarint

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT32_INT16_INT32 = struct.Struct(">ihi")  # throttle_time_ms, error_code, session_id (v7+)
_PARTITION_HEAD = struct.Struct(">ihqq")  # partition_index, error_code, high_watermark, last_stable_offset
_INT64 = struct.Struct(">q")
_ABORTED = struct.Struct(">qq")  # producer_id, first_offset
_NO_PREFERRED_READ_REPLICA = _INT32.pack(-1)
_NO_TAGGED_FIELDS = b"\x00"


class FetchPartition(NamedTuple):
    """One partition of a Fetch answer; ``records`` is None (null), or bytes or a file region of batches."""

    topic: str
    partition: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records: Sized | None
    aborted_transactions: tuple[tuple[int, int], ...] = ()  # (producer id, first offset), §19.7


def encode_fetch_response(version: int, correlation_id: int, throttle_time_ms: int, error_code: int,
                          session_id: int, partitions: Sequence[FetchPartition]) -> list[bytes | Sized]:
    """The whole response frame (size prefix, header, body) as chunks to send back to back.

    Every ``records`` object of ``partitions`` is one chunk, the same object;
    the other chunks are ``bytes``.  Partitions of one topic are grouped under
    it in the order the topic first appears.
    """
    if not KafkaApi.FETCH.supports(version):
        raise ValueError(f"Fetch v{version} is not served")
    flexible = KafkaApi.FETCH.flexible(version)
    by_topic: dict[str, list[FetchPartition]] = {}
    for part in partitions:
        by_topic.setdefault(part.topic, []).append(part)

    out = bytearray(SIZE_PREFIX_BYTES)  # the size, written once the length is known
    written = [out]  # the bytes written here: one piece before, between and after the records objects
    sent: list[Sized] = []
    out += response_header(correlation_id, KafkaApi.FETCH, version)
    if version >= 7:
        out += _INT32_INT16_INT32.pack(throttle_time_ms, error_code, session_id)
    else:
        out += _INT32.pack(throttle_time_ms)
    out += _array_length(len(by_topic), flexible)
    for topic, parts in by_topic.items():
        out += _string(topic, flexible)
        out += _array_length(len(parts), flexible)
        for part in parts:
            out += _PARTITION_HEAD.pack(part.partition, part.error_code, part.high_watermark,
                                        part.last_stable_offset)
            if version >= 5:
                out += _INT64.pack(part.log_start_offset)
            out += _array_length(len(part.aborted_transactions), flexible)
            for producer_id, first_offset in part.aborted_transactions:
                out += _ABORTED.pack(producer_id, first_offset)
                if flexible:
                    out += _NO_TAGGED_FIELDS
            if version >= 11:
                out += _NO_PREFERRED_READ_REPLICA
            records = part.records
            size = -1 if records is None else len(records)
            out += (uvarint(size + 1) if flexible else _INT32.pack(size))
            if records is not None and size > 0:
                sent.append(records)
                out = bytearray()
                written.append(out)
            if flexible:
                out += _NO_TAGGED_FIELDS  # partition
        if flexible:
            out += _NO_TAGGED_FIELDS  # topic
    if flexible:
        out += _NO_TAGGED_FIELDS  # response
    _INT32.pack_into(written[0], 0, sum(map(len, written)) + sum(map(len, sent)) - SIZE_PREFIX_BYTES)
    chunks: list[bytes | Sized] = [bytes(written[0])]
    for records, piece in zip(sent, written[1:]):
        chunks += (records, bytes(piece)) if piece else (records,)
    return chunks


def _array_length(count: int, flexible: bool) -> bytes:
    return uvarint(count + 1) if flexible else _INT32.pack(count)


def _string(value: str, flexible: bool) -> bytes:
    data = value.encode()
    return (uvarint(len(data) + 1) if flexible else _INT16.pack(len(data))) + data
