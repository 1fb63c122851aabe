"""Audit counting: producers' events against what tiers hold (docs/protocol.md §13.2)."""

from __future__ import annotations

from trikafka.mirror.tally import AuditTally
from trikafka.producer.audit import AuditTrail
from trikafka.wire.audit import AuditEvent
from trikafka.wire.envelope import decode_envelope

W = 60_000


def sent(topic, start, count, producer="p", window=W):
    return AuditEvent("producer", topic, start, window, "h", producer, count)


def envelope(created_ms, sequence, producer="p"):
    from trikafka.wire.envelope import encode_envelope
    return decode_envelope(encode_envelope(b"x", created_ms, sequence, "h", producer))


def rows_by(tally):
    return {(r.topic, r.window_start_ms, r.tier): r for r in tally.rows()}


def test_missing_duplicated_and_extra_per_window():
    tally = AuditTally()
    tally.add_event(sent("t", 0, 3))
    tally.add_event(sent("t", W, 2))
    tally.add_tier("source")
    tally.add_tier("target")
    for seq, at in enumerate([1, 2, 3, W + 1, W + 2]):
        tally.add_held("source", "t", envelope(at, seq))
    # target: window 0 lost sequence 2, window W has sequence 3 twice and one unknown message
    for seq, at in [(0, 1), (1, 2), (3, W + 1), (3, W + 1), (4, W + 2), (9, W + 3)]:
        tally.add_held("target", "t", envelope(at, seq))
    rows = rows_by(tally)
    assert rows["t", 0, "source"].ok and rows["t", W, "source"].ok
    assert (rows["t", 0, "target"].missing, rows["t", 0, "target"].duplicated) == (1, 0)
    target_w = rows["t", W, "target"]
    assert (target_w.held, target_w.distinct, target_w.missing, target_w.duplicated, target_w.extra) == (4, 3, 0, 1, 1)


def test_a_tier_holding_nothing_misses_everything():
    tally = AuditTally()
    tally.add_event(sent("t", 0, 5))
    tally.add_tier("empty")
    [row] = tally.rows()
    assert (row.expected, row.held, row.missing) == (5, 0, 5)


def test_events_of_several_producers_and_late_events_add_up():
    tally = AuditTally()
    tally.add_event(sent("t", 0, 2, "a"))
    tally.add_event(sent("t", 0, 1, "a"))  # a late delivery reported later for the same window
    tally.add_event(sent("t", 0, 4, "b"))
    tally.add_tier("c")
    for seq in range(3):
        tally.add_held("c", "t", envelope(10, seq, "a"))
    for seq in range(4):
        tally.add_held("c", "t", envelope(10, seq, "b"))
    [row] = tally.rows()
    assert (row.expected, row.distinct, row.missing, row.duplicated) == (7, 7, 0, 0)


def test_smaller_windows_fold_into_the_largest():
    tally = AuditTally()
    tally.add_event(sent("t", 0, 1, "a", window=10_000))
    tally.add_event(sent("t", 10_000, 1, "a", window=10_000))
    tally.add_event(sent("t", 0, 3, "b", window=W))
    tally.add_tier("c")
    [row] = tally.rows()
    assert (row.window_ms, row.expected) == (W, 5)


def test_loader_tiers_compare_counts():
    tally = AuditTally()
    tally.add_event(sent("t", 0, 5))
    tally.add_event(AuditEvent("spark:load", "t", 0, W, None, None, 7))
    [row] = tally.rows()
    assert (row.tier, row.held, row.distinct, row.missing, row.duplicated) == ("spark:load", None, 7, 0, 2)


def test_unaudited_topics_are_ignored():
    tally = AuditTally()
    tally.add_tier("c")
    tally.add_held("c", "other", envelope(1, 0))
    assert tally.rows() == []


def test_producer_trail_counts_delivered_messages_per_closed_window():
    now = [125_000]
    trail = AuditTrail(60, origin="h", producer_id="p", clock_ms=lambda: now[0])
    first = trail.wrap("t", b"a")
    second = trail.wrap("t", b"b")
    assert [decode_envelope(x).sequence for x in (first, second)] == [0, 1]
    assert trail.wrap("trikafka-audit", b"{}") == b"{}"
    trail.delivered("t", first)  # the second one failed: not counted
    assert trail.take_events() == []  # window 120000 still open
    now[0] = 181_000
    trail.delivered("t", trail.wrap("t", b"c"))
    assert trail.take_events() == [AuditEvent("producer", "t", 120_000, 60_000, "h", "p", 1)]
    assert trail.take_events(everything=True) == [AuditEvent("producer", "t", 180_000, 60_000, "h", "p", 1)]
    assert trail.take_events(everything=True) == []


def test_loader_events_are_snapshots_the_later_one_wins():
    tally = AuditTally()
    tally.add_event(sent("t", 0, 5))
    tally.add_event(AuditEvent("spark:load", "t", 0, W, None, None, 3))  # a first, partial run
    tally.add_event(AuditEvent("spark:load", "t", 0, W, None, None, 5))  # the next run's totals
    [row] = tally.rows()
    assert (row.distinct, row.missing, row.duplicated) == (5, 0, 0)


def test_spark_window_counts_count_only_enveloped_payloads():
    from trikafka.spark.load_job import window_counts
    from trikafka.wire.envelope import encode_envelope

    rows = [("t", encode_envelope(b"{}", 61_000, 0, "h", "p")), ("t", b"plain"), ("t", None),
            ("u", encode_envelope(b"{}", 1_000, 1, "h", "p"))]
    assert list(window_counts(rows, W)) == [(("t", 60_000), 1), (("u", 0), 1)]
