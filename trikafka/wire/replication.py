"""REPLICA_FETCH (110) and EPOCH_END_OFFSET (111): the replication requests (docs/protocol.md §12.4).

Sans-I/O like the rest of ``wire``: frozen request dataclasses, their body
encoders and decoders (listed in the request table, ``requests.py``), and the
two responses (REPLICA_FETCH's carries a message-set chunk that the broker
sends with sendfile, as FETCH does).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar

from .apis import ProtocolTable
from .cursor import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, FieldCursor, check_int, encode_topic
from .errors import ErrorCode, RemoteProtocolError
from .responses import Chunk, FetchData, _data_chunks, _response_header

_INT32 = struct.Struct(">i")
_FETCH_HEAD = struct.Struct(">iii")  # replica_id, leader_epoch, max_wait_ms
_FETCH_TAIL = struct.Struct(">iqqiq")  # partition, fetch_offset, durable_offset, max_bytes, log_start_offset
_EPOCH_HEAD = struct.Struct(">ii")  # replica_id, leader_epoch
_EPOCH_TAIL = struct.Struct(">ii")  # partition, requested_epoch
_FETCH_RESPONSE_HEAD = struct.Struct(">iiqqqi")  # leader_epoch, chunk_epoch, hw, log_end, log_start_offset, isr count
_EPOCH_RESPONSE = struct.Struct(">iq")  # epoch, end_offset


@dataclass(frozen=True, slots=True)
class ReplicaFetchRequest:
    """A follower's fetch: its id, the epoch it follows, its log and fsynced ends, and its log start
    offset (-1: a 0.7 log, which has none)."""

    replica_id: int
    leader_epoch: int
    max_wait_ms: int
    topic: str
    partition: int
    fetch_offset: int
    durable_offset: int
    max_bytes: int
    log_start_offset: int = -1
    type: ClassVar[ProtocolTable]  # set by the request table (requests.py)


@dataclass(frozen=True, slots=True)
class EpochEndOffsetRequest:
    """"Where does ``requested_epoch`` end in your log?" (KIP-101)."""

    replica_id: int
    leader_epoch: int
    topic: str
    partition: int
    requested_epoch: int
    type: ClassVar[ProtocolTable]  # set by the request table (requests.py)


def _int32(name: str, value: int) -> int:
    return check_int(name, value, INT32_MIN, INT32_MAX)


def _int64(name: str, value: int) -> int:
    return check_int(name, value, INT64_MIN, INT64_MAX)


def encode_replica_fetch(req: ReplicaFetchRequest, version: int = 0) -> list[bytes]:
    """REPLICA_FETCH's body after the request type (``requests.encode_request`` frames it)."""
    return [
        _FETCH_HEAD.pack(_int32("replica_id", req.replica_id), _int32("leader_epoch", req.leader_epoch),
                         _int32("max_wait_ms", req.max_wait_ms)),
        encode_topic(req.topic),
        _FETCH_TAIL.pack(_int32("partition", req.partition), _int64("fetch_offset", req.fetch_offset),
                         _int64("durable_offset", req.durable_offset), _int32("max_bytes", req.max_bytes),
                         _int64("log_start_offset", req.log_start_offset)),
    ]


def decode_replica_fetch(cur: FieldCursor, version: int = 0) -> ReplicaFetchRequest:
    """Decode a REPLICA_FETCH body; RemoteProtocolError if short."""
    replica_id = cur.int32("replica_id")
    leader_epoch = cur.int32("leader_epoch")
    max_wait_ms = cur.int32("max_wait_ms")
    topic = cur.topic()
    partition = cur.int32("partition")
    fetch_offset = cur.int64("fetch_offset")
    durable_offset = cur.int64("durable_offset")
    max_bytes = cur.int32("max_bytes")
    return ReplicaFetchRequest(replica_id, leader_epoch, max_wait_ms, topic, partition, fetch_offset,
                               durable_offset, max_bytes, cur.int64("log_start_offset"))


