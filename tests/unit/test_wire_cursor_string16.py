"""FieldCursor.string16: a negative length is an error, and the cursor never moves back."""

import struct

import pytest

from trikafka.wire.cursor import FieldCursor
from trikafka.wire.errors import RemoteProtocolError


@pytest.mark.parametrize("length", [-1, -2])
def test_a_negative_string_length_is_refused(length):
    cursor = FieldCursor(struct.pack(">h", length) + b"abc")
    with pytest.raises(RemoteProtocolError, match="negative"):
        cursor.string16("topic")


def test_a_string_is_read_and_the_cursor_moves_past_it():
    cursor = FieldCursor(struct.pack(">h", 3) + b"abc" + b"!")
    assert cursor.string16("topic") == "abc" and cursor.remaining == 1
