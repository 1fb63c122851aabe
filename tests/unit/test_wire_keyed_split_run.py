"""split_run's bound on the largest padding entry (docs/protocol.md §11.3)."""

import pytest

from trikafka.wire.errors import LocalProtocolError
from trikafka.wire.keyed import MIN_PADDING_ENTRY_BYTES, split_run


def test_the_largest_entry_must_hold_two_of_the_smallest():
    run_bytes = 5 * MIN_PADDING_ENTRY_BYTES
    sizes = split_run(run_bytes, 2 * MIN_PADDING_ENTRY_BYTES)
    assert sum(sizes) == run_bytes and max(sizes) <= 2 * MIN_PADDING_ENTRY_BYTES
    with pytest.raises(LocalProtocolError, match="too small"):
        split_run(run_bytes, 2 * MIN_PADDING_ENTRY_BYTES - 1)
