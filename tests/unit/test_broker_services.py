"""The broker's services on a mock clock: flush scheduler, retention deleter, supervision.

Brokers here run on ``FakeFileSystem`` with blocking calls inline and talk
over in-memory streams, so Trio's autojump clock moves only when every task
waits on a timer, and the times asserted are the ones the services chose.
"""

from __future__ import annotations

import functools

import pytest
import trio
import trio.testing

from tests.helpers.broker_testing import make_config, memory_client, messages
from trikafka.log.errors import LogFailedError
from trikafka.testing import FakeFileSystem, start_in_memory
from trikafka.log.manager import CLEAN_SHUTDOWN_MARKER
from trikafka.log.flushing import FlushTicket, RollTicket
from trikafka.wire import (
    ErrorCode,
    FetchPart,
    FetchRequest,
    ProduceAckedRequest,
    ProducePart,
    ProduceRequest,
    encode_request,
)

HOUR_MS = 3_600_000


@pytest.fixture
def fake_fs():
    return FakeFileSystem(seed=3)


def config(tmp_path, **changes):
    settings = dict(log_flush_interval=100_000, num_partitions=1)
    settings.update(changes)
    return make_config(tmp_path, **settings).replace(log_dir="/data")


async def produce(client, topic, data):
    await client.send(ProduceRequest(ProducePart(topic, 0, data)))
    await client.offsets(topic, 0, -1)  # handled in order: the produce is appended now


# --------------------------------------------------------------------------- flush scheduler


def visible_times(log):
    """The Trio times at which ``log``'s visible end advanced."""
    times = []
    log.add_visible_listener(lambda _: times.append(trio.current_time()))
    return times


async def test_a_log_is_flushed_exactly_at_its_deadline_not_before(nursery, tmp_path, fake_fs, autojump_clock):
    broker = await start_in_memory(nursery, config(tmp_path, log_default_flush_interval_ms=1_000), fake_fs)
    client = await memory_client(broker)
    await trio.sleep(0.25)  # the interval starts at the first unflushed append, not on a fixed tick
    appended_at = trio.current_time()
    await produce(client, "t", messages(b"first"))
    log = broker.log_manager.get("t", 0)
    flushed_at = visible_times(log)
    await trio.sleep(0.5)
    await produce(client, "t", messages(b"second"))  # joins the wait the first one started
    await trio.sleep_until(appended_at + 0.999)
    assert log.visible_end == 0 and flushed_at == []
    await trio.sleep_until(appended_at + 1.0)
    await trio.testing.wait_all_tasks_blocked()
    assert flushed_at == [pytest.approx(appended_at + 1.0, abs=1e-9)]
    assert log.visible_end == log.end_offset  # both appends, in one flush


async def test_each_topic_waits_its_own_interval(nursery, tmp_path, fake_fs, autojump_clock):
    broker = await start_in_memory(nursery, config(
        tmp_path, log_default_flush_scheduler_interval_ms=500, log_default_flush_interval_ms=5_000,
        topic_flush_intervals_ms={"fast": 1_000}), fake_fs)
    client = await memory_client(broker)
    started = trio.current_time()
    await produce(client, "slow", messages(b"s"))
    await produce(client, "fast", messages(b"f"))  # a nearer deadline wakes the scheduler earlier
    fast, slow = visible_times(broker.log_manager.get("fast", 0)), visible_times(broker.log_manager.get("slow", 0))
    await trio.sleep(10)
    assert fast == [pytest.approx(started + 1.0)] and slow == [pytest.approx(started + 5.0)]


async def test_many_logs_each_flushed_at_its_own_deadline(nursery, tmp_path, fake_fs, autojump_clock):
    broker = await start_in_memory(nursery, config(tmp_path, log_default_flush_interval_ms=100), fake_fs)
    client = await memory_client(broker)
    appended_at, flushed_at = {}, {}
    for i in range(200):
        topic = f"t{i % 50}"  # 50 logs in four rounds of 25 ms: each log's four appends share one wait
        await produce(client, topic, messages(b"%d" % i))
        appended_at.setdefault(topic, trio.current_time())
        if topic not in flushed_at:
            flushed_at[topic] = visible_times(broker.log_manager.get(topic, 0))
        await trio.sleep(0.0005)
    await trio.sleep(1)
    for topic, times in flushed_at.items():
        assert times == [pytest.approx(appended_at[topic] + 0.1)], topic  # when its first append started the wait
        log = broker.log_manager.get(topic, 0)
        assert log.visible_end == log.end_offset
    assert broker.flusher.flushes_completed == 50


