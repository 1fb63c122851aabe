"""A broker's own calls keep their connections for the next call to the same peer (docs/protocol.md §18.5).

The peers here are tasks on the far end of in-memory streams that answer
DescribeCluster with trikafka's codec; each may close its connection after a
number of answers, as a restarted peer or one that closes idle connections does.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
import trio
import trio.testing
from kio.schema.describe_cluster.v0.request import DescribeClusterRequest
from kio.schema.describe_cluster.v0.response import DescribeClusterResponse
from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId
from kio.static.primitive import i32

from trikafka.broker.kafka.peer_call import PeerCallError, PeerStream, peer_call
from trikafka.broker.kafka.peer_connections import PeerConnections
from trikafka.kafka.apis import KafkaApi
from trikafka.kafka.framing import FrameReader, encode_response, parse_request
from trikafka.wire.metadata import BrokerAddress

PEER = BrokerAddress(1, "127.0.0.1", 9093)
OTHER_PEER = BrokerAddress(2, "127.0.0.1", 9094)
BODY = DescribeClusterRequest(include_cluster_authorized_operations=False)
ANSWER = DescribeClusterResponse(throttle_time=timedelta(0), error_code=ErrorCode.none, error_message=None,
                                 cluster_id="c", controller_id=BrokerId(1), brokers=(),
                                 cluster_authorized_operations=i32(0))


class FakePeers:
    """A ``Connector`` whose every connection is served by a task answering ``answers_per_connection``
    requests, then closing its end."""

    def __init__(self, nursery: trio.Nursery, answers_per_connection: int):
        self.nursery = nursery
        self.answers_per_connection = answers_per_connection
        self.connects = 0
        self.requests = 0

    async def connect(self, address: BrokerAddress) -> PeerStream:
        self.connects += 1
        ours, theirs = trio.testing.memory_stream_pair()
        self.nursery.start_soon(self._serve, theirs)
        return PeerStream(ours, address)

    async def _serve(self, stream: trio.abc.Stream) -> None:
        reader = FrameReader(1 << 20)
        answered = 0
        async with stream:
            while answered < self.answers_per_connection:
                frame = reader.next_frame()
                if frame is None:
                    data = await stream.receive_some()
                    if not data:
                        return
                    reader.feed(data)
                    continue
                self.requests += 1
                await stream.send_all(encode_response(parse_request(frame), ANSWER))
                answered += 1


async def call(connections: PeerConnections, address: BrokerAddress = PEER) -> object:
    return await peer_call(connections, address, KafkaApi.DESCRIBE_CLUSTER, 0, BODY, timeout_s=10)


async def test_a_second_call_to_a_peer_runs_on_the_connection_the_first_kept(nursery):
    peers = FakePeers(nursery, answers_per_connection=100)
    connections = PeerConnections(peers)
    assert await call(connections) == ANSWER and await call(connections) == ANSWER
    assert (peers.connects, peers.requests, connections.idle_count(PEER)) == (1, 2, 1)
    await call(connections, OTHER_PEER)  # another peer: its own connection
    assert (peers.connects, connections.idle_count()) == (2, 2)


async def test_a_kept_connection_the_peer_closed_is_replaced_and_the_call_sent_once_more(nursery):
    peers = FakePeers(nursery, answers_per_connection=1)  # each connection closes after its answer
    connections = PeerConnections(peers)
    assert await call(connections) == ANSWER
    await trio.testing.wait_all_tasks_blocked()  # the peer has closed its end of the kept connection
    assert await call(connections) == ANSWER
    assert (peers.connects, peers.requests, connections.idle_count(PEER)) == (2, 2, 1)


async def test_a_new_connection_the_peer_closes_before_answering_fails_the_call_once(nursery):
    peers = FakePeers(nursery, answers_per_connection=0)
    connections = PeerConnections(peers)
    with pytest.raises(PeerCallError, match=r"^DescribeCluster to broker 1 at 127\.0\.0\.1:9093: "):
        await call(connections)
    assert (peers.connects, connections.idle_count()) == (1, 0)


async def test_idle_connections_are_bounded_per_peer_and_closed_after_their_idle_time(nursery):
    peers = FakePeers(nursery, answers_per_connection=100)
    now_s = [0.0]
    connections = PeerConnections(peers, max_idle_per_peer=2, idle_s=60.0, clock=lambda: now_s[0])
    taken = [(await connections.take(PEER))[0] for _ in range(3)]  # three calls at once: three connections
    for stream in taken:
        await connections.give_back(stream)
    assert (peers.connects, connections.idle_count(PEER)) == (3, 2)  # the third was closed
    now_s[0] = 61.0
    assert await connections.take(PEER) != (taken[0], True) and peers.connects == 4  # both expired: a new one
    assert connections.idle_count(PEER) == 0
    await connections.give_back(taken[0])
    now_s[0] = 200.0
    assert await connections.close_expired() == 1 and connections.idle_count() == 0


async def test_run_closes_every_idle_connection_when_cancelled(nursery):
    peers = FakePeers(nursery, answers_per_connection=100)
    connections = PeerConnections(peers)
    async with trio.open_nursery() as inner:
        inner.start_soon(connections.run)
        await call(connections)
        await call(connections, OTHER_PEER)
        assert connections.idle_count() == 2
        inner.cancel_scope.cancel()
    assert connections.idle_count() == 0
