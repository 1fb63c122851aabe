"""Known replication failures of earlier systems as named scenarios on the model cluster.

Each replays, step by step, a history that lost acknowledged writes or forked
replicas in an earlier system, and shows trikafka's rule closing it.
"""

from __future__ import annotations

from tests.helpers.replication_model import MSG_BYTES, World, message
from trikafka.broker.engine.errors import EngineError


def _start(**kwargs) -> World:
    w = World(3, **kwargs)
    for i in range(3):
        w.notify(i)
    return w


def _commit_one(w: World, followers=(1, 2)) -> int:
    """Leader 0 appends one acks -1 message; the followers copy it and report it."""
    msg = w.next_msg
    assert w.produce(0) is None
    for f in followers:
        w.fetch(f)
        w.fetch(f)
    assert msg in w.acked
    w.check()
    return msg


def _elect(w: World) -> None:
    w.controller()
    for i in range(3):
        w.notify(i)
    w.check()


def test_jepsen_2013_isr_of_one_refuses_acks_all_with_min_insync_2():
    w = _start(min_isr=2)
    _commit_one(w)
    w.tick(1500)  # both followers silent past replica.lag.time.max.ms
    assert w.leader_isr(0) and w.zk.isr == (0,)
    assert w.produce(0) == EngineError.NOT_ENOUGH_REPLICAS  # nothing appended, nothing acknowledged
    assert len(w.r[0].log) == MSG_BYTES


def test_jepsen_2013_leader_alone_dies_and_no_stale_replica_is_elected():
    w = _start(min_isr=1)
    _commit_one(w)
    w.tick(1500)
    assert w.leader_isr(0) and w.zk.isr == (0,)
    msg = w.next_msg
    assert w.produce(0) is None and msg in w.acked  # committed by the ISR {0}
    w.crash(0)
    _elect(w)
    assert w.zk.leader == -1  # offline: 1 and 2 lack the acknowledged write
    w.restart(0)
    _elect(w)
    assert w.zk.leader == 0
    assert bytes(w.r[0].log[MSG_BYTES:2 * MSG_BYTES]) == message(msg)


def test_jepsen_2013_unclean_opt_in_loses_the_write_it_warns_about():
    w = _start(min_isr=1, unclean=True)
    _commit_one(w)
    w.tick(1500)
    w.leader_isr(0)
    w.produce(0)
    w.crash(0)
    w.controller()
    assert w.zk.leader == 1 and w.zk.isr == (1,)
    assert len(w.r[1].log) == MSG_BYTES  # the second acknowledged message is not there


def test_kip_101_restarted_follower_truncates_by_epoch_not_to_its_high_watermark():
    w = _start(min_isr=2)
    msg = _commit_one(w)
    w.crash(1)  # its high watermark was in memory only
    w.restart(1)
    w.notify(1)
    assert w.r[1].hw == 0
    assert w.truncate_by_epoch(1) == MSG_BYTES  # the HW rule would have cut to 0
    w.crash(0)  # the leader dies before 1 fetches again
    w.crash(2)
    _elect(w)
    assert w.zk.leader == 1
    assert bytes(w.r[1].log[:MSG_BYTES]) == message(msg)


def test_kip_101_divergent_tails_are_cut_at_the_epoch_boundary():
    w = _start(min_isr=1)
    _commit_one(w)
    assert w.produce(0) is None  # appended at 8 in epoch 0, never copied
    w.crash(0)
    _elect(w)
    assert w.zk.leader == 1
    assert w.produce(1) is None  # a different message at 8, epoch 1
    w.restart(0)
    _elect(w)
    assert w.zk.leader in (0, 1)
    for _ in range(4):
        for i in range(3):
            w.fetch(i, 5)
        w.check()
    logs = {bytes(r.log) for r in w.r}
    assert len(logs) == 1, "replicas diverged"


def test_kip_966_last_replica_standing_that_lost_its_tail_is_not_elected():
    w = _start(min_isr=1)
    w.tick(1500)
    w.fetch(1)  # 1 keeps up; 2 never fetched
    assert w.leader_isr(0) and w.zk.isr == (0, 1)
    msg = _commit_one(w, followers=(1,))
    w.tick(1500)
    assert w.leader_isr(0) and w.zk.isr == (0,)
    w.crash(0, power_loss=True)  # the unflushed message is gone from 0's disk
    w.restart(0)
    _elect(w)
    assert w.zk.leader == -1, "a leader without its unflushed tail would make 1 truncate a committed write"
    assert bytes(w.r[1].log[:MSG_BYTES]) == message(msg)


def test_zombie_leader_cannot_commit_after_its_session_expired():
    w = _start(min_isr=2)
    _commit_one(w)
    w.pause(0)
    _elect(w)
    assert w.zk.leader == 1
    w.resume(0)  # the zombie still believes it leads epoch 0
    assert w.produce(0) is None
    w.fetch(2)  # 2 follows epoch 1 and is not fenced into the zombie's epoch
    w.tick(1500)
    assert not w.leader_isr(0)  # its conditional ISR write fails
    assert len(w.acked) == 1
    w.check()
