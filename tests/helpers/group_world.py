"""A whole consumer-group world in one Trio run, for property and fault tests.

:class:`GroupWorld` owns in-process brokers (each registered in ZooKeeper with
its own session), group consumers (each on its own coordinator session), a
record of every produced and every delivered message, and the checks the
rebalancing tests share:

* :meth:`GroupWorld.settle`: waits until the group's ownership in ZooKeeper
  equals ``assign_group`` of the live membership and every live consumer's
  ``owned`` set is its share of it (one owner per partition, only live ones);
* :meth:`GroupWorld.finish`: restarts stopped brokers, lets every consumer run
  freely until every produced message has been delivered, then
  :meth:`GroupWorld.check_deliveries`: nothing lost, nothing invented, order
  and contiguity kept within each partition, and duplicates only from the
  uncommitted range of a consumer that crashed or lost its session.

Two ZooKeeper backends: :class:`FakeBackend` (in-process, pair it with
``MockClock(autojump_threshold=0)``) and :class:`KazooBackend` (a real server,
real time).  A crash is modelled by :class:`CrashableCoordinator`: from the
crash on, every coordinator call of that consumer fails at once, so its exit
path can neither commit nor release anything (a process that died), and its
session then ends: at the session timeout for the fake (ephemerals linger,
as after a real crash), or by closing the kazoo session.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import logging
import math
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Mapping

import trio

from trikafka.broker import BrokerConfig, serve
from trikafka.broker.server import inline_blocking
from trikafka.client import ACKS_FLUSHED, connect
from trikafka.group.assign import assign_group, partition_owners
from trikafka.group.registry import decode_offset, decode_owner, decode_topic_count
from trikafka.testing import FakeZooKeeperClient, FakeFileSystem, FakeZooKeeper
from trikafka.wire import ErrorCode, ProducePart, build_message_set
from trikafka.zk import ZooKeeperClientClosedError, KazooZooKeeperClient, NoNodeError
from trikafka.zk.registry import BrokerRegistration

from tests.helpers.fault_proxy import FaultProxy

log = logging.getLogger(__name__)

GROUP = "g"
FAKE_CHROOT = "/world"
FAKE_SESSION_TIMEOUT_S = 3.0
KAZOO_SESSION_TIMEOUT_S = 2.0
FAST_RETRY = dict(max_tries=-1, delay=0.05, backoff=1.5, max_delay=0.5, max_jitter=0.1)


# -- backends ---------------------------------------------------------------------


class FakeBackend:
    """FakeZooKeeper + FakeZooKeeperClient; every timeout is Trio (mock) time."""

    kind = "fake"
    settle_timeout_s = 300.0
    drain_timeout_s = 600.0
    poll_s = 0.05
    session_timeout_s = FAKE_SESSION_TIMEOUT_S

    def __init__(self) -> None:
        self.server = FakeZooKeeper()

    async def open_coordinator(self, *, admin: bool = False) -> FakeZooKeeperClient:
        zk = FakeZooKeeperClient(self.server, session_timeout_s=self.session_timeout_s, chroot=FAKE_CHROOT)
        await zk.start()
        return zk

    def broker_fs(self) -> FakeFileSystem:
        return FakeFileSystem()

    def broker_serve_kwargs(self, fs: Any) -> dict[str, Any]:
        return dict(fs=fs, run_blocking=inline_blocking, clock_ms=lambda: int(trio.current_time() * 1000))

    async def expire(self, zk: FakeZooKeeperClient) -> None:
        generation = zk.session_generation.value
        zk.expire()
        with trio.fail_after(self.settle_timeout_s):
            await zk.session_generation.wait_value(lambda g: g > generation)

    def cut_off(self, zk: FakeZooKeeperClient) -> None:
        """A crashed process: its connection is gone, the server expires the
        session after the timeout (the expiry timer runs in ``zk``)."""
        zk.disconnect()

    async def linger_after_crash(self, zk: FakeZooKeeperClient) -> None:
        # Keep the (disconnected) coordinator open until the server has
        # expired the session, so the ephemerals linger like a dead process's.
        await trio.sleep(self.session_timeout_s + 0.5)


class KazooBackend:
    """Real ZooKeeper: coordinators on ``connect_string`` (a chroot of its own)."""

    kind = "kazoo"
    settle_timeout_s = 30.0
    drain_timeout_s = 60.0
    poll_s = 0.05
    session_timeout_s = KAZOO_SESSION_TIMEOUT_S

    def __init__(self, connect_string: str, server_hosts: str, tmp_dir: str) -> None:
        self.connect_string = connect_string
        self.server_hosts = server_hosts
        self.tmp_dir = tmp_dir
        self._dirs = itertools.count()

    async def open_coordinator(self, *, admin: bool = False) -> KazooZooKeeperClient:
        # The admin coordinator opens first and creates the chroot if needed.
        zk = KazooZooKeeperClient(self.connect_string, session_timeout_s=self.session_timeout_s,
                                  connection_retry=dict(FAST_RETRY), ensure_chroot=admin)
        await zk.start()
        return zk

    def broker_fs(self) -> None:
        return None

    def broker_serve_kwargs(self, fs: Any) -> dict[str, Any]:
        return {}

    async def expire(self, zk: KazooZooKeeperClient) -> None:
        from tests.helpers.zookeeper_server import expire_session

        await expire_session(zk, self.server_hosts, timeout_s=self.settle_timeout_s)

    def cut_off(self, zk: KazooZooKeeperClient) -> None:
        pass  # closing the kazoo session (below) ends it at once

    async def linger_after_crash(self, zk: KazooZooKeeperClient) -> None:
        pass


# -- a coordinator that can "die" -------------------------------------------------

_OPERATIONS = frozenset({
    "create", "get", "set", "delete", "exists", "children", "ensure_path", "multi",
    "create_ephemeral_expect_conflict", "wait_connected", "wait_reconnected",
})


class CrashableCoordinator:
    """Delegates to a real coordinator until :meth:`crash`; then every
    operation raises ``ZooKeeperClientClosedError`` at once."""

    def __init__(self, real: Any) -> None:
        self._real = real
        self.crashed = False
        # Fault injection: awaited before every operation (with the op's name).
        self.before_op: Callable[[str], Awaitable[None]] | None = None
        self.operations = 0

    def crash(self) -> None:
        self.crashed = True

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._real, name)
        if name in _OPERATIONS:
            @functools.wraps(attr)
            async def guarded(*args: Any, **kwargs: Any) -> Any:
                if self.crashed:
                    raise ZooKeeperClientClosedError("the consumer process crashed")
                self.operations += 1
                if self.before_op is not None:
                    await self.before_op(name)
                return await attr(*args, **kwargs)
            return guarded
        if name in ("watch_data", "watch_children") and self.crashed:
            raise ZooKeeperClientClosedError("the consumer process crashed")
        return attr


# -- records ----------------------------------------------------------------------


@dataclass(frozen=True)
class Delivery:
    order: int
    consumer: str
    generation: Any
    topic: str
    partition: str
    offset: int
    next_offset: int
    payload: bytes


@dataclass(frozen=True)
class SessionLoss:
    """A crash or session expiry of ``consumer``; ``committed`` is the group's
    committed offsets (``(topic, partition) -> offset``) read at that moment."""

    consumer: str
    kind: str
    committed: Mapping[tuple[str, str], int]


@dataclass
class BrokerSlot:
    broker_id: int
    num_partitions: int
    log_dir: str
    fs: Any
    proxied: bool = False
    running: bool = False
    port: int = 0  # the broker's own port (the harness produces there)
    proxy: FaultProxy | None = None  # consumers reach a proxied broker through this
    stop_requested: trio.Event = field(default_factory=trio.Event)
    stopped: trio.Event = field(default_factory=trio.Event)
    registration: BrokerRegistration | None = None
    connection: Any = None


@dataclass
class ConsumerSlot:
    name: str
    subscription: Any
    config: Any
    consumer_id: str | None = None
    group_consumer: Any = None
    wrapper: CrashableCoordinator | None = None
    real_zk: Any = None
    credit: float = 0
    credit_changed: trio.Event = field(default_factory=trio.Event)
    pull_scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    task_scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    done: trio.Event = field(default_factory=trio.Event)
    state: str = "starting"  # live, stopped, crashed

    def grant(self, n: float) -> None:
        self.credit += n
        self.credit_changed.set()
        self.credit_changed = trio.Event()


def payload_for(topic: str, partition: str, seq: int) -> bytes:
    return f"{topic}|{partition}|{seq}".encode()


def parse_payload(payload: bytes) -> tuple[str, str, int]:
    topic, partition, seq = payload.decode().split("|")
    return topic, partition, int(seq)


# -- the world --------------------------------------------------------------------


class GroupWorld:
    """Brokers, consumers and records for one test run (see module docstring).

    Use ``async with GroupWorld.open(backend, consumer_config_factory) as world``.
    """

    def __init__(self, backend: Any, nursery: trio.Nursery, admin: Any, *,
                 group: str = GROUP, log_root: str = "/brokers-data") -> None:
        self.backend = backend
        self.nursery = nursery
        self.admin = admin  # a coordinator for the harness's own reads
        self.group = group
        self.log_root = log_root
        self.brokers: dict[int, BrokerSlot] = {}
        self.topics: list[str] = []
        self.consumers: dict[str, ConsumerSlot] = {}
        self.produced: dict[tuple[str, str], list[bytes]] = {}
        self.deliveries: list[Delivery] = []
        self.losses: list[SessionLoss] = []
        self.trace: list[str] = []
        self._orders = itertools.count()

    @classmethod
    @contextlib.asynccontextmanager
    async def open(cls, backend: Any, *, group: str = GROUP, log_root: str = "/brokers-data"):
        admin = await backend.open_coordinator(admin=True)
        try:
            async with trio.open_nursery() as nursery:
                world = cls(backend, nursery, admin, group=group, log_root=log_root)
                try:
                    yield world
                finally:
                    nursery.cancel_scope.cancel()
        finally:
            # not in a new cancel scope: the fake coordinator's nursery must unwind in LIFO order
            await admin.aclose()

    def note(self, text: str) -> None:
        self.trace.append(f"[{trio.current_time():9.3f}] {text}")

    # -- brokers ----------------------------------------------------------------

    async def start_broker(self, broker_id: int, num_partitions: int = 2, *, proxied: bool = False) -> BrokerSlot:
        """Start (or restart, with the same data) broker ``broker_id`` and
        register it and every world topic in ZooKeeper.  A ``proxied`` broker
        advertises a :class:`FaultProxy` (``slot.proxy``) in front of itself."""
        slot = self.brokers.get(broker_id)
        if slot is None:
            slot = BrokerSlot(broker_id, num_partitions, f"{self.log_root}/broker-{broker_id}",
                              self.backend.broker_fs(), proxied=proxied)
            self.brokers[broker_id] = slot
        assert not slot.running, f"broker {broker_id} is already running"
        slot.stop_requested, slot.stopped = trio.Event(), trio.Event()
        await self.nursery.start(self._broker_task, slot)
        self.note(f"broker {broker_id} up on port {slot.port}")
        return slot

    async def _broker_task(self, slot: BrokerSlot, *, task_status: trio.TaskStatus[None]) -> None:
        config = BrokerConfig(broker_id=slot.broker_id, host="127.0.0.1", port=0, log_dir=slot.log_dir,
                              num_partitions=slot.num_partitions, num_threads=1,
                              graceful_shutdown_timeout_s=1.0)
        zk = await self.backend.open_coordinator()
        try:
            async with trio.open_nursery() as nursery:
                broker = await nursery.start(functools.partial(
                    serve, config, **self.backend.broker_serve_kwargs(slot.fs)))
                slot.port = advertised_port = broker.port
                proxy_scope = trio.CancelScope()
                if slot.proxied:
                    slot.proxy = FaultProxy("127.0.0.1", broker.port)
                    await nursery.start(self._run_in_scope, proxy_scope, slot.proxy.serve)
                    advertised_port = slot.proxy.port
                registration = BrokerRegistration(zk, slot.broker_id, "127.0.0.1", advertised_port)
                slot.registration = registration
                registration_scope = trio.CancelScope()
                registration_done = trio.Event()
                await nursery.start(self._run_registration, registration, registration_scope,
                                    registration_done, {t: slot.num_partitions for t in self.topics})
                slot.running = True
                task_status.started()
                await slot.stop_requested.wait()
                slot.running = False
                # Deregister first (consumers see the broker leave), then stop serving.
                registration_scope.cancel()
                await registration_done.wait()
                if slot.connection is not None:
                    await slot.connection.aclose()
                    slot.connection = None
                broker.shutdown()
                proxy_scope.cancel()
        finally:
            slot.running = False
            # not in a new cancel scope: the fake coordinator's nursery must unwind in LIFO order
            await zk.aclose()
            slot.stopped.set()

    @staticmethod
    async def _run_in_scope(scope: trio.CancelScope, serve: Callable[..., Awaitable[None]], *,
                            task_status: trio.TaskStatus[None]) -> None:
        with scope:
            await serve(task_status=task_status)

    @staticmethod
    async def _run_registration(registration: BrokerRegistration, scope: trio.CancelScope, done: trio.Event,
                                topics: Mapping[str, int], *, task_status: trio.TaskStatus[None]) -> None:
        # run() re-registers after every session expiry and deregisters when cancelled.
        try:
            with scope:
                await registration.run(topics, task_status=task_status)
        finally:
            done.set()

    async def stop_broker(self, broker_id: int) -> None:
        slot = self.brokers[broker_id]
        slot.stop_requested.set()
        await slot.stopped.wait()
        self.note(f"broker {broker_id} down")

    async def add_topic(self, topic: str) -> None:
        """Register ``topic`` on every running broker (and on later ones)."""
        if topic not in self.topics:
            self.topics.append(topic)
        for slot in self.brokers.values():
            if slot.running and slot.registration is not None:
                await slot.registration.register_topic(topic, slot.num_partitions)
        self.note(f"topic {topic} added")

    async def produce(self, topic: str, broker_id: int, partition: int, count: int) -> list[bytes]:
        """Append ``count`` messages (acked once flushed, i.e. visible)."""
        slot = self.brokers[broker_id]
        assert slot.running
        key = (topic, f"{broker_id}-{partition % slot.num_partitions}")
        part = partition % slot.num_partitions
        sent = self.produced.setdefault(key, [])
        payloads = [payload_for(topic, key[1], len(sent) + i) for i in range(count)]
        if slot.connection is None:
            slot.connection = await connect("127.0.0.1", slot.port)
        results = await slot.connection.produce_acked(
            [ProducePart(topic, part, build_message_set(payloads))], acks=ACKS_FLUSHED)
        assert results[0].error == ErrorCode.NO_ERROR, results
        sent.extend(payloads)
        self.note(f"produced {count} to {topic}/{key[1]}")
        return payloads

    # -- consumers ----------------------------------------------------------------

    async def add_consumer(self, name: str, subscription: Any, config: Any, *, credit: float = 0) -> ConsumerSlot:
        """Start a group consumer on a session of its own; returns once it is
        registered (its ``__aenter__`` finished)."""
        slot = ConsumerSlot(name, subscription, config, credit=credit)
        self.consumers[name] = slot
        await self.nursery.start(self._consumer_task, slot)
        self.note(f"consumer {name} ({slot.consumer_id}) joined")
        return slot

    async def _consumer_task(self, slot: ConsumerSlot, *, task_status: trio.TaskStatus[None]) -> None:
        from trikafka.group import GroupConsumer

        real = await self.backend.open_coordinator()
        slot.real_zk = real
        slot.wrapper = CrashableCoordinator(real)
        try:
            try:
                with slot.task_scope:
                    async with GroupConsumer(slot.wrapper, self.group, slot.subscription,
                                             consumer_id=slot.name, config=slot.config) as consumer:
                        slot.group_consumer = consumer
                        slot.consumer_id = consumer.consumer_id
                        slot.state = "live"
                        task_status.started()
                        with slot.pull_scope:
                            await self._pull(slot, consumer)
            except BaseException as exc:
                if slot.state != "crashed":
                    raise
                # A crashed consumer's exit path fails: that is the point.  Only
                # cancellation from outside (the world closing) goes on.
                if isinstance(exc, BaseExceptionGroup):
                    _crash_errors, rest = exc.split(Exception)
                    if rest is not None:
                        raise rest
                elif not isinstance(exc, Exception):
                    raise
            if slot.state == "crashed":
                await self.backend.linger_after_crash(real)
        finally:
            # not in a new cancel scope: the fake coordinator's nursery must unwind in LIFO order
            await real.aclose()
            slot.done.set()

    async def _pull(self, slot: ConsumerSlot, consumer: Any) -> None:
        """Take messages while the consumer has credit; record each delivery
        with the consumer's generation at that moment."""
        messages = consumer.__aiter__()
        try:
            while True:
                while slot.credit < 1:
                    await slot.credit_changed.wait()
                message = await messages.__anext__()
                slot.credit -= 1
                self.deliveries.append(Delivery(
                    next(self._orders), slot.name, getattr(consumer, "generation", None), message.topic,
                    message.partition, message.offset, message.next_offset, bytes(message.payload)))
        finally:
            if messages is not consumer and hasattr(messages, "aclose"):
                with trio.CancelScope(shield=True):
                    await messages.aclose()  # an async generator: finalize it here, not in GC

    def record(self, consumer: str, generation: Any, topic: str, partition: str, offset: int,
               next_offset: int, payload: bytes) -> None:
        """Record a delivery seen outside the world (e.g. a consumer subprocess)."""
        self.deliveries.append(Delivery(next(self._orders), consumer, generation, topic, partition,
                                        offset, next_offset, payload))

    def live_consumers(self) -> list[ConsumerSlot]:
        return [c for c in self.consumers.values() if c.state == "live"]

    def consume(self, name: str, count: float) -> None:
        """Let consumer ``name`` take ``count`` more messages (in the background)."""
        self.consumers[name].grant(count)

    async def commit(self, name: str) -> None:
        await self.consumers[name].group_consumer.commit()
        self.note(f"consumer {name} committed")

    async def stop_consumer(self, name: str) -> None:
        """Clean stop: leave the ``async with`` (commit, release, deregister)."""
        slot = self.consumers[name]
        slot.pull_scope.cancel()
        await slot.done.wait()
        slot.state = "stopped"
        self.note(f"consumer {name} stopped")

    async def crash_consumer(self, name: str) -> None:
        """Kill a consumer: no commit, no release; its session ends later (fake:
        at the session timeout) or now (kazoo: the session is closed)."""
        slot = self.consumers[name]
        committed = await self.committed_offsets()
        slot.state = "crashed"
        assert slot.wrapper is not None
        slot.wrapper.crash()
        self.backend.cut_off(slot.real_zk)
        slot.task_scope.cancel()
        self.losses.append(SessionLoss(name, "crash", committed))
        self.note(f"consumer {name} crashed")

    async def expire_consumer(self, name: str) -> None:
        """Expire a live consumer's session; it keeps running and must rejoin."""
        slot = self.consumers[name]
        committed = await self.committed_offsets()
        self.losses.append(SessionLoss(name, "expiry", committed))
        await self.backend.expire(slot.real_zk)
        self.note(f"consumer {name} session expired")

    # -- reading the registry ---------------------------------------------------------

    async def _children(self, path: str) -> list[str]:
        try:
            return await self.admin.children(path)
        except NoNodeError:
            return []

    async def _get(self, path: str) -> bytes | None:
        try:
            data, _stat = await self.admin.get(path)
            return data
        except NoNodeError:
            return None

    async def committed_offsets(self) -> dict[tuple[str, str], int]:
        base = f"/consumers/{self.group}/offsets"
        result: dict[tuple[str, str], int] = {}
        for topic in await self._children(base):
            for part in await self._children(f"{base}/{topic}"):
                data = await self._get(f"{base}/{topic}/{part}")
                offset = None if data is None else decode_offset(data)
                if offset is not None:
                    result[(topic, part)] = offset
        return result

    async def read_registry(self) -> dict[str, Any]:
        """Members, broker topics and owners as ZooKeeper has them now."""
        ids_path = f"/consumers/{self.group}/ids"
        members = {}
        for consumer_id in await self._children(ids_path):
            data = await self._get(f"{ids_path}/{consumer_id}")
            if data is not None:
                members[consumer_id] = decode_topic_count(data)
        broker_topics: dict[str, dict[int, int]] = {}
        for topic in await self._children("/brokers/topics"):
            per_broker = {}
            for broker in await self._children(f"/brokers/topics/{topic}"):
                data = await self._get(f"/brokers/topics/{topic}/{broker}")
                if data is not None:
                    per_broker[int(broker)] = int(data.decode())
            broker_topics[topic] = per_broker
        owners_path = f"/consumers/{self.group}/owners"
        owners: dict[str, dict[str, str]] = {}
        for topic in await self._children(owners_path):
            for part in await self._children(f"{owners_path}/{topic}"):
                data = await self._get(f"{owners_path}/{topic}/{part}")
                if data is not None:
                    owners.setdefault(topic, {})[part] = decode_owner(data)
        return dict(members=members, broker_topics=broker_topics, owners=owners)

    async def ownership_problems(self) -> list[str]:
        """Why the group is not settled yet (empty list: settled and correct)."""
        registry = await self.read_registry()
        live = {c.consumer_id: c for c in self.live_consumers()}
        problems = []
        if set(registry["members"]) != set(live):
            problems.append(f"members {sorted(registry['members'])} != live {sorted(live)}")
            return problems
        expected_brokers = {b.broker_id for b in self.brokers.values() if b.running}
        for topic in self.topics:
            seen = set(registry["broker_topics"].get(topic, {}))
            if seen != expected_brokers:
                problems.append(f"/brokers/topics/{topic} has {sorted(seen)}, running {sorted(expected_brokers)}")
        if problems:
            return problems
        expected = partition_owners(assign_group(registry["members"], registry["broker_topics"]))
        expected = {t: parts for t, parts in expected.items() if parts}
        if registry["owners"] != expected:
            problems.append(f"owners {registry['owners']} != assignment {expected}")
        for consumer_id, slot in live.items():
            mine = {(t, p) for t, parts in expected.items() for p, thread in parts.items()
                    if thread.rsplit("-", 1)[0] == consumer_id}
            owned = set(slot.group_consumer.owned)
            if owned != mine:
                problems.append(f"{slot.name} owns {sorted(owned)}, assignment gives it {sorted(mine)}")
        return problems

    async def settle(self, timeout_s: float | None = None) -> None:
        """Wait until the ownership is exactly the assignment of the live group."""
        timeout_s = self.backend.settle_timeout_s if timeout_s is None else timeout_s
        problems: list[str] = []
        with trio.move_on_after(timeout_s):
            while True:
                problems = await self.ownership_problems()
                if not problems:
                    self.note("settled")
                    return
                await trio.sleep(self.backend.poll_s)
        raise AssertionError(f"group not settled after {timeout_s} s: {problems}\n" + self.trace_text())

    def trace_text(self, last: int = 60) -> str:
        return "\n".join(self.trace[-last:])

    # -- the end ----------------------------------------------------------------

    def missing(self) -> set[bytes]:
        delivered = {d.payload for d in self.deliveries}
        return {p for sent in self.produced.values() for p in sent} - delivered

    async def drain(self, timeout_s: float | None = None) -> None:
        """Let every live consumer run freely until all produced messages arrived."""
        timeout_s = self.backend.drain_timeout_s if timeout_s is None else timeout_s
        for slot in self.live_consumers():
            slot.grant(math.inf)
        with trio.move_on_after(timeout_s):
            while self.missing():
                await trio.sleep(self.backend.poll_s)
            return
        missing = sorted(self.missing())
        raise AssertionError(f"{len(missing)} produced messages never consumed, e.g. {missing[:5]}\n"
                             + self.trace_text())

    async def finish(self, make_consumer: Callable[[], Any] | None = None) -> None:
        """Restart stopped brokers, make sure someone consumes, settle, drain, check."""
        for slot in list(self.brokers.values()):
            if not slot.running:
                await self.start_broker(slot.broker_id)
        if not self.live_consumers() and make_consumer is not None:
            await make_consumer()
        await self.settle()
        await self.drain()
        self.check_deliveries()

    def check_deliveries(self) -> None:
        """Order, contiguity, no invented messages, duplicates only where excused."""
        produced_index = {p: (key, seq) for key, sent in self.produced.items() for seq, p in enumerate(sent)}
        payload_at: dict[tuple[str, str, int], bytes] = {}
        last: dict[tuple[str, str, str], Delivery] = {}
        by_message: dict[bytes, list[Delivery]] = {}
        for d in self.deliveries:
            key = (d.topic, d.partition)
            assert d.payload in produced_index, f"delivered a message nobody produced: {d}"
            assert produced_index[d.payload][0] == key, f"message delivered from the wrong partition: {d}"
            seen = payload_at.setdefault((d.topic, d.partition, d.offset), d.payload)
            assert seen == d.payload, f"offset {d.offset} of {key} gave {seen!r} and {d.payload!r}"
            previous = last.get((d.consumer, *key))
            if previous is not None and previous.generation == d.generation and d.generation is not None:
                assert d.offset == previous.next_offset, (
                    f"{d.consumer} skipped or repeated within one generation: {previous} then {d}")
            if previous is not None and previous.generation == d.generation:
                assert produced_index[d.payload][1] > produced_index[previous.payload][1], (
                    f"order broken in {key} by {d.consumer}: {previous} then {d}")
            last[(d.consumer, *key)] = d
            by_message.setdefault(d.payload, []).append(d)
        for payload, copies in by_message.items():
            if len(copies) > 1 and not self._excused(copies):
                raise AssertionError(f"duplicate delivery not explained by a crash or expiry: {copies}\n"
                                     f"losses: {self.losses}\n" + self.trace_text())
        assert not self.missing(), f"lost: {sorted(self.missing())[:5]}"

    def _excused(self, copies: list[Delivery]) -> bool:
        """A message may come twice only if a consumer that crashed or lost its
        session had delivered it, above the offset committed at that moment."""
        for loss in self.losses:
            for d in copies:
                if d.consumer == loss.consumer and d.offset >= loss.committed.get((d.topic, d.partition), 0):
                    return True
        return False

    def stats(self) -> dict[str, int]:
        return dict(produced=sum(map(len, self.produced.values())), delivered=len(self.deliveries),
                    duplicates=len(self.deliveries) - len({d.payload for d in self.deliveries}),
                    losses=len(self.losses))


