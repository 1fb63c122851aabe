"""LogManager: startup, clean-shutdown marker, topic creation and validation (spec §5.1, §7, §9.7)."""

import pytest

from trikafka.log import (
    CLEAN_SHUTDOWN_MARKER,
    InvalidTopicError,
    LogConfig,
    LogManager,
    ManualClock,
    WrongPartitionError,
)
from trikafka.testing import FakeFileSystem
from trikafka.log.errors import LogClosedError, LogError, LogLoadError
from trikafka.wire.messageset import build_message_set

ROOT = "/data/logs"
MARKER = ROOT + "/" + CLEAN_SHUTDOWN_MARKER


def manager(fs, **kwargs):
    kwargs.setdefault("clock_ms", ManualClock(0))
    mgr = LogManager(ROOT, LogConfig(), fs, **kwargs)
    mgr.open()
    return mgr


def test_first_start_creates_the_log_dir_and_needs_recovery():
    fs = FakeFileSystem()
    mgr = manager(fs)
    assert fs.is_dir(ROOT) and mgr.recovered is True and mgr.logs() == []


def test_topic_created_on_first_use_durably():
    fs = FakeFileSystem()
    mgr = manager(fs, partitions=2)
    created = []
    mgr.add_topic_listener(created.append)
    log = mgr.get_or_create("orders", 1)
    assert mgr.get_or_create("orders", 1) is log
    mgr.get_or_create("orders", 0)
    assert created == ["orders"]  # once per topic, not per partition
    assert fs.listdir(ROOT) == ["orders-0", "orders-1"]
    assert fs.is_durable_entry(ROOT + "/orders-1")
    assert fs.is_durable_entry(ROOT + "/orders-1/00000000000000000000.kafka")
    assert mgr.get("orders", 1) is log and mgr.get("orders", 5) is None
    assert mgr.topics() == {"orders"}


@pytest.mark.parametrize("name", ["..", ".", "a/b", "/", "a\x00b", "x" * 10240, "", "../../etc"])
def test_hostile_topic_names_create_nothing(name):
    fs = FakeFileSystem()
    mgr = manager(fs)
    with pytest.raises(InvalidTopicError):
        mgr.get_or_create(name, 0)
    assert fs.listdir(ROOT) == [] and fs.listdir("/data") == ["logs"] and mgr.logs() == []


def test_partition_range_is_checked_before_creation():
    fs = FakeFileSystem()
    mgr = manager(fs, partitions=lambda topic: 3 if topic == "big" else 1)
    for topic, partition in [("t", 1), ("t", -1), ("big", 3)]:
        with pytest.raises(WrongPartitionError) as info:
            mgr.get_or_create(topic, partition)
        assert info.value.error_code == 3
    mgr.get_or_create("big", 2)
    assert fs.listdir(ROOT) == ["big-2"]


def test_topic_configs_override_the_default():
    fs = FakeFileSystem()
    special = LogConfig(segment_bytes=10)
    mgr = manager(fs, topic_configs={"small": special})
    assert mgr.get_or_create("small", 0).config is special
    assert mgr.get_or_create("other", 0).config == LogConfig()


def test_clean_shutdown_writes_the_marker_and_the_next_start_skips_recovery():
    fs = FakeFileSystem()
    mgr = manager(fs)
    mgr.get_or_create("t", 0).append(build_message_set([b"hello"]))
    assert mgr.close() is True
    assert fs.exists(MARKER) and fs.is_durable_entry(MARKER)
    segment = ROOT + "/t-0/00000000000000000000.kafka"
    assert fs.durable_size(segment) == 15  # flushed before the marker
    fs.crash("random")  # nothing volatile is left: the crash changes nothing
    fs.write_file(segment, fs.read_file(segment) + bytes(3))  # a tail recovery would cut
    mgr2 = manager(fs)
    assert mgr2.recovered is False
    assert not fs.exists(MARKER) and fs.is_durable_entry(MARKER)  # removal made durable at once
    assert mgr2.get("t", 0).end_offset == 18  # no scan after a clean shutdown (spec §7.3)


def test_missing_marker_forces_recovery():
    fs = FakeFileSystem()
    mgr = manager(fs)
    mgr.get_or_create("t", 0).append(build_message_set([b"hello"]))
    mgr.get("t", 0).flush()
    fs.write_file(ROOT + "/t-0/00000000000000000000.kafka", fs.read_file(ROOT + "/t-0/00000000000000000000.kafka") + bytes(3))
    fs.crash("keep_all")  # no close(): a crash
    mgr2 = manager(fs)
    assert mgr2.recovered is True and mgr2.get("t", 0).end_offset == 15


def test_unclean_close_writes_no_marker():
    fs = FakeFileSystem()
    mgr = manager(fs)
    mgr.get_or_create("t", 0)
    assert mgr.close(clean=False) is False and not fs.exists(MARKER)
    with pytest.raises(LogClosedError):
        mgr.get_or_create("t", 0)


def test_a_failed_log_blocks_the_marker():
    fs = FakeFileSystem()
    mgr = manager(fs)
    log = mgr.get_or_create("t", 0)
    fs.inject_error("write")
    with pytest.raises(LogError):
        log.append(build_message_set([b"x"]))
    assert mgr.close() is False
    assert not fs.exists(MARKER)