async def test_the_message_count_rule_flushes_before_the_deadline(nursery, tmp_path, fake_fs, autojump_clock):
    broker = await start_in_memory(nursery, config(tmp_path, log_flush_interval=3,
                                                   log_default_flush_interval_ms=HOUR_MS), fake_fs)
    client = await memory_client(broker)
    started = trio.current_time()
    await produce(client, "t", messages(b"1", b"2"))
    log = broker.log_manager.get("t", 0)
    await trio.testing.wait_all_tasks_blocked()
    assert log.visible_end == 0  # two messages: under log.flush.interval
    await produce(client, "t", messages(b"3"))
    await trio.testing.wait_all_tasks_blocked()
    assert log.visible_end == log.end_offset and trio.current_time() == started  # the third one: at once


async def test_an_idle_broker_never_wakes_the_flush_scheduler(nursery, tmp_path, fake_fs, autojump_clock):
    broker = await start_in_memory(nursery, config(tmp_path, num_partitions=4, log_default_flush_interval_ms=10,
                                                   retention_first_run_delay_s=10**9), fake_fs)
    client = await memory_client(broker)
    for i in range(250):  # 1,000 logs
        for partition in range(4):
            await client.send(ProduceRequest(ProducePart(f"t{i}", partition, messages(b"x"))))
    await client.offsets("t0", 0, -1)
    await trio.sleep(1)
    assert len(broker.log_manager.logs()) == 1000
    assert all(log.visible_end == log.end_offset for log in broker.log_manager.logs())
    wakeups, flushes = broker.flusher.wakeups, broker.flusher.flushes_completed
    await trio.sleep(24 * 3600)  # a day with nothing to flush: no wakeup at all (no periodic scan)
    assert (broker.flusher.wakeups, broker.flusher.flushes_completed) == (wakeups, flushes)
    await produce(client, "t7", messages(b"again"))
    await trio.sleep(1)
    assert broker.flusher.wakeups == wakeups + 1 and broker.flusher.flushes_completed == flushes + 1


async def test_flush_requests_during_an_fsync_coalesce_into_one_more_flush(nursery, tmp_path, fake_fs,
                                                                          autojump_clock):
    release = trio.Event()
    fsyncs = []

    async def held_fsync(fn):
        if isinstance(getattr(fn, "__self__", None), FlushTicket):
            fsyncs.append(fn.__self__.size)
            await release.wait()
        fn_result = fn()
        await trio.lowlevel.checkpoint()
        return fn_result

    broker = await start_in_memory(nursery, config(tmp_path, log_default_flush_scheduler_interval_ms=HOUR_MS),
                                   fake_fs, run_blocking=held_fsync)
    try:
        clients = [await memory_client(broker) for _ in range(5)]
        first = messages(b"first")
        response_frames = []

        async def acked(client, data):
            response_frames.append(await client.call(ProduceAckedRequest(-1, 60_000, (ProducePart("t", 0, data),))))

        async with trio.open_nursery() as producers:
            producers.start_soon(acked, clients[0], first)
            await trio.testing.wait_all_tasks_blocked()
            assert fsyncs == [len(first)]  # the first flush is stuck in its fsync
            for client in clients[1:]:
                producers.start_soon(acked, client, messages(b"later"))
            await trio.testing.wait_all_tasks_blocked()
            release.set()
    finally:
        release.set()
    # One flush for the first produce, ONE more for the four that came during its fsync.
    assert fsyncs == [len(first), len(first) + 4 * len(messages(b"later"))]
    assert len(response_frames) == 5


