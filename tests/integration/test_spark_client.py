"""The blocking client and the task-side fetch loop against real brokers (no Spark needed)."""

from __future__ import annotations

import random
import socket

import pytest

from trikafka.spark.blocking_client import BrokerConnection, BrokerConnectionError
from trikafka.spark.offsets import PartitionKey
from trikafka.spark.reading import (
    FetchSizing,
    MaxFetchSizeExceededError,
    ReadError,
    iter_message_chunks,
    last_boundary_within,
    next_entry_end,
)
from trikafka.wire import Codec, ErrorCode, FetchPart, ProducePart, build_message_set

pytest_plugins = ["tests.helpers.spark_cluster"]
pytestmark = [pytest.mark.spark]


def test_requests_round_trip_through_a_real_broker(broker_cluster, unique_topic):
    with broker_cluster.connect(0) as conn:
        assert conn.visible_end(unique_topic, 1) == 0  # no log yet (spec §5.5)
        (result,) = conn.produce_acked([ProducePart(unique_topic, 1, build_message_set([b"hello"]))])
        assert (result.error, result.base_offset, result.next_offset) == (ErrorCode.NO_ERROR, 0, 15)
        assert conn.visible_end(unique_topic, 1) == 15 and conn.log_start(unique_topic, 1) == 0
        assert conn.offsets(unique_topic, 1, -1, 10) == [15, 0]
        fetched = conn.fetch(unique_topic, 1, 0, 1024)
        assert fetched.error == ErrorCode.NO_ERROR and fetched.data == build_message_set([b"hello"])
        parts = conn.multifetch([FetchPart(unique_topic, 1, 0, 7), FetchPart(unique_topic, 1, 99, 10)])
        assert [(p.error, p.data) for p in parts] == [
            (ErrorCode.NO_ERROR, build_message_set([b"hello"])[:7]),
            (ErrorCode.OFFSET_OUT_OF_RANGE, b""),
        ]
        conn.produce(unique_topic, 1, build_message_set([b"unacknowledged"]))  # no response expected
        assert conn.visible_end(unique_topic, 1) >= 15  # the connection is still in step


def test_a_request_the_broker_rejects_by_closing_raises(broker_cluster, unique_topic):
    with broker_cluster.connect(1) as conn:
        with pytest.raises(BrokerConnectionError, match="closed the connection"):
            conn.offsets(unique_topic, 99, -1, 1)  # invalid partition: 0.7 closes (spec §5.5)
        assert conn.closed
        with pytest.raises(BrokerConnectionError, match="closed"):
            conn.visible_end(unique_topic, 0)


def test_connecting_to_a_closed_port_raises():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound but not listening: connections are refused
        with pytest.raises(BrokerConnectionError, match="cannot connect"):
            BrokerConnection("127.0.0.1", port, timeout_s=2)


