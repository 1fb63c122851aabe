"""A lost tail stays lost until every hosted replica caught up with its leader, and each replica that did
is listed in ``tail_copied`` (docs/protocol.md §12.2)."""

from __future__ import annotations

from types import SimpleNamespace

from trikafka.broker.replication.fetch_rules import FollowerPartition
from trikafka.broker.replication.membership import decode_tail_copied, encode_tail_copied
from trikafka.broker.replication.tail import copied_again, copied_partitions, forget_tail_lost, keep_tail_status
from trikafka.log.names import TAIL_LOST_FILE
from trikafka.testing import FakeFileSystem

LOG_DIR = "/data"


def test_a_lost_tail_is_remembered_across_clean_starts_until_forgotten():
    fs = FakeFileSystem()
    fs.makedirs(LOG_DIR)
    fs.fsync_dir("/")  # the log dir itself is durable, as the broker makes it
    assert keep_tail_status(fs, LOG_DIR, intact_now=True)  # nothing was ever lost
    assert not keep_tail_status(fs, LOG_DIR, intact_now=False)  # a reboot without a clean stop
    assert fs.is_durable_entry(f"{LOG_DIR}/{TAIL_LOST_FILE}")
    fs.crash()
    assert not keep_tail_status(fs, LOG_DIR, intact_now=True)  # a clean stop since: still lost
    forget_tail_lost(fs, LOG_DIR)
    fs.crash()
    assert keep_tail_status(fs, LOG_DIR, intact_now=True)


def _hosted(replicas, follower=None):
    return SimpleNamespace(replicas=replicas, follower=follower)


def test_a_replica_is_copied_again_once_it_caught_up_with_its_leader_and_the_tail_once_all_are():
    caught_up, behind = FollowerPartition(1, 4), FollowerPartition(1, 4)
    caught_up.caught_up = True
    hosted = {("t", 0): _hosted((1, 2), caught_up), ("t", 1): _hosted((1, 3))}  # not a replica of t-1
    assert copied_partitions(2, hosted) == {("t", 0)}
    assert copied_again(2, hosted, copied_partitions(2, hosted))
    hosted[("t", 2)] = _hosted((2, 1), behind)
    hosted[("t", 3)] = _hosted((1, 2), None)  # no leader to copy from (offline), or leading
    assert copied_partitions(2, hosted) == {("t", 0)}
    assert not copied_again(2, hosted, {("t", 0), ("t", 2)})
    assert copied_again(2, hosted, {("t", 0), ("t", 2), ("t", 3)})  # copied earlier, leading now
    assert copied_again(2, {}, set())


def test_tail_copied_is_written_by_topic_in_order_and_read_back_leniently():
    value = encode_tail_copied({("b", 2), ("a", 1), ("b", 0)})
    assert value == {"a": [1], "b": [0, 2]}
    assert decode_tail_copied(value) == {("a", 1), ("b", 0), ("b", 2)}
    assert decode_tail_copied(None) == frozenset() and decode_tail_copied([1]) == frozenset()
    assert decode_tail_copied({"a": [1, "2", True], "b": 3}) == {("a", 1)}  # what is not a partition counts as not copied
