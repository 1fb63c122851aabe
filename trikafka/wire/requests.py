"""The request table of the 0.7 protocol and trikafka's extensions (docs/protocol.md §2, §5, §9, §12.4).

Each request type is one ``Api`` entry in ``RequestType``: its id, its name, its request
class, its body encoder and decoder, whether it is answered, whether it is a trikafka
extension, and its metrics label.  ``encode_request``, ``decode_request_body`` (and so
``framing.RequestReader``), the broker's dispatch and its metrics all read this table;
adding a request type is one entry here, its class and body codec, one broker handler.

The table's shape (``Api``, ``ProtocolTable``) is in ``apis.py``; the 0.7 protocol sends no
version, so its entries have the one version 0.
"""

from __future__ import annotations

import enum
import struct
from typing import Union

from .apis import Api, BodyDecoder, ProtocolTable
from .cursor import INT32_MAX, FieldCursor
from .errors import LocalProtocolError, RemoteProtocolError
from .replication import (
    EpochEndOffsetRequest, ReplicaFetchRequest, decode_epoch_end_offset, decode_replica_fetch,
    encode_epoch_end_offset, encode_replica_fetch,
)
from .request_bodies import (  # noqa: F401 (re-exported: callers import requests from here)
    ACKS_APPENDED, ACKS_FLUSHED, OFFSETS_EARLIEST, OFFSETS_LATEST, CreateTopicRequest, FetchLocalRequest, FetchPart,
    FetchRequest, FetchWaitRequest, MetadataRequest, MultiFetchRequest, MultiProduceRequest, OffsetsRequest,
    ProduceAckedRequest, ProducePart, ProduceRequest, decode_create_topic, decode_fetch, decode_fetch_local,
    decode_fetch_wait, decode_metadata, decode_multifetch, decode_multiproduce, decode_offsets, decode_produce,
    decode_produce_acked, encode_create_topic, encode_fetch, encode_fetch_local, encode_fetch_wait, encode_metadata,
    encode_multifetch, encode_multiproduce, encode_offsets, encode_produce, encode_produce_acked,
)

_HEADER = struct.Struct(">ih")  # size, requestType
_TYPE = struct.Struct(">h")

Request = Union[
    ProduceRequest,
    FetchRequest,
    MultiFetchRequest,
    MultiProduceRequest,
    OffsetsRequest,
    ProduceAckedRequest,
    FetchWaitRequest,
    MetadataRequest,
    CreateTopicRequest,
    FetchLocalRequest,
    ReplicaFetchRequest,
    EpochEndOffsetRequest,
]

@enum.unique
class RequestType(ProtocolTable):
    """The int16 request types: 0-4 from 0.7, 100+ trikafka's extensions (§9), 110+ replication (§12.4)."""

    PRODUCE = Api(0, "produce", ProduceRequest, encode_produce, decode_produce, answered=False, extension=False)
    FETCH = Api(1, "fetch", FetchRequest, encode_fetch, decode_fetch, extension=False)
    MULTIFETCH = Api(2, "multifetch", MultiFetchRequest, encode_multifetch, decode_multifetch, extension=False)
    MULTIPRODUCE = Api(3, "multiproduce", MultiProduceRequest, encode_multiproduce, decode_multiproduce,
                       answered=False, extension=False)
    OFFSETS = Api(4, "offsets", OffsetsRequest, encode_offsets, decode_offsets, extension=False)
    PRODUCE_ACKED = Api(100, "produce_acked", ProduceAckedRequest, encode_produce_acked, decode_produce_acked)
    FETCH_WAIT = Api(101, "fetch_wait", FetchWaitRequest, encode_fetch_wait, decode_fetch_wait)
    METADATA = Api(102, "metadata", MetadataRequest, encode_metadata, decode_metadata)
    CREATE_TOPIC = Api(103, "create_topic", CreateTopicRequest, encode_create_topic, decode_create_topic)
    FETCH_LOCAL = Api(104, "fetch_local", FetchLocalRequest, encode_fetch_local, decode_fetch_local)
    REPLICA_FETCH = Api(110, "replica_fetch", ReplicaFetchRequest, encode_replica_fetch, decode_replica_fetch)
    EPOCH_END_OFFSET = Api(111, "epoch_end_offset", EpochEndOffsetRequest, encode_epoch_end_offset,
                           decode_epoch_end_offset)


# The table indexed for the per-request paths: an int16 id to its decoder, a class to its member.
_DECODERS: dict[int, BodyDecoder] = {t.api.key: t.api.decode for t in RequestType}
_BY_CLASS: dict[type, RequestType] = {t.api.request_class: t for t in RequestType}


def encode_request(req: Request) -> bytes:
    """The whole frame for ``req``: int32 size, int16 type, body (docs/protocol.md §2)."""
    kind = _BY_CLASS.get(type(req))
    if kind is None:
        raise LocalProtocolError(f"not a request: {req!r}")
    body = kind.api.encode(req, 0)
    size = 2 + sum(len(b) for b in body)
    if size > INT32_MAX:
        raise LocalProtocolError(f"request of {size} bytes does not fit an int32 size")
    return b"".join([_HEADER.pack(size, kind.api.key), *body])


def decode_request_body(frame: bytes) -> Request:
    """Decode the bytes after the size prefix: ``requestType:int16`` + body.

    Raises ``RemoteProtocolError`` for every closing condition of §2 the codec
    can see.  Bytes after the last field are ignored (§2).
    """
    return decode_request(frame if type(frame) is bytes else bytes(frame), 0, len(frame))


def decode_request(data: bytes, start: int, end: int) -> Request:
    """``decode_request_body(data[start:end])`` without copying the frame out of ``data``."""
    if end - start < 2:
        raise RemoteProtocolError("request body too short for request type")
    (type_id,) = _TYPE.unpack_from(data, start)
    decode = _DECODERS.get(type_id)
    if decode is None:
        raise RemoteProtocolError(f"unknown request type {type_id}")
    result: Request = decode(FieldCursor(data, start + 2, "request body", end), 0)
    return result
