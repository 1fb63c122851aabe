"""Replication: a broker's part in replicated topics (docs/protocol.md §12).

One service of the broker's nursery tree, started once the broker is
registered in ZooKeeper::

    Replication.run
    ├── broker addresses     children of /brokers/ids -> who listens where
    ├── topics               children of /trikafka/topics -> one task per topic
    │   └── partition states one data watch per partition state: every broker
    │                        knows every leader (METADATA); a replica acts on it
    ├── follower tasks       one per partition this broker follows (followers.py)
    ├── ISR maintenance      the leader's shrink and expand proposals, written
    │                        with versioned sets (a stale leader is fenced)
    └── controller           contends for /trikafka/controller (controller.py)

A state read from ZooKeeper is the only way a broker learns it leads or
follows (there is no leader-and-ISR request): each watch fire re-reads the
current value, so a missed event cannot leave a broker behind.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from typing import TYPE_CHECKING, Awaitable, Callable, Protocol

import trio

from ...log.epochs import EpochFile
from ...wire.metadata import BrokerAddress
from ...zk import paths
from ...zk.client import ZooKeeperClient
from ...zk.errors import BadVersionError, ZooKeeperClientError, NoNodeError, SessionExpiredError
from ...zk.registry_values import parse_broker_registration
from ...zk.replication_store import read_state, write_state
from ...zk.replication_values import MIN_INSYNC_REPLICAS, PartitionState, ReplicationValueError, TopicAssignment
from ..engine.waiters import VisibleEndWaiters
from ..log_tally import Tally
from ..seams import Flusher, LogDirectory, RunBlocking
from .controller import Controller
from .followers import FollowerTasks
from .hosted import HostedPartition
from .isr import LeaderPartition
from ..topic_settings import RECORD_FORMAT
from .membership import controlled_shutdown, register_membership, registered_before
from .tail import TailStatus, forget_tail_lost
from .view import ReplicationView, TopicPartition

if TYPE_CHECKING:
    from ..config import BrokerConfig
    from ..engine.directory import PartitionDirectory

logger = logging.getLogger(__name__)

ISR_CHECK_INTERVAL_S = 0.25


class SettingsChanges(Protocol):
    """Where the broker's dynamic settings are announced (§20.4; ``dynamic_config.BrokerSettings``):
    replication adds its own listener as it is built, told the settings in force after each change."""

    listeners: list[Callable[[BrokerConfig], None]]


class Replication:
    """Hosts this broker's replicas, tells the engine who leads, and runs the controller."""

    _nursery: trio.Nursery  # run()'s: the watches and follower tasks start in it

    def __init__(self, *, broker_id: int, zk: ZooKeeperClient, address: BrokerAddress, view: ReplicationView,
                 directory: PartitionDirectory,
                 log_manager: LogDirectory, flusher: Flusher, waiters: VisibleEndWaiters, run_blocking: RunBlocking,
                 open_stream: Callable[[str, int], Awaitable[trio.abc.Stream]], tail_intact: bool = True,
                 on_replicated_topic: Callable[[str], None] = lambda topic: None,
                 reconcile_interval_s: float | None = None, kafka_port: int | None = None,
                 on_role: Callable[[str, int, str], None] | None = None,
                 broker_settings: SettingsChanges | None = None):
        """``broker_settings``: the broker's dynamic settings (§20.4), whose ``min.insync.replicas`` it
        follows; ``on_role``: told (topic, partition, role) after each partition state it applies."""
        self.broker_id = broker_id
        self.kafka_port = kafka_port  # published in /trikafka/brokers/<id> (§16.1)
        self._zk = zk
        self.address = address
        self._directory, self._log_manager, self._flusher = directory, log_manager, flusher
        self._waiters = waiters
        self._run_blocking = run_blocking
        self.tail = TailStatus(broker_id, tail_intact)
        self._on_replicated_topic = on_replicated_topic  # the 0.7 registrar must skip these
        self._view = view  # the topics, states, replicas hosted and brokers it learns, for the engine
        self._progress = trio.Event()  # set (and replaced) on each state read and follower catch-up
        self.controller = Controller(zk, broker_id, **(
            {} if reconcile_interval_s is None else {"reconcile_interval_s": reconcile_interval_s}))
        self._follower_tasks = FollowerTasks(broker_id=broker_id, brokers=lambda: self.brokers,
                                             open_stream=open_stream, on_high_watermark=self._on_follower_hw)
        self._watched_partitions: dict[TopicPartition, trio.CancelScope] = {}  # the state watches
        self.isr_changes = 0  # ISR shrinks and expands written as leader (metrics)
        self.leaving: frozenset[int] = frozenset()  # brokers in a controlled shutdown
        self._leading = Tally(logger, f"broker {broker_id}: partitions it now leads")
        # Told (topic, partition, role) after each state this broker applies: the Kafka listener's
        # coordinators load a partition of their internal topic they now lead (docs/protocol.md §17.3).
        self._on_role = on_role if on_role is not None else _ignore_role
        if broker_settings is not None:
            broker_settings.listeners.append(self._reconfigure)

    def _reconfigure(self, config: BrokerConfig) -> None:
        """The brokers' dynamic ``min.insync.replicas`` (§20.4): the partitions hosted here whose topic
        sets none take it at once (a leader's next acks -1 check and ISR shrink), the controller at
        its next election."""
        count = config.min_insync_replicas
        self.controller.setting_defaults[MIN_INSYNC_REPLICAS] = str(count)
        for (topic, _partition), hosted in self.hosted.items():
            assignment = self.topics.get(topic)
            if assignment is None or MIN_INSYNC_REPLICAS in assignment.config:
                continue
            hosted.config = dataclasses.replace(hosted.config, min_insync_replicas=count)
            if hosted.leader is not None:
                hosted.leader.min_insync_replicas = count

    # ----------------------------------------------------------------- the view it keeps

    @property
    def topics(self) -> dict[str, TopicAssignment]:
        return self._view.topics

    @property
    def states(self) -> dict[TopicPartition, PartitionState]:
        return self._view.states

    @property
    def hosted(self) -> dict[TopicPartition, HostedPartition]:
        return self._view.hosted

    @property
    def brokers(self) -> dict[int, BrokerAddress]:
        return self._view.brokers

    # ----------------------------------------------------------------- the service

    async def run(self, *, task_status: trio.TaskStatus["Replication"] = trio.TASK_STATUS_IGNORED) -> None:
        """Register, load every replicated topic, then keep up with ZooKeeper until cancelled."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await nursery.start(self._keep_membership)
            await nursery.start(self._watch_brokers)
            await nursery.start(self._watch_leaving)
            await nursery.start(self._watch_topics)
            nursery.start_soon(self._maintain_isr)
            await nursery.start(self.controller.run)
            if not self.tail.intact:
                forget = functools.partial(self._run_blocking, functools.partial(
                    forget_tail_lost, self._log_manager.fs, self._log_manager.log_dir))
                nursery.start_soon(self.tail.until_copied, self.hosted, self._progress_made, self._register,
                                   self._zk.wait_connected, forget)
            task_status.started(self)

    @property
    def _tasks(self) -> trio.Nursery:
        """The nursery of ``run``, where the watch and follower tasks live."""
        assert self._nursery is not None, "started by run()"
        return self._nursery

    async def _progress_made(self) -> None:
        await self._progress.wait()

    async def _register(self) -> None:
        """Write this session's ``/trikafka/brokers/<id>`` with the tail status now."""
        await register_membership(self._zk, self.broker_id, self.address.host, self.address.port,
                                  intact=self.tail.intact, copied=self.tail.copied, kafka_port=self.kafka_port)

    def _note_progress(self) -> None:
        self._progress.set()
        self._progress = trio.Event()

    async def controlled_shutdown(self, timeout_s: float) -> bool:
        """Ask the controller to move leadership away; True once this broker leads nothing."""
        if not any(h.leader is not None for h in self.hosted.values()):
            return True
        logger.info("controlled shutdown: moving leadership away")
        with trio.move_on_after(timeout_s):  # ZooKeeper may be unreachable: never hang the stop
            try:
                return await controlled_shutdown(self._zk, self.broker_id, timeout_s)
            except ZooKeeperClientError as exc:
                logger.warning("controlled shutdown not possible (%s); stopping anyway", exc)
        return False

    async def _keep_membership(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """``/trikafka/brokers/<id>`` in every session (an ephemeral node goes with its session)."""
        started = False
        while True:
            await self._zk.wait_connected()
            generation = self._zk.session_generation.value
            try:
                await self._register()
            except SessionExpiredError:
                continue
            if not started:
                task_status.started()
                started = True
            await self._zk.session_generation.wait_value(lambda g: g > generation)

    async def _watch_brokers(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        started = False
        async for children in self._zk.watch_children(paths.BROKER_IDS):
            addresses = {}
            for name in children or ():
                if not name.isdigit():
                    continue
                try:
                    data, _stat = await self._zk.get(paths.broker_id(int(name)))
                    info = parse_broker_registration(data)
                except (NoNodeError, ValueError):
                    continue
                addresses[int(name)] = BrokerAddress(int(name), info.host, info.port)
            self._view.brokers = addresses
            if not started:
                task_status.started()
                started = True

    async def _watch_leaving(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        started = False
        async for children in self._zk.watch_children(paths.SHUTTING_DOWN):
            self.leaving = frozenset(int(n) for n in children or () if n.isdigit())
            if not started:
                task_status.started()
                started = True

    async def _watch_topics(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        started: set[str] = set()
        first = True
        async for children in self._zk.watch_children(paths.REPLICATED_TOPICS):
            for topic in children or ():
                if topic not in started:
                    started.add(topic)
                    await self._tasks.start(self._watch_topic, topic)
            if first:
                task_status.started()
                first = False

    async def _watch_topic(self, topic: str, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        started = False
        async for value in self._zk.watch_data(paths.replicated_topic(topic)):
            if value is not None:
                try:
                    assignment = TopicAssignment.decode(value[0])
                    assignment.settings()
                except ReplicationValueError as exc:
                    logger.error("replicated topic %r: %s", topic, exc)
                else:
                    await self._adopt_topic(topic, assignment)
            elif topic in self.topics:
                await self._drop_topic(topic)
            if not started:
                task_status.started()
                started = True

    async def _adopt_topic(self, topic: str, assignment: TopicAssignment) -> None:
        new = topic not in self.topics
        before = self.topics.get(topic)
        self.topics[topic] = assignment
        if new:
            self._on_replicated_topic(topic)
            self._directory.forget_partition_count(topic)
        for partition in range(len(assignment.replicas)):
            key = (topic, partition)
            if key not in self._watched_partitions:
                self._watched_partitions[key] = scope = trio.CancelScope()
                await self._tasks.start(self._watch_partition, topic, partition, scope)
            elif (before is not None and partition < len(before.replicas)
                  and before.replicas[partition] != assignment.replicas[partition]
                  and (state := self.states.get(key)) is not None):
                # A reassignment changed the replica list: act on it even if the
                # partition's state was read before the topic's new value.
                hosted = self.hosted.get(key)
                await self._apply(topic, partition, state, hosted.version if hosted else -1)

    async def _drop_topic(self, topic: str) -> None:
        """The topic's znode is gone (DeleteTopics, §16.4): stop serving its partitions here and
        delete this broker's logs of it; a topic created again later starts afresh."""
        del self.topics[topic]
        for key in [k for k in self._watched_partitions if k[0] == topic]:
            self._watched_partitions.pop(key).cancel()
            self.states.pop(key, None)
        for key in [k for k in self.hosted if k[0] == topic]:
            hosted = self.hosted.pop(key)
            await hosted.retire()
            self._start_or_stop_follower(hosted)
            await self._run_blocking(hosted.epochs.close)
        count = await self._directory.delete_topic_logs(topic)
        self._note_progress()
        logger.info("topic %s deleted: %d logs removed from this broker", topic, count)

    async def _watch_partition(self, topic: str, partition: int, scope: trio.CancelScope, *,
                               task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        with scope:
            await self._watch_partition_state(topic, partition, task_status)

    async def _watch_partition_state(self, topic: str, partition: int, task_status: trio.TaskStatus[None]) -> None:
        started = False
        async for value in self._zk.watch_data(paths.partition_state(topic, partition)):
            if value is not None and topic in self.topics:
                try:
                    state = PartitionState.decode(value[0])
                except ReplicationValueError as exc:
                    logger.error("%s-%d: unreadable state: %s", topic, partition, exc)
                else:
                    self.states[(topic, partition)] = state
                    await self._apply(topic, partition, state, value[1].version, value[1].mzxid)
                    self._note_progress()
            if not started:
                task_status.started()
                started = True

    async def _apply(self, topic: str, partition: int, state: PartitionState, version: int,
                     mzxid: int | None = None) -> None:
        assignment = self.topics[topic]
        replicas = assignment.replicas[partition] if partition < len(assignment.replicas) else ()
        hosted = self.hosted.get((topic, partition))
        if hosted is None:
            if self.broker_id not in replicas:
                return
            hosted = await self._host(topic, partition, len(assignment.replicas),
                                      assignment.config.get(RECORD_FORMAT))
        may_lead = state.leader != self.broker_id or await registered_before(self._zk, self.broker_id, mzxid)
        was_leading = hosted.leader is not None
        role = await hosted.apply_state(state, version, replicas, assignment.settings(self.controller.setting_defaults),
                                        may_lead=may_lead)
        if hosted.leader is not None and not was_leading:
            self._leading.note(topic, partition)
        self._start_or_stop_follower(hosted)
        self._on_role(topic, partition, role)

    async def _host(self, topic: str, partition: int, count: int, record_format: str | None) -> HostedPartition:
        """Open (or create) this broker's replica of ``topic``-``partition`` and its epoch file;
        a new log gets the topic's ``record.format`` (§16.6)."""
        self._log_manager.raise_partition_count(topic, count)
        config = self._log_manager.config_for(topic)
        if record_format is not None and config.record_format != record_format:
            self._log_manager.override_topic_config(topic, dataclasses.replace(config, record_format=record_format))
        log = await self._directory.log_for_write(topic, partition)
        epochs = await self._run_blocking(functools.partial(EpochFile.open, self._log_manager.fs, log.dir_path,
                                                            log.end_offset))
        hosted = HostedPartition(topic, partition, self.broker_id, log, epochs, flusher=self._flusher,
                                 waiters=self._waiters, run_blocking=self._run_blocking, clock_ms=_trio_ms)
        if not self.tail.intact:  # §12.2: after a reboot, what recovery kept on CRCs alone is copied again
            hosted.copy_again_from = log.crc_checked_from
        self.hosted[(topic, partition)] = hosted
        return hosted

    def _on_follower_hw(self, hosted: HostedPartition, high_watermark: int) -> None:
        hosted.note_follower_hw(high_watermark)
        self._note_progress()

    def close(self) -> None:
        """Close the epoch files (blocking: call from a worker thread at shutdown)."""
        for hosted in self.hosted.values():
            hosted.epochs.close()

    def _start_or_stop_follower(self, hosted: HostedPartition) -> None:
        self._follower_tasks.update(hosted, self._tasks)

    # ----------------------------------------------------------------- the leader's ISR

    async def _maintain_isr(self) -> None:
        while True:
            await trio.sleep(ISR_CHECK_INTERVAL_S)
            for hosted in list(self.hosted.values()):
                leader = hosted.leader
                if leader is None:
                    continue
                proposal = leader.shrink_proposal(now_ms := _trio_ms()) or leader.expand_proposal(now_ms)
                if proposal is not None and self.leaving:
                    # A broker in a controlled shutdown is about to stop fetching: never re-admit it.
                    proposal = tuple(r for r in proposal if r in leader.isr or r not in self.leaving)
                    proposal = None if proposal == leader.isr else proposal
                if proposal is not None:
                    try:
                        await self._write_isr(hosted, leader, proposal)
                    except ZooKeeperClientError as exc:
                        logger.warning("%s-%d: ISR change not written (%s); retrying", hosted.topic,
                                       hosted.partition, exc)

    async def _write_isr(self, hosted: HostedPartition, leader: LeaderPartition, isr: tuple[int, ...]) -> None:
        topic, partition = hosted.key
        async with hosted.lock:
            state = hosted.state
            if hosted.leader is not leader or state is None:
                return
            new = PartitionState(state.leader, state.leader_epoch, isr, state.controller_epoch)
            if not leader.begin_expansion(isr):
                return  # the HW moved past a joiner while we waited for the lock
            try:
                version = await write_state(self._zk, topic, partition, new, hosted.version)
            except BadVersionError:
                fenced = True
            else:
                fenced = False
                hosted.state, hosted.version = new, version
                self.states[hosted.key] = new
                leader.apply_isr(isr)
                self.isr_changes += 1
                logger.info("%s-%d: ISR %s -> %s", topic, partition, list(state.isr), list(isr))
            finally:
                leader.end_expansion()
        if fenced:  # someone moved first: re-read and act on what is there now
            current = await read_state(self._zk, topic, partition)
            self.states[hosted.key] = current.state
            await self._apply(topic, partition, current.state, current.version)
        self._waiters.notify(hosted.key)


def _ignore_role(topic: str, partition: int, role: str) -> None:
    """No one to tell of a role (a broker without the Kafka listener)."""


def _trio_ms() -> int:
    """Replication's clock: Trio's (a mock clock in simulations and tests)."""
    return int(trio.current_time() * 1000)
