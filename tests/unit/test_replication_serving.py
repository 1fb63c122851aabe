"""A consumer's fetch from a replica: bytes up to the high watermark, and which offsets are out of range."""

from __future__ import annotations

from types import SimpleNamespace

from trikafka.broker.replication import serving
from trikafka.wire import ErrorCode, FetchPart


class StubLog:
    start_offset = 100
    end_offset = 500

    def read(self, offset, max_bytes, *, end):
        return ("region", offset, min(end - offset, max_bytes))


def manager_with(high_watermark, *, leading=True):
    hosted = SimpleNamespace(key=("t", 0), log=StubLog(), consumer_end=lambda: high_watermark,
                             leader=object() if leading else None)
    return SimpleNamespace(hosted={("t", 0): hosted}, states={})


def fetch(manager, part):
    """A consumer's fetch part, asked of the replicated topic's partition as the request handler asks it."""
    return serving.partition(manager, part.topic, part.partition).fetch(part)


def test_a_replica_serves_consumers_up_to_its_high_watermark():
    assert fetch(manager_with(300), FetchPart("t", 0, 200, 1000)) == (ErrorCode.NO_ERROR, ("region", 200, 100))
    assert fetch(manager_with(300), FetchPart("t", 0, 300, 1000)) == (ErrorCode.NO_ERROR, None)


def test_an_offset_above_the_high_watermark_within_the_log_waits_instead_of_resetting():
    # Committed on a previous leader, not yet here: empty, no error (docs/protocol.md §12.6).
    for offset in (301, 450, 500):
        assert fetch(manager_with(300), FetchPart("t", 0, offset, 1000)) == (ErrorCode.NO_ERROR, None)


def test_only_offsets_outside_the_log_are_out_of_range():
    for offset in (99, 501):
        assert fetch(manager_with(300), FetchPart("t", 0, offset, 1000)) == (ErrorCode.OFFSET_OUT_OF_RANGE, None)


def test_past_its_log_end_a_replica_that_does_not_lead_sends_the_consumer_to_the_leader():
    # Its log may be behind (catching up, or a lost tail after a power cut): only the leader can tell.
    follower = manager_with(300, leading=False)
    assert fetch(follower, FetchPart("t", 0, 501, 1000)) == (ErrorCode.NOT_LEADER_FOR_PARTITION, None)
    assert fetch(follower, FetchPart("t", 0, 99, 1000)) == (ErrorCode.OFFSET_OUT_OF_RANGE, None)
    assert fetch(follower, FetchPart("t", 0, 450, 1000)) == (ErrorCode.NO_ERROR, None)
    assert fetch(follower, FetchPart("t", 0, 200, 1000)) == (ErrorCode.NO_ERROR, ("region", 200, 100))
