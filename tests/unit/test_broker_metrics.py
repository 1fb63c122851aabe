"""The metrics collectors (trikafka/broker/metrics.py), read back through the library's parser."""

from __future__ import annotations

from types import SimpleNamespace

from prometheus_client.parser import text_string_to_metric_families

from trikafka.broker.metrics import FLUSH_BUCKETS_S, BrokerMetrics, LatencyHistogram
from trikafka.log.config import LogConfig
from trikafka.log.manager import LogManager
from trikafka.wire import build_message_set


def samples(metrics: BrokerMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the exposition, by (name, sorted labels)."""
    text = metrics.exposition().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_a_histogram_counts_each_observation_in_the_first_bucket_that_holds_it():
    histogram = LatencyHistogram((0.001, 0.01))
    for seconds in (0.0005, 0.001, 0.002, 0.5):  # 0.001 is "le 0.001": bounds are inclusive
        histogram.observe(seconds)
    assert histogram.cumulative_buckets() == [("0.001", 2), ("0.01", 3), ("+Inf", 4)]
    assert histogram.count == 4
    assert histogram.sum_s == 0.5035


def test_traffic_is_counted_per_topic_and_exposed_as_counters():
    metrics = BrokerMetrics()
    metrics.count_in("a", 3, 120)
    metrics.count_in("a", 2, 80)
    metrics.count_in("b", 1, 40)
    part = lambda topic: SimpleNamespace(topic=topic)  # noqa: E731
    region = lambda length: b"x" * length  # noqa: E731  (any sized fetch data)
    metrics.count_out([part("a"), part("b"), part("c")], [(0, region(70)), (0, None), (3, None)])
    got = samples(metrics)
    assert got[("trikafka_messages_in_total", (("topic", "a"),))] == 5
    assert got[("trikafka_messages_in_total", (("topic", "b"),))] == 1
    assert got[("trikafka_bytes_in_total", (("topic", "a"),))] == 200
    assert got[("trikafka_bytes_out_total", (("topic", "a"),))] == 70
    assert got[("trikafka_bytes_out_total", (("topic", "b"),))] == 0
    assert ("trikafka_bytes_out_total", (("topic", "c"),)) not in got  # nothing sent: no series


def test_request_and_flush_histograms_are_exposed_with_their_counts():
    metrics = BrokerMetrics()
    produce = metrics.request_histogram("ProduceRequest")
    produce.observe(0.00001)
    produce.observe(0.2)
    metrics.request_histogram("FetchWaitRequest").observe(3.0)
    metrics.flushes.observe(0.004)
    got = samples(metrics)
    assert got[("trikafka_request_duration_seconds_count", (("request", "produce"),))] == 2
    assert got[("trikafka_request_duration_seconds_bucket", (("le", "0.0001"), ("request", "produce")))] == 1
    assert got[("trikafka_request_duration_seconds_bucket", (("le", "+Inf"), ("request", "produce")))] == 2
    assert got[("trikafka_request_duration_seconds_count", (("request", "fetch_wait"),))] == 1
    assert got[("trikafka_request_duration_seconds_count", (("request", "offsets"),))] == 0
    assert got[("trikafka_flush_duration_seconds_count", ())] == 1
    assert got[("trikafka_flush_duration_seconds_bucket", (("le", "0.005"),))] == 1
    assert got[("trikafka_flush_duration_seconds_bucket", (("le", "0.0025"),))] == 0
    assert 0.005 in FLUSH_BUCKETS_S


def test_two_brokers_in_one_process_keep_separate_figures():
    first, second = BrokerMetrics(), BrokerMetrics()
    first.count_in("t", 7, 10)
    assert samples(first)[("trikafka_messages_in_total", (("topic", "t"),))] == 7
    assert ("trikafka_messages_in_total", (("topic", "t"),)) not in samples(second)


def test_log_sizes_come_from_the_logs_in_memory(tmp_path):
    manager = LogManager(str(tmp_path), LogConfig(segment_bytes=200, flush_interval_messages=10_000), partitions=2)
    manager.open()
    log = manager.get_or_create("t", 1)
    message_set = build_message_set([b"x" * 50])
    for _ in range(5):
        log.append(message_set)  # 5 x 65 bytes in segments of at most 200 bytes
    log.flush()
    log.append(message_set)  # appended, not flushed
    metrics = BrokerMetrics()
    metrics.watch_logs(manager)
    got = samples(metrics)
    labels = (("partition", "1"), ("topic", "t"))
    assert got[("trikafka_log_size_bytes", labels)] == 6 * len(message_set)
    assert got[("trikafka_log_unflushed_bytes", labels)] == len(message_set)
    assert got[("trikafka_log_segments", labels)] == len(log.segments.segments) > 1
    manager.close()


def test_connections_and_readiness_are_read_at_scrape_time():
    processors = [SimpleNamespace(connections=frozenset({1, 2}), connections_served=5),
                  SimpleNamespace(connections=frozenset({3}), connections_served=4)]
    metrics = BrokerMetrics()
    metrics.watch_connections(processors)
    ready = [False]
    metrics.watch_readiness(lambda: ready[0])
    got = samples(metrics)
    assert got[("trikafka_connections", ())] == 3
    assert got[("trikafka_connections_accepted_total", ())] == 9
    assert got[("trikafka_ready", ())] == 0
    processors[1].connections = frozenset()
    ready[0] = True
    got = samples(metrics)
    assert got[("trikafka_connections", ())] == 2
    assert got[("trikafka_ready", ())] == 1