async def test_a_roll_fsyncs_in_the_worker_while_other_logs_take_appends(nursery, tmp_path, fake_fs,
                                                                         autojump_clock, monkeypatch):
    """The decision "fsync never runs on the event loop" holds for rolls (§7.2) too."""
    release = trio.Event()
    rolls = []
    in_worker = False
    real_run = RollTicket.run

    def checked_run(ticket):
        assert in_worker, "a roll ran its fsync on the event loop"
        return real_run(ticket)

    monkeypatch.setattr(RollTicket, "run", checked_run)

    async def held_roll(fn):
        nonlocal in_worker
        if isinstance(getattr(fn, "__self__", None), RollTicket):
            rolls.append(fn.__self__.old_size)
            await release.wait()
        in_worker = True
        try:
            result = fn()
        finally:
            in_worker = False
        await trio.lowlevel.checkpoint()
        return result

    first, second = messages(b"a" * 80), messages(b"b" * 80)
    broker = await start_in_memory(nursery, config(tmp_path, log_file_size=len(first) - 1,
                                                   log_default_flush_scheduler_interval_ms=HOUR_MS),
                                   fake_fs, run_blocking=held_roll)
    rolling, other = await memory_client(broker), await memory_client(broker)
    await produce(rolling, "t", first)  # segment 0 now holds more than log.file.size
    answers = []

    async def acked_second():
        frame = await rolling.call(ProduceAckedRequest(1, 60_000, (ProducePart("t", 0, second),)))
        answers.append(frame)

    nursery.start_soon(acked_second)
    await trio.testing.wait_all_tasks_blocked()
    assert rolls == [len(first)]  # the roll of t-0 waits in the worker; the loop goes on:
    await produce(other, "u", first)
    assert await other.offsets("u", 0, -1) == [0]  # u-0 took its append (not yet flushed)
    assert answers == []  # the append to t-0 waits for the roll
    release.set()
    await trio.testing.wait_all_tasks_blocked()
    assert len(answers) == 1 and answers[0].error_code == ErrorCode.NO_ERROR
    log = broker.log_manager.get("t", 0)
    assert log.segments.starts == (0, len(first))
    assert log.segments.segments[0].fully_flushed  # the roll fsynced the old segment in full
    assert log.end_offset == len(first) + len(second)


# --------------------------------------------------------------------------- nothing blocks the loop


def blocking_calls_checked(fake_fs, monkeypatch):
    """Make every blocking call of ``fake_fs`` check that it runs in the "worker"
    (inside ``run_blocking``); returns the ``run_blocking`` to pass and the log of calls."""
    calls = []
    in_worker = False
    for name in ("makedirs", "open_segment", "fsync_dir", "remove", "mtime_ms", "touch"):
        real = getattr(fake_fs, name)

        def checked(*args, _real=real, _name=name, **kwargs):
            assert in_worker, f"{_name}{args} ran on the event loop"
            calls.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(fake_fs, name, checked)

    async def in_the_worker(fn):
        nonlocal in_worker
        in_worker = True
        try:
            result = fn()
        finally:
            in_worker = False
        await trio.lowlevel.checkpoint()
        return result

    return in_the_worker, calls


async def test_a_new_log_is_created_in_the_worker_once_while_other_logs_go_on(nursery, tmp_path, fake_fs,
                                                                              autojump_clock, monkeypatch):
    checked, calls = blocking_calls_checked(fake_fs, monkeypatch)
    release = trio.Event()
    creations = []

    async def held_creation(fn):
        if getattr(fn, "func", None) is not None and fn.func.__name__ == "make_log":
            creations.append(fn.args)
            if fn.args[0] == "new":
                await release.wait()
        return await checked(fn)

    broker = await start_in_memory(nursery, config(tmp_path, log_default_flush_interval_ms=HOUR_MS), fake_fs,
                                   run_blocking=held_creation)
    calls.clear()  # the log dir's loading at startup
    other = await memory_client(broker)
    await produce(other, "u", messages(b"u"))  # u-0 exists
    assert creations == [("u", 0)]
    answers = []

    async def acked(client, payload):
        frame = await client.call(ProduceAckedRequest(1, 60_000, (ProducePart("new", 0, messages(payload)),)))
        answers.append(frame.error_code)

    for payload in (b"a", b"b", b"c"):
        nursery.start_soon(acked, await memory_client(broker), payload)
    await trio.testing.wait_all_tasks_blocked()
    assert creations[1:] == [("new", 0)]  # one creation, however many requests wait for it
    await produce(other, "u", messages(b"u again"))  # another log takes appends meanwhile
    assert await other.offsets("new", 0, -1) == [0]  # not created yet: the 0.7 answer for no log
    assert answers == []
    release.set()
    await trio.testing.wait_all_tasks_blocked()
    assert answers == [ErrorCode.NO_ERROR] * 3
    log = broker.log_manager.get("new", 0)
    assert log.end_offset == sum(len(messages(p)) for p in (b"a", b"b", b"c"))
    assert calls.count("makedirs") == 2 and "fsync_dir" in calls


