"""Three real ``trikafka serve`` processes serving one replicated partition, for fault tests.

:class:`ReplicatedWorld` owns the broker processes (fixed ports, so a broker
restarted after a SIGKILL is recognised as its own previous run and waits out
its old ZooKeeper session), one :class:`~tests.helpers.fault_proxy.FaultProxy`
per broker in front of ZooKeeper (to cut a broker off from ZooKeeper while
clients and followers still reach it), a record of every partition state seen
in ZooKeeper or in a METADATA answer, and the load: an acks -1 producer and a
consumer that both find the leader through METADATA and record, in a
:class:`~tests.helpers.ledger.Ledger`, every entry acknowledged or seen
at its byte offset.

:meth:`ReplicatedWorld.check` is the per-cycle verdict (see its docstring).
Every wait is bounded (``WAIT_S``) and ends on an observed condition.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Callable

import trio

from tests.helpers.ledger import Ledger, entries_of
from tests.helpers.fault_proxy import FaultMode, FaultProxy
from tests.helpers.zookeeper_server import open_zookeeper_proxy
from tests.helpers.broker_testing import READY_MARKER, ChildProcess, child_process
from trikafka.client import ClientError, connect
from trikafka.log.epochs import EPOCH_FILE_NAME, decode_records
from trikafka.wire import ErrorCode
from trikafka.wire.messageset import build_message_set
from trikafka.wire.reading import iter_messages
from trikafka.zk.server_setup import free_port
from trikafka.zk import KazooZooKeeperClient
from trikafka.zk import paths
from trikafka.zk.connect import parse_connect_string
from trikafka.zk.replication_store import create_topic, read_state
from trikafka.zk.replication_values import PartitionState, TopicAssignment

TOPIC = "replicated"
BROKER_IDS = (1, 2, 3)
SESSION_TIMEOUT_MS = 1500
WAIT_S = 60.0
CALL_TIMEOUT_S = 2.0  # a client call to a paused broker gives up after this
FETCH_BYTES = 64 * 1024
# Flush often, so consumers (who see only flushed, committed bytes) keep moving.
BROKER_SETTINGS = ("--set", f"zk.sessiontimeout.ms={SESSION_TIMEOUT_MS}", "--set", "log.flush.interval=20",
                   "--set", "log.default.flush.scheduler.interval.ms=20", "--log-level", "WARNING")
LINK_ERRORS = (ClientError, OSError, trio.BrokenResourceError, trio.ClosedResourceError)


@dataclass
class BrokerSlot:
    broker_id: int
    port: int
    log_dir: Path
    proxy: FaultProxy
    child: ChildProcess | None = None
    scope: trio.CancelScope | None = None
    expect_exit: bool = False
    starts: int = 0


@dataclass
class History:
    """Every (epoch -> leader) seen; two leaders in one epoch is a violation."""

    leaders: dict[int, int] = field(default_factory=dict)
    states: list[PartitionState] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)

    def note(self, epoch: int, leader: int, where: str) -> None:
        if leader < 0:
            return
        known = self.leaders.setdefault(epoch, leader)
        if known != leader:
            self.violations.append(f"epoch {epoch}: leader {known} and leader {leader} ({where})")


class ReplicatedWorld:
    """See the module docstring.  Open with :func:`open_world`."""

    def __init__(self, nursery: trio.Nursery, zk: KazooZooKeeperClient, chroot_connect: str, root: Path,
                 rng: random.Random) -> None:
        self.nursery = nursery
        self.zk = zk
        self.chroot = parse_connect_string(chroot_connect).chroot or ""
        self.root = root
        self.rng = rng
        self.slots: dict[int, BrokerSlot] = {}
        self.ledger = Ledger()
        self.history = History()
        self.not_acked = 0
        self.consumed_to = 0  # the consumer's next offset, kept across cycles

    # ----------------------------------------------------------------- brokers

    async def start(self, broker_id: int) -> None:
        """Start (or restart) broker ``broker_id``; returns once it serves."""
        slot = self.slots[broker_id]
        slot.expect_exit = False
        await self.nursery.start(self._run_broker, slot)

    async def _run_broker(self, slot: BrokerSlot, *, task_status: trio.TaskStatus[None]) -> None:
        ready_file = str(slot.log_dir) + ".port"
        with trio.CancelScope() as scope:
            slot.scope = scope
            async with child_process("serve", "--broker-id", str(slot.broker_id), "--port", str(slot.port),
                                     "--zookeeper", slot.proxy.connect_string + self.chroot,
                                     "--log-dir", str(slot.log_dir), "--ready-file", ready_file,
                                     *BROKER_SETTINGS) as child:
                slot.child = child
                slot.starts += 1
                await child.wait_for_stderr(READY_MARKER)
                task_status.started()
                await child.process.wait()
                if not slot.expect_exit:
                    raise AssertionError(f"broker {slot.broker_id} exited by itself: "
                                         f"{bytes(child.stderr[-3000:]).decode(errors='replace')}")

    async def kill(self, broker_id: int, signum: int = signal.SIGKILL) -> None:
        """Send ``signum`` (SIGKILL or SIGTERM) and wait for the process to end."""
        slot = self.slots[broker_id]
        slot.expect_exit = True
        os.kill(slot.child.pid, signum)
        with trio.fail_after(WAIT_S):
            await slot.child.process.wait()

    def pause(self, broker_id: int) -> None:
        os.kill(self.slots[broker_id].child.pid, signal.SIGSTOP)

    def resume(self, broker_id: int) -> None:
        os.kill(self.slots[broker_id].child.pid, signal.SIGCONT)

    def cut_from_zookeeper(self, broker_id: int) -> None:
        """Hold every byte between the broker and ZooKeeper: its session expires at the server
        while the broker still serves clients and followers (it has not heard yet)."""
        self.slots[broker_id].proxy.set_mode(FaultMode.STALL)

    def heal_zookeeper(self, broker_id: int) -> None:
        proxy = self.slots[broker_id].proxy
        proxy.sever()  # the held connection is dead for the server anyway
        proxy.set_mode(FaultMode.FORWARD)

    # ----------------------------------------------------------------- ZooKeeper state

    async def create_topic(self, isr: tuple[int, ...], **config: str) -> None:
        """RF 3 (replicas 1, 2, 3: broker 1 preferred), min.insync.replicas 2 unless ``config`` says."""
        settings = {"min.insync.replicas": "2", **config}
        await create_topic(self.zk, TOPIC, TopicAssignment((BROKER_IDS,), settings),
                           [PartitionState(leader=isr[0], leader_epoch=0, isr=isr, controller_epoch=0)])

    async def watch_states(self) -> None:
        """Record every partition state ZooKeeper shows (runs for the world's lifetime)."""
        async for value in self.zk.watch_data(paths.partition_state(TOPIC, 0)):
            if value is not None:
                state = PartitionState.decode(value[0])
                self.history.states.append(state)
                self.history.note(state.leader_epoch, state.leader, "ZooKeeper")

    async def state(self) -> PartitionState:
        return (await read_state(self.zk, TOPIC, 0)).state

    async def wait_state(self, accept: Callable[[PartitionState], bool], what: str) -> PartitionState:
        """The first partition state (current or later) that ``accept`` takes."""
        last: PartitionState | None = None
        with trio.move_on_after(WAIT_S):
            async for value in self.zk.watch_data(paths.partition_state(TOPIC, 0)):
                if value is not None and accept(state := PartitionState.decode(value[0])):
                    return state
                last = state if value is not None else last
        raise AssertionError(f"the partition state never became {what} in {WAIT_S} s; the last one: {last}")

    async def wait_healthy(self) -> PartitionState:
        """A leader that ZooKeeper still knows is registered, with every replica in sync."""
        return await self.wait_state(lambda s: s.leader >= 0 and sorted(s.isr) == list(BROKER_IDS),
                                     "led with a full ISR")

    # ----------------------------------------------------------------- clients

    async def metadata_leader(self) -> int | None:
        """Ask a random broker through METADATA who leads (None: no answer or no leader)."""
        broker_id = self.rng.choice(BROKER_IDS)
        with trio.move_on_after(CALL_TIMEOUT_S):
            try:
                async with await connect("127.0.0.1", self.slots[broker_id].port) as conn:
                    metadata = await conn.metadata([TOPIC])
            except LINK_ERRORS:
                return None
            (part,) = metadata.topic(TOPIC).partitions
            self.history.note(part.leader_epoch, part.leader, f"METADATA of broker {broker_id}")
            return part.leader if part.leader >= 0 else None
        return None

    async def producer(self, tag: str) -> None:
        """acks -1, forever: every acknowledged entry goes into the ledger at its offset."""
        rng = random.Random(self.rng.random())
        seq = 0
        while True:
            leader = await self.metadata_leader()
            if leader is None:
                await trio.sleep(0.05)
                continue
            with trio.move_on_after(CALL_TIMEOUT_S * 2):
                try:
                    async with await connect("127.0.0.1", self.slots[leader].port) as conn:
                        while True:
                            payloads = [f"{tag}.{seq}.{i} ".encode() * rng.randint(1, 8)
                                        for i in range(rng.randint(1, 4))]
                            seq += 1
                            data = build_message_set(payloads, magic=rng.choice([0, 1]))
                            with trio.fail_after(CALL_TIMEOUT_S):
                                (result,) = await conn.produce_acked([(TOPIC, 0, data)], acks=-1,
                                                                     timeout_ms=1000)
                            if result.error != ErrorCode.NO_ERROR:
                                self.not_acked += 1
                                break  # ask METADATA again
                            for offset, entry in entries_of(data, result.base_offset):
                                self.ledger.promise(offset, entry, f"acked by broker {leader}")
                            self.ledger.acked_messages += len(payloads)
                except (*LINK_ERRORS, trio.TooSlowError):
                    pass
            await trio.sleep(0.02)

    async def consumer(self) -> None:
        """Fetch from a random replica; every entry seen goes into the ledger at its offset."""
        while True:
            broker_id = self.rng.choice(BROKER_IDS)
            with trio.move_on_after(CALL_TIMEOUT_S * 3):
                try:
                    async with await connect("127.0.0.1", self.slots[broker_id].port) as conn:
                        for _ in range(50):
                            offset = self.consumed_to
                            with trio.fail_after(CALL_TIMEOUT_S):
                                result = await conn.fetch(TOPIC, 0, offset, FETCH_BYTES)
                            if result.error != ErrorCode.NO_ERROR:
                                break
                            entries = entries_of(bytes(result.data), offset)
                            for entry_offset, entry in entries:
                                self.ledger.promise(entry_offset, entry, f"seen at broker {broker_id}")
                                self.ledger.seen_messages += 1
                            if entries:
                                self.consumed_to = entries[-1][0] + len(entries[-1][1])
                            else:
                                await trio.sleep(0.01)
                except (*LINK_ERRORS, trio.TooSlowError):
                    pass
            await trio.sleep(0.02)

    @contextlib.asynccontextmanager
    async def load(self, tag: str) -> AsyncIterator[None]:
        """A producer and a consumer running for the duration of the block."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.producer, tag)
            nursery.start_soon(self.consumer)
            yield
            nursery.cancel_scope.cancel()

    async def wait_acknowledged(self, what: str) -> None:
        """Until the load's producer gets one more acknowledgement (writes are available again)."""
        before = self.ledger.acked_messages
        with trio.fail_after(WAIT_S):
            while self.ledger.acked_messages == before:
                await trio.sleep(0.02)

    async def produce_once(self, broker_id: int, payloads: list[bytes], acks: int, *,
                           leading: bool = False) -> Any:
        """One PRODUCE_ACKED at ``broker_id``: its result (acknowledged entries are promised).

        ``leading``: ZooKeeper already names ``broker_id`` leader, so a not-leader answer only
        means the broker has not acted on that state yet: ask again (bounded)."""
        data = build_message_set(payloads)
        not_yet = (ErrorCode.NOT_LEADER_FOR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE)
        with trio.fail_after(WAIT_S):
            async with await connect("127.0.0.1", self.slots[broker_id].port) as conn:
                while True:
                    (result,) = await conn.produce_acked([(TOPIC, 0, data)], acks=acks, timeout_ms=2000)
                    if not (leading and result.error in not_yet):
                        break
                    await trio.sleep(0.02)
        if result.error == ErrorCode.NO_ERROR and acks == -1:
            for offset, entry in entries_of(data, result.base_offset):
                self.ledger.promise(offset, entry, f"acked by broker {broker_id}")
            self.ledger.acked_messages += len(payloads)
        return result

    # ----------------------------------------------------------------- the stored replicas

    def partition_dir(self, broker_id: int) -> Path:
        return self.slots[broker_id].log_dir / f"{TOPIC}-0"

    def replica_bytes(self, broker_id: int) -> bytes:
        """The replica's log: its segment files in offset order (blocking)."""
        directory = self.partition_dir(broker_id)
        if not directory.exists():
            return b""
        segments = sorted(p for p in directory.iterdir() if p.suffix == ".kafka")
        return b"".join(p.read_bytes() for p in segments)

    def epoch_records(self, broker_id: int) -> dict[int, int]:
        """The replica's epoch file: epoch -> start offset (blocking)."""
        path = self.partition_dir(broker_id) / EPOCH_FILE_NAME
        data = path.read_bytes() if path.exists() else b""
        return {e.epoch: e.start_offset for e in decode_records(data)}

    async def wait_replicas_equal(self) -> bytes:
        """Once no one writes: wait until every replica holds the same bytes; those bytes."""
        with trio.fail_after(WAIT_S):
            while True:
                logs = [await trio.to_thread.run_sync(self.replica_bytes, b) for b in BROKER_IDS]
                if len(set(logs)) == 1 and len(logs[0]) >= self.promised_end():
                    return logs[0]
                await trio.sleep(0.05)

    def promised_end(self) -> int:
        return max((o + len(e) for o, e in self.ledger.promised.items()), default=0)

    async def check(self, label: str) -> int:
        """The per-cycle verdict; the cluster must be healthy and idle.  Checks that

        * the replicas are byte-identical (whole logs: with no writes in flight
          and every replica in the ISR, the high watermark is the log end);
        * every acknowledged entry, and every entry a consumer saw, is at its
          offset on every replica (a seen entry that vanished fails here);
        * every message stored parses with a valid CRC;
        * no epoch had two leaders (ZooKeeper states and METADATA answers), and
          every replica's epoch file agrees on where each epoch it knows starts.

        Returns the common log size.
        """
        await self.wait_healthy()
        log = await self.wait_replicas_equal()
        for _ in iter_messages(log):
            pass
        for offset, entry in self.ledger.promised.items():
            assert log[offset:offset + len(entry)] == entry, f"{label}: the entry promised at {offset} is gone"
        assert not self.history.violations, f"{label}: {self.history.violations}"
        starts: dict[int, int] = {}
        for broker_id in BROKER_IDS:
            for epoch, start in (await trio.to_thread.run_sync(self.epoch_records, broker_id)).items():
                known = starts.setdefault(epoch, start)
                assert known == start, f"{label}: epoch {epoch} starts at {known} and at {start}"
        return len(log)


@contextlib.asynccontextmanager
async def open_world(zk_chroot: str, root: Path, rng: random.Random, *, running: tuple[int, ...] = BROKER_IDS,
                     **topic_config: str) -> AsyncIterator[ReplicatedWorld]:
    """The replicated topic (ISR = ``running``) and the brokers ``running`` (each behind its own
    ZooKeeper proxy; the others can be started later with :meth:`ReplicatedWorld.start`)."""
    async with contextlib.AsyncExitStack() as stack:
        proxies = [await stack.enter_async_context(open_zookeeper_proxy(zk_chroot)) for _ in BROKER_IDS]
        zk = await stack.enter_async_context(KazooZooKeeperClient(zk_chroot, session_timeout_s=10.0))
        nursery = await stack.enter_async_context(trio.open_nursery())
        world = ReplicatedWorld(nursery, zk, zk_chroot, root, rng)
        for broker_id, proxy in zip(BROKER_IDS, proxies):
            world.slots[broker_id] = BrokerSlot(broker_id, free_port(), root / f"broker-{broker_id}", proxy)
        await world.create_topic(running, **topic_config)
        nursery.start_soon(world.watch_states)
        async with trio.open_nursery() as starting:
            for broker_id in running:
                starting.start_soon(world.start, broker_id)
        try:
            yield world
        finally:
            for slot in world.slots.values():
                slot.expect_exit = True
                if slot.child is not None and slot.child.process.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(slot.child.pid, signal.SIGCONT)
            nursery.cancel_scope.cancel()
