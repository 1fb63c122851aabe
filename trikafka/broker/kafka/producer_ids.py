"""Producer ids and InitProducerId (docs/protocol.md §19.1).

``ProducerIds`` hands out ids from blocks of ``BLOCK_SIZE`` that it takes
durably before using them (from ZooKeeper in a cluster, from a file in the
log directory standalone), so an id is never handed out twice, across brokers
and restarts.  ``init_producer_id`` is the api's handler.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Awaitable, Callable

import trio
from kio.schema.errors import ErrorCode
from kio.schema.types import ProducerId
from kio.static.primitive import i16

from trikafka.kafka.framing import Request
from trikafka.log.fs import FileSystem

from .context import KafkaContext
from .entities import NO_THROTTLE, Reply

logger = logging.getLogger(__name__)

BLOCK_SIZE = 1000
MAX_EPOCH = 32766  # an epoch bump past it starts a new producer id (§19.1)
PRODUCER_IDS_FILE = ".trikafka-producer-ids"  # standalone: the next free block (§19.1)


class ProducerIds:
    """This broker's source of producer ids; ``take_block(size)`` durably takes ``size`` ids and
    returns the first."""

    def __init__(self, take_block: Callable[[int], Awaitable[int]]):
        self._take_block = take_block
        self._next = 0
        self._end = 0
        self._lock = trio.Lock()

    async def new_id(self) -> int:
        """A producer id no one has had."""
        async with self._lock:
            if self._next >= self._end:
                start = await self._take_block(BLOCK_SIZE)
                self._next, self._end = start, start + BLOCK_SIZE
                logger.info("producer ids %d-%d taken", start, start + BLOCK_SIZE - 1)
            found = self._next
            self._next += 1
            return found


def take_file_block(fs: FileSystem, log_dir: str, size: int) -> int:
    """Standalone: take ``size`` ids from ``<log-dir>/.trikafka-producer-ids``, durably.  Blocking."""
    path = os.path.join(log_dir, PRODUCER_IDS_FILE)
    start = 0
    if fs.exists(path):
        text = fs.read_file(path).decode(errors="replace").strip()
        if not text.isdigit():
            raise ValueError(f"{path} holds {text[:40]!r}, not the next producer id")
        start = int(text)
    fs.write_synced(f"{path}.tmp", f"{start + size}\n".encode())
    fs.rename(f"{path}.tmp", path)
    fs.fsync_dir(log_dir)
    return start


async def init_producer_id(service: KafkaContext, request: Request) -> Any:
    """InitProducerId (§19.1): a new id at epoch 0, or (v3+, KIP-360) the next epoch of the id the
    producer has."""
    body: Any = request.body  # Any: this api's request class at the request's version
    reply = Reply(request.api_key, request.api_version)

    def answer(error: ErrorCode, producer_id: int = -1, epoch: int = -1) -> Any:
        return reply.response(throttle_time=NO_THROTTLE, error_code=error, producer_id=ProducerId(producer_id),
                              producer_epoch=i16(epoch))

    if body.transactional_id is not None:
        return answer(ErrorCode.transactional_id_authorization_failed)
    had_id = getattr(body, "producer_id", -1)
    had_epoch = getattr(body, "producer_epoch", -1)
    if (had_id < 0) != (had_epoch < 0):
        return answer(ErrorCode.invalid_request)
    if had_id >= 0 and had_epoch < MAX_EPOCH:
        return answer(ErrorCode.none, had_id, had_epoch + 1)
    return answer(ErrorCode.none, await service.producer_ids.new_id(), 0)
