"""Per-partition producer state of a Kafka-format log (docs/protocol.md §19.2, §19.3, §19.6).

For each producer id that wrote to the log: its epoch, its last
``CACHED_BATCHES`` batches' sequence numbers and offsets, and its last write
time (its last batch's or marker's ``maxTimestamp``, §19.2.1); its open
transaction's first offset; and the log's aborted transactions.  Everything
here is derived from the log's batches: each segment's ``BatchIndex`` keeps
its own producers' batches and transaction events (``SegmentProducers``), and
the log's ``ProducerStates`` is their fold, kept current by every append and
folded again after a truncation (which reads the cut segment's headers again,
on its worker thread, when the segment's entries forgot batches before the
cut, ``SegmentProducers.truncate``).  No I/O here.

Invariants:

* an entry's batches all have the entry's epoch, in log order, at most
  ``CACHED_BATCHES`` of them; an entry with none has an unknown sequence;
* ``open_transactions[p]`` is the first offset of producer ``p``'s first
  transactional batch after its last marker; ``aborted`` is ordered by
  the markers' offsets (``last_offset``);
* ``check`` changes nothing: the append that it allows records the batches
  (``record``) once they are written;
* an entry's ``last_timestamp_ms`` is the ``maxTimestamp`` of the producer's
  last batch or marker in log order (-1 when none is known); ``remove_expired``
  drops only entries without an open transaction (§19.2.1);
* ``guards`` holds a verification guard (§19.5.7) only for a producer with no
  transaction open here at the guard's start; every transaction event of the
  producer clears it.  Guards are not derived from the log: a fold starts
  without them.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Iterable, NamedTuple, Sequence

from trikafka.kafka.batch import NO_PRODUCER_ID, BatchError, BatchHeader, next_sequence
from trikafka.kafka.markers import is_marker, is_transactional_data, read_marker

from .verification_guard import VerificationGuard, VerificationGuards

Buffer = bytes | bytearray | memoryview

CACHED_BATCHES = 5  # as Kafka: a producer has at most five batches in flight per partition


class ProducerBatch(NamedTuple):
    """One idempotent batch as the producer state keeps it."""

    epoch: int
    first_seq: int
    last_seq: int
    base_offset: int
    last_offset: int
    max_timestamp_ms: int = -1  # the batch header's maxTimestamp; -1 for a batch not yet written


BEGIN, ABORT, COMMIT = "begin", "abort", "commit"  # the kinds of a transaction event


class TxnEvent(NamedTuple):
    """A producer's transaction begins (its first transactional batch after a marker) or ends (a marker)."""

    offset: int
    producer_id: int
    kind: str
    timestamp_ms: int = -1  # the batch's maxTimestamp: a marker's is its producer's last write time (§19.2.1)
    coordinator_epoch: int = -1  # a marker's (§19.5.5); -1 for BEGIN
    producer_epoch: int = -1  # the batch's: a marker's fences the older ones (§19.2)


class AbortedTxn(NamedTuple):
    """An aborted transaction on one partition: its first offset and its ABORT marker's offset (§19.6)."""

    producer_id: int
    first_offset: int
    last_offset: int


def txn_event(header: BatchHeader, data: Buffer | None) -> TxnEvent | None:
    """The transaction event a batch is, if any: BEGIN for transactional data (the caller keeps only
    a producer's first after its last marker), ABORT or COMMIT for a marker (read from ``data``, the
    bytes that hold the batch at ``header.position``)."""
    if is_marker(header):
        if data is None:
            raise ValueError(f"the marker at offset {header.base_offset} needs its bytes to be read")
        found = read_marker(data, header)
        return TxnEvent(header.base_offset, header.producer_id, COMMIT if found.commit else ABORT,
                        header.max_timestamp_ms, found.coordinator_epoch, header.producer_epoch)
    if is_transactional_data(header):
        return TxnEvent(header.base_offset, header.producer_id, BEGIN, header.max_timestamp_ms,
                        producer_epoch=header.producer_epoch)
    return None


def producer_batch(header: BatchHeader) -> ProducerBatch:
    """What the state keeps of a batch that has its offsets."""
    return ProducerBatch(header.producer_epoch, header.base_sequence,
                         next_sequence(header.base_sequence, header.last_offset_delta),
                         header.base_offset, header.base_offset + header.last_offset_delta, header.max_timestamp_ms)


