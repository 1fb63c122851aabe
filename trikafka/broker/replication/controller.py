"""The controller: one broker elects partition leaders for every replicated topic.

Every broker runs ``Controller.run`` as a child of its root nursery.  It tries
to create the ephemeral ``/trikafka/controller``; the loser waits for that node
to go and tries again.  The winner reconciles: it reads the live brokers (with
the czxid of each registration, so a broker that came back with a new session
counts as restarted), whose unflushed tail survived (or, partition by
partition, was copied again), who asks for a controlled
shutdown, and every partition state, and writes what ``election.elect``
decides with versioned sets.  It reconciles on every change of
``/brokers/ids``, ``/trikafka/brokers``, ``/trikafka/topics`` and
``/trikafka/shutting_down``, and at
least every ``reconcile_interval_s`` (a watch coalesces a quick delete and
re-create into nothing, so the timer is what catches a fast restart).  The
topic znodes and states come from data watches (read when they fire, not on
every pass); the brokers are read again on every pass (docs/protocol.md §12.2).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass, field

import trio

from ...zk import paths
from ...zk.client import ZooKeeperClient
from ...zk.errors import BadVersionError, ZooKeeperClientError, NoNodeError
from ...zk.replication_store import VersionedState, claim_controller, write_assignment, write_state_versioned
from ...zk.replication_values import NO_LEADER, PartitionState, ReplicationValueError, TopicAssignment, TopicConfig
from ..log_tally import Tally
from .assignment import finished
from .election import Cluster, announce, elect, finish_reassignment, prune_to_replicas
from .membership import decode_tail_copied

logger = logging.getLogger(__name__)

RECONCILE_INTERVAL_S = 1.0


@dataclass
class ControllerStats:
    """What the controller did (for tests and ``trikafka cluster``)."""

    epoch: int | None = None
    passes: int = 0
    elections: int = 0
    fenced_writes: int = 0
    seen_registrations: dict[int, int] = field(default_factory=dict)  # broker -> czxid


class Controller:
    """Claims the controller role and reconciles partition states while it holds it."""

    def __init__(self, zk: ZooKeeperClient, broker_id: int, *, reconcile_interval_s: float = RECONCILE_INTERVAL_S):
        self._zk = zk
        self.broker_id = broker_id
        self.reconcile_interval_s = reconcile_interval_s
        self.stats = ControllerStats()
        self._wake = trio.Event()
        self.reconciled = trio.Event()  # set after each pass (replaced by a new one)
        self.active = False  # holds the role right now
        # The replica list each partition's latest state write announced (§12.12.3).
        self._announced: dict[tuple[str, int], tuple[int, ...]] = {}
        self._pending_seen: dict[int, int] = {}  # broker -> czxid of its registration, this pass
        self._tail_copied: dict[int, frozenset[tuple[str, int]]] = {}  # tail-lost broker -> copied again
        # A restart elects a leader for every partition: one line per burst, by topic (each at DEBUG).
        self._elected = Tally(logger, f"controller {broker_id}: partitions given a leader")
        self._offline = Tally(logger, f"controller {broker_id}: partitions left without a leader")
        # Replication settings a topic that sets none takes: the brokers' dynamic ones (§20.4).
        self.setting_defaults: dict[str, str] = {}
        # What the watches of the topic znodes and states last read while this broker controls
        # (§12.2): topic -> (assignment, znode version), None (gone) or why it does not parse;
        # (topic, partition) -> its state, or why there is none.
        self._topics: dict[str, tuple[TopicAssignment, int] | ReplicationValueError | None] = {}
        self._states: dict[tuple[str, int], VersionedState | NoNodeError | ReplicationValueError] = {}
        self._reads: dict[str, int] = {}  # znode path -> values its watch delivered (see _wrote)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Contend for the role forever (cancel to stop).

        Ready once the first claim was tried: a controller started before
        another one in the same cluster wins, which tests and operators rely on.
        """
        started = False
        while True:
            epoch = await claim_controller(self._zk, self.broker_id)
            if not started:
                task_status.started()
                started = True
            if epoch is None:
                async for value in self._zk.watch_data(paths.CONTROLLER):
                    if value is None:
                        break
                continue
            self.stats.epoch = epoch
            logger.info("broker %d is the controller (epoch %d)", self.broker_id, epoch)
            self.active = True
            self._announced = {}  # another controller may have written meanwhile
            try:
                await self._control(epoch)
            finally:
                self.active = False

    async def _control(self, epoch: int) -> None:
        self._topics, self._states, self._reads = {}, {}, {}  # another controller's writes came meanwhile
        async with trio.open_nursery() as nursery:
            for path in (paths.BROKER_IDS, paths.REPLICATION_BROKERS, paths.SHUTTING_DOWN, paths.UNCLEAN_ELECTIONS):
                nursery.start_soon(self._wake_on_children, path)
            nursery.start_soon(self._wake_on_loss_of_role, nursery.cancel_scope)
            await nursery.start(self._watch_topics)  # the first pass sees every topic and state
            while True:
                with trio.move_on_after(self.reconcile_interval_s):
                    await self._wake.wait()
                self._wake = trio.Event()
                try:
                    await self.reconcile(epoch)
                except ZooKeeperClientError as exc:
                    logger.warning("controller pass failed (%s); retrying", exc)

    async def _wake_on_children(self, path: str) -> None:
        async for _children in self._zk.watch_children(path):
            self._wake.set()

    async def _watch_topics(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Watch each replicated topic's znode while it exists (started once each has been read)."""
        scopes: dict[str, trio.CancelScope] = {}
        started = False
        async with trio.open_nursery() as nursery:
            async for names in self._zk.watch_children(paths.REPLICATED_TOPICS):
                topics = set(names or ())
                for topic in sorted(topics - scopes.keys()):
                    scopes[topic] = await nursery.start(self._watch_topic, topic)
                for topic in sorted(scopes.keys() - topics):
                    scopes.pop(topic).cancel()
                    self._topics.pop(topic, None)
                    for key in [key for key in self._states if key[0] == topic]:
                        del self._states[key]
                if not started:
                    task_status.started()
                    started = True
                self._wake.set()

    async def _watch_topic(self, topic: str, *,
                           task_status: trio.TaskStatus[trio.CancelScope] = trio.TASK_STATUS_IGNORED) -> None:
        """Keep ``_topics[topic]`` current, and a watch on the state of each partition the topic has
        (started once the topic and those states have been read; the scope cancels it)."""
        path, watched, started = paths.replicated_topic(topic), 0, False
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                async for value in self._zk.watch_data(path):
                    self._reads[path] = self._reads.get(path, 0) + 1
                    read: tuple[TopicAssignment, int] | ReplicationValueError | None
                    try:
                        read = None if value is None else (TopicAssignment.decode(value[0]), value[1].version)
                    except ReplicationValueError as exc:
                        logger.error("replicated topic %r: %s", topic, exc)
                        read = exc
                    for partition in range(watched, len(read[0].replicas) if isinstance(read, tuple) else 0):
                        await nursery.start(self._watch_state, topic, partition)
                        watched = partition + 1
                    if not started:
                        task_status.started(scope)
                        started = True
                    self._topics[topic] = read  # (decided on at the next pass, as a state)

    async def _watch_state(self, topic: str, partition: int, *,
                           task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Keep ``_states[(topic, partition)]`` current (started once it has been read)."""
        key, path, started = (topic, partition), paths.partition_state(topic, partition), False
        async for value in self._zk.watch_data(path):
            self._reads[path] = self._reads.get(path, 0) + 1
            read: VersionedState | NoNodeError | ReplicationValueError
            try:
                read = NoNodeError(path) if value is None else VersionedState(
                    PartitionState.decode(value[0]), value[1].version, value[1].mzxid)
            except ReplicationValueError as exc:
                read = exc
            # Decided on at the next pass (a timer's or a watch's of the brokers, topics, shutdowns):
            # as often as when each pass read every state.
            self._states[key] = read
            if not started:
                task_status.started()
                started = True

    def _wrote(self, path: str, reads_before: int) -> bool:
        """Whether a value this controller wrote at ``path`` may stand for the watch's: only if the
        watch delivered nothing while the write was under way (else it read that write or a later
        value, and will deliver whatever came after the value it read)."""
        return self._reads.get(path, 0) == reads_before

    async def _wake_on_loss_of_role(self, scope: trio.CancelScope) -> None:
        async for value in self._zk.watch_data(paths.CONTROLLER):
            if value is None or value[1].ephemeral_owner != self._zk.session_id:
                logger.warning("broker %d lost the controller role", self.broker_id)
                scope.cancel()
                return

    async def _cluster(self) -> Cluster:
        try:
            ids = [int(name) for name in await self._zk.children(paths.BROKER_IDS) if name.isdigit()]
        except NoNodeError:
            ids = []
        live, intact, restarted, seen = set(), set(), set(), {}
        copied: dict[int, frozenset[tuple[str, int]]] = {}
        for broker in ids:
            stat = await self._zk.exists(paths.broker_id(broker))
            if stat is None:
                continue
            live.add(broker)
            seen[broker] = stat.czxid
            if self.stats.seen_registrations.get(broker, stat.czxid) != stat.czxid:
                restarted.add(broker)
            broker_intact, tail_copied = await self._tail_status(broker)
            if broker_intact:
                intact.add(broker)
            elif tail_copied:
                copied[broker] = tail_copied
        try:
            leaving = {int(n) for n in await self._zk.children(paths.SHUTTING_DOWN) if n.isdigit()}
        except NoNodeError:
            leaving = set()
        self._pending_seen = seen
        self._tail_copied = copied
        return Cluster(frozenset(live), frozenset(intact), frozenset(leaving), frozenset(restarted))

    async def _tail_status(self, broker: int) -> tuple[bool, frozenset[tuple[str, int]]]:
        """Whether ``broker``'s tail is intact and, if not, the replicas it copied again (§12.2)."""
        try:
            data, _stat = await self._zk.get(paths.replication_broker(broker))
            value = json.loads(data)
            intact = bool(value.get("tail_intact", True))
            return intact, frozenset() if intact else decode_tail_copied(value.get("tail_copied"))
        except NoNodeError:
            # Not said yet: /brokers/ids/<id> comes first, and a broker back from a reboot that
            # lost its unflushed tail must not be elected in that gap.
            return False, frozenset()
        except (ValueError, AttributeError):
            return False, frozenset()

    async def _unclean_requests(self) -> dict[tuple[str, int], str]:
        """The partitions ElectLeaders asked an unclean election for (§12.7), with their request znodes."""
        try:
            names = await self._zk.children(paths.UNCLEAN_ELECTIONS)
        except NoNodeError:
            return {}
        return {key: f"{paths.UNCLEAN_ELECTIONS}/{name}" for name in names
                if (key := paths.parse_unclean_election(name)) is not None}

    async def reconcile(self, epoch: int) -> None:
        """One pass over every replicated partition (as the watches last read them)."""
        cluster = await self._cluster()
        unclean = await self._unclean_requests()
        for topic in sorted(self._topics):
            read = self._topics.get(topic)  # (a watch may have dropped it while this pass wrote)
            if not isinstance(read, tuple):
                continue  # gone, or it does not parse (logged when read)
            assignment, version = read
            config = assignment.settings(self.setting_defaults)
            for partition, replicas in enumerate(assignment.replicas):
                current = self._states.get((topic, partition))
                if not isinstance(current, VersionedState):
                    logger.error("%s-%d: unreadable state (%s)", topic, partition, current)
                    continue
                leader = current.state.leader
                newer = frozenset(b for b, czxid in self._pending_seen.items() if czxid > current.mzxid)
                # A leader registered after this state was written restarted (or lost its session)
                # since, so it no longer leads in memory, even if this controller never saw its old
                # registration (it took over while the leader was away).
                # A broker whose tail is lost counts as intact for the partitions it copied again (§12.7).
                copied_here = frozenset(b for b, tps in self._tail_copied.items() if (topic, partition) in tps)
                part_cluster = dataclasses.replace(cluster, registered_after_state=newer,
                                                   restarted=cluster.restarted | (newer & {leader}),
                                                   tail_intact=cluster.tail_intact | copied_here)
                asked = dataclasses.replace(config, unclean_leader_election=True)
                new, finish = self._decide(topic, partition, assignment, current.state, part_cluster,
                                           asked if (topic, partition) in unclean else config, epoch)
                if new is None:
                    continue
                path = paths.partition_state(topic, partition)
                reads_before = self._reads.get(path, 0)
                try:
                    written = await write_state_versioned(self._zk, topic, partition, new, current.version)
                except BadVersionError:
                    self.stats.fenced_writes += 1  # a leader changed the ISR meanwhile: next pass
                    self._wake.set()
                    continue
                if self._wrote(path, reads_before):
                    self._states[(topic, partition)] = written
                self._announced[(topic, partition)] = replicas
                self.stats.elections += 1
                logger.debug("%s-%d: leader %d, epoch %d, isr %s", topic, partition, new.leader,
                             new.leader_epoch, list(new.isr))
                (self._offline if new.leader == NO_LEADER else self._elected).note(topic, partition)
                if finish:
                    assignment, version = await self._finish(topic, partition, assignment, version)
        for path in unclean.values():  # answered by this pass, whatever it decided (§12.7)
            try:
                await self._zk.delete(path)
            except NoNodeError:
                pass
        self.stats.seen_registrations = self._pending_seen
        self.stats.passes += 1
        self.reconciled.set()
        self.reconciled = trio.Event()

    def _decide(self, topic: str, partition: int, assignment: TopicAssignment, state: PartitionState,
                cluster: Cluster, config: TopicConfig, epoch: int) -> tuple[PartitionState | None, bool]:
        """The state to write (None: none) and whether it finishes a reassignment (§12.12.3)."""
        replicas = assignment.replicas[partition]
        new = prune_to_replicas(state, replicas, cluster, config, epoch) or elect(state, replicas, cluster, config,
                                                                                 epoch)
        if new is not None:
            return new, False
        target = assignment.targets.get(partition)
        if target is None:
            return None, False
        done = finish_reassignment(state, target, cluster, config, epoch)
        if done is not None:
            return done, True
        if state.leader != NO_LEADER and self._announced.get((topic, partition)) != replicas:
            return announce(state, epoch), False
        return None, False

    async def _finish(self, topic: str, partition: int, assignment: TopicAssignment,
                      version: int) -> tuple[TopicAssignment, int]:
        """Write the target list into the topic znode; what the znode now holds and its version."""
        done = finished(assignment, partition)
        path = paths.replicated_topic(topic)
        reads_before = self._reads.get(path, 0)
        try:
            version = await write_assignment(self._zk, topic, done, version)
        except BadVersionError:  # an admin wrote meanwhile: the target is still there, finish next pass
            self._wake.set()
            return assignment, version
        if self._wrote(path, reads_before):
            self._topics[topic] = (done, version)
        logger.info("%s-%d: reassigned to %s", topic, partition, list(done.replicas[partition]))
        return done, version
