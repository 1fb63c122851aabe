"""The clients of the transactions world (docs/simulation.md, "Transactions").

``SimCopier`` is a consume-transform-produce loop with a transactional id, as Kafka's
``TransactionalMessageCopier`` runs it: InitProducerId, the committed position of its input
partition, then transactions of 1-4 input records, each copied to one of the output partitions,
with the consumed offset sent into the transaction (AddOffsetsToTxn, TxnOffsetCommit) before
EndTxn commits or aborts.  A request without an answer in ``REQUEST_TIMEOUT_MS`` is sent again
(AddPartitionsToTxn, EndTxn) or, for a Produce, ends the transaction by InitProducerId (the epoch
bump that fences the lost request, KIP-360); a commit whose answer is lost is retried or, as an
application may, aborted.  A fenced producer stops; the world starts the id's next incarnation.
``SimIdempotent`` is an idempotent producer that retries each batch with its sequence until it is
acknowledged.  ``SimReader`` reads the output partitions, read_committed or not.

Each client has one request in flight (max.in.flight 1: a retry is the only reordering), and a
frozen client holds what reaches it until it wakes.
"""

from __future__ import annotations

import itertools
import random
from typing import Any, Callable, Protocol

from kio.schema.errors import ErrorCode

from trikafka.kafka.batch import TRANSACTIONAL, next_sequence
from trikafka.kafka.records import build_batch

from .determinism import Trace
from .txn_promises import copier_value, idempotent_value

REQUEST_TIMEOUT_MS = 1500
BACKOFF_MS = 100
TXN_TIMEOUT_MS = 3000
PRODUCE_EVERY_MS = 100
READ_EVERY_MS = 200
ABORT_PERCENT = 15  # transactions the copier aborts on its own
GIVE_UP_COMMIT_PERCENT = 30  # commits with a lost answer that the application aborts instead
RETRIABLE = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
                       ErrorCode.coordinator_load_in_progress, ErrorCode.concurrent_transactions,
                       ErrorCode.not_leader_or_follower, ErrorCode.network_exception})

Deliver = Callable[[Callable[[Any], None]], None]  # at the broker: handles the request, calls back its answer
# (connection, deliver): requests on one connection (to the coordinator, to one partition's leader) and
# their answers keep their order
Request = tuple[str, Deliver]


class ClientWorld(Protocol):
    """What the clients see of the world (``txn_world.TransactionsWorld``)."""

    now_ms: int
    trace: Trace
    duration_ms: int
    output_partitions: int

    def at(self, when_ms: int, callback: Callable[..., None], *args: Any) -> None: ...
    def send(self, client: Any, request: Request, answered: Callable[[Any], None]) -> None:
        """Any: the sending client and each request kind's own answer."""

    def to_coordinator(self, call: Callable[[Any, Callable[[Any], None]], None], error: Callable[[ErrorCode], Any]) \
            -> Request: ...
    def produce(self, partition: tuple[str, int], data: bytes, transactional_id: str | None) -> Request: ...
    def commit_offset(self, source: int, producer_id: int, producer_epoch: int, transactional_id: str,
                      offset: int) -> Request: ...
    def committed_offset(self, source: int) -> Request: ...
    def read(self, partition: int, offset: int, committed: bool) -> Request: ...
    def new_producer_id(self) -> int: ...
    def began(self, producer_id: int, epoch: int, label: str) -> None: ...
    def acknowledged(self, label: str, partition: int, values: list[bytes]) -> None: ...
    def commit_acknowledged(self, label: str) -> None: ...
    def fenced(self, client: Any) -> None: ...
    def shown(self, reader: Any, partition: int, records: list[tuple[int, bytes]]) -> None: ...


class SimClient:
    """One client process: its request in flight, its timeouts, freezing (see the module docstring)."""

    def __init__(self, world: ClientWorld, name: str, rng: random.Random):
        self.world, self.name, self.rng = world, name, rng
        self.alive = True
        self.frozen = False
        self.delayed_until_ms = 0  # its requests take longer until then (request-delay)
        self.losing_until_ms = 0  # its answers are lost until then (lost-answers)
        self.connections: dict[str, tuple[int, int]] = {}  # connection -> (last arrival, last answer) in ms
        self._held: list[Callable[[], None]] = []
        self._pending = 0
        self._numbers = itertools.count(1)

    def call(self, request: Request, answered: Callable[[Any], None], timed_out: Callable[[], None]) -> None:
        """Send one request; ``answered`` with its answer or ``timed_out`` after ``REQUEST_TIMEOUT_MS``."""
        number = self._pending = next(self._numbers)

        def answer(result: Any) -> None:
            if number == self._pending:
                self._pending = 0
                answered(result)

        def expire() -> None:
            if number == self._pending:
                self._pending = 0
                timed_out()

        self.world.send(self, request, lambda result: self.event(answer, result))
        self.world.at(self.world.now_ms + REQUEST_TIMEOUT_MS, self.event, expire)

    def later(self, delay_ms: int, callback: Callable[..., None], *args: Any) -> None:
        self.world.at(self.world.now_ms + delay_ms, self.event, callback, *args)

    def event(self, callback: Callable[..., None], *args: Any) -> None:
        """Run ``callback`` now, later if the process is frozen, never if it died."""
        if not self.alive:
            return
        if self.frozen:
            self._held.append(lambda: callback(*args))
        else:
            callback(*args)

    def crash(self) -> None:
        self.alive = False

    def freeze(self) -> None:
        self.frozen = True

    def wake(self) -> None:
        self.frozen = False
        held, self._held = self._held, []
        for callback in held:
            self.event(callback)


