"""Per-partition producer state of a Kafka-format log (docs/protocol.md §19.2, §19.3).

For each producer id that wrote to the log: its epoch and its last
``CACHED_BATCHES`` batches' sequence numbers and offsets.  Everything here is
derived from the log's batch headers: each segment's ``BatchIndex`` keeps the
batches of its own producers (``SegmentProducers``), and the log's
``ProducerStates`` is their fold, kept current by every append and folded again
after a truncation.  No I/O.

Invariants:

* an entry's batches all have the entry's epoch, in log order, at most
  ``CACHED_BATCHES`` of them; an entry with none has an unknown sequence;
* ``check`` changes nothing: the append that it allows records the batches
  (``record``) once they are written.
"""

from __future__ import annotations

from typing import Iterable, NamedTuple

from trikafka.kafka.batch import NO_PRODUCER_ID, BatchError, BatchHeader, next_sequence

CACHED_BATCHES = 5  # as Kafka: a producer has at most five batches in flight per partition


class ProducerBatch(NamedTuple):
    """One idempotent batch as the producer state keeps it."""

    epoch: int
    first_seq: int
    last_seq: int
    base_offset: int
    last_offset: int


def producer_batch(header: BatchHeader) -> ProducerBatch:
    """What the state keeps of a batch that has its offsets."""
    return ProducerBatch(header.producer_epoch, header.base_sequence,
                         next_sequence(header.base_sequence, header.last_offset_delta),
                         header.base_offset, header.base_offset + header.last_offset_delta)


class ProducerEntry:
    """One producer's epoch and last batches on one log."""

    __slots__ = ("epoch", "batches")

    def __init__(self, epoch: int):
        self.epoch = epoch
        self.batches: list[ProducerBatch] = []

    def add(self, batch: ProducerBatch) -> None:
        if batch.epoch != self.epoch:
            self.epoch = batch.epoch
            self.batches.clear()
        self.batches.append(batch)
        if len(self.batches) > CACHED_BATCHES:
            del self.batches[0]

    def copy(self) -> ProducerEntry:
        twin = ProducerEntry(self.epoch)
        twin.batches = list(self.batches)
        return twin

    def __repr__(self) -> str:
        return f"ProducerEntry(epoch={self.epoch}, batches={self.batches})"


class SegmentProducers:
    """The producers of one segment's batches: what a log's ``ProducerStates`` is folded from."""

    __slots__ = ("entries",)

    def __init__(self) -> None:
        self.entries: dict[int, ProducerEntry] = {}

    def add(self, header: BatchHeader) -> None:
        """Keep an indexed batch (with offsets) of a producer."""
        entry = self.entries.get(header.producer_id)
        if entry is None:
            entry = self.entries[header.producer_id] = ProducerEntry(header.producer_epoch)
        entry.add(producer_batch(header))

    def truncate(self, next_offset: int) -> None:
        """Forget the batches at and after ``next_offset`` (the segment's index was cut there)."""
        for producer_id, entry in list(self.entries.items()):
            entry.batches = [b for b in entry.batches if b.base_offset < next_offset]
            if not entry.batches:
                del self.entries[producer_id]