def test_a_broker_that_never_answers_times_out_with_a_clear_error():
    """The kernel enforces the time-out (the socket is in blocking mode): a silent peer ends
    the wait after ``timeout_s``, with a message that says so."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        conn = BrokerConnection("127.0.0.1", server.getsockname()[1], timeout_s=0.5)
        with pytest.raises(BrokerConnectionError, match=r"failed: timed out after 0.5 s"):
            conn.fetch_into("t", 0, 0, 100, bytearray(100))
        assert conn.closed
        conn = BrokerConnection("127.0.0.1", server.getsockname()[1], timeout_s=0.5)
        with pytest.raises(BrokerConnectionError, match=r"failed: timed out after 0.5 s"):
            conn.visible_end("t", 0)


def test_fetch_into_refuses_a_buffer_smaller_than_the_fetch(broker_cluster, unique_topic):
    with broker_cluster.connect(0) as conn:
        with pytest.raises(ValueError, match="cannot hold a fetch of 100"):
            conn.fetch_into(unique_topic, 0, 0, 100, bytearray(99))
        assert conn.fetch_into(unique_topic, 0, 0, 100, bytearray(100)) == (ErrorCode.NO_ERROR, 0)


def test_fetch_loop_reads_a_range_exactly_in_small_fetches(tk, broker_cluster, unique_topic):
    expected = tk.produce_mixed(broker_cluster, unique_topic, seed=5)
    key = PartitionKey(unique_topic, 1, 0)
    rows = expected.rows[(1, 0)]
    start, end = rows[0][3], rows[-1][4]
    with broker_cluster.connect(1) as conn:
        chunks = list(iter_message_chunks(conn, key, start, end, FetchSizing(512, 1 << 20)))
    assert len(chunks) > 5
    got = [(key.topic, 1, 0, m.offset, m.next_offset, m.payload) for chunk in chunks for m in chunk]
    assert got == rows


@pytest.mark.parametrize("prefetch", ["false", "true"])
def test_a_task_yields_every_row_of_its_range_with_or_without_prefetch(tk, broker_cluster, unique_topic,
                                                                       prefetch):
    """``read_partition`` (the task body): runs, loose messages and wrappers, in small fetches
    so that the reused receive buffer is refilled many times; prefetch on or off."""
    from trikafka.spark.options import parse_options
    from trikafka.spark.planning import PartitionRange
    from trikafka.spark.tasks import RangePartition, read_partition

    expected = tk.produce_mixed(broker_cluster, unique_topic, seed=11)
    base, end = broker_cluster.produce_payloads(unique_topic, 1, 0, [bytes([i % 256]) * 64 for i in range(300)])
    expected.plain(1, 0, base, [bytes([i % 256]) * 64 for i in range(300)])
    rows = expected.rows[(1, 0)]
    address = broker_cluster.addresses[1]
    options = parse_options({"brokers": broker_cluster.broker_list, "topics": unique_topic,
                             "fetchSize": "3000", "prefetch": prefetch})
    planned = PartitionRange(PartitionKey(unique_topic, 1, 0), address.host, address.port, rows[0][3], end)
    batches = list(read_partition(options, RangePartition(planned)))
    assert len(batches) > 5
    got = [(r["topic"], r["broker"], r["partition"], r["offset"], r["next_offset"], r["payload"])
           for batch in batches for r in batch.to_pylist()]
    assert got == rows


def test_fetch_grows_for_a_big_message_up_to_the_bound(broker_cluster, unique_topic):
    big = random.Random(1).randbytes(100_000)
    base, end = broker_cluster.produce_payloads(unique_topic, 0, 0, [b"a", big, b"z"])
    key = PartitionKey(unique_topic, 0, 0)
    with broker_cluster.connect(0) as conn:
        chunks = list(iter_message_chunks(conn, key, base, end, FetchSizing(100, 200_000)))
        assert [m.payload for chunk in chunks for m in chunk] == [b"a", big, b"z"]
        with pytest.raises(MaxFetchSizeExceededError, match="maxFetchSize"):
            list(iter_message_chunks(conn, key, base, end, FetchSizing(100, 50_000)))
        with pytest.raises(ReadError, match="not an entry boundary"):
            list(iter_message_chunks(conn, key, base, end - 1, FetchSizing(1 << 20, 1 << 20)))
        with pytest.raises(ReadError, match="visible end"):
            list(iter_message_chunks(conn, key, base, end + 100, FetchSizing(1 << 20, 1 << 20)))


def test_boundary_search_never_splits_a_message(tk, broker_cluster, unique_topic):
    expected = tk.Expected(unique_topic)
    rng = random.Random(9)
    payloads = [rng.randbytes(rng.randrange(1, 500)) for _ in range(200)]
    base, _ = broker_cluster.produce_payloads(unique_topic, 1, 1, payloads)
    base2, end2 = broker_cluster.produce_payloads(unique_topic, 1, 1, payloads[:50], codec=Codec.SNAPPY)
    expected.plain(1, 1, base, payloads)
    expected.wrapper(1, 1, base2, end2, payloads[:50])
    boundaries = sorted(expected.boundaries()[(1, 1)])
    key = PartitionKey(unique_topic, 1, 1)
    with broker_cluster.connect(1) as conn:
        for limit in sorted(rng.sample(range(base, end2 + 1), 40)) + [end2, base]:
            got = last_boundary_within(conn, key, base, limit, FetchSizing(1000, 1 << 20))
            assert got == max(b for b in boundaries if b <= limit)
        assert next_entry_end(conn, key, boundaries[3]) == boundaries[4]
        assert next_entry_end(conn, key, end2) is None
