"""The bound on nested wrappers: MAX_WRAPPER_DEPTH wrappers are read, one more is refused."""

import pytest

from tests.helpers.message_sets import wrapper
from trikafka.wire import InvalidMessageError, encode_entry, validate_message_set
from trikafka.wire.messageset import MAX_WRAPPER_DEPTH


def nested(depth: int) -> bytes:
    data = encode_entry(b"deep")
    for _ in range(depth):
        data = wrapper(data)
    return data


def test_wrappers_nest_exactly_to_the_bound():
    assert validate_message_set(nested(MAX_WRAPPER_DEPTH)).message_count == 1
    with pytest.raises(InvalidMessageError, match="nested too deeply"):
        validate_message_set(nested(MAX_WRAPPER_DEPTH + 1))
