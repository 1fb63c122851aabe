"""Spark's driver side on replicated topics: keys without a broker, named <p>, planned at the leader."""

from __future__ import annotations

import pytest

from trikafka.spark.blocking_client import BrokerConnectionError
from trikafka.spark.offsets import PartitionKey, offsets_from_json, offsets_to_json
from trikafka.spark import planning
from trikafka.spark.planning import ConnectionPool, PartitionRange, PlanningError, ranges_between
from trikafka.wire import NO_LEADER, BrokerAddress, ErrorCode, Metadata, PartitionMetadata, TopicMetadata

BROKERS = {1: BrokerAddress(1, "h1", 1), 2: BrokerAddress(2, "h2", 2)}


def test_replicated_keys_are_named_by_partition_alone_and_round_trip():
    offsets = {PartitionKey("r", None, 10): 7, PartitionKey("r", None, 2): 5, PartitionKey("old", 1, 0): 3}
    text = offsets_to_json(offsets)
    assert text == '{"old":{"1-0":3},"r":{"2":5,"10":7}}'
    assert offsets_from_json(text) == offsets


class _Conn:
    def __init__(self, answer: Metadata | None):
        self.answer, self.closed = answer, False

    def metadata(self, topics):
        if self.answer is None:
            raise BrokerConnectionError("down")
        return self.answer

    def close(self):
        self.closed = True


class _Pool(ConnectionPool):
    """A pool whose brokers answer METADATA from a script (broker 1 is down)."""

    def __init__(self, leader: int):
        super().__init__(BROKERS, options=None)
        part = PartitionMetadata(0, leader, 4, (1, 2), (2,),
                                 ErrorCode.NO_ERROR if leader != NO_LEADER else ErrorCode.LEADER_NOT_AVAILABLE)
        answer = Metadata(1000, (BROKERS[2], BROKERS[1]), (TopicMetadata("r", (part,)),))
        self.fake = {1: _Conn(None), 2: _Conn(answer)}

    def get(self, broker_id):
        return self.fake[broker_id]


def test_a_replicated_partition_is_planned_at_its_leader_asked_of_a_live_broker():
    pool = _Pool(leader=2)
    key = PartitionKey("r", None, 0)
    assert pool.address_of(key) == BROKERS[2]
    assert pool.for_key(key) is pool.fake[2]
    [planned] = ranges_between({key: 0}, {key: 10}, pool)
    assert (planned.host, planned.port, planned.start, planned.end) == ("h2", 2, 0, 10)
    assert pool.address_of(PartitionKey("old", 1, 0)) == BROKERS[1]  # 0.7 keys keep their broker


def test_a_partition_without_leader_is_a_clear_planning_error():
    with pytest.raises(PlanningError, match="no leader"):
        _Pool(leader=NO_LEADER).address_of(PartitionKey("r", None, 0))


class _Cluster:
    def brokers(self):
        return dict(BROKERS)

    def close(self):
        pass


class _Options:
    def open_cluster(self):
        return _Cluster()


def test_a_task_whose_planned_leader_is_gone_reads_at_the_current_leader(monkeypatch):
    opened = []

    def fake_connect(host, port, broker_id, options):
        opened.append(host)
        if host == "gone":
            raise BrokerConnectionError("refused")
        return f"conn to {host}"

    monkeypatch.setattr(planning, "_connect", fake_connect)
    monkeypatch.setattr(planning, "ConnectionPool", lambda brokers, options: _Pool(leader=2))
    replicated = PartitionRange(PartitionKey("r", None, 0), "gone", 9, 0, 10)
    assert planning.open_for_range(replicated, _Options()) == "conn to h2"
    assert opened == ["gone", "h2"]
    with pytest.raises(BrokerConnectionError):  # a 0.7 partition lives on its broker only
        planning.open_for_range(PartitionRange(PartitionKey("old", 1, 0), "gone", 9, 0, 10), _Options())
