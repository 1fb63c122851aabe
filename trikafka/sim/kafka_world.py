"""One seed, the Kafka world: the shipped brokers' Kafka listeners and trikafka's own Kafka client under
faults, on a virtual clock (docs/simulation.md, "The Kafka world").

Three real brokers (``trikafka.testing.open_cluster``: the Kafka listener, its produce and fetch paths,
the group and transaction coordinators and their internal topics, replication, the controller) run
on fake disks, the fake ZooKeeper and the in-memory network, as the cluster world's do.  The workload
is ``trikafka.client.kafka``: idempotent producers write the input topic; transactional copiers read
it read_committed in the group ``copiers``, copy each record to the output topic and commit the
consumed offsets with the transaction (some they abort); a group ``readers`` reads the input and
commits; a read_committed reader reads the output.  Each client runs in incarnations: an error, or
the ``client-crash`` fault (cancelled where it stands, mid-transaction included: nothing aborts), ends
one and the next starts with a new client.  The nemesis is the cluster world's (``ClusterWorld._nemesis``)
over its broker faults (``faults.FAULT_TABLE``) plus this world's: ``client-crash`` and
``coordinator-move`` (the broker coordinating a copier's transactional id restarts),
``coordinator-crash`` (a copier and its coordinator die together just after its EndTxn),
``copier-stall`` (a copier stalls before a transaction while its group membership carries on) and
``slow-broker`` (every request to one broker is held a while).  After healing,
``kafka_promises.KafkaHistory`` judges what clients saw against the logs a fresh client reads back.
"""

from __future__ import annotations

import functools
import itertools
import random
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

import trio
from kio.schema.errors import ErrorCode

from trikafka.client.errors import ClientError
from trikafka.client.kafka import (KafkaAdmin, KafkaClient, KafkaGroupConsumer, KafkaGroupMessage, KafkaProducer, NewTopic,
                                   PartitionConsumer, PendingRecord, TopicPartition)
from trikafka.client.kafka.coordinators import find_coordinator
from trikafka.client.kafka.errors import KafkaResponseError
from trikafka.testing import open_cluster
from trikafka.util.errors import leaf_exceptions

from .checker import Violation
from .determinism import Trace, derived_random, seeded_member_ids
from .kafka_faults import (APART_GAP_S, CLIENT_ERRORS, COORDINATOR_KEY_TYPE_TRANSACTION, COPIERS, KAFKA_FAULT_TABLE,
                           KAFKA_FAULTS, Stall, copier_id)
from .kafka_promises import FinalLogs, KafkaHistory, copy_value, idempotent_value
from .world import BROKERS, SimResult, ClusterWorld, replay_command, replica_assignment, run_world

IN, OUT = "in", "out"
COPY_GROUP, READ_GROUP = "copiers", "readers"
PARTITIONS = 2
PRODUCERS, READERS = 2, 2  # (COPIERS: kafka_faults)
PRODUCE_RATE_PER_S = 10.0  # each producer's
ABORT_SHARE = 0.2  # of a copier's transactions
COMMIT_SHARE = 0.3  # of a reader's records, after which it commits
TRANSACTION_TIMEOUT_MS = 10_000
SESSION_TIMEOUT_S = 6.0
RESTART_AFTER_S = (0.1, 3.0)  # a client incarnation that ended: the next starts after this long
SETTLE_S = 90.0
OPEN_STATES = ("Ongoing", "PrepareCommit", "PrepareAbort")
# The brokers' settings: internal topics the size of the world's, the transaction reaper within the
# settle time, a group's first rebalance at once (Kafka's names and defaults otherwise).
BROKER_SETTINGS: dict[str, Any] = {
    "offsets_topic_num_partitions": PARTITIONS, "transaction_state_log_num_partitions": PARTITIONS,
    "group_initial_rebalance_delay_ms": 0, "group_min_session_timeout_ms": 1000,
    "transaction_abort_timed_out_transaction_cleanup_interval_ms": 1000, "offsets_topic_replication_factor": 3,
    "transaction_state_log_replication_factor": 3}