# -- conveniences for tests ---------------------------------------------------------


def group_config(**overrides: Any) -> Any:
    """A GroupConfig for tests: fast back-offs, many retries, read from the start.
    Keys the real GroupConfig lacks are dropped (the contract may drift)."""
    from trikafka.group import GroupConfig

    wanted: dict[str, Any] = dict(rebalance_retries_max=40, rebalance_backoff_s=0.2, autocommit_enable=False,
                                  autocommit_interval_s=0.5, autooffset_reset="smallest",
                                  fetch_max_bytes=64 * 1024)
    wanted.update(overrides)
    known = {f.name for f in dataclasses.fields(GroupConfig)}
    return GroupConfig(**{k: v for k, v in wanted.items() if k in known})


@contextlib.asynccontextmanager
async def open_kazoo_world(connect_string: str, server_hosts: str, log_root: str, *, group: str = GROUP):
    """A GroupWorld on a real server (``connect_string`` should carry a chroot)."""
    backend = KazooBackend(connect_string, server_hosts, log_root)
    async with GroupWorld.open(backend, group=group, log_root=log_root) as world:
        yield world


async def produce_everywhere(world: GroupWorld, topic: str, per_partition: int) -> int:
    """``per_partition`` messages into every partition of every running broker."""
    total = 0
    for slot in list(world.brokers.values()):
        if slot.running:
            for partition in range(slot.num_partitions):
                await world.produce(topic, slot.broker_id, partition, per_partition)
                total += per_partition
    return total