async def test_retention_stats_unlinks_and_rolls_in_the_worker(nursery, tmp_path, autojump_clock, monkeypatch):
    now_ms = [0]
    fake_fs = FakeFileSystem(seed=3, clock_ms=lambda: now_ms[0])
    checked, calls = blocking_calls_checked(fake_fs, monkeypatch)
    broker = await start_in_memory(nursery, config(
        tmp_path, log_retention_hours=1, log_file_size=30, log_default_flush_interval_ms=HOUR_MS),
        fake_fs, clock_ms=lambda: now_ms[0], run_blocking=checked)
    client = await memory_client(broker)
    for i in range(3):  # each set is > 30 bytes: three segments
        await produce(client, "t", messages(b"%d" % i * 40))
        await broker.flush_all()
    log = broker.log_manager.get("t", 0)
    end = log.visible_end
    calls.clear()
    now_ms[0] = 2 * HOUR_MS  # every segment is expired: roll first, then delete all but the new one
    assert await broker.retention.run_once() == 3
    assert log.segments.starts == (end,) and log.visible_end == end
    assert calls.count("mtime_ms") == 3 and calls.count("remove") == 3
    assert calls.count("fsync_dir") == 4  # the roll's, then one per deleted segment


# --------------------------------------------------------------------------- retention


async def test_retention_first_runs_after_the_delay_then_every_interval(nursery, tmp_path, autojump_clock):
    now_ms = [0]
    fake_fs = FakeFileSystem(seed=3, clock_ms=lambda: now_ms[0])  # segment mtimes follow the same clock
    broker = await start_in_memory(nursery, config(
        tmp_path, log_cleanup_interval_mins=10, retention_first_run_delay_s=60, log_retention_hours=1,
        log_file_size=30, log_default_flush_scheduler_interval_ms=HOUR_MS), fake_fs, clock_ms=lambda: now_ms[0])
    client = await memory_client(broker)
    started = trio.current_time()
    for i in range(4):  # each set is > 30 bytes, so every produce after the first rolls a segment
        await produce(client, "t", messages(b"%d" % i * 40))
        await broker.flush_all()
    log = broker.log_manager.get("t", 0)
    segments_before = len(log.segments.segments)
    assert segments_before >= 4
    now_ms[0] = 2 * HOUR_MS  # every segment is now older than log.retention.hours
    await trio.sleep(59)
    assert broker.retention.runs == 0
    await trio.sleep(2)
    assert broker.retention.runs == 1 and broker.retention.segments_deleted >= 1
    assert trio.current_time() - started == pytest.approx(61)
    await trio.sleep(10 * 60)
    assert broker.retention.runs == 2
    assert log.start_offset > 0  # old segments are gone, offsets were not renumbered


async def broker_deleting_at_first_blocking_call(nursery, broker_config, topic):
    """An in-memory broker whose blocking calls run on the loop; once ``arm()`` is called, the next one
    first starts deleting ``topic``'s logs in a task of its own (DeleteTopics racing a service's pass)
    and lets it go as far as it can before the call runs.  Returns the broker, ``arm`` and
    ``deleted()``, which waits for the delete to end and returns its count."""
    armed, counts, done = [], [], trio.Event()

    async def delete():
        counts.append(await broker.engine.directory.delete_topic_logs(topic))
        done.set()

    async def run_blocking(fn):
        if armed:  # once: the delete's own blocking calls pass through
            armed.clear()
            nursery.start_soon(delete)
            await trio.testing.wait_all_tasks_blocked()
        return fn()

    async def deleted():
        with trio.fail_after(60):
            await done.wait()
        return counts[0]

    broker = await start_in_memory(nursery, broker_config, FakeFileSystem(seed=3), run_blocking=run_blocking)
    return broker, functools.partial(armed.append, True), deleted