INTERNAL_TOPICS = ("__consumer_offsets", "__transaction_state")
DEFAULT_DURATION_S = 60.0


@dataclass
class Slot:
    """One client of the workload, run in incarnations; ``scope`` is the running one's (a crash cancels it)."""

    name: str
    index: int
    body: Callable[[Slot, int], Awaitable[None]]
    scope: trio.CancelScope
    incarnation: int = 0  # the running one's number
    moved_on: trio.Event = field(default_factory=trio.Event)  # set: the next incarnation may start
    paused: dict[int, trio.Event] = field(default_factory=dict)  # incarnation -> set when it wakes
    end_txn_sent: trio.Event | None = None  # armed by ``coordinator-crash``: set as the copier sends EndTxn
    stall: Stall | None = None  # armed by ``copier-stall``


def run_seed(seed: int, *, duration_s: float = DEFAULT_DURATION_S, faults: tuple[str, ...] = KAFKA_FAULTS,
             plant: str | None = None) -> SimResult:
    """Run one seed of the Kafka world (blocking: its own ``trio.run``) and judge it."""
    trace = Trace()
    world = KafkaWorld(seed, duration_s, faults, trace)
    simulated_s, context = run_world(world, plant, seeded_member_ids(derived_random(seed, "ids")))
    return SimResult(seed, world.violation is None, trace.digest, simulated_s, world.violation, context,
                     len(world.history.acked), world.faults, len(world.history.handed), trace.lines,
                     replay_command(seed, duration_s=duration_s, faults=faults, plant=plant, world="kafka",
                                    every_fault=KAFKA_FAULTS))