class ProducerStates:
    """The producer state of one Kafka-format log (§19.2); see the module docstring."""

    __slots__ = ("entries",)

    def __init__(self) -> None:
        self.entries: dict[int, ProducerEntry] = {}

    @classmethod
    def fold(cls, segments: Iterable[SegmentProducers]) -> ProducerStates:
        """The state the segments' batches give, oldest segment first."""
        states = cls()
        for segment in segments:
            for producer_id, entry in segment.entries.items():
                for batch in entry.batches:
                    states._add(producer_id, batch)
        return states

    def __len__(self) -> int:
        return len(self.entries)

    def entry(self, producer_id: int) -> ProducerEntry | None:
        return self.entries.get(producer_id)

    def check(self, headers: Iterable[BatchHeader]) -> int | None:
        """The leader's check of a partition's batches before they are appended (§19.3).

        Returns None when every producer batch may be appended, or the base
        offset of the first batch when all of them are duplicates (nothing is
        to be appended).  Raises ``BatchError`` (``INVALID_PRODUCER_EPOCH``,
        ``OUT_OF_ORDER_SEQUENCE``, ``INVALID``) for a batch that may not be.
        Changes nothing; batches after the first see the state the earlier
        ones would leave.
        """
        pending: dict[int, ProducerEntry] = {}
        duplicates: list[int] = []
        fresh = 0
        for header in headers:
            producer_id = header.producer_id
            if producer_id == NO_PRODUCER_ID:
                fresh += 1
                continue
            where = f"batch at {header.position} of producer {producer_id}"
            if header.producer_epoch < 0 or header.base_sequence < 0:
                raise BatchError(BatchError.INVALID, f"{where}: epoch {header.producer_epoch}, base sequence "
                                                     f"{header.base_sequence}")
            entry = pending.get(producer_id)
            if entry is None:
                known = self.entries.get(producer_id)
                entry = pending[producer_id] = known.copy() if known is not None else ProducerEntry(-1)
            duplicate = _verdict(entry, header, where)
            if duplicate is not None:
                duplicates.append(duplicate)
                continue
            fresh += 1
            entry.add(ProducerBatch(header.producer_epoch, header.base_sequence,
                                    next_sequence(header.base_sequence, header.last_offset_delta), -1, -1))
        if not duplicates:
            return None
        if fresh:
            raise BatchError(BatchError.OUT_OF_ORDER_SEQUENCE, f"{len(duplicates)} duplicate and {fresh} new "
                                                               f"batches in one partition's data")
        return duplicates[0]

    def record(self, headers: Iterable[BatchHeader]) -> None:
        """Keep the producer batches just appended (with their offsets), leader's or follower's."""
        for header in headers:
            if header.producer_id != NO_PRODUCER_ID:
                self._add(header.producer_id, producer_batch(header))

    def _add(self, producer_id: int, batch: ProducerBatch) -> None:
        entry = self.entries.get(producer_id)
        if entry is None:
            entry = self.entries[producer_id] = ProducerEntry(batch.epoch)
        entry.add(batch)


def _verdict(entry: ProducerEntry, header: BatchHeader, where: str) -> int | None:
    """§19.3's table for one batch against its producer's entry: None to append, a duplicate's base
    offset, or ``BatchError``."""
    epoch, first_seq = header.producer_epoch, header.base_sequence
    if entry.epoch < 0 or (epoch > entry.epoch and first_seq == 0):
        return None  # a producer new to the log, or its next epoch starting over
    if epoch < entry.epoch:
        raise BatchError(BatchError.INVALID_PRODUCER_EPOCH, f"{where}: epoch {epoch}, the producer is at "
                                                            f"{entry.epoch}")
    if epoch > entry.epoch:
        raise BatchError(BatchError.OUT_OF_ORDER_SEQUENCE, f"{where}: a new epoch {epoch} must start at "
                                                           f"sequence 0, not {first_seq}")
    if not entry.batches:
        return None  # the sequence is unknown (its batches were cut): this batch starts it again
    last_seq = next_sequence(first_seq, header.last_offset_delta)
    for cached in entry.batches:
        if cached.first_seq == first_seq and cached.last_seq == last_seq:
            if cached.base_offset < 0:
                raise BatchError(BatchError.OUT_OF_ORDER_SEQUENCE, f"{where}: the same batch twice in one request")
            return cached.base_offset
    expected = next_sequence(entry.batches[-1].last_seq)
    if first_seq != expected:
        raise BatchError(BatchError.OUT_OF_ORDER_SEQUENCE, f"{where}: sequence {first_seq}, expected {expected}")
    return None
