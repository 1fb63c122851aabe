"""A model cluster of one replicated partition, driven step by step by tests.

It runs the pure protocol modules (``EpochHistory``, ``LeaderPartition``,
``elect``, the truncation walk) exactly as the broker does, over in-memory
logs and a one-znode "ZooKeeper" with versions; each step is one thing that
can happen in a real cluster: a produce, a follower's fetch, a watch
delivered, an ISR write, the controller reacting, a clock tick, a flush, a
crash (process or power loss), a pause (the session expires, the process
lives on as a zombie) and their recoveries.

Messages are one-message 0.7 sets of equal size, so byte offsets are real byte
positions; follower fetches go through the broker's own ``serve_replica_fetch``
and ``FollowerPartition``.  ``check()`` asserts the promises:

* every acknowledged (committed) message is at its offset on every ISR replica
  (but one whose unflushed tail a power loss took, unless the topic acks after fsync);
* all replicas agree with the one committed history up to the HW they know,
  and that history only ever grows (no consumer saw bytes that later vanished);
* at most one leader per epoch, and nobody else appended in a leader's epoch.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from trikafka.broker.replication.election import Cluster, elect, initial_state
from trikafka.broker.replication.fetch_rules import Append, FollowerPartition, serve_replica_fetch
from trikafka.broker.replication.isr import LeaderPartition
from trikafka.zk.replication_values import NO_LEADER, PartitionState, TopicConfig
from trikafka.broker.replication.truncation import resolve
from trikafka.log.epochs import EpochHistory
from trikafka.broker.engine.errors import EngineError
from trikafka.wire.errors import ErrorCode
from trikafka.wire.messageset import build_message_set
from trikafka.wire.replication import ReplicaFetchRequest, ReplicaFetchResult

def message(msg_id: int) -> bytes:
    """Message ``msg_id`` as a one-message 0.7 set (every one the same size)."""
    return build_message_set([b"%07d" % msg_id])


MSG_BYTES = len(message(0))


@dataclass
class Replica:
    """One broker's replica and its in-memory view of the partition."""

    id: int
    log: bytearray = field(default_factory=bytearray)
    durable: int = 0
    history: EpochHistory = field(default_factory=EpochHistory)
    hw: int = 0  # the high watermark this replica knows (what its consumers may read)
    alive: bool = True
    paused: bool = False
    registered: bool = True
    tail_intact: bool = True
    tail_copied: bool = False  # tail lost, but caught up with a leader since the restart (§12.2)
    view: PartitionState | None = None
    view_version: int = -1
    leading: LeaderPartition | None = None
    leading_epoch: int = -1
    needs_truncation: bool = True
    session: int = 0  # bumped by every new ZooKeeper session (restart, resume)

    @property
    def running(self) -> bool:
        return self.alive and not self.paused