async def test_a_log_deleted_while_retention_works_on_another_is_skipped(nursery, tmp_path, autojump_clock):
    # librdkafka's 0045_subscribe_many_updates deletes 100 topics at once; two brokers of its cluster
    # stopped with LogClosedError from the retention pass, which held a list of logs taken before.
    broker, arm, deleted = await broker_deleting_at_first_blocking_call(
        nursery, config(tmp_path, log_retention_hours=1), "u")
    client = await memory_client(broker)
    for topic in ("t", "u"):
        await produce(client, topic, messages(b"x"))
    assert [log.topic for log in broker.log_manager.logs()] == ["t", "u"]  # t's pass deletes u

    arm()
    assert await broker.retention.run_once() == 0
    assert await deleted() == 1 and broker.retention.runs == 1


async def test_a_log_deleted_under_its_own_retention_pass_is_deleted_once_the_pass_ended(nursery, tmp_path,
                                                                                        autojump_clock):
    # Deletion waited for a flush, a truncation and a cleaning in flight, not for a retention pass: it
    # closed and removed the log under the pass's stats.  Now it waits for the pass's lease.
    broker, arm, deleted = await broker_deleting_at_first_blocking_call(
        nursery, config(tmp_path, log_retention_hours=1), "t")
    client = await memory_client(broker)
    await produce(client, "t", messages(b"x"))
    (log,) = broker.log_manager.logs()

    arm()  # the pass's first blocking call (its stats) starts the deletion of its own log
    assert await broker.retention.run_once() == 0
    assert await deleted() == 1 and log.closed and log.passes.held == 0
    await produce(client, "u", messages(b"after"))
    assert await client.offsets("u", 0, -1) != []  # the broker still serves


async def test_a_log_deleted_while_it_rolls_is_deleted_once_the_roll_ended(nursery, tmp_path, autojump_clock):
    # Deletion did not wait for a roll in flight either: it closed the log under the roll's fsyncs.
    first = messages(b"x" * 40)
    broker, arm, deleted = await broker_deleting_at_first_blocking_call(
        nursery, config(tmp_path, log_file_size=len(first) - 1), "t")
    client = await memory_client(broker)
    await produce(client, "t", first)
    (log,) = broker.log_manager.logs()
    assert log.roll_due()

    arm()  # the next append rolls first: the roll's blocking call starts the deletion
    await produce(client, "t", messages(b"second"))
    assert await deleted() == 1 and log.closed and len(log.segments.segments) == 2
    await produce(client, "u", messages(b"after"))
    assert await client.offsets("u", 0, -1) != []  # the broker still serves


async def test_a_log_deleted_while_it_is_truncated_is_deleted_once_the_cut_ended(nursery, tmp_path, autojump_clock):
    # A follower's truncation (§12.4.3) holds the lease too: the deletion closes the log after the cut.
    broker, arm, deleted = await broker_deleting_at_first_blocking_call(nursery, config(tmp_path), "t")
    client = await memory_client(broker)
    await produce(client, "t", messages(b"kept"))
    (log,) = broker.log_manager.logs()
    cut = log.end_offset
    await produce(client, "t", messages(b"cut"))
    await broker.flush_all()

    arm()  # the cut's blocking call starts the deletion
    await broker.flusher.truncate(log, cut)
    assert await deleted() == 1 and log.closed and log.end_offset == cut


# --------------------------------------------------------------------------- supervision


async def test_a_failing_flush_brings_the_broker_down_loudly_and_leaves_no_marker(tmp_path, fake_fs, autojump_clock):
    fake_fs.inject_error("fsync", "t-0")
    with pytest.raises(BaseExceptionGroup) as failure:
        async with trio.open_nursery() as nursery:
            broker = await start_in_memory(nursery, config(tmp_path), fake_fs)
            client = await memory_client(broker)
            await client.send(ProduceAckedRequest(-1, 60_000, (ProducePart("t", 0, messages(b"x")),)))
            await trio.sleep(3600)  # the broker must fail long before this
    assert failure.group_contains(LogFailedError, depth=None)
    assert trio.current_time() < 3600
    assert broker.clean_shutdown is False
    assert not fake_fs.exists("/data/" + CLEAN_SHUTDOWN_MARKER)