def test_flush_error_at_shutdown_blocks_the_marker():
    fs = FakeFileSystem()
    mgr = manager(fs)
    mgr.get_or_create("t", 0).append(build_message_set([b"x"]))
    fs.inject_error("fsync")
    assert mgr.close() is False and not fs.exists(MARKER)


def test_startup_ignores_files_and_rejects_bad_directory_names():
    fs = FakeFileSystem()
    fs.write_file(ROOT + "/README", b"hi")
    fs.write_file(ROOT + "/a-b-3/00000000000000000000.kafka", b"")
    mgr = manager(fs)
    assert mgr.get("a-b", 3) is not None
    for bad in ("nodash", "t-x", "t-01", "bad name-0"):
        fs2 = FakeFileSystem()
        fs2.makedirs(ROOT + "/" + bad)
        with pytest.raises(LogLoadError, match="log dir"):
            manager(fs2)


def test_open_twice_and_use_before_open_are_errors():
    fs = FakeFileSystem()
    mgr = LogManager(ROOT, LogConfig(), fs, ManualClock(0))
    with pytest.raises(LogError):
        mgr.get_or_create("t", 0)
    mgr.open()
    with pytest.raises(LogError):
        mgr.open()


def test_partition_dir_lost_in_a_crash_before_its_directory_fsync():
    # makedirs + fsync of the log dir happen before get_or_create returns, so a
    # crash afterwards keeps the partition; its segment 0 is durable too.
    for seed in range(10):
        fs = FakeFileSystem(seed)
        mgr = manager(fs)
        mgr.get_or_create("t", 0)
        fs.crash("prefix", dir_entry_keep_probability=0.0)
        assert manager(fs).get("t", 0) is not None


def test_create_topic_makes_every_partition_durable_and_listeners_see_the_final_count():
    fs = FakeFileSystem()
    mgr = manager(fs, partitions=1)
    seen = []
    mgr.add_topic_listener(lambda topic: seen.append((topic, mgr.partitions_for(topic))))
    created = mgr.create_topic("wide", 4)
    assert [log.partition for log in created] == [0, 1, 2, 3] and seen == [("wide", 4)]
    assert all(fs.is_durable_entry(f"{ROOT}/wide-{p}/00000000000000000000.kafka") for p in range(4))
    assert mgr.create_topic("wide", 4) == []  # nothing left to create
    assert mgr.get_or_create("wide", 3) is created[3]
    with pytest.raises(WrongPartitionError):
        mgr.get_or_create("wide", 4)
    with pytest.raises(InvalidTopicError):
        mgr.create_topic("a/b", 2)
    assert mgr.configured_partitions("wide") == 1


def test_partition_count_never_drops_below_the_directories_on_disk():
    fs = FakeFileSystem()
    mgr = manager(fs, partitions=lambda topic: 6 if topic == "t" else 1)
    mgr.get_or_create("t", 5)
    mgr.close()
    # Restarted with a smaller setting: partition 5 stays reachable.
    again = manager(fs, partitions=2)
    assert again.partitions_for("t") == 6 and again.partitions_for("other") == 2
    assert again.get_or_create("t", 5).partition == 5


def test_a_kafka_format_topic_has_its_own_count_and_a_07_topic_the_settings_floor():
    fs = FakeFileSystem()
    mgr = manager(fs, partitions=3, topic_configs={"kafka": LogConfig(record_format="v2")})
    mgr.create_topic("kafka", 1)
    assert mgr.partitions_for("kafka") == 1  # num.partitions is only the default of its creation (§9.6)
    with pytest.raises(WrongPartitionError):
        mgr.get_or_create("kafka", 2)
    assert mgr.partitions_for("old") == 3  # a 0.7 topic: every valid name has num.partitions
    mgr.get_or_create("old", 2)


def test_a_new_partition_is_not_recovered(caplog):
    import logging

    mgr = manager(FakeFileSystem())
    with caplog.at_level(logging.INFO, "trikafka.log"):
        mgr.get_or_create("orders", 0)
    assert "recovery" not in caplog.text  # an empty directory has nothing to scan


def test_the_broker_s_own_files_in_the_log_dir_are_not_warned_about(caplog):
    """The ACL and user stores, the listener and settings files live beside the partition
    directories; only a stranger is worth a warning."""
    from trikafka.broker.kafka.acl.store import FileAcls
    from trikafka.log.names import BROKER_FILES

    fs = FakeFileSystem()
    fs.makedirs(ROOT)
    FileAcls(fs, ROOT).update(lambda acls: acls)  # the file `trikafka acls add` writes
    for name in BROKER_FILES:
        fs.write_synced(f"{ROOT}/{name}", b"")
    fs.write_synced(f"{ROOT}/stray.txt", b"")
    with caplog.at_level("WARNING", logger="trikafka.log"):
        manager(fs)
    assert [r.getMessage() for r in caplog.records] == [f"ignoring {ROOT}/stray.txt: not a partition directory"]
