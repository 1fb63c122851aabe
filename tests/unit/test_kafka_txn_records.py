"""The records of ``__transaction_state`` (§19.5.2): bytes equal to Kafka's TransactionLogKey/Value v0
layouts built by hand, round trips, and what does not decode refused."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trikafka.kafka.txn_records import (TxnKey, TxnRecordError, TxnState, TxnValue, decode_key, decode_record,
                                        decode_value, encode_key, encode_value, state_named)

HEAD = ">hqhib"  # version, producer id, epoch, timeout, state


def test_key_is_kafkas_version_0_layout():
    assert encode_key(TxnKey("tx-1")) == struct.pack(">hh", 0, 4) + b"tx-1"


def test_value_is_kafkas_version_0_layout():
    value = TxnValue(4001, 3, 60000, TxnState.ONGOING, (("a", 0), ("a", 2), ("b", 1)), 1_700_000_000_500,
                     1_700_000_000_000)
    expected = (struct.pack(HEAD, 0, 4001, 3, 60000, 1)
                + struct.pack(">i", 2)
                + struct.pack(">h", 1) + b"a" + struct.pack(">iii", 2, 0, 2)
                + struct.pack(">h", 1) + b"b" + struct.pack(">ii", 1, 1)
                + struct.pack(">qq", 1_700_000_000_500, 1_700_000_000_000))
    assert encode_value(value) == expected


def test_no_partitions_are_a_null_array_and_read_back_as_none():
    value = TxnValue(7, 0, 1000, TxnState.EMPTY)
    data = encode_value(value)
    assert data == struct.pack(HEAD, 0, 7, 0, 1000, 0) + struct.pack(">iqq", -1, -1, -1)
    assert decode_value(data) == value
    # Kafka may write an empty (not null) array: the same state.
    assert decode_value(struct.pack(HEAD, 0, 7, 0, 1000, 0) + struct.pack(">iqq", 0, -1, -1)) == value


def test_state_codes_are_kafkas():
    assert [(s.name, s.value) for s in TxnState] == [
        ("EMPTY", 0), ("ONGOING", 1), ("PREPARE_COMMIT", 2), ("PREPARE_ABORT", 3), ("COMPLETE_COMMIT", 4),
        ("COMPLETE_ABORT", 5), ("DEAD", 6), ("PREPARE_EPOCH_FENCE", 7)]


def test_a_null_value_is_a_tombstone():
    assert encode_value(None) is None
    assert decode_record(encode_key(TxnKey("t")), None) == (TxnKey("t"), None)


def test_partitions_are_read_sorted_whatever_order_they_were_written_in():
    data = (struct.pack(HEAD, 0, 1, 0, 1000, 1) + struct.pack(">i", 2)
            + struct.pack(">h", 1) + b"b" + struct.pack(">ii", 1, 0)
            + struct.pack(">h", 1) + b"a" + struct.pack(">iii", 2, 5, 1)
            + struct.pack(">qq", 1, 1))
    assert decode_value(data).partitions == (("a", 1), ("a", 5), ("b", 0))


def test_unsorted_partitions_are_refused_when_built():
    with pytest.raises(TxnRecordError):
        TxnValue(1, 0, 1000, TxnState.ONGOING, (("b", 0), ("a", 0)))


@pytest.mark.parametrize("data, fault", [
    (struct.pack(">hh", 1, 1) + b"t", "version 1"),
    (struct.pack(">hh", 0, 5) + b"t", "end inside"),
    (struct.pack(">hh", 0, 1) + b"tx", "after the last field"),
    (struct.pack(">hh", 0, -1), "null string"),
])
def test_a_bad_key_is_one_clear_error(data: bytes, fault: str):
    with pytest.raises(TxnRecordError, match=fault):
        decode_key(data)


GOOD = encode_value(TxnValue(1, 0, 1000, TxnState.EMPTY))
assert GOOD is not None


@pytest.mark.parametrize("data, fault", [
    (struct.pack(">h", 1) + GOOD[2:], "version 1"),
    (GOOD[:16] + struct.pack(">b", 8) + GOOD[17:], "state 8"),
    (GOOD[:-1], "end inside"),
    (GOOD + b"\0", "after the last field"),
    (GOOD[:17] + struct.pack(">i", -2) + GOOD[21:], "-2 topics"),
])
def test_a_bad_value_is_one_clear_error(data: bytes, fault: str):
    with pytest.raises(TxnRecordError, match=fault):
        decode_value(data)


_ids = st.text(min_size=0, max_size=30)
_partitions = st.lists(st.tuples(st.text(min_size=1, max_size=20), st.integers(0, 2**31 - 1)),
                       max_size=20).map(lambda parts: tuple(sorted(set(parts))))
_values = st.builds(TxnValue, st.integers(-1, 2**63 - 1), st.integers(-1, 2**15 - 1),
                    st.integers(-2**31, 2**31 - 1), st.sampled_from(TxnState), _partitions,
                    st.integers(-1, 2**63 - 1), st.integers(-1, 2**63 - 1))


@given(_ids, st.one_of(st.none(), _values))
def test_round_trip(transactional_id: str, value: TxnValue | None):
    key = TxnKey(transactional_id)
    assert decode_record(encode_key(key), encode_value(value)) == (key, value)



def test_states_carry_kafkas_names_both_ways():
    assert [state.kafka_name for state in TxnState] == [
        "Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead",
        "PrepareEpochFence"]
    assert all(state_named(state.kafka_name) is state for state in TxnState)
    assert state_named("ongoing") is None and state_named("Bogus") is None
