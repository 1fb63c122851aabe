"""Answers to replication requests on a broker that holds no replicated partition.

Until replication serves them, REPLICA_FETCH and EPOCH_END_OFFSET get
NOT_REPLICA (a clear "not here"), never a crash or a silent close.
"""

from __future__ import annotations

from ...log.epochs import UNDEFINED_EPOCH, UNDEFINED_OFFSET
from ...wire.errors import ErrorCode
from ...wire.replication import (
    EpochEndOffsetRequest, ReplicaFetchRequest, encode_epoch_end_offset_response, encode_replica_fetch_response,
)
from ...wire.responses import Chunk


def not_a_replica(request: ReplicaFetchRequest | EpochEndOffsetRequest) -> list[Chunk]:
    """The NOT_REPLICA response to ``request``."""
    if isinstance(request, EpochEndOffsetRequest):
        return [encode_epoch_end_offset_response(ErrorCode.NOT_REPLICA, UNDEFINED_EPOCH, UNDEFINED_OFFSET)]
    return encode_replica_fetch_response(ErrorCode.NOT_REPLICA, leader_epoch=UNDEFINED_EPOCH,
                                         chunk_epoch=UNDEFINED_EPOCH, high_watermark=UNDEFINED_OFFSET,
                                         log_end=UNDEFINED_OFFSET, isr=(), data=None)