class ProducerEntry:
    """One producer's epoch, last batches and last write time on one log."""

    __slots__ = ("epoch", "batches", "last_timestamp_ms", "coordinator_epoch")

    def __init__(self, epoch: int):
        self.epoch = epoch
        self.batches: list[ProducerBatch] = []
        self.last_timestamp_ms = -1  # maxTimestamp of its last batch or marker (§19.2.1); -1: none known
        self.coordinator_epoch = -1  # the highest of its markers' (§19.5.5); -1: none known

    def add(self, batch: ProducerBatch) -> None:
        if batch.epoch != self.epoch:
            self.epoch = batch.epoch
            self.batches.clear()
        self.batches.append(batch)
        self.last_timestamp_ms = batch.max_timestamp_ms
        if len(self.batches) > CACHED_BATCHES:
            del self.batches[0]

    def fence(self, epoch: int, coordinator_epoch: int = -1) -> None:
        """A marker of ``epoch`` (the coordinator may have bumped it): a later epoch's sequence is unknown.
        A marker of an older ``coordinator_epoch`` is refused from now on (§19.5.5)."""
        self.coordinator_epoch = max(self.coordinator_epoch, coordinator_epoch)
        if epoch > self.epoch:
            self.epoch = epoch
            self.batches.clear()

    def copy(self) -> ProducerEntry:
        twin = ProducerEntry(self.epoch)
        twin.batches = list(self.batches)
        twin.last_timestamp_ms = self.last_timestamp_ms
        twin.coordinator_epoch = self.coordinator_epoch
        return twin

    def __repr__(self) -> str:
        return f"ProducerEntry(epoch={self.epoch}, batches={self.batches})"


class SegmentProducers:
    """The producers of one segment's batches and its transaction events: what a log's
    ``ProducerStates`` is folded from."""

    __slots__ = ("entries", "events", "_open", "_forgetful")

    def __init__(self) -> None:
        self.entries: dict[int, ProducerEntry] = {}
        self.events: list[TxnEvent] = []  # in offset order; a BEGIN only for a producer not open here
        self._open: set[int] = set()
        # Producers whose entry dropped a batch of this segment (a later epoch, a marker's bump, a sixth
        # batch): a cut of their later batches cannot be undone from the entry alone.
        self._forgetful: set[int] = set()

    def add(self, header: BatchHeader, data: Buffer | None) -> None:
        """Keep an indexed batch (with offsets) of a producer; ``data`` holds it at ``header.position``."""
        producer_id = header.producer_id
        known = self.entries.get(producer_id)
        if known is not None and known.batches and (header.producer_epoch != known.epoch
                                                     or len(known.batches) >= CACHED_BATCHES):
            self._forgetful.add(producer_id)  # conservative for a marker: it may drop none
        event = txn_event(header, data)
        if event is not None and event.kind != BEGIN:
            self.events.append(event)
            self._open.discard(producer_id)
            _mark(self.entries, event)
            return
        if event is not None and producer_id not in self._open:
            self.events.append(event)
            self._open.add(producer_id)
        _entry(self.entries, producer_id, header.producer_epoch).add(producer_batch(header))

    def truncate(self, next_offset: int) -> bool:
        """Forget the batches at and after ``next_offset`` (the segment's index was cut there): the
        entries again from the kept batches and markers, in log order.  False when that is not the
        state the segment's batches before the cut give: a producer with batches or markers cut had
        dropped earlier ones from its entry, and only the segment's headers have them (§19.2)."""
        cut = {producer_id for producer_id, entry in self.entries.items()
               if entry.batches and entry.batches[-1].base_offset >= next_offset}
        cut.update(e.producer_id for e in self.events if e.offset >= next_offset)
        exact = not cut & self._forgetful
        self.events = [e for e in self.events if e.offset < next_offset]
        kept: list[tuple[int, int, ProducerBatch | TxnEvent]] = [
            (batch.base_offset, producer_id, batch) for producer_id, entry in self.entries.items()
            for batch in entry.batches if batch.base_offset < next_offset]
        kept += [(event.offset, event.producer_id, event) for event in self.events if event.kind != BEGIN]
        self.entries, self._open = {}, set()
        for _, producer_id, item in sorted(kept, key=lambda k: k[0]):
            if isinstance(item, TxnEvent):
                _mark(self.entries, item)
            else:
                _entry(self.entries, producer_id, item.epoch).add(item)
        for event in self.events:
            (self._open.add if event.kind == BEGIN else self._open.discard)(event.producer_id)
        return exact


def _entry(entries: dict[int, ProducerEntry], producer_id: int, epoch: int) -> ProducerEntry:
    entry = entries.get(producer_id)
    if entry is None:
        entry = entries[producer_id] = ProducerEntry(epoch)
    return entry


def _mark(entries: dict[int, ProducerEntry], marker: TxnEvent) -> None:
    """A marker's effect on its producer's entry: its epochs fence the older ones, and it is the
    producer's last write (§19.2, §19.5.5)."""
    entry = _entry(entries, marker.producer_id, marker.producer_epoch)
    entry.fence(marker.producer_epoch, marker.coordinator_epoch)
    entry.last_timestamp_ms = marker.timestamp_ms