def encode_epoch_end_offset(req: EpochEndOffsetRequest, version: int = 0) -> list[bytes]:
    """EPOCH_END_OFFSET's body after the request type."""
    return [
        _EPOCH_HEAD.pack(_int32("replica_id", req.replica_id), _int32("leader_epoch", req.leader_epoch)),
        encode_topic(req.topic),
        _EPOCH_TAIL.pack(_int32("partition", req.partition), _int32("requested_epoch", req.requested_epoch)),
    ]


def decode_epoch_end_offset(cur: FieldCursor, version: int = 0) -> EpochEndOffsetRequest:
    """Decode an EPOCH_END_OFFSET body; RemoteProtocolError if short."""
    replica_id = cur.int32("replica_id")
    leader_epoch = cur.int32("leader_epoch")
    topic = cur.topic()
    partition = cur.int32("partition")
    return EpochEndOffsetRequest(replica_id, leader_epoch, topic, partition, cur.int32("requested_epoch"))


# --------------------------------------------------------------------------- responses


@dataclass(frozen=True, slots=True)
class ReplicaFetchResult:
    """A decoded REPLICA_FETCH response; ``log_start_offset`` is logical, -1 for a 0.7 log (§12.4.1)."""

    error: ErrorCode
    leader_epoch: int
    chunk_epoch: int
    high_watermark: int
    log_end: int
    isr: tuple[int, ...]
    data: bytes
    log_start_offset: int = -1


def encode_replica_fetch_response(error: ErrorCode, *, leader_epoch: int, chunk_epoch: int, high_watermark: int,
                                  log_end: int, isr: tuple[int, ...], data: FetchData,
                                  log_start_offset: int = -1) -> list[Chunk]:
    """Header chunk plus the data chunk (bytes or a FileRegion for sendfile), if any."""
    head = _FETCH_RESPONSE_HEAD.pack(leader_epoch, chunk_epoch, high_watermark, log_end,
                                     _int64("log_start_offset", log_start_offset), len(isr))
    head += b"".join(_INT32.pack(_int32("isr member", r)) for r in isr)
    chunks = _data_chunks(data)
    header = _response_header(error, len(head) + sum(len(c) for c in chunks)) + head
    return [header, *chunks]


def decode_replica_fetch_response(error: int, payload: bytes) -> ReplicaFetchResult:
    """Decode the payload after ``size, errorCode``; RemoteProtocolError if malformed."""
    if len(payload) < _FETCH_RESPONSE_HEAD.size:
        raise RemoteProtocolError("replica fetch response shorter than its header")
    leader_epoch, chunk_epoch, hw, log_end, log_start, count = _FETCH_RESPONSE_HEAD.unpack_from(payload)
    pos = _FETCH_RESPONSE_HEAD.size
    if count < 0 or len(payload) < pos + 4 * count:
        raise RemoteProtocolError(f"replica fetch response with a bad ISR count {count}")
    isr = tuple(_INT32.unpack_from(payload, pos + 4 * i)[0] for i in range(count))
    return ReplicaFetchResult(ErrorCode.from_wire(error), leader_epoch, chunk_epoch, hw, log_end, isr,
                              bytes(payload[pos + 4 * count:]), log_start)


def encode_epoch_end_offset_response(error: ErrorCode, epoch: int, end_offset: int) -> bytes:
    """The whole EPOCH_END_OFFSET response frame."""
    return _response_header(error, _EPOCH_RESPONSE.size) + _EPOCH_RESPONSE.pack(epoch, end_offset)


def decode_epoch_end_offset_response(error: int, payload: bytes) -> tuple[ErrorCode, int, int]:
    """``(error, epoch, end_offset)`` from the payload after ``size, errorCode``."""
    if len(payload) < _EPOCH_RESPONSE.size:
        raise RemoteProtocolError("epoch end offset response too short")
    epoch, end = _EPOCH_RESPONSE.unpack_from(payload)
    return ErrorCode.from_wire(error), epoch, end
