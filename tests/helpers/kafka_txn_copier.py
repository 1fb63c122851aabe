"""A transactional copier of another project's client in a child process, for tests that SIGKILL it
(docs/protocol.md §19.5: consume, produce and commit the consumed offsets in one transaction).

``python -m tests.helpers.kafka_txn_copier BOOTSTRAP GROUP INPUT OUTPUT TRANSACTIONAL_ID [BATCH]``
runs a confluent-kafka ``Consumer`` of ``GROUP`` (``read_committed``, no automatic
commits) on ``INPUT`` and a transactional ``Producer`` of ``TRANSACTIONAL_ID``.  Each
transaction copies up to ``BATCH`` records (750 by default) to the same partition of
``OUTPUT`` and commits the consumed positions with them.  librdkafka's error classes
decide what follows an error: a retriable one repeats the call, one that requires an
abort aborts and rewinds the consumer to the group's committed positions, a fatal one
(fencing) ends the process with ``FATAL_EXIT``, and a call that does not complete within
``CALL_TIMEOUT_S`` (librdkafka's ``_TIMED_OUT``), or a transaction still open
``STUCK_AFTER_S`` after it began (a watchdog thread; the threads' stacks go to stderr),
ends it with ``STUCK_EXIT``, as a supervisor restarts a wedged worker: either way it is
restarted with the same transactional id, which fences what it left open.  SIGTERM stops it between transactions
(exit 0).

It reports on stderr: ``ready``, then one ``committed <n>`` line per transaction, one
``aborted: <error>`` line per abort, and a ``jump:`` line when one consume delivered a
partition's offsets with a gap (the input is written without transactions, so its offsets
are dense), besides librdkafka's own transaction log (``debug=eos``).
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
import time
from typing import Any, Callable, TypeVar

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

FATAL_EXIT = 3
STUCK_EXIT = 4
DEFAULT_BATCH = 750
CALL_TIMEOUT_S = 30.0  # as long as a transaction may stay open (TRANSACTION_TIMEOUT_MS)
# A transaction still open this long after it began is stuck, whichever call holds it.
STUCK_AFTER_S = 2 * CALL_TIMEOUT_S
CONSUME_WAIT_S = 0.5
SESSION_TIMEOUT_MS = 6000
# A SIGKILLed copier's open transaction holds back the partitions' last stable offset until its
# restart fences it or this timeout aborts it.
TRANSACTION_TIMEOUT_MS = 30000

T = TypeVar("T")


class Fatal(Exception):
    """The producer cannot go on (fenced, or a fatal librdkafka error)."""


class Stuck(Exception):
    """A transactional call did not complete within ``CALL_TIMEOUT_S``."""


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _retrying(call: Callable[[], T]) -> T:
    """``call()`` again while librdkafka says its error is retriable; a fatal error is :class:`Fatal`."""
    while True:
        try:
            return call()
        except KafkaException as raised:
            error = raised.args[0]
            if error.fatal():
                raise Fatal(str(error)) from raised
            if error.code() == KafkaError._TIMED_OUT:
                raise Stuck(str(error)) from raised
            if error.retriable() and not error.txn_requires_abort():
                continue
            raise


class Copier:
    """One consume → produce → commit loop; the assignment changes only inside ``consume`` calls."""

    def __init__(self, bootstrap: str, group: str, source: str, target: str, transactional_id: str, batch: int):
        self.source, self.target, self.batch = source, target, batch
        self.stopping = False
        self.transaction_began: float | None = None  # time.monotonic() of the open transaction's begin
        # Counts assignment changes: a batch read across one is dropped, since librdkafka's positions
        # restart at the committed offsets and another copier may own a revoked partition now.
        self.assignment_changes = 0
        self.producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                                  "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS, "linger.ms": 5,
                                  "acks": "all", "debug": "eos"})
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                  "isolation.level": "read_committed", "enable.auto.commit": False,
                                  "auto.offset.reset": "earliest", "session.timeout.ms": SESSION_TIMEOUT_MS,
                                  "heartbeat.interval.ms": 500})

    def _changed(self, _consumer: Any, _partitions: Any) -> None:
        self.assignment_changes += 1

    def run(self) -> None:
        _retrying(lambda: self.producer.init_transactions(CALL_TIMEOUT_S))
        self.consumer.subscribe([self.source], on_assign=self._changed, on_revoke=self._changed)
        _say("ready")
        while not self.stopping:
            before = self.assignment_changes
            records = [m for m in self.consumer.consume(self.batch, CONSUME_WAIT_S) if m.error() is None]
            if not records:
                continue
            if self.assignment_changes != before:
                self._rewind()
                continue
            self._note_jumps(records)
            self._copy(records)

    def _note_jumps(self, records: list[Any]) -> None:
        last: dict[int, int] = {}
        for record in records:
            p = record.partition()
            if p in last and record.offset() != last[p] + 1:
                _say(f"jump: partition {p} from {last[p]} to {record.offset()} within one consume "
                     f"({len(records)} records, assignment changes {self.assignment_changes})")
            last[p] = record.offset()

    def watch(self) -> None:
        """The watchdog: a transaction open for ``STUCK_AFTER_S`` ends the process with ``STUCK_EXIT``."""
        while True:
            time.sleep(1.0)  # the watchdog's period
            began = self.transaction_began
            if began is not None and time.monotonic() - began > STUCK_AFTER_S:
                _say(f"stuck: a transaction open for over {STUCK_AFTER_S:.0f} s; the threads:")
                faulthandler.dump_traceback(sys.stderr)
                os._exit(STUCK_EXIT)

    def _copy(self, records: list[Any]) -> None:
        self.transaction_began = time.monotonic()
        try:
            self._copy_in_transaction(records)
        finally:
            self.transaction_began = None

    def _copy_in_transaction(self, records: list[Any]) -> None:
        self.producer.begin_transaction()
        try:
            positions: dict[int, int] = {}
            for record in records:
                self._produce(record)
                positions[record.partition()] = record.offset() + 1
            offsets = [TopicPartition(self.source, p, o) for p, o in sorted(positions.items())]
            _retrying(lambda: self.producer.send_offsets_to_transaction(
                offsets, self.consumer.consumer_group_metadata(), CALL_TIMEOUT_S))
            _retrying(lambda: self.producer.commit_transaction(CALL_TIMEOUT_S))
        except KafkaException as raised:
            error = raised.args[0]
            if error.fatal() or not error.txn_requires_abort():
                raise Fatal(str(error)) from raised
            _say(f"aborted: {error}")
            _retrying(lambda: self.producer.abort_transaction(CALL_TIMEOUT_S))
            self._rewind()
            return
        _say(f"committed {len(records)}")

    def _produce(self, record: Any) -> None:
        while True:
            try:
                self.producer.produce(self.target, value=record.value(), key=record.key(),
                                      partition=record.partition())
                return
            except BufferError:
                self.producer.poll(0.05)

    def _rewind(self) -> None:
        """Every assigned partition back to the group's committed position (read_committed waits for a
        pending transactional commit of it to be decided)."""
        assigned = self.consumer.assignment()
        if not assigned:
            return
        committed = self.consumer.committed(assigned, CALL_TIMEOUT_S)
        for partition in committed:
            where = partition.offset if partition.offset >= 0 else OFFSET_BEGINNING
            self.consumer.seek(TopicPartition(partition.topic, partition.partition, where))

    def close(self) -> None:
        self.consumer.close()
        self.producer.flush(CALL_TIMEOUT_S)


def main(argv: list[str]) -> int:
    bootstrap, group, source, target, transactional_id = argv[:5]
    batch = int(argv[5]) if len(argv) > 5 else DEFAULT_BATCH
    copier = Copier(bootstrap, group, source, target, transactional_id, batch)

    def stop(_signum: int, _frame: Any) -> None:
        copier.stopping = True

    signal.signal(signal.SIGTERM, stop)
    threading.Thread(target=copier.watch, daemon=True).start()
    try:
        copier.run()
    except Fatal as fatal:
        _say(f"fatal: {fatal}")
        return FATAL_EXIT
    except Stuck as stuck:
        _say(f"stuck: {stuck}")
        os._exit(STUCK_EXIT)  # not through librdkafka's teardown, which may wait on what is stuck
    copier.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
