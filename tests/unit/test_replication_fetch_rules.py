"""REPLICA_FETCH decisions on the leader and the follower."""

from __future__ import annotations

from trikafka.broker.replication.fetch_rules import (
    Append, FollowerPartition, Nothing, TruncateFirst, WaitForState, serve_epoch_end_offset, serve_replica_fetch,
)
from trikafka.broker.replication.isr import LeaderPartition
from trikafka.kafka import batch
from trikafka.log.epochs import EpochEntry, EpochHistory
from trikafka.wire.errors import ErrorCode
from trikafka.wire.messageset import build_message_set
from trikafka.wire.replication import EpochEndOffsetRequest, ReplicaFetchRequest, ReplicaFetchResult

from tests.helpers.kafka_batches import make_batch

HISTORY = EpochHistory([EpochEntry(0, 0), EpochEntry(3, 100)])


def lead(epoch_start=100):
    return LeaderPartition(1, (1, 2, 3), (1, 2, 3), epoch_start=epoch_start, high_watermark=0,
                           lag_time_max_ms=1000, min_insync_replicas=2, now_ms=0)


def ask(replica=2, epoch=3, offset=40, max_bytes=1000):
    return ReplicaFetchRequest(replica, epoch, 0, "t", 0, offset, offset, max_bytes)


def serve(request, leader="default", epoch=3, log_end=150):
    lp = lead() if leader == "default" else leader
    return serve_replica_fetch(request, leader=lp, leader_epoch=epoch, history=HISTORY, log_end=log_end,
                               now_ms=5, ack_fsync=False)


def test_fencing_and_refusals():
    assert serve(ask(), leader=None).error == ErrorCode.NOT_LEADER_FOR_PARTITION
    assert serve(ask(replica=9)).error == ErrorCode.NOT_REPLICA
    assert serve(ask(replica=1)).error == ErrorCode.NOT_REPLICA
    assert serve(ask(epoch=2)).error == ErrorCode.FENCED_LEADER_EPOCH
    assert serve(ask(epoch=4)).error == ErrorCode.UNKNOWN_LEADER_EPOCH
    out = serve(ask(offset=151))
    assert (out.error, out.log_end) == (ErrorCode.OFFSET_OUT_OF_RANGE, 150)


def test_a_chunk_never_spans_an_epoch_boundary_and_records_the_follower():
    lp = lead()
    lp.on_local_append(150)
    out = serve(ask(offset=40), leader=lp)
    assert (out.error, out.chunk_epoch, out.offset, out.max_bytes) == (ErrorCode.NO_ERROR, 0, 40, 60)
    assert lp.follower_end(2) == 40
    out = serve(ask(offset=100, max_bytes=20), leader=lp)
    assert (out.chunk_epoch, out.max_bytes, out.log_end, out.isr) == (3, 20, 150, (1, 2, 3))
    assert serve(ask(offset=150), leader=lp).max_bytes == 0


def result(data=b"", hw=0, error=ErrorCode.NO_ERROR, chunk_epoch=3):
    return ReplicaFetchResult(error, 3, chunk_epoch, hw, 500, (1, 2), data)


def test_follower_appends_whole_messages_only_and_bounds_its_hw():
    f = FollowerPartition(1, 3)
    data = build_message_set([b"a" * 10, b"b" * 10])
    one = len(build_message_set([b"a" * 10]))
    action = f.on_response(result(data[:-3], hw=400), fetch_offset=100)
    assert action == Append(data[:one], 3, 100)
    assert f.high_watermark == 100 + one  # the leader's HW is further, but we hold only this
    assert f.on_response(result(b"", hw=90), fetch_offset=100 + one) == Nothing()
    assert f.high_watermark == 100 + one  # never moves back


def test_a_kafka_format_follower_appends_whole_v2_batches_only():
    # A byte-range fetch may end inside a v2 batch (§16.6): the follower keeps the batches before it.
    f = FollowerPartition(1, 3, whole_prefix_bytes=batch.scan_valid_prefix)
    first, second = make_batch([b"a" * 10, b"b"]), make_batch([b"c" * 30], base_offset=2)
    action = f.on_response(result(first + second[:-5], hw=400), fetch_offset=100)
    assert action == Append(first, 3, 100)
    assert f.high_watermark == 100 + len(first)
    assert f.on_response(result(second[:20], hw=400), fetch_offset=100 + len(first)) == Nothing()


def test_follower_errors():
    f = FollowerPartition(1, 3)
    f.needs_truncation = False
    assert f.on_response(result(error=ErrorCode.OFFSET_OUT_OF_RANGE), 10) == TruncateFirst()
    assert f.needs_truncation
    assert f.on_response(result(error=ErrorCode.FENCED_LEADER_EPOCH), 10) == WaitForState(ErrorCode.FENCED_LEADER_EPOCH)


def test_epoch_end_offset_answers_and_fencing():
    def answer(epoch=3, requested=0, replica=2, leader="default"):
        return serve_epoch_end_offset(EpochEndOffsetRequest(replica, epoch, "t", 0, requested),
                                      leader=lead() if leader == "default" else leader, leader_epoch=3,
                                      history=HISTORY, log_end=150)
    assert answer(requested=0) == (ErrorCode.NO_ERROR, 0, 100)
    assert answer(requested=2) == (ErrorCode.NO_ERROR, 0, 100)
    assert answer(requested=3) == (ErrorCode.NO_ERROR, 3, 150)
    assert answer(epoch=2)[0] == ErrorCode.FENCED_LEADER_EPOCH
    assert answer(epoch=4)[0] == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert answer(replica=7)[0] == ErrorCode.NOT_REPLICA
    assert answer(leader=None)[0] == ErrorCode.NOT_LEADER_FOR_PARTITION