class SimCopier(SimClient):
    """One incarnation of the transactional copier of input partition ``source``."""

    def __init__(self, world: ClientWorld, source: int, incarnation: int, rng: random.Random):
        super().__init__(world, f"copier-{source}.{incarnation}", rng)
        self.tid, self.source, self.incarnation = f"copier-{source}", source, incarnation
        self.producer_id = self.epoch = -1
        self.position = 0
        self.sequences: dict[tuple[str, int], int] = {}
        self.label = ""
        self.transactions = 0
        self.stopped = False  # fenced, or done at the end of the load

    def start(self) -> None:
        self.event(self._init)

    def _init(self) -> None:
        def answered(result: tuple[ErrorCode, int, int]) -> None:
            error, producer_id, epoch = result
            if error == ErrorCode.none:
                self.producer_id, self.epoch, self.sequences = producer_id, epoch, {}
                self.world.trace.add(f"{self.name} initialised: producer {producer_id} epoch {epoch}")
                self._fetch_position()
            elif error in RETRIABLE:
                self.later(BACKOFF_MS, self._init)
            else:
                self._fenced(f"InitProducerId {error.name}")

        self.call(self.world.to_coordinator(lambda c, reply: c.init_producer_id(
            self.tid, TXN_TIMEOUT_MS, lambda *r: reply(r)), lambda e: (e, -1, -1)), answered, self._init)

    def _fetch_position(self) -> None:
        def answered(result: int | ErrorCode) -> None:
            if isinstance(result, ErrorCode):
                self.later(BACKOFF_MS, self._fetch_position)
                return
            self.position = result
            self._begin()

        self.call(self.world.committed_offset(self.source), answered, self._fetch_position)

    def _begin(self) -> None:
        if self.world.now_ms >= self.world.duration_ms:
            self.stopped = True
            return
        self.transactions += 1
        self.label = f"c{self.source}i{self.incarnation}t{self.transactions}"
        count = self.rng.randint(1, 4)
        plan: dict[int, list[int]] = {}
        for index in range(self.position, self.position + count):
            plan.setdefault(self.rng.randrange(self.world.output_partitions), []).append(index)
        commit = self.rng.randrange(100) >= ABORT_PERCENT
        self._add([("out", p) for p in sorted(plan)], lambda: self._produce(sorted(plan.items()), count, commit),
                  first=True)

    def _add(self, partitions: list[tuple[str, int]], then: Callable[[], None], first: bool = False) -> None:
        def answered(error: ErrorCode) -> None:
            if error == ErrorCode.none:
                if first:
                    self.world.began(pid, epoch, self.label)
                then()
            elif error in RETRIABLE:
                self.later(BACKOFF_MS, self._add, partitions, then, first)
            else:
                self._fenced(f"AddPartitionsToTxn {error.name}")

        pid, epoch = self.producer_id, self.epoch
        self.call(self.world.to_coordinator(lambda c, reply: c.add_partitions(self.tid, pid, epoch, partitions, reply),
                                            lambda e: e), answered, lambda: self._add(partitions, then, first))

    def _produce(self, plan: list[tuple[int, list[int]]], count: int, commit: bool) -> None:
        if not plan:
            offsets = ("__consumer_offsets", self.source)
            self._add([offsets], lambda: self._send_offsets(count, commit))
            return
        partition, indexes = plan[0]
        name = ("out", partition)
        values = [copier_value(self.label, self.source, i) for i in indexes]
        sequence = self.sequences.get(name, 0)
        data = build_batch(values, producer_id=self.producer_id, producer_epoch=self.epoch, base_sequence=sequence,
                           control_attributes=TRANSACTIONAL, timestamp_ms=0)

        def answered(result: tuple[ErrorCode, int]) -> None:
            error = result[0]
            if error == ErrorCode.none:
                self.sequences[name] = next_sequence(sequence, len(values))
                self.world.acknowledged(self.label, partition, values)
                self._produce(plan[1:], count, commit)
            elif error in RETRIABLE:
                self.later(BACKOFF_MS, self._produce, plan, count, commit)
            else:
                self._fenced(f"Produce {error.name}")

        self.call(self.world.produce(name, data, self.tid), answered, self._lost_produce)

    def _lost_produce(self) -> None:
        """A Produce without an answer: its fate unknown, the transaction ends with a new epoch (KIP-360)."""
        self.world.trace.add(f"{self.name}: a Produce timed out, transaction {self.label} abandoned")
        self._init()

    def _send_offsets(self, count: int, commit: bool) -> None:
        def answered(result: tuple[ErrorCode, int]) -> None:
            error = result[0]
            if error == ErrorCode.none:
                self._end(count, commit)
            elif error in RETRIABLE:
                self.later(BACKOFF_MS, self._send_offsets, count, commit)
            else:
                self._fenced(f"TxnOffsetCommit {error.name}")

        self.call(self.world.commit_offset(self.source, self.producer_id, self.epoch, self.tid, self.position + count),
                  answered, self._lost_produce)

    def _end(self, count: int, commit: bool) -> None:
        def answered(error: ErrorCode) -> None:
            if error == ErrorCode.none:
                if commit:
                    self.world.commit_acknowledged(self.label)
                    self.position += count
                self._begin()
            elif error in RETRIABLE:
                self.later(BACKOFF_MS, self._end, count, commit)
            elif error == ErrorCode.invalid_txn_state:
                self._init()  # an abort after a commit that stood: the outcome is read back from the offsets
            else:
                self._fenced(f"EndTxn {error.name}")

        def lost() -> None:
            give_up = commit and self.rng.randrange(100) < GIVE_UP_COMMIT_PERCENT
            if give_up:
                self.world.trace.add(f"{self.name}: commit of {self.label} unanswered, aborting instead")
            self._end(count, commit and not give_up)

        pid, epoch = self.producer_id, self.epoch
        self.call(self.world.to_coordinator(lambda c, reply: c.end_transaction(self.tid, pid, epoch, commit, reply),
                                            lambda e: e), answered, lost)

    def _fenced(self, why: str) -> None:
        self.world.trace.add(f"{self.name} fenced ({why}) in {self.label}")
        self.stopped = True
        self.alive = False
        self.world.fenced(self)


