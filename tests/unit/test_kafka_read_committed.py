"""What a read_committed reader keeps of fetched batches (docs/protocol.md §19.6)."""

from __future__ import annotations

import struct

from trikafka.kafka.batch import CONTROL, PADDING_ATTRIBUTES, TRANSACTIONAL, BatchHeader
from trikafka.kafka.markers import ABORT as ABORT_MARKER, COMMIT as COMMIT_MARKER
from trikafka.kafka.read_committed import committed_batches
from trikafka.kafka.records import Record


def batch(base: int, count: int, producer_id: int = -1, attributes: int = 0,
          marker: int | None = None) -> tuple[BatchHeader, list[Record]]:
    header = BatchHeader(0, base, 0, -1, 2, 0, attributes, count - 1, 0, 0, producer_id, 0, 0, count)
    if marker is not None:
        return header, [Record(base, 0, struct.pack(">hh", 0, marker), b"\x00\x00\x00\x00\x00\x00")]
    return header, [Record(base + i, 0, None, b"%d" % (base + i)) for i in range(count)]


def offsets(kept) -> list[int]:  # type: ignore[no-untyped-def]
    return [r.offset for _, records in kept for r in records]


def test_aborted_transactions_and_control_batches_are_never_delivered() -> None:
    txn, ctl = TRANSACTIONAL, TRANSACTIONAL | CONTROL
    log = [
        batch(0, 2),                                   # plain
        batch(2, 2, producer_id=7, attributes=txn),    # 7's transaction, aborted below
        batch(4, 2, producer_id=8, attributes=txn),    # 8's transaction, committed
        batch(6, 1, producer_id=7, attributes=txn),
        batch(7, 1, producer_id=7, attributes=ctl, marker=ABORT_MARKER),
        batch(8, 1, producer_id=8, attributes=ctl, marker=COMMIT_MARKER),
        batch(9, 2, producer_id=7, attributes=txn),    # 7's next transaction: not in the aborted list
        batch(11, 1, producer_id=7, attributes=ctl, marker=COMMIT_MARKER),
        (BatchHeader(0, 12, 0, -1, 2, 0, PADDING_ATTRIBUTES, 2, 0, 0, -1, -1, -1, 0), []),  # cleaner's padding
        batch(15, 1),
    ]
    kept = list(committed_batches(log, aborted=[(7, 2)]))
    assert offsets(kept) == [0, 1, 4, 5, 9, 10, 15]


def test_an_aborted_transaction_starting_inside_a_batch_counts_from_that_batch() -> None:
    # Kafka's rule: a transaction is open from the batch whose last offset reaches its first offset.
    log = [batch(0, 4, producer_id=3, attributes=TRANSACTIONAL),
           batch(4, 1, producer_id=3, attributes=TRANSACTIONAL | CONTROL, marker=ABORT_MARKER)]
    assert offsets(committed_batches(log, aborted=[(3, 2)])) == []
    assert offsets(committed_batches(log, aborted=[])) == [0, 1, 2, 3]


def test_each_aborted_transaction_is_skipped_from_its_own_first_offset() -> None:
    # Several aborted transactions, listed in any order, each open from its own first offset to
    # its producer's ABORT marker; a producer's batches outside a transaction (not transactional)
    # are delivered even while its aborted transaction is open, as Kafka's reader does.
    txn, ctl = TRANSACTIONAL, TRANSACTIONAL | CONTROL
    log = [
        batch(0, 2, producer_id=7, attributes=txn),    # 7's aborted transaction opens at 0
        batch(2, 1, producer_id=7),                    # 7's idempotent batch, no transaction
        batch(3, 1, producer_id=8, attributes=txn),    # 8's aborted transaction opens at 3, its last offset
        batch(4, 1, producer_id=9, attributes=txn),    # 9's, committed
        batch(5, 1, producer_id=7, attributes=ctl, marker=ABORT_MARKER),
        batch(6, 1, producer_id=8, attributes=txn),
        batch(7, 1, producer_id=8, attributes=ctl, marker=ABORT_MARKER),
        batch(8, 1, producer_id=9, attributes=ctl, marker=COMMIT_MARKER),
    ]
    for aborted in ([(7, 0), (8, 3)], [(8, 3), (7, 0)]):
        assert offsets(committed_batches(log, aborted=aborted)) == [2, 4]
