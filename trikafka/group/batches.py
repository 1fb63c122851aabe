"""Whole fetched message sets for a mirror: handed out undecoded, committed only once acknowledged."""

from __future__ import annotations

from typing import NamedTuple


from .fetcher import PartitionKey


class GroupBatch(NamedTuple):
    """A whole fetched message set, as ``GroupConsumer.next_batch`` hands it out.

    ``message_set`` holds the entries from ``offset`` to ``next_offset``
    exactly as the broker stored them (compressed wrappers included);
    ``count`` is how many messages they hold once unwrapped.
    """

    topic: str
    partition: str
    broker_id: int | None  # None: a replicated partition
    part: int
    offset: int
    next_offset: int
    message_set: bytes
    count: int


class BatchHandout:
    """``next_batch`` / ``acknowledge``; commits write ``_committable``.

    Part of ``GroupConsumer``: ``_unacked`` (partition -> starts of batches
    handed out and not acknowledged, in order) is set up in its ``__init__``.
    """

    async def next_batch(self) -> GroupBatch:
        """The next whole fetched message set, undecoded (for a mirror).

        Its messages count as delivered, but commits keep writing the batch's
        start until ``acknowledge(batch)``: what was handed out and not
        acknowledged comes again after a crash or a hand-over (at least once).
        Do not mix with message iteration.
        """
        chunk = await self._gated_chunk()  # the same gate as message iteration
        if chunk.index:
            raise RuntimeError("next_batch after message iteration left a chunk half delivered")
        self._current = None
        chunk.index = len(chunk.messages)
        end = chunk.messages[-1].next_offset
        self._positions[chunk.key] = end
        start = chunk.expect
        assert start is not None  # an accepted chunk continues a known position
        self._unacked.setdefault(chunk.key, []).append(start)
        return GroupBatch(chunk.key[0], chunk.key[1], chunk.broker_id, chunk.part, start, end, chunk.data,
                          len(chunk.messages))

    def acknowledge(self, batch: GroupBatch) -> None:
        """``batch`` is safely handled: the next commit may write past it."""
        key = (batch.topic, batch.partition)
        pending = self._unacked.get(key)
        if pending is not None and batch.offset in pending:
            pending.remove(batch.offset)
            if not pending:
                del self._unacked[key]

    def _committable(self, key: PartitionKey) -> int | None:
        """What a commit writes: the first unacknowledged batch's start, else the position."""
        pending = self._unacked.get(key)
        return pending[0] if pending else self._positions.get(key)