async def test_a_failing_retention_run_brings_the_broker_down(tmp_path, autojump_clock):
    now_ms = [0]
    fake_fs = FakeFileSystem(seed=3, clock_ms=lambda: now_ms[0])
    with pytest.raises(BaseExceptionGroup) as failure:
        async with trio.open_nursery() as nursery:
            broker = await start_in_memory(nursery, config(
                tmp_path, retention_first_run_delay_s=60, log_retention_hours=1, log_file_size=30),
                fake_fs, clock_ms=lambda: now_ms[0])
            client = await memory_client(broker)
            for i in range(3):
                await produce(client, "t", messages(b"%d" % i * 40))
                await broker.flush_all()
            now_ms[0] = 2 * HOUR_MS
            fake_fs.inject_error("remove", "t-0", count=100)
            await trio.sleep(3600)
    assert failure.group_contains(OSError, depth=None) or failure.group_contains(LogFailedError, depth=None)
    assert trio.current_time() == pytest.approx(60)
    assert broker.clean_shutdown is False


async def test_a_protocol_error_closes_only_that_connection(nursery, tmp_path, fake_fs, autojump_clock):
    broker = await start_in_memory(nursery, config(tmp_path), fake_fs)
    bad, good = await memory_client(broker), await memory_client(broker)
    await bad.send(b"\x00\x00\x00\x02\x00\x63")  # unknown request type 99
    await bad.assert_closed()
    assert await good.offsets("t", 0, -1) == [0]
    response = await good.call(ProduceAckedRequest(1, 1000, (ProducePart("t", 0, messages(b"ok")),)))
    assert response.error_code == ErrorCode.NO_ERROR


# --------------------------------------------------------------------------- graceful shutdown


async def test_shutdown_gives_stuck_requests_the_grace_period_then_cancels_them(tmp_path, fake_fs, autojump_clock):
    async with trio.open_nursery() as nursery:
        broker = await start_in_memory(nursery, config(tmp_path, graceful_shutdown_timeout_s=5.0), fake_fs)
        writer = await memory_client(broker)
        await writer.call(ProduceAckedRequest(-1, 1000, (ProducePart("t", 0, messages(b"x" * 1000)),)))
        # A client that sends a fetch and never reads: lockstep streams make the
        # broker's send block until the peer reads, so this request never finishes.
        client_stream, server_stream = trio.testing.lockstep_stream_pair()
        await broker.connect_stream(server_stream)
        await client_stream.send_all(encode_request(FetchRequest(FetchPart("t", 0, 0, 10_000))))
        await trio.testing.wait_all_tasks_blocked()
        started = trio.current_time()
        broker.shutdown()
    assert trio.current_time() - started == pytest.approx(5.0)
    assert broker.clean_shutdown is True  # cancelling a stuck send loses no data: the marker is written
    assert fake_fs.exists("/data/" + CLEAN_SHUTDOWN_MARKER)


async def test_a_second_shutdown_request_skips_the_rest_of_the_grace_period(tmp_path, fake_fs, autojump_clock):
    async with trio.open_nursery() as nursery:
        broker = await start_in_memory(nursery, config(tmp_path, graceful_shutdown_timeout_s=30.0), fake_fs)
        client_stream, server_stream = trio.testing.lockstep_stream_pair()
        await broker.connect_stream(server_stream)
        await client_stream.send_all(encode_request(ProduceAckedRequest(1, 1000, (ProducePart("t", 0, b""),))))
        await trio.testing.wait_all_tasks_blocked()
        started = trio.current_time()
        broker.shutdown()
        await trio.sleep(1)
        broker.shutdown()  # like a second Ctrl-C
    assert trio.current_time() - started == pytest.approx(1.0)
    assert broker.clean_shutdown is True