def _aborted_between(aborted: Sequence[AbortedTxn], start_offset: int, end_offset: int) -> list[AbortedTxn]:
    """The transactions of ``aborted`` (ordered by ``last_offset``) that ``[start_offset, end_offset)`` overlaps."""
    k = bisect_left(aborted, start_offset, key=lambda a: a.last_offset)
    return [a for a in aborted[k:] if a.first_offset < end_offset]


class TxnSnapshot:
    """A log's transactions as they stood at one moment (``ProducerStates.snapshot``): a copy that
    the log's appends do not change, for a reader off the event loop (§19.6)."""

    __slots__ = ("open_transactions", "aborted")

    def __init__(self, open_transactions: dict[int, int], aborted: list[AbortedTxn]):
        self.open_transactions = open_transactions  # producer id -> first offset of its open transaction
        self.aborted = aborted

    def aborted_between(self, start_offset: int, end_offset: int) -> list[AbortedTxn]:
        """As ``ProducerStates.aborted_between``, at the snapshot's moment."""
        return _aborted_between(self.aborted, start_offset, end_offset)


class ProducerStates:
    """The producer state of one Kafka-format log (§19.2, §19.6); see the module docstring."""

    __slots__ = ("entries", "open_transactions", "aborted", "guards")

    def __init__(self) -> None:
        self.entries: dict[int, ProducerEntry] = {}
        self.open_transactions: dict[int, int] = {}  # producer id -> first offset of its open transaction
        self.aborted: list[AbortedTxn] = []
        self.guards = VerificationGuards()  # the leader's verifications in flight (§19.5.7)

    @classmethod
    def fold(cls, segments: Iterable[SegmentProducers]) -> ProducerStates:
        """The state the segments' batches give, oldest segment first."""
        states = cls()
        for segment in segments:
            for producer_id, entry in segment.entries.items():
                # A segment's entry is its batches, then the fence its markers left (their epochs,
                # also when the segment holds only markers of the producer).
                folded = _entry(states.entries, producer_id, entry.epoch)
                for batch in entry.batches:
                    folded.add(batch)
                folded.fence(entry.epoch, entry.coordinator_epoch)
                folded.last_timestamp_ms = entry.last_timestamp_ms  # this segment holds its latest write so far
            for event in segment.events:
                states._apply(event)
        return states

    def __len__(self) -> int:
        return len(self.entries)

    def entry(self, producer_id: int) -> ProducerEntry | None:
        return self.entries.get(producer_id)

    def next_base_sequence(self, producer_id: int, epoch: int) -> int:
        """The base sequence that continues ``producer_id``'s batches at ``epoch`` (§19.3): 0 for a
        producer new here, a newer epoch, or a sequence no longer known.  The broker numbers the
        batches it writes for a producer with it (TxnOffsetCommit, §19.5.4)."""
        entry = self.entries.get(producer_id)
        if entry is None or entry.epoch != epoch or not entry.batches:
            return 0
        return next_sequence(entry.batches[-1].last_seq)

    def holds_open_transaction(self, producer_id: int, epoch: int) -> bool:
        """Whether ``producer_id`` has a transaction open here at ``epoch``: its first batch was
        verified with the coordinator and no marker has closed it, so its next batches need no
        verification (KIP-890 part 1, §19.5.7)."""
        entry = self.entries.get(producer_id)
        return entry is not None and entry.epoch == epoch and producer_id in self.open_transactions

    def start_verification(self, producer_id: int, epoch: int) -> VerificationGuard | None:
        """A transactional batch of ``producer_id`` at ``epoch`` is about to be verified (§19.5.7):
        None when its transaction is open here (no question, no guard), else the guard its append
        must present."""
        if self.holds_open_transaction(producer_id, epoch):
            return None
        return self.guards.start(producer_id)

    def last_stable_offset(self, high_watermark: int) -> int:
        """The LSO (§19.6): the first offset of the oldest open transaction, or the high watermark."""
        return min(min(self.open_transactions.values(), default=high_watermark), high_watermark)

    def aborted_between(self, start_offset: int, end_offset: int) -> list[AbortedTxn]:
        """The aborted transactions a read of ``[start_offset, end_offset)`` overlaps (§19.7)."""
        return _aborted_between(self.aborted, start_offset, end_offset)

    def snapshot(self) -> TxnSnapshot:
        """The open and aborted transactions now, copied: taken on the event loop, it cannot change
        half-way through a worker thread's look at it (§19.5.4)."""
        return TxnSnapshot(dict(self.open_transactions), list(self.aborted))

    def check(self, headers: Iterable[BatchHeader], guard: VerificationGuard | None = None,
              data: Buffer | None = None) -> int | None:
        """The leader's check of a partition's batches before they are appended (§19.3, §19.5.7).

        Returns None when every producer batch may be appended, or the base
        offset of the first batch when all of them are duplicates (nothing is
        to be appended).  Raises ``BatchError`` (``INVALID_PRODUCER_EPOCH``,
        ``OUT_OF_ORDER_SEQUENCE``, ``INVALID``, ``TXN_STATE``) for a batch that
        may not be: ``TXN_STATE`` for a transactional batch whose transaction
        is not open here and whose producer's recorded guard is not ``guard``;
        ``COORDINATOR_FENCED`` for a marker (read from ``data``, which holds the
        batches at their positions) of a coordinator epoch below its producer's.
        Changes nothing; batches after the first see the state the earlier
        ones would leave.
        """
        pending: dict[int, ProducerEntry] = {}
        opened: set[int] = set()  # producers whose transaction an earlier batch here opens
        duplicates: list[int] = []
        fresh = 0
        for header in headers:
            producer_id = header.producer_id
            if producer_id == NO_PRODUCER_ID:
                fresh += 1
                continue
            where = f"batch at {header.position} of producer {producer_id}"
            if is_marker(header):  # the coordinator's decision: only an older epoch is refused
                known = self.entries.get(producer_id)
                if known is not None and header.producer_epoch < known.epoch:
                    raise BatchError(BatchError.INVALID_PRODUCER_EPOCH, f"{where}: a marker of epoch "
                                                                        f"{header.producer_epoch}, the producer "
                                                                        f"is at {known.epoch}")
                if known is not None and data is not None and (
                        coordinator_epoch := read_marker(data, header).coordinator_epoch) < known.coordinator_epoch:
                    raise BatchError(BatchError.COORDINATOR_FENCED, f"{where}: a marker of coordinator epoch "
                                                                    f"{coordinator_epoch}, the producer's is "
                                                                    f"{known.coordinator_epoch}")
                fresh += 1
                continue
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
            if is_transactional_data(header) and producer_id not in opened:
                self._check_verified(header, guard, where)
                opened.add(producer_id)
            fresh += 1
            entry.add(ProducerBatch(header.producer_epoch, header.base_sequence,
                                    next_sequence(header.base_sequence, header.last_offset_delta), -1, -1))
        if not duplicates:
            return None
        if fresh:
            raise BatchError(BatchError.OUT_OF_ORDER_SEQUENCE, f"{len(duplicates)} duplicate and {fresh} new "
                                                               f"batches in one partition's data")
        return duplicates[0]

    def record(self, headers: Iterable[BatchHeader], data: Buffer | None) -> None:
        """Keep the producer batches just appended (with their offsets), leader's or follower's;
        ``data`` holds them at their positions (markers are read from it)."""
        for header in headers:
            if header.producer_id == NO_PRODUCER_ID:
                continue
            event = txn_event(header, data)
            if event is not None:
                self._apply(event)
            if event is not None and event.kind != BEGIN:
                _mark(self.entries, event)
            else:
                _entry(self.entries, header.producer_id, header.producer_epoch).add(producer_batch(header))

    def remove_expired(self, now_ms: int, expiration_ms: int) -> list[int]:
        """Drop every producer without an open transaction here whose last write time is
        ``expiration_ms`` or more before ``now_ms`` (§19.2.1); their ids, ascending.  The aborted
        transactions stay: readers still need them (§19.7)."""
        expired = sorted(producer_id for producer_id, entry in self.entries.items()
                         if producer_id not in self.open_transactions
                         and now_ms - entry.last_timestamp_ms >= expiration_ms)
        for producer_id in expired:
            del self.entries[producer_id]
            self.guards.clear(producer_id)
        return expired

    def _check_verified(self, header: BatchHeader, guard: VerificationGuard | None, where: str) -> None:
        """§19.5.7: a transactional batch opens a transaction only with its verification's guard."""
        producer_id = header.producer_id
        if self.holds_open_transaction(producer_id, header.producer_epoch) or self.guards.admits(producer_id, guard):
            return
        raise BatchError(BatchError.TXN_STATE, f"{where}: no transaction of epoch {header.producer_epoch} is "
                                               f"open here and its verification's guard is not the one recorded")

    def _apply(self, event: TxnEvent) -> None:
        self.guards.clear(event.producer_id)
        if event.kind == BEGIN:
            self.open_transactions.setdefault(event.producer_id, event.offset)
            return
        first = self.open_transactions.pop(event.producer_id, None)
        if event.kind == ABORT and first is not None:
            self.aborted.append(AbortedTxn(event.producer_id, first, event.offset))


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
