"""``schema.build``: one set of values fills the request class of whichever version was negotiated."""

from __future__ import annotations

import datetime

import pytest

from trikafka.client.kafka import schema
from trikafka.kafka.apis import KafkaApi

FETCH_VALUES = dict(replica_id=-1, max_wait=datetime.timedelta(milliseconds=500), min_bytes=1, max_bytes=1000,
                    isolation_level=0, session_id=0, session_epoch=-1, forgotten_topics_data=(), rack_id="",
                    topics=[{"topic": "t", "partitions": [{"partition": 3, "fetch_offset": 42,
                                                           "current_leader_epoch": -1, "log_start_offset": -1,
                                                           "partition_max_bytes": 100}]}])


@pytest.mark.parametrize("version", range(KafkaApi.FETCH.min_version, KafkaApi.FETCH.max_version + 1))
def test_fields_a_version_lacks_are_dropped_and_nested_dicts_become_its_entities(version: int) -> None:
    body = schema.build(KafkaApi.FETCH, version, **FETCH_VALUES)
    assert type(body) is KafkaApi.FETCH.request_class(version)
    (topic,) = body.topics  # type: ignore[attr-defined]
    (partition,) = topic.partitions
    assert type(partition).__module__ == type(body).__module__  # the nested class of this version
    assert (partition.partition, partition.fetch_offset) == (3, 42)
    assert schema.field(body, "rack_id") == ("" if version >= 11 else None)
    assert schema.field(body, "session_id", "absent") == (0 if version >= 7 else "absent")


def test_a_required_field_left_out_is_an_error() -> None:
    with pytest.raises(TypeError):
        schema.build(KafkaApi.FETCH, 12, min_bytes=1)