async def test_a_log_deleted_while_the_cleaner_weighs_it_is_left_alone(nursery, tmp_path, autojump_clock):
    # The cleaner weighs its candidates' dirty ratios off the loop; a topic deleted meanwhile waits for
    # the weighing, and the cleaning that would follow is refused its lease (retention and the flusher
    # had the same race).
    from trikafka.wire.keyed import build_keyed_set

    broker, arm, deleted = await broker_deleting_at_first_blocking_call(
        nursery, config(tmp_path, log_file_size=2000, topic_cleanup_policy_map={"kv": "compact"},
                        log_cleaner_enable=False, min_cleanable_dirty_ratio=0.01, log_flush_interval=1), "kv")
    assert broker.cleaner is not None
    client = await memory_client(broker)
    for round_ in range(20):
        await produce(client, "kv", build_keyed_set([(b"user-%d" % k, b"round %02d" % round_) for k in range(8)]))
    (log,) = broker.log_manager.logs()
    assert len(log.segments.segments) > 2 and not log.closed  # rolled: there is something to clean

    arm()
    assert await broker.cleaner.clean_once() is None
    assert await deleted() == 1 and log.closed


async def kafka_broker_deleting_at_first_blocking_call(nursery, tmp_path):
    """``broker_deleting_at_first_blocking_call`` with a Kafka listener and a Kafka-format topic ``t`` of
    one partition holding one batch of 3 records stamped 1000, 1001, 1002 ms, flushed."""
    from tests.helpers.kafka_batches import batches
    from trikafka.broker.seams import KafkaAppend

    broker, arm, deleted = await broker_deleting_at_first_blocking_call(nursery, config(tmp_path, kafka_port=0), "t")
    assert broker.kafka is not None
    await broker.kafka.topics.create("t", 1, 1, {})
    partition = await broker.engine.directory.partition_for_write("t", 0)
    await partition.append(bytearray(batches([3], base_timestamp_ms=1000)), 1, kafka=KafkaAppend())
    await broker.flush_all()
    return broker, arm, deleted


async def test_a_log_deleted_while_deleterecords_stores_its_start_is_deleted_after_the_store(nursery, tmp_path,
                                                                                           autojump_clock):
    # DeleteRecords stores the new log start in the partition directory off the loop (§16.6); a
    # DeleteTopics meanwhile removed that directory under the store.
    from trikafka.broker.kafka.delete_records import HIGH_WATERMARK, _delete_below

    broker, arm, deleted = await kafka_broker_deleting_at_first_blocking_call(nursery, tmp_path)
    log = broker.log_manager.get("t", 0)
    arm()  # the store's blocking call starts the deletion
    await _delete_below(broker.kafka, "t", 0, HIGH_WATERMARK, trio.current_time() + 30)
    assert await deleted() == 1 and log.closed


async def test_a_log_deleted_while_listoffsets_reads_a_batch_is_deleted_after_the_read(nursery, tmp_path,
                                                                                     autojump_clock):
    # ListOffsets by time reads the batch the index found off the loop; a DeleteTopics meanwhile closed
    # the log under the read.
    from kio.schema.errors import ErrorCode
    from trikafka.broker.kafka.offsets import _list_one

    broker, arm, deleted = await kafka_broker_deleting_at_first_blocking_call(nursery, tmp_path)
    log = broker.log_manager.get("t", 0)
    arm()  # the read's blocking call starts the deletion
    assert await _list_one(broker.kafka, "t", 0, 1001, -1, False) == (ErrorCode.none, 1, 1001, 0)
    assert await deleted() == 1 and log.closed


async def test_a_log_deleted_while_0_7_offsets_stats_its_segments_is_deleted_after_the_stats(nursery, tmp_path,
                                                                                           autojump_clock):
    # 0.7 OFFSETS by time stats the segment files off the loop; a topic deletion meanwhile removed them
    # (three attempts found them gone: the connection was closed).
    broker, arm, deleted = await broker_deleting_at_first_blocking_call(nursery, config(tmp_path), "t")
    client = await memory_client(broker)
    await produce(client, "t", messages(b"x"))
    log = broker.log_manager.get("t", 0)

    arm()  # the stats' blocking call starts the deletion
    assert await client.offsets("t", 0, HOUR_MS) == [0]
    assert await deleted() == 1 and log.closed
