"""``RecordBatchBuilder``: decoded sets as the RecordBatches Spark expects."""

from __future__ import annotations

import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from trikafka.spark.columns import RecordBatchBuilder, arrow_schema, decode_fetched  # noqa: E402
from trikafka.spark.offsets import PartitionKey  # noqa: E402
from trikafka.wire import Codec, build_message_set, iter_messages  # noqa: E402

KEY = PartitionKey("clicks", 3, 1)


@pytest.mark.parametrize("base", [0, 12345, (1 << 62) + 12345])
def test_batches_hold_the_rows_iter_messages_gives(base):  # type: ignore[no-untyped-def]
    data = b"".join([
        build_message_set([bytes([i]) * 40 for i in range(30)]),  # a run
        build_message_set([b"x", b"", b"yz"]),
        build_message_set([b"in1", b"in2"], codec=Codec.GZIP),
        build_message_set([b"old"] * 3, magic=0),
    ])
    builder = RecordBatchBuilder(KEY, arrow_schema())
    batch = builder.build(decode_fetched(data + data[:17], base))
    assert batch.schema.equals(arrow_schema())
    assert batch.to_pylist() == [
        {"topic": "clicks", "broker": 3, "partition": 1, "offset": m.offset, "next_offset": m.next_offset,
         "payload": m.payload}
        for m in iter_messages(data, base)
    ]
    batch.validate(full=True)


def test_constant_columns_follow_the_batch_length():  # type: ignore[no-untyped-def]
    builder = RecordBatchBuilder(KEY, arrow_schema())
    for count in (5, 9, 5):
        batch = builder.build(decode_fetched(build_message_set([b"pay!"] * count), 0))
        assert batch.num_rows == count and batch.column("topic").to_pylist() == ["clicks"] * count


def test_an_offset_past_int64_is_an_error_not_a_wrap():  # type: ignore[no-untyped-def]
    builder = RecordBatchBuilder(KEY, arrow_schema())
    with pytest.raises(pa.ArrowInvalid, match="overflow"):
        builder.build(decode_fetched(build_message_set([b"p"] * 3), (1 << 63) - 20))
    with pytest.raises(pa.ArrowInvalid, match="overflow"):  # a run (payloads of 4 bytes or more) likewise
        builder.build(decode_fetched(build_message_set([b"pay!"] * 20), (1 << 63) - 200))


def test_a_batch_owns_its_memory_so_the_receive_buffer_can_be_reused():  # type: ignore[no-untyped-def]
    data = b"".join([build_message_set([bytes([i]) * 30 for i in range(40)]), build_message_set([b"a", b"bc"])])
    buffer = bytearray(data)
    batch = RecordBatchBuilder(KEY, arrow_schema()).build(decode_fetched(buffer, 100))
    buffer[:] = bytes(len(buffer))  # the next fetch overwrites the buffer
    assert [r["payload"] for r in batch.to_pylist()] == [m.payload for m in iter_messages(data, 100)]


def test_layout_caches_stay_bounded_and_serve_every_task():  # type: ignore[no-untyped-def]
    from trikafka.spark import columns

    for size in range(4, 60):  # a new builder (task) for each batch: the caches are the worker's
        batch = RecordBatchBuilder(KEY, arrow_schema()).build(decode_fetched(build_message_set([b"v" * size] * 12), 0))
        assert batch.column("payload").to_pylist() == [b"v" * size] * 12
        assert batch.column("offset").to_pylist() == [i * (size + 10) for i in range(12)]
    assert len(columns._POSITIONS) <= 16 and len(columns._ENDS) <= 16
