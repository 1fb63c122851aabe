"""The one fetch-size growth rule every consumer uses (simple, group, Spark)."""

from __future__ import annotations

import pytest

from trikafka.wire import grown_fetch_size


@pytest.mark.parametrize("asked, limit, needed, grown", [
    (100, 1000, None, 200),    # only the length prefix came: double
    (100, 1000, 150, 200),     # the entry fits in double: double
    (100, 1000, 700, 700),     # at once to the whole entry
    (600, 1000, None, 1000),   # capped at the limit
    (1000, 1000, None, None),  # already at the limit
    (100, 1000, 1001, None),   # the entry can never fit
])
def test_grown_fetch_size(asked, limit, needed, grown):
    assert grown_fetch_size(asked, limit, needed) == grown
