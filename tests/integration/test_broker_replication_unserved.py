"""A broker without replicas answers the replication requests with NOT_REPLICA and keeps serving."""

from __future__ import annotations

from trikafka.broker import serve
from trikafka.wire.errors import ErrorCode
from trikafka.wire.replication import (
    EpochEndOffsetRequest, ReplicaFetchRequest, decode_epoch_end_offset_response, decode_replica_fetch_response,
)

from tests.helpers.broker_testing import RawClient, make_config


async def test_replication_requests_get_not_replica_and_the_connection_stays(nursery, tmp_path):
    broker = await nursery.start(serve, make_config(tmp_path))
    client = await RawClient.connect(broker.port)
    response = await client.call(ReplicaFetchRequest(2, 0, 0, "t", 0, 0, 0, 1024))
    result = decode_replica_fetch_response(response.error_code, response.payload)
    assert result.error == ErrorCode.NOT_REPLICA and result.data == b"" and result.isr == ()
    response = await client.call(EpochEndOffsetRequest(2, 0, "t", 0, 0))
    assert decode_epoch_end_offset_response(response.error_code, response.payload) == (ErrorCode.NOT_REPLICA, -1, -1)
    assert await client.offsets("t", 0, -1) == [0]  # same connection, still served
    await client.aclose()
    broker.shutdown()