class World:
    """N replicas of one partition, a versioned state znode and a controller."""

    def __init__(self, n: int = 3, *, min_isr: int = 2, ack_fsync: bool = False, unclean: bool = False):
        self.config = TopicConfig(min_insync_replicas=min_isr, unclean_leader_election=unclean,
                                  replica_ack_fsync=ack_fsync, replica_lag_time_max_ms=1000)
        self.replicas = tuple(range(n))
        self.r = [Replica(i) for i in self.replicas]
        self.now_ms = 0
        self.controller_epoch = 1
        self.zk = initial_state(self.replicas, self._cluster(), self.controller_epoch)
        self.zk_version = 0
        self.seen_sessions = {r.id: r.session for r in self.r}  # what the controller last saw
        self.shutting_down: set[int] = set()
        self.next_msg = 0
        self.pending: list[tuple[int, int, int, int, int]] = []  # msg, offset, end, leader, epoch
        self.acked: dict[int, int] = {}  # msg id -> offset
        self.committed = bytearray()  # the ghost history every replica must agree with
        self.epoch_leader: dict[int, int] = {self.zk.leader_epoch: self.zk.leader}
        self.appender: dict[int, int] = {}  # epoch -> the one broker that appended in it
        self.log: list[str] = []

    # -- helpers ---------------------------------------------------------------------------

    def _cluster(self) -> Cluster:
        live = frozenset(r.id for r in getattr(self, "r", []) if r.registered)
        intact = frozenset(r.id for r in getattr(self, "r", []) if r.registered and (r.tail_intact or r.tail_copied))
        seen = getattr(self, "seen_sessions", {})
        restarted = frozenset(r.id for r in getattr(self, "r", []) if r.registered and seen.get(r.id) != r.session)
        leaving = frozenset(getattr(self, "shutting_down", ()))
        return Cluster(live, intact, shutting_down=leaving, restarted=restarted)

    def _write_state(self, state: PartitionState) -> None:
        if state.leader != NO_LEADER:
            prior = self.epoch_leader.setdefault(state.leader_epoch, state.leader)
            assert prior == state.leader, f"epoch {state.leader_epoch} given to {prior} and {state.leader}"
        self.zk = state
        self.zk_version += 1

    def _reported(self, r: Replica) -> int | None:
        return r.durable if self.config.replica_ack_fsync else None

    def _settle(self, leader: Replica) -> None:
        """Answer the acks -1 writes waiting on ``leader``."""
        self._observe_leaders()
        still = []
        for msg, offset, end, lid, epoch in self.pending:
            if lid != leader.id or leader.leading is None or leader.leading_epoch != epoch:
                still.append((msg, offset, end, lid, epoch))
                continue
            status = leader.leading.commit_status(end)
            if status is None:
                still.append((msg, offset, end, lid, epoch))
            elif status == EngineError.NO_ERROR:
                self.acked[msg] = offset
        self.pending = still

    def _drop_pending(self, broker: int) -> None:
        self.pending = [p for p in self.pending if p[3] != broker]

    # -- steps -----------------------------------------------------------------------------

    def controller(self) -> bool:
        """The controller reacts to the live brokers; True if it wrote a new state."""
        new = elect(self.zk, self.replicas, self._cluster(), self.config, self.controller_epoch)
        self.seen_sessions = {r.id: r.session for r in self.r}
        if new is None:
            return False
        self._write_state(new)
        self.log.append(f"controller: {new}")
        return True

    def notify(self, i: int) -> None:
        """Broker ``i``'s watch fires: it re-reads the state and takes its role."""
        r = self.r[i]
        if not r.running:
            return
        state, version = self.zk, self.zk_version
        if state.leader == i and r.leading_epoch != state.leader_epoch:
            if r.history.latest_epoch >= state.leader_epoch:
                return  # an epoch of our previous life: wait for the controller's new one
            r.history.assign(state.leader_epoch, len(r.log))
            r.leading = LeaderPartition(i, self.replicas, state.isr, epoch_start=len(r.log), high_watermark=r.hw,
                                        lag_time_max_ms=self.config.replica_lag_time_max_ms,
                                        min_insync_replicas=self.config.min_insync_replicas, now_ms=self.now_ms,
                                        durable_end=self._reported(r))
            r.leading_epoch = state.leader_epoch
            r.hw = r.leading.high_watermark
        elif state.leader != i:
            if r.leading is not None:
                self._drop_pending(i)
            if r.view is None or r.view.leader_epoch != state.leader_epoch or r.leading is not None:
                r.needs_truncation = True
            r.leading, r.leading_epoch = None, -1
        r.view, r.view_version = state, version

    def produce(self, i: int) -> EngineError | None:
        """A producer sends one acks -1 message to broker ``i``."""
        r = self.r[i]
        if not r.running or r.leading is None:
            return EngineError.NOT_LEADER_FOR_PARTITION
        code = r.leading.check_acks_all()
        if code != EngineError.NO_ERROR:
            return code
        prior = self.appender.setdefault(r.leading_epoch, i)
        assert prior == i, f"{prior} and {i} both appended in epoch {r.leading_epoch}"
        msg, offset = self.next_msg, len(r.log)
        self.next_msg += 1
        r.log += message(msg)
        r.leading.on_local_append(len(r.log), self._reported(r))
        self.pending.append((msg, offset, len(r.log), i, r.leading_epoch))
        self._settle(r)
        return None

    def fetch(self, i: int, max_msgs: int = 2) -> bool:
        """Follower ``i`` truncates by epoch if it must, then fetches once; False if fenced or idle."""
        f = self.r[i]
        if not f.running or f.view is None or f.leading is not None or f.view.leader == NO_LEADER:
            return False
        leader = self.r[f.view.leader]
        if not leader.running:
            return False  # no answer at all
        if f.needs_truncation and leader.leading is not None and leader.leading_epoch == f.view.leader_epoch:
            self.truncate_by_epoch(i)
        offset = len(f.log)
        request = ReplicaFetchRequest(i, f.view.leader_epoch, 0, "t", 0, offset, f.durable, max_msgs * MSG_BYTES)
        answer = serve_replica_fetch(request, leader=leader.leading, leader_epoch=leader.leading_epoch,
                                     history=leader.history, log_end=len(leader.log), now_ms=self.now_ms,
                                     ack_fsync=self.config.replica_ack_fsync)
        if answer.error != ErrorCode.NO_ERROR:
            assert answer.error != ErrorCode.OFFSET_OUT_OF_RANGE, f"{i} at {offset} is past leader {leader.id}'s end"
            return False  # FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH / NOT_LEADER: wait for the state
        leader.hw = leader.leading.high_watermark
        data = bytes(leader.log[answer.offset:answer.offset + answer.max_bytes])
        result = ReplicaFetchResult(answer.error, answer.leader_epoch, answer.chunk_epoch, answer.high_watermark,
                                    answer.log_end, answer.isr, data)
        follower = FollowerPartition(leader.id, f.view.leader_epoch, f.hw)
        follower.needs_truncation = False
        action = follower.on_response(result, offset)
        if isinstance(action, Append):
            if action.epoch > f.history.latest_epoch:
                f.history.assign(action.epoch, action.offset)
            f.log += action.data
            if self.config.replica_ack_fsync:
                f.durable = len(f.log)  # followers fsync every append in this mode
        f.hw = follower.high_watermark
        # fetcher.follow's caught-up test: bytes of the leader's epoch, and the response's HW reached
        if not f.tail_intact and f.history.latest_epoch == f.view.leader_epoch and len(f.log) >= answer.high_watermark:
            f.tail_copied = True
        self._settle(leader)
        return True

    def truncate_by_epoch(self, i: int) -> int | None:
        """Follower ``i`` asks its leader where its epochs end and cuts its log there."""
        f = self.r[i]
        if not f.running or f.view is None or f.leading is not None or f.view.leader == NO_LEADER:
            return None
        leader = self.r[f.view.leader]
        if not leader.running or leader.leading is None or leader.leading_epoch != f.view.leader_epoch:
            return None
        cut = resolve(f.history, len(f.log), lambda e: leader.history.end_offset_for(e, len(leader.log)))
        assert cut >= min(f.hw, len(f.log)), f"{i} would truncate committed bytes: {cut} < hw {f.hw}"
        del f.log[cut:]
        f.durable = min(f.durable, cut)
        f.history.truncate_from(cut)
        f.needs_truncation = False
        return cut

    def leader_isr(self, i: int) -> bool:
        """Leader ``i`` proposes an ISR change and writes it conditionally; True if it changed."""
        r = self.r[i]
        if not r.running or r.leading is None:
            return False
        proposal = r.leading.shrink_proposal(self.now_ms) or r.leading.expand_proposal(self.now_ms)
        if proposal is None or r.view_version != self.zk_version:
            return False  # nothing to do, or BadVersion: it re-reads on its next watch
        self._write_state(replace(self.zk, isr=proposal))
        r.view, r.view_version = self.zk, self.zk_version
        r.leading.apply_isr(proposal)
        r.hw = r.leading.high_watermark
        self._settle(r)
        return True

    def tick(self, ms: int) -> None:
        self.now_ms += ms

    def flush(self, i: int) -> None:
        r = self.r[i]
        if r.running:
            r.durable = len(r.log)
            if r.leading is not None:
                r.leading.on_local_append(len(r.log), self._reported(r))
                r.hw = r.leading.high_watermark
                self._settle(r)

    def crash(self, i: int, power_loss: bool = False) -> None:
        """Broker ``i`` dies; a power loss also loses its unflushed tail."""
        r = self.r[i]
        if not r.alive:
            return
        r.alive = r.paused = r.registered = False
        self._drop_pending(i)
        r.tail_copied = False  # a new process copies again what it lost
        if power_loss:
            del r.log[r.durable:]
            r.tail_intact = False
        r.history.truncate_from(len(r.log) + 1)
        r.leading, r.leading_epoch, r.view, r.hw = None, -1, None, 0

    def restart(self, i: int) -> None:
        r = self.r[i]
        if r.alive:
            return
        r.alive = r.registered = True
        r.session += 1
        r.needs_truncation = True

    def pause(self, i: int) -> None:
        """SIGSTOP long enough for the session to expire: a zombie keeps its in-memory role."""
        r = self.r[i]
        if r.running:
            r.paused, r.registered = True, False

    def resume(self, i: int) -> None:
        r = self.r[i]
        if r.alive and r.paused:
            r.paused, r.registered = False, True
            r.session += 1

    # -- the promises ----------------------------------------------------------------------

    def _observe_leaders(self) -> None:
        # Every HW a leader reaches extends the one committed history.
        for r in self.r:
            if r.leading is not None and r.running:
                hw = r.leading.high_watermark
                common = min(hw, len(self.committed))
                assert bytes(r.log[:common]) == bytes(self.committed[:common]), f"leader {r.id} rewrote committed bytes"
                if hw > len(self.committed):
                    self.committed[:] = r.log[:hw]

    def check(self) -> None:
        self._observe_leaders()
        for r in self.r:
            seen = min(r.hw, len(r.log))
            assert seen <= len(self.committed), f"{r.id} knows hw {r.hw} past the committed {len(self.committed)}"
            assert bytes(r.log[:seen]) == bytes(self.committed[:seen]), f"{r.id} disagrees below its hw"
        for msg, offset in self.acked.items():
            assert bytes(self.committed[offset:offset + MSG_BYTES]) == message(msg), f"acked {msg} not committed"
            for rid in self.zk.isr:
                if not (self.r[rid].tail_intact or self.r[rid].tail_copied or self.config.replica_ack_fsync):
                    continue  # a power loss took its page cache: the documented exception
                got = bytes(self.r[rid].log[offset:offset + MSG_BYTES])
                assert got == message(msg), f"acked {msg} at {offset} missing on ISR member {rid}: {got!r}"
