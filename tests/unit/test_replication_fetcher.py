"""The follower loop over the wire (memory streams) against an in-memory leader."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from trikafka.broker.replication.fetch_rules import FollowerPartition, serve_epoch_end_offset, serve_replica_fetch
from trikafka.broker.replication.fetcher import FollowerStopped, StreamLeaderLink, follow
from trikafka.broker.replication.isr import LeaderPartition
from trikafka.log.epochs import EpochEntry, EpochHistory
from trikafka.wire.errors import ErrorCode
from trikafka.wire.framing import NEED_DATA, RequestReader
from trikafka.wire.messageset import build_message_set
from trikafka.wire.replication import (
    EpochEndOffsetRequest, encode_epoch_end_offset_response, encode_replica_fetch_response,
)

A, B, C, X = (build_message_set([p * 20]) for p in (b"a", b"b", b"c", b"x"))


class MemoryReplica:
    """A ReplicaLog in memory."""

    def __init__(self, data: bytes = b"", entries=(), log_start_offset: int = -1):
        self.data = bytearray(data)
        self.history = EpochHistory(list(entries))
        self.log_start_offset = log_start_offset  # a Kafka-format log's (§12.4.1); -1: a 0.7 log's
        self.log_starts_followed: list[int] = []

    @property
    def end_offset(self) -> int:
        return len(self.data)

    @property
    def durable_end(self) -> int:
        return len(self.data)

    async def assign_epoch(self, epoch: int, start_offset: int) -> None:
        self.history.assign(epoch, start_offset)

    async def truncate_to(self, offset: int) -> None:
        del self.data[offset:]
        self.history.truncate_from(offset)

    async def append_verbatim(self, data: bytes) -> None:
        self.data += data

    async def follow_log_start(self, offset: int) -> None:
        self.log_starts_followed.append(offset)
        self.log_start_offset = max(self.log_start_offset, offset)


class MemoryLeader:
    """Serves REPLICA_FETCH and EPOCH_END_OFFSET from an in-memory log."""

    def __init__(self, replica: MemoryReplica, epoch: int):
        self.replica, self.epoch = replica, epoch
        self.partition = LeaderPartition(1, (1, 2), (1, 2), epoch_start=replica.end_offset, high_watermark=0,
                                         lag_time_max_ms=1000, min_insync_replicas=1, now_ms=0)
        self.partition.on_local_append(replica.end_offset)
        self.caught_up = trio.Event()

    async def serve(self, stream: trio.abc.Stream) -> None:
        reader = RequestReader()
        while data := await stream.receive_some(65536):
            reader.receive_data(data)
            while (request := reader.next_event()) is not NEED_DATA:
                await stream.send_all(b"".join(self._answer(request)))

    def _answer(self, request) -> list[bytes]:
        r = self.replica
        if isinstance(request, EpochEndOffsetRequest):
            return [encode_epoch_end_offset_response(*serve_epoch_end_offset(
                request, leader=self.partition, leader_epoch=self.epoch, history=r.history, log_end=r.end_offset))]
        answer = serve_replica_fetch(request, leader=self.partition, leader_epoch=self.epoch, history=r.history,
                                     log_end=r.end_offset, now_ms=0, ack_fsync=False)
        if answer.error == ErrorCode.NO_ERROR and answer.max_bytes == 0 and answer.high_watermark == r.end_offset:
            self.caught_up.set()
            self.epoch += 1  # the test moves leadership on once the follower has everything
        data = bytes(r.data[answer.offset:answer.offset + answer.max_bytes])
        return encode_replica_fetch_response(answer.error, leader_epoch=answer.leader_epoch,
                                             chunk_epoch=answer.chunk_epoch, high_watermark=answer.high_watermark,
                                             log_end=answer.log_end, isr=answer.isr, data=data,
                                             log_start_offset=r.log_start_offset)


async def test_a_divergent_follower_truncates_by_epoch_then_copies_the_leader_verbatim():
    # Epoch 0 wrote A; the old leader (now follower) also wrote X in epoch 0 that nobody copied.
    # The new leader wrote B in epoch 1 and C in epoch 2.
    leader_log = MemoryReplica(A + B + C, [EpochEntry(0, 0), EpochEntry(1, len(A)), EpochEntry(2, len(A + B))])
    follower_log = MemoryReplica(A + X, [EpochEntry(0, 0)])
    leader = MemoryLeader(leader_log, epoch=2)
    left, right = trio.testing.memory_stream_pair()
    state = FollowerPartition(leader_id=1, leader_epoch=2)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(leader.serve, right)
        link = StreamLeaderLink(left, replica_id=2, leader_epoch=2, topic="t", partition=0)
        with pytest.raises(FollowerStopped) as stopped, trio.fail_after(5):
            await follow(follower_log, link, state, max_bytes=1000)
        assert stopped.value.error == ErrorCode.FENCED_LEADER_EPOCH  # the leader moved to epoch 3
        nursery.cancel_scope.cancel()
    assert bytes(follower_log.data) == bytes(leader_log.data)
    assert follower_log.history == leader_log.history  # each epoch recorded where its bytes began
    assert state.high_watermark == len(A + B + C)
    assert leader.partition.follower_end(2) == len(A + B + C)
    assert state.caught_up  # bytes of the leader's epoch, and its HW: every committed byte is here


async def test_a_follower_without_bytes_of_the_leaders_epoch_is_caught_up_once_it_holds_the_leaders_log():
    # The leader of epoch 3 has appended nothing yet: what it held when elected may have been
    # committed beyond the HW it reports, so reaching that HW does not prove the copy complete;
    # holding the leader's whole log (its log_end) does (§12.2).
    leader_log = MemoryReplica(A + B, [EpochEntry(0, 0), EpochEntry(1, len(A))])
    leader = MemoryLeader(leader_log, epoch=3)
    left, right = trio.testing.memory_stream_pair()
    state = FollowerPartition(leader_id=1, leader_epoch=3)
    follower_log = MemoryReplica()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(leader.serve, right)
        link = StreamLeaderLink(left, replica_id=2, leader_epoch=3, topic="t", partition=0)
        with pytest.raises(FollowerStopped), trio.fail_after(5):
            await follow(follower_log, link, state, max_bytes=1000)
        nursery.cancel_scope.cancel()
    assert bytes(follower_log.data) == A + B and state.caught_up



async def _follow_until_caught_up(leader_log: MemoryReplica, follower_log: MemoryReplica) -> MemoryLeader:
    """Follower 2 copies leader 1 (epoch 0) until the leader moves on once it has everything."""
    leader = MemoryLeader(leader_log, epoch=0)
    left, right = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(leader.serve, right)
        link = StreamLeaderLink(left, replica_id=2, leader_epoch=0, topic="t", partition=0)
        with pytest.raises(FollowerStopped), trio.fail_after(5):
            await follow(follower_log, link, FollowerPartition(leader_id=1, leader_epoch=0), max_bytes=1000)
        nursery.cancel_scope.cancel()
    return leader


@pytest.mark.parametrize("leader_start, followed", [(7, 7), (-1, -1)])
async def test_the_follower_takes_the_leaders_log_start_offset_and_a_07_leader_sends_none(leader_start, followed):
    follower_log = MemoryReplica()
    await _follow_until_caught_up(MemoryReplica(A + B, [EpochEntry(0, 0)], log_start_offset=leader_start),
                                  follower_log)
    assert follower_log.log_start_offset == followed
    assert set(follower_log.log_starts_followed) <= ({followed} - {-1})  # a 0.7 leader's -1 is never followed


async def test_each_fetch_reports_the_followers_log_start_offset_to_the_leader():
    leader = await _follow_until_caught_up(MemoryReplica(A + B, [EpochEntry(0, 0)], log_start_offset=7),
                                           MemoryReplica(log_start_offset=3))
    # the first fetch said 3; the ones after the leader's answer, the 7 it stored meanwhile
    assert leader.partition.log_start_of(2) == 7 and leader.partition.isr_holds_log_start(7)
