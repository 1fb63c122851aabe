"""GroupDelivery: messages and whole batches handed to the application, only through the gate."""

from __future__ import annotations

import logging
from typing import NamedTuple

import trio
from trio_util import AsyncBool

from trikafka.wire.keys import split_key
from trikafka.zk.client import ZooKeeperClient
from trikafka.zk.errors import ZooKeeperClientError
from trikafka.zk.ops import SessionState

from .batches import GroupBatch
from .config import GroupConfig
from .fetch_control import Fetchers
from .fetcher import Chunk
from .membership import Membership
from .ownership import Ownership

log = logging.getLogger("trikafka.group.consumer")  # one logger for the whole consumer

# The iterator hands out up to this many messages of a fetched chunk between
# real checkpoints (it always checks for cancellation); other tasks run in between.
MESSAGES_PER_CHECKPOINT = 64


class GroupMessage(NamedTuple):
    """A message as the group consumer delivers it.

    ``partition`` is the registry name ``"<broker>-<partition>"``; ``offset`` is
    where its entry starts and ``next_offset`` what a commit after it stores
    (docs/protocol.md §4: inner messages of a compressed wrapper share the wrapper's start).
    """

    topic: str
    partition: str
    broker_id: int | None  # None: a replicated partition (read from its current leader)
    part: int
    offset: int
    next_offset: int
    payload: bytes
    attributes: int = 0  # the message's attributes byte: its KEYED and TOMBSTONE bits

    @property
    def key(self) -> bytes | None:
        """The key of a keyed message (compacted topics), None for a plain one."""
        return split_key(self.payload, self.attributes)[0]

    @property
    def value(self) -> bytes:
        """The payload without its key (empty for a tombstone); a plain message's whole payload."""
        return split_key(self.payload, self.attributes)[1]


class GroupDelivery:
    """Hands out the fetched chunks' messages (or whole chunks) in order.

    Nothing is handed out unless the gate is open: a live, connected session
    whose registration is confirmed since its last dropped connection, no
    rebalance in progress (``rebalancing``), and a chunk of the current
    generation that continues the partition's position.
    """

    def __init__(self, zk: ZooKeeperClient, config: GroupConfig, *, membership: Membership, ownership: Ownership,
                 fetchers: Fetchers, rebalancing: AsyncBool):
        self._zk = zk
        self._config = config
        self._membership = membership
        self._ownership = ownership
        self._fetchers = fetchers
        self._rebalancing = rebalancing
        self._current: Chunk | None = None  # the chunk being delivered from
        self._since_checkpoint = 0

    async def next_message(self) -> GroupMessage:
        """The next message, once the gate is open."""
        # Fast path: the next message of the current chunk, when nothing changed.
        self._since_checkpoint += 1
        if self._since_checkpoint >= MESSAGES_PER_CHECKPOINT:
            self._since_checkpoint = 0
            await trio.lowlevel.checkpoint()
        else:
            await trio.lowlevel.checkpoint_if_cancelled()
        chunk = self._current
        if (chunk is not None and chunk.generation == self._ownership.generation
                and chunk.index < len(chunk.messages)
                and self._zk.state.value is SessionState.CONNECTED and not self._rebalancing.value
                and self._membership.current()):
            return self._take(chunk)
        while True:
            chunk = await self._gated_chunk()
            if chunk.index < len(chunk.messages):
                return self._take(chunk)
            self._current = None

    def _take(self, chunk: Chunk) -> GroupMessage:
        message = chunk.messages[chunk.index]
        chunk.index += 1
        self._ownership.positions[chunk.key] = message.next_offset
        return GroupMessage(chunk.key[0], chunk.key[1], chunk.broker_id, chunk.part, message.offset,
                            message.next_offset, bytes(message.payload), message.attributes)

    async def next_batch(self) -> GroupBatch:
        """The next whole fetched message set, undecoded (see ``GroupConsumer.next_batch``)."""
        chunk = await self._gated_chunk()  # the same gate as message iteration
        if chunk.index:
            raise RuntimeError("next_batch after message iteration left a chunk half delivered")
        self._current = None
        chunk.index = len(chunk.messages)
        end = chunk.messages[-1].next_offset
        start = chunk.expect
        assert start is not None  # an accepted chunk continues a known position
        self._ownership.hand_out(chunk.key, start, end)
        return GroupBatch(chunk.key[0], chunk.key[1], chunk.broker_id, chunk.part, start, end, chunk.data,
                          len(chunk.messages))

    async def _gated_chunk(self) -> Chunk:
        """The chunk to deliver from, once the gate is open."""
        while True:
            await self._zk.state.wait_value(SessionState.CONNECTED)
            await self._rebalancing.wait_value(False)
            if self._zk.state.value is not SessionState.CONNECTED or self._rebalancing.value:
                continue
            self._membership.check_session()
            if not self._membership.confirmed():
                try:
                    await self._membership.confirm_registration()
                except ZooKeeperClientError:
                    await trio.sleep(self._config.fetcher_backoff_s)
                continue
            chunk = self._current
            if chunk is not None and chunk.generation == self._ownership.generation:
                return chunk
            self._current = None
            chunk = await self._fetchers.receive()
            if self._accept(chunk):
                self._current = chunk
            # and check the gate again before delivering from it

    def _accept(self, chunk: Chunk) -> bool:
        """Whether ``chunk`` continues the current position; applies resets and errors."""
        ownership = self._ownership
        if chunk.generation != ownership.generation or chunk.key not in ownership.owned:
            return False
        if ownership.positions.get(chunk.key) != chunk.expect:
            log.debug("consumer %s: dropped a chunk of %s/%s at %s (position %s)", self._membership.consumer_id,
                      *chunk.key, chunk.expect, ownership.positions.get(chunk.key))
            return False
        if chunk.error is not None:
            raise chunk.error
        if chunk.new_position is not None:
            ownership.positions[chunk.key] = chunk.new_position
            return False
        return bool(chunk.messages)