class SimIdempotent(SimClient):
    """An idempotent producer (no transactional id): each batch retried with its sequence until acknowledged."""

    def __init__(self, world: ClientWorld, incarnation: int, rng: random.Random):
        super().__init__(world, f"idempotent.{incarnation}", rng)
        self.producer_id = -1
        self.sequences: dict[int, int] = {}
        self.written = 0
        self.stopped = False

    def start(self) -> None:
        self.producer_id, self.sequences = self.world.new_producer_id(), {}
        self.world.trace.add(f"{self.name}: producer {self.producer_id}")
        self.event(self._next)

    def _next(self) -> None:
        if self.world.now_ms >= self.world.duration_ms:
            self.stopped = True
            return
        partition = self.rng.randrange(self.world.output_partitions)
        values = [idempotent_value(self.written + i) for i in range(self.rng.randint(1, 3))]
        self.written += len(values)
        sequence = self.sequences.get(partition, 0)
        self._send(partition, values, sequence)

    def _send(self, partition: int, values: list[bytes], sequence: int) -> None:
        data = build_batch(values, producer_id=self.producer_id, producer_epoch=0, base_sequence=sequence,
                           timestamp_ms=0)

        def answered(result: tuple[ErrorCode, int]) -> None:
            error = result[0]
            if error == ErrorCode.none:
                self.sequences[partition] = next_sequence(sequence, len(values))
                self.world.acknowledged("idem", partition, values)
                self.later(PRODUCE_EVERY_MS, self._next)
            elif error in RETRIABLE:
                self.later(BACKOFF_MS, self._send, partition, values, sequence)
            else:  # its sequence is lost to the partition: a new producer id, new records
                self.world.trace.add(f"{self.name}: {error.name}, a new producer id")
                self.start()

        self.call(self.world.produce(("out", partition), data, None), answered,
                  lambda: self._send(partition, values, sequence))


class SimReader(SimClient):
    """A reader of every output partition from offset 0, read_committed or read_uncommitted."""

    def __init__(self, world: ClientWorld, committed: bool, rng: random.Random):
        super().__init__(world, "reader" if committed else "uncommitted-reader", rng)
        self.committed = committed
        self.positions = [0] * world.output_partitions

    def start(self) -> None:
        self.event(self._poll, 0)

    def _poll(self, partition: int) -> None:
        def answered(result: tuple[list[tuple[int, bytes]], int] | ErrorCode) -> None:
            if not isinstance(result, ErrorCode):
                records, self.positions[partition] = result
                self.world.shown(self, partition, records)
            following = (partition + 1) % self.world.output_partitions
            self.later(READ_EVERY_MS if following == 0 else 0, self._poll, following)

        self.call(self.world.read(partition, self.positions[partition], self.committed), answered,
                  lambda: self._poll(partition))
