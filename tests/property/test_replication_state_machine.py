"""The replication protocol (docs/protocol.md §12) as a Hypothesis state machine.

Three replicas of one partition under ``replication_world.World``: produces
with acks -1, follower fetches, watches delivered late or early, leader ISR
writes (conditional, so a zombie's fail), controller elections, clock ticks,
flushes, process crashes, pauses long enough to lose the session (zombie
leaders), restarts and resumes, in any order.  ``World.check`` runs after
every step: acknowledged messages stay on every ISR member, replicas agree with
the committed history up to the HW they know, and one leader per epoch.

The ack-fsync variant adds power losses (the unflushed tail is gone); its
replicas report their fsynced ends, so acknowledged messages survive those too.
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from tests.helpers.hypothesis_profiles import STATE_MACHINE_MIN_EXAMPLES
from tests.helpers.replication_model import World

BROKERS = st.sampled_from([0, 1, 2])


class ReplicationMachine(RuleBasedStateMachine):
    ack_fsync = False

    @initialize(min_isr=st.sampled_from([1, 2, 3]))
    def start(self, min_isr):
        self.world = World(3, min_isr=min_isr, ack_fsync=self.ack_fsync)
        for i in range(3):
            self.world.notify(i)

    @rule(i=BROKERS)
    def produce(self, i):
        self.world.produce(i)

    @rule(i=BROKERS, max_msgs=st.integers(1, 3))
    def fetch(self, i, max_msgs):
        self.world.fetch(i, max_msgs)

    @rule(i=BROKERS)
    def truncate(self, i):
        """Truncation by epoch on its own, so a leader can die between it and the next fetch (KIP-101)."""
        if self.world.r[i].needs_truncation:
            self.world.truncate_by_epoch(i)

    @rule(i=BROKERS)
    def notify(self, i):
        self.world.notify(i)

    @rule()
    def replicate(self):
        """A round of follower fetches: what makes acks -1 complete."""
        for _ in range(2):
            for i in range(3):
                self.world.fetch(i, 3)

    @rule()
    def failover(self):
        """The controller reacts and every watch is delivered at once."""
        self.world.controller()
        for i in range(3):
            self.world.notify(i)

    @rule()
    def notify_all(self):
        for i in range(3):
            self.world.notify(i)

    @rule(i=BROKERS)
    def leader_isr(self, i):
        self.world.leader_isr(i)

    @rule()
    def controller(self):
        self.world.controller()

    @rule(ms=st.sampled_from([100, 600, 1500]))
    def tick(self, ms):
        self.world.tick(ms)

    @rule(i=BROKERS)
    def flush(self, i):
        self.world.flush(i)

    @rule(i=BROKERS)
    def crash(self, i):
        self.world.crash(i, power_loss=False)

    @rule(i=BROKERS)
    def bounce(self, i):
        """A crash and a restart before anyone reacted (its in-memory HW is gone)."""
        self.world.crash(i, power_loss=False)
        self.world.restart(i)
        self.world.notify(i)

    @rule(i=BROKERS)
    def restart(self, i):
        self.world.restart(i)

    @rule(i=BROKERS)
    def controlled_shutdown(self, i):
        """SIGTERM: leadership moves away first, then the broker stops cleanly."""
        w = self.world
        w.shutting_down.add(i)
        w.controller()
        for j in range(3):
            w.notify(j)
        w.shutting_down.discard(i)
        w.crash(i, power_loss=False)

    @rule(i=BROKERS)
    def pause(self, i):
        self.world.pause(i)

    @rule(i=BROKERS)
    def resume(self, i):
        self.world.resume(i)

    @invariant()
    def promises_hold(self):
        if hasattr(self, "world"):
            self.world.check()

    def teardown(self):
        """Heal everything and let it converge: every replica ends byte-identical to the leader."""
        if not hasattr(self, "world"):
            return
        w = self.world
        for i in range(3):
            w.resume(i)
            w.restart(i)
        for _ in range(20):
            w.controller()
            for i in range(3):
                w.notify(i)
            for i in range(3):
                while w.fetch(i, 50) and len(w.r[i].log) < len(w.r[w.zk.leader].log):
                    pass
                w.fetch(i, 50)
            w.leader_isr(w.zk.leader)
            w.check()
        leader = w.r[w.zk.leader]
        assert w.zk.leader != -1 and leader.leading is not None
        for r in w.r:
            assert bytes(r.log) == bytes(leader.log), f"replica {r.id} differs from leader {leader.id} after healing"


class AckFsyncReplicationMachine(ReplicationMachine):
    ack_fsync = True

    @rule(i=BROKERS)
    def power_loss(self, i):
        self.world.crash(i, power_loss=True)


TestReplication = ReplicationMachine.TestCase
TestReplication.settings = settings(max_examples=STATE_MACHINE_MIN_EXAMPLES, stateful_step_count=60,
                                    deadline=None)
TestAckFsyncReplication = AckFsyncReplicationMachine.TestCase
TestAckFsyncReplication.settings = settings(max_examples=STATE_MACHINE_MIN_EXAMPLES,
                                            stateful_step_count=60, deadline=None)
