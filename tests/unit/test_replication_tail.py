"""A lost tail stays lost until every hosted replica caught up with its leader (docs/protocol.md §12.2)."""

from __future__ import annotations

from types import SimpleNamespace

from trikafka.broker.replication.fetch_rules import FollowerPartition
from trikafka.broker.replication.tail import copied_again, forget_tail_lost, keep_tail_status
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


def test_copied_again_once_every_hosted_replica_caught_up_with_its_leader():
    caught_up, behind = FollowerPartition(1, 4), FollowerPartition(1, 4)
    caught_up.caught_up = True
    assert copied_again(2, [_hosted((1, 2), caught_up), _hosted((1, 3))])  # not a replica of the second
    assert not copied_again(2, [_hosted((1, 2), caught_up), _hosted((2, 1), behind)])
    assert not copied_again(2, [_hosted((1, 2), None)])  # no leader to copy from (offline, or leading)
    assert copied_again(2, [])
