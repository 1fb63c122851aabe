"""The size rule of docs/protocol.md §5.1 step 4 comes before the checks of step 5, wherever the entry is."""

import pytest

from tests.helpers.message_sets import corrupt_crc
from trikafka.wire import (
    InvalidMessageError, MessageSizeTooLargeError, build_message_set, encode_entry, validate_message_set,
)


@pytest.mark.parametrize("magic", [0, 1])
def test_an_oversized_last_entry_wins_over_an_earlier_bad_crc(magic):
    data = corrupt_crc(encode_entry(b"small")) + build_message_set([b"x" * 51], magic=magic)
    with pytest.raises(MessageSizeTooLargeError):
        validate_message_set(data, max_message_size=50)


@pytest.mark.parametrize("magic", [0, 1])
def test_a_last_entry_at_the_limit_leaves_the_bad_crc_to_report(magic):
    data = corrupt_crc(encode_entry(b"small")) + build_message_set([b"x" * 50], magic=magic)
    with pytest.raises(InvalidMessageError, match="CRC"):
        validate_message_set(data, max_message_size=50)


def test_a_cut_last_entry_is_not_judged_by_the_length_it_claims():
    cut = build_message_set([b"x" * 200])[:60]  # claims 200 payload bytes, holds fewer
    data = corrupt_crc(encode_entry(b"small")) + cut
    with pytest.raises(InvalidMessageError, match="CRC"):
        validate_message_set(data, max_message_size=50)


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("first_bad", [False, True])
def test_the_size_error_names_the_payload_bytes(magic, first_bad):
    data = build_message_set([b"x" * 51], magic=magic)
    if first_bad:  # the separate pass of the size rule reports it too
        data = corrupt_crc(encode_entry(b"small")) + data
    with pytest.raises(MessageSizeTooLargeError, match="payload of 51 bytes exceeds max.message.size 50"):
        validate_message_set(data, max_message_size=50)


def test_a_limit_of_zero_takes_empty_payloads_only():
    assert validate_message_set(build_message_set([b""]), max_message_size=0).message_count == 1
    with pytest.raises(MessageSizeTooLargeError):
        validate_message_set(build_message_set([b"x"]), max_message_size=0)