class KafkaWorld(ClusterWorld):
    """Everything one seed of the Kafka world runs (the fault machinery is the cluster world's)."""

    fault_table = KAFKA_FAULT_TABLE

    def __init__(self, seed: int, duration_s: float, faults: tuple[str, ...], trace: Trace):
        super().__init__(seed, duration_s, faults, trace, replica_assignment(BROKERS, PARTITIONS))
        self.topic = IN
        self.topics = (IN, OUT, *INTERNAL_TOPICS)
        self.history = KafkaHistory()
        self.client_streams = {name: derived_random(seed, name) for name in ("producers", "copiers", "readers")}
        self.apart = {name: derived_random(seed, name) for name in faults if name in APART_GAP_S}
        self.fault_names = tuple(name for name in faults if name not in APART_GAP_S)  # the nemesis' draws
        self.counters = [itertools.count() for _ in range(PRODUCERS)]
        self.read_positions = [0] * PARTITIONS
        self.first_copier = PRODUCERS
        self.slots = [*(Slot(f"producer-{i}", i, self._idempotent_produce, trio.CancelScope()) for i in range(PRODUCERS)),
                      *(Slot(f"copier-{i}", i, self._copy, trio.CancelScope()) for i in range(COPIERS)),
                      *(Slot(f"reader-{i}", i, self._read_group, trio.CancelScope()) for i in range(READERS)),
                      Slot("committed-reader", 0, self._read_committed, trio.CancelScope())]

    async def run(self) -> None:
        async with open_cluster(self.brokers, seed=self.seed, clock_ms=self._now_ms,
                                log_flush_interval=self.streams.config.choice((1, 4, 50)), survive_failures=True,
                                loopback=False, **BROKER_SETTINGS) as cluster, cluster.coordinator() as zk:
            self.cluster, self.zk = cluster, zk
            await self._create_topics()
            self._add_latency()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._nemesis)
                for slot in self.slots:
                    nursery.start_soon(self._keep_running, slot)
                await trio.sleep(self.duration_s)
                nursery.cancel_scope.cancel()
            await self._heal()
            if self.violation is None:
                await self._judge()

    async def _nemesis(self) -> None:
        """The cluster world's nemesis over the kinds it draws, and each kind of ``APART_GAP_S`` on its
        own stream."""
        async with trio.open_nursery() as nursery:
            for name, stream in self.apart.items():
                nursery.start_soon(self._apart, name, stream)
            if self.fault_names:
                await super()._nemesis()

    async def _apart(self, name: str, stream: random.Random) -> None:
        fault = self.fault_table[name]
        async with trio.open_nursery() as faults:
            while True:
                await trio.sleep(stream.uniform(*APART_GAP_S[name]))
                victim, step, scale = stream.randrange(self.brokers), stream.random(), stream.random()
                self.faults += 1
                faults.start_soon(fault.inject, self, victim, fault.duration_s(step, scale))

    def _now_ms(self) -> int:
        return int(trio.current_time() * 1000)

    def _client(self) -> KafkaClient:
        return self.cluster.kafka_client(request_timeout_s=5.0, retry_backoff_s=0.2, max_retries=10)

    async def _create_topics(self) -> None:
        """The two topics, and the internal ones (a first FindCoordinator creates each), before any fault."""
        async with self._client() as client:
            created = await KafkaAdmin(client).create_topics(
                [NewTopic(name, PARTITIONS, 3, {"min.insync.replicas": "2"}) for name in (IN, OUT)])
            assert all(error is None for error in created.values()), created
            for key, key_type in ((COPY_GROUP, 0), (copier_id(0), COORDINATOR_KEY_TYPE_TRANSACTION)):
                while True:
                    try:
                        await find_coordinator(client, key, key_type)
                        break
                    except ClientError:
                        await trio.sleep(0.1)
        self.trace.add(f"topics {IN}, {OUT} and {', '.join(INTERNAL_TOPICS)} created")

    # ----------------------------------------------------------------- the clients

    async def _keep_running(self, slot: Slot) -> None:
        """Incarnation after incarnation; a paused one (``client-pause``) is left behind, a zombie that
        wakes later, while the next one starts."""
        stream = self.client_streams["readers" if slot.name.startswith("reader") else "copiers"]
        async with trio.open_nursery() as incarnations:
            for incarnation in itertools.count():
                slot.scope, slot.incarnation, slot.moved_on = trio.CancelScope(), incarnation, trio.Event()
                incarnations.start_soon(self._incarnation, slot, incarnation, slot.scope, slot.moved_on)
                await slot.moved_on.wait()
                await trio.sleep(stream.uniform(*RESTART_AFTER_S))

    async def _incarnation(self, slot: Slot, incarnation: int, scope: trio.CancelScope, moved_on: trio.Event) -> None:
        with scope:
            try:
                await slot.body(slot, incarnation)
            except* CLIENT_ERRORS as errors:  # (from inside the client's nurseries: a group)
                exc = leaf_exceptions(errors)[0]
                self.trace.add(f"{slot.name}.{incarnation} ended: {type(exc).__name__} {exc}"[:200])
        moved_on.set()

    async def _awake(self, slot: Slot, incarnation: int, *, may_stall: bool = False) -> None:
        """Return once this incarnation is not paused (a copier checks before each request it makes in a
        transaction); an armed ``copier-stall`` strikes where ``may_stall`` (before a transaction begins)
        if this is the running incarnation (not a ``client-pause`` zombie, fenced already)."""
        paused = slot.paused.get(incarnation)
        if paused is not None:
            await paused.wait()
        stall = slot.stall
        if (may_stall and stall is not None and not stall.struck.is_set() and incarnation == slot.incarnation
                and incarnation not in slot.paused):
            stall.victim = (slot.name, incarnation)
            stall.struck.set()
            await stall.resumed.wait()

    async def _idempotent_produce(self, slot: Slot, incarnation: int) -> None:
        """Records submitted at the producer's rate without waiting for the one before (several batches
        in flight); a record that fails is noted and the producer carries on, so its next batch starts
        a new epoch (KIP-360) while older batches of the last epoch may still be retried."""
        stream = self.client_streams["producers"]
        async with self._client() as client, KafkaProducer.open(client, acks=-1, idempotent=True,
                                                                linger_s=0.005) as producer:
            while True:
                await trio.sleep(stream.expovariate(PRODUCE_RATE_PER_S))
                partition, value = stream.randrange(PARTITIONS), idempotent_value(slot.index, next(self.counters[slot.index]))
                await producer.submit(IN, value, partition=partition, timestamp_ms=self._now_ms(),
                                      on_delivery=functools.partial(self._delivered, slot, incarnation, value))

    def _delivered(self, slot: Slot, incarnation: int, value: bytes, pending: PendingRecord) -> None:
        """A record's batch was answered (the producer's delivery callback: no task per record)."""
        try:
            partition, offset = pending.result()
        except CLIENT_ERRORS as exc:
            self.trace.add(f"{slot.name} {value.decode()} failed: {type(exc).__name__} {exc}"[:200])
            return
        self.trace.add(f"{slot.name} {value.decode()} acked at in-{partition}@{offset}")
        self.fail(self.history.acknowledged(partition, offset, value, incarnation))

    def _on_assigned(self, group: str, consumer: KafkaGroupConsumer) -> Callable[[list[TopicPartition]], Awaitable[None]]:
        async def assigned(partitions: list[TopicPartition]) -> None:
            m = consumer.membership
            self.trace.add(f"{group} {m.member_id} generation {m.generation_id}: {[tp.partition for tp in partitions]}")
            self.fail(self.history.assigned(group, m.generation_id, m.member_id, [tp.partition for tp in partitions]))
        return assigned

    def _group_consumer(self, client: KafkaClient, group: str, *, read_committed: bool) -> KafkaGroupConsumer:
        consumer = KafkaGroupConsumer(client, group, [IN], auto_offset_reset="earliest", enable_auto_commit=False,
                                      session_timeout_s=SESSION_TIMEOUT_S, heartbeat_interval_s=1.0,
                                      rebalance_timeout_s=10.0, max_wait_s=0.2, read_committed=read_committed)
        consumer.on_assigned = self._on_assigned(group, consumer)
        return consumer

    async def _copy(self, slot: Slot, incarnation: int) -> None:
        """read_committed consume -> produce -> send offsets -> commit (or abort, then start again)."""
        stream, tid = self.client_streams["copiers"], copier_id(slot.index)
        async with self._client() as client, KafkaProducer.open(
                client, transactional_id=tid, transaction_timeout_ms=TRANSACTION_TIMEOUT_MS, linger_s=0.005) as producer:
            await producer.init_transactions()
            manager = producer.transactions
            assert manager is not None
            consumer = self._group_consumer(client, COPY_GROUP, read_committed=True)
            batch: list[KafkaGroupMessage] = []

            async def revoked(partitions: list[TopicPartition]) -> None:
                # Records read and not yet copied are dropped with the partitions: their next owner
                # (maybe this member again) reads them from the committed offsets.
                batch.clear()

            consumer.on_revoked = revoked
            async with consumer:
                wanted, transactions = stream.randint(1, 3), itertools.count()
                async for message in consumer:
                    self.fail(self.history.handed_out(IN, message.partition, message.record.offset,
                                                      message.record.value or b""))
                    if not batch:  # the generation the records were read in fences their offsets' commit
                        metadata = consumer.group_metadata()
                    batch.append(message)
                    if len(batch) < wanted:
                        continue
                    label = f"{tid}.{incarnation}.{next(transactions)}"
                    records = list(batch)  # (a revocation meanwhile clears the batch, not what was read)
                    await self._awake(slot, incarnation, may_stall=True)
                    manager.begin()
                    offsets: dict[TopicPartition, int] = {}
                    for m in records:
                        await self._awake(slot, incarnation)
                        value = copy_value(m.partition, m.record.offset, label)
                        await producer.send(OUT, value, partition=m.partition, timestamp_ms=self._now_ms())
                        self.history.sent(label, m.partition, value)
                        offsets[TopicPartition(IN, m.partition)] = m.record.offset + 1
                    await self._awake(slot, incarnation)
                    await producer.send_offsets(metadata, offsets)
                    commit = stream.random() >= ABORT_SHARE
                    await self._awake(slot, incarnation)
                    await (manager.commit if commit else manager.abort)(functools.partial(self._flush, slot,
                                                                                          incarnation, producer))
                    self.trace.add(f"{label} {'committed' if commit else 'aborted'}: "
                                   f"{sorted((tp.partition, o) for tp, o in offsets.items())}")
                    self.fail(self.history.ended(label, commit))
                    if not commit:
                        return  # the next incarnation reads again from the committed offsets
                    batch.clear()
                    wanted = stream.randint(1, 3)

    async def _flush(self, slot: Slot, incarnation: int, producer: KafkaProducer) -> None:
        """A transaction's flush, after which its EndTxn goes out: an armed ``coordinator-crash`` hears of it."""
        await producer.flush()
        if slot.end_txn_sent is not None and incarnation == slot.incarnation:
            slot.end_txn_sent.set()

    async def _read_group(self, slot: Slot, incarnation: int) -> None:
        stream = self.client_streams["readers"]
        async with self._client() as client, \
                self._group_consumer(client, READ_GROUP, read_committed=False) as consumer:
            async for message in consumer:
                self.fail(self.history.handed_out(IN, message.partition, message.record.offset,
                                                  message.record.value or b"", READ_GROUP))
                if stream.random() >= COMMIT_SHARE:
                    continue
                positions = {tp.partition: offset for tp, offset in consumer.consumed.items() if offset >= 0}
                try:
                    await consumer.commit()
                except KafkaResponseError as exc:  # refused (a rebalance, a coordinator moving): read on
                    self.trace.add(f"{slot.name} commit refused: {exc}")
                    continue
                self.trace.add(f"{slot.name} committed {sorted(positions.items())}")
                for partition, offset in sorted(positions.items()):
                    self.fail(self.history.committed(READ_GROUP, partition, offset))

    async def _read_committed(self, slot: Slot, incarnation: int) -> None:
        async with self._client() as client:
            consumers = [PartitionConsumer(client, OUT, p, self.read_positions[p], max_wait_s=0.2,
                                           read_committed=True) for p in range(PARTITIONS)]
            while True:
                for partition, consumer in enumerate(consumers):
                    for record in await consumer.fetch():
                        self.fail(self.history.read(partition, record.offset, record.value or b""))
                    assert consumer.position is not None
                    self.read_positions[partition] = consumer.position

    # ----------------------------------------------------------------- the end state

    async def _judge(self) -> None:
        judged: FinalLogs | None = None
        with trio.move_on_after(SETTLE_S):
            async with self._client() as client:
                admin = KafkaAdmin(client)
                while True:
                    try:
                        before = [await self._settled(topic) for topic in (IN, OUT)]
                        if None in before:
                            await trio.sleep(0.5)
                            continue
                        if not await _open_transactions(admin) and not await _unsettled_groups(admin):
                            logs = await self._final_logs(client)
                            # The same leaders at the same high watermarks after the read as before:
                            # a leader elected meanwhile starts from the HW it knew, maybe 0, and a
                            # read from it finds nothing (docs/protocol.md §12.6).
                            if (not logs.unstable and not logs.pending_offsets
                                    and [await self._settled(topic) for topic in (IN, OUT)] == before):
                                judged = logs
                                break
                    except CLIENT_ERRORS:
                        pass
                    await trio.sleep(0.5)
        async with self._client() as client:
            with trio.move_on_after(SETTLE_S):
                if judged is None:  # never settled: judge what can be read
                    open_ids = await _open_transactions(KafkaAdmin(client))
                    unsettled = await _unsettled_groups(KafkaAdmin(client))
                    judged = await self._final_logs(client)
                    judged.open_transactions, judged.unsettled_groups = open_ids, unsettled
                logs = judged
                self.trace.add(f"settled: {sum(map(len, logs.inputs.values()))} input records, "
                               f"{sum(map(len, logs.outputs_committed.values()))} copies, copiers at "
                               f"{logs.copier_offsets}, {len(self.history.acked)} acked")
                self.fail(self.history.finish(logs))
                return
        self.fail(Violation("the cluster heals", f"the logs could not be read {SETTLE_S:.0f} s after healing"))

    async def _final_logs(self, client: KafkaClient) -> FinalLogs:
        inputs, outputs, unstable = {}, {}, {}
        for partition in range(PARTITIONS):
            inputs[partition], _ = await _read_all(client, IN, partition, read_committed=False)
            outputs[partition], (stable, high_watermark) = await _read_all(client, OUT, partition, read_committed=True)
            if stable < high_watermark:
                unstable[partition] = (stable, high_watermark)
        committed: dict[int, int] = {}
        pending: list[int] = []
        for partition in range(PARTITIONS):  # one at a time: a pending one refuses only itself
            try:
                fetched = await KafkaAdmin(client).list_group_offsets(COPY_GROUP, [TopicPartition(IN, partition)])
            except KafkaResponseError as exc:
                if exc.error_code != ErrorCode.unstable_offset_commit:
                    raise
                pending.append(partition)  # a transaction holds it: judged as one that never ended
                continue
            committed.update((tp.partition, max(offset, 0)) for tp, offset in fetched.items())
        readers = await KafkaAdmin(client).list_group_offsets(
            READ_GROUP, [TopicPartition(IN, partition) for partition in range(PARTITIONS)])
        group_offsets = {(READ_GROUP, tp.partition): offset for tp, offset in readers.items()}
        return FinalLogs(inputs, outputs, committed, [], unstable, pending, group_offsets)


async def _open_transactions(admin: KafkaAdmin) -> list[str]:
    """The copiers' transactional ids left Ongoing or Prepare*, each described by its coordinator, which
    loads the id's partition before it answers.  Not ListTransactions: each broker lists only the
    partitions it has loaded, so while a ``__transaction_state`` leadership moves every listing is
    empty (no broker leads, or the new leader has not loaded yet) and an open id goes unseen."""
    open_ids = []
    for tid in (copier_id(index) for index in range(COPIERS)):
        try:
            described = await admin.describe_transactions([tid])
        except KafkaResponseError as exc:
            if exc.error_code != ErrorCode.transactional_id_not_found:
                raise
            continue  # never initialised: nothing open
        if described[tid].state in OPEN_STATES:
            open_ids.append(tid)
    return open_ids


async def _unsettled_groups(admin: KafkaAdmin) -> list[str]:
    """The world's groups not Empty, each as ``<group> <state> with <n> members`` (once the clients are
    gone, every member's session expires and each group ends Empty)."""
    described = await admin.describe_groups((COPY_GROUP, READ_GROUP))
    return [f"{group} {d.state} with {len(d.members)} members" for group, d in sorted(described.items())
            if d.state != "Empty"]


async def _read_all(client: KafkaClient, topic: str, partition: int, *,
                    read_committed: bool) -> tuple[dict[int, bytes], tuple[int, int]]:
    """Every record of the partition (offset -> value) and (the position reached, the high watermark):
    read until a fetch brings nothing new (read_committed stops at the last stable offset)."""
    records: dict[int, bytes] = {}
    async with PartitionConsumer(client, topic, partition, 0, max_wait_s=0.0, read_committed=read_committed) as consumer:
        while True:
            before = consumer.position
            for record in await consumer.fetch():
                records[record.offset] = record.value or b""
            assert consumer.position is not None
            if consumer.position >= consumer.high_watermark or consumer.position == before:
                return records, (consumer.position, consumer.high_watermark)
