"""The broker's metrics, exposed through ``prometheus_client`` (README, "Metrics").

Every broker owns one ``BrokerMetrics`` and, in it, its own
``CollectorRegistry`` (never the library's global one), so several brokers in
one process keep separate figures.  ``BrokerMetrics.exposition()`` is the
library's ``generate_latest`` over that registry.

Why the hot path keeps plain integers instead of the library's ``Counter`` and
``Histogram`` objects: those take a lock on every update (they are
thread-safe), which costs about 0.8 us per ``inc`` and 1.5 us per ``observe``;
a single-message PRODUCE would pay that three times.  Every update here happens
on the event loop thread, and so does every scrape, so a Python integer
increment (tens of ns) is enough.  The collectors below turn those integers
into metric families at scrape time, and the library writes the text format.

Counting is per request or per message set, where the count is already known
(``AppendResult.message_count``, a fetch region's length), never per message.
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Protocol

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from trikafka.kafka.apis import KafkaApi
from trikafka.wire.requests import RequestType

if TYPE_CHECKING:  # for types only: the seams the collectors read
    from trikafka.wire.errors import ErrorCode
    from trikafka.wire.requests import FetchPart

    from trikafka.wire.responses import FetchData

    from .seams import ConnectionCounts, LogDirectory, ReplicationStatus

# Upper bounds of the latency buckets, in seconds: a request served from memory
# takes tens of microseconds, a long poll or an acks=-1 produce up to seconds.
REQUEST_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                     0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# An fsync takes from tens of microseconds (page cache, tmpfs) to seconds (a busy disk).
FLUSH_BUCKETS_S = (0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                   1.0, 2.5, 5.0, 10.0)

# The ``request`` label of each request class (by class name), from the wire's request table.
REQUEST_LABELS = {kind.api.request_class.__name__: kind.label for kind in RequestType}


class LatencyHistogram:
    """Observations counted into fixed buckets; updated on the loop thread only."""

    __slots__ = ("bounds_s", "counts", "sum_s")

    def __init__(self, bounds_s: tuple[float, ...]):
        self.bounds_s = bounds_s
        self.counts = [0] * (len(bounds_s) + 1)  # the last one is +Inf
        self.sum_s = 0.0

    def observe(self, seconds: float) -> None:
        # bisect_left: the first bound >= seconds, as Prometheus' "le" (less or equal) wants.
        self.counts[bisect.bisect_left(self.bounds_s, seconds)] += 1
        self.sum_s += seconds

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative_buckets(self) -> list[tuple[str, int]]:
        """(``le``, observations <= le) pairs, ending with ``+Inf``, as the exposition wants."""
        buckets, total = [], 0
        for bound, count in zip((*map(repr, self.bounds_s), "+Inf"), self.counts):
            total += count
            buckets.append((bound, total))
        return buckets


class TopicTraffic:
    """What went in and out of one topic since the broker started."""

    __slots__ = ("messages_in", "bytes_in", "bytes_out")

    def __init__(self) -> None:
        self.messages_in = 0
        self.bytes_in = 0
        self.bytes_out = 0


class BrokerMetrics:
    """One broker's metrics: the counters the request path updates, and its registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.topics: dict[str, TopicTraffic] = {}
        self.requests = {label: LatencyHistogram(REQUEST_BUCKETS_S) for label in REQUEST_LABELS.values()}
        # The Kafka listener's apis (docs/protocol.md §16.3), by api key, labelled with Kafka's names.
        self.kafka_requests = {int(api): LatencyHistogram(REQUEST_BUCKETS_S) for api in KafkaApi}
        self.kafka_labels = {int(api): api.label for api in KafkaApi}
        self.flushes = LatencyHistogram(FLUSH_BUCKETS_S)
        self.registry.register(TrafficCollector(self))

    def topic(self, topic: str) -> TopicTraffic:
        """The traffic counters of ``topic`` (created at its first use)."""
        traffic = self.topics.get(topic)
        if traffic is None:
            traffic = self.topics[topic] = TopicTraffic()
        return traffic

    def count_in(self, topic: str, message_count: int, byte_count: int) -> None:
        """One message set appended to ``topic``."""
        traffic = self.topic(topic)
        traffic.messages_in += message_count
        traffic.bytes_in += byte_count

    def count_out(self, parts: Iterable[FetchPart], outcomes: Iterable[tuple[ErrorCode, FetchData]]) -> None:
        """Fetch answers: the bytes of each answer's data (a file region, or a
        synthesized padding entry and a region), under its part's topic."""
        for part, (_, data) in zip(parts, outcomes):
            if data is not None and len(data):
                self.topic(part.topic).bytes_out += len(data)

    def request_histogram(self, request_class_name: str) -> LatencyHistogram:
        """The latency histogram of the requests of the class named ``request_class_name``."""
        return self.requests[REQUEST_LABELS[request_class_name]]

    # The broker's composition root adds each collector as the object it reads comes to exist
    # (tests/unit/test_composition_root.py checks no one else does).

    def watch_readiness(self, is_ready: Callable[[], bool]) -> None:
        """Add ``trikafka_ready``, read from ``is_ready`` at scrape time (what ``/readyz`` answers)."""
        self.registry.register(_readiness_collector(is_ready))

    def watch_logs(self, log_manager: LogDirectory) -> None:
        """Add the collector of the logs' sizes, unflushed bytes and segments."""
        self.registry.register(LogCollector(log_manager))

    def watch_connections(self, processors: Iterable[ConnectionCounts]) -> None:
        """Add the collector of every listener's processors' connections."""
        self.registry.register(ConnectionCollector(list(processors)))

    def watch_replication(self, replicas: ReplicationStatus) -> None:
        """Add the replication collector (a broker with ZooKeeper; docs/protocol.md §12)."""
        self.registry.register(ReplicationCollector(replicas))

    def watch_groups(self, groups: GroupStatus) -> None:
        """Add the collector of the Kafka-protocol consumer groups this broker coordinates (§17.6)."""
        self.registry.register(GroupCollector(groups))

    def exposition(self) -> bytes:
        """The registry in the Prometheus text format (``prometheus_client.generate_latest``)."""
        return generate_latest(self.registry)


def _histogram(name: str, documentation: str, label: str | None,
               histograms: Iterable[tuple[str | None, LatencyHistogram]]) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, documentation, labels=[label] if label else None)
    for value, histogram in histograms:
        family.add_metric([value] if value is not None else [], histogram.cumulative_buckets(), histogram.sum_s)
    return family


class TrafficCollector(Collector):
    """Per-topic traffic, request latency and flush latency, from ``BrokerMetrics``."""

    def __init__(self, metrics: BrokerMetrics):
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        metrics = self._metrics
        messages_in = CounterMetricFamily("trikafka_messages_in", "Messages appended (a compressed wrapper "
                                          "counts as the messages inside it)", labels=["topic"])
        bytes_in = CounterMetricFamily("trikafka_bytes_in", "Message set bytes appended", labels=["topic"])
        bytes_out = CounterMetricFamily("trikafka_bytes_out", "Message set bytes sent in fetch responses",
                                        labels=["topic"])
        for topic, traffic in metrics.topics.items():
            messages_in.add_metric([topic], traffic.messages_in)
            bytes_in.add_metric([topic], traffic.bytes_in)
            bytes_out.add_metric([topic], traffic.bytes_out)
        yield from (messages_in, bytes_in, bytes_out)
        yield _histogram("trikafka_request_duration_seconds", "Time from a request's decoding to its answer "
                         "written (or its append, for requests without an answer)", "request",
                         metrics.requests.items())
        yield _histogram("trikafka_kafka_request_duration_seconds", "Kafka listener: time from a request's "
                         "decoding to its answer written", "api",
                         [(metrics.kafka_labels[key], h) for key, h in metrics.kafka_requests.items()])
        yield _histogram("trikafka_flush_duration_seconds", "Duration of a log flush's fsync", None,
                         [(None, metrics.flushes)])


class GroupStatus(Protocol):
    """The group coordinator as its collector reads it (``kafka.groups.coordinator.GroupCoordinator``)."""

    @property
    def rebalances(self) -> int: ...

    def states(self) -> dict[str, int]: ...


class GroupCollector(Collector):
    """Kafka-protocol consumer groups (docs/protocol.md §17.6): groups per state, rebalances completed."""

    def __init__(self, groups: GroupStatus):
        self._groups = groups

    def collect(self) -> Iterator[Metric]:
        states = GaugeMetricFamily("trikafka_kafka_groups", "Consumer groups this broker coordinates, by state",
                                   labels=["state"])
        for state, count in self._groups.states().items():
            states.add_metric([state], count)
        yield states
        rebalances = CounterMetricFamily("trikafka_kafka_group_rebalances", "Group rebalances completed")
        rebalances.add_metric([], self._groups.rebalances)
        yield rebalances


class LogCollector(Collector):
    """Per-log sizes, from the logs' in-memory state (no file is touched at scrape time)."""

    def __init__(self, log_manager: LogDirectory):
        self._log_manager = log_manager

    def collect(self) -> Iterator[Metric]:
        size = GaugeMetricFamily("trikafka_log_size_bytes", "Bytes in a log's segments, flushed or not",
                                 labels=["topic", "partition"])
        unflushed = GaugeMetricFamily("trikafka_log_unflushed_bytes", "Bytes appended to a log but not yet "
                                      "flushed (invisible to consumers)", labels=["topic", "partition"])
        segments = GaugeMetricFamily("trikafka_log_segments", "Segment files of a log",
                                     labels=["topic", "partition"])
        for log in self._log_manager.logs():
            labels = [log.topic, str(log.partition)]
            view = log.segments
            end = view.segments[-1].end
            size.add_metric(labels, end - view.starts[0])
            unflushed.add_metric(labels, end - view.segments[-1].visible_end)
            segments.add_metric(labels, len(view.segments))
        yield from (size, unflushed, segments)


class ConnectionCollector(Collector):
    """Open and accepted client connections, from the processors."""

    def __init__(self, processors: list[ConnectionCounts]):
        self._processors = processors

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("trikafka_connections", "Open client connections",
                                value=sum(len(p.connections) for p in self._processors))
        yield CounterMetricFamily("trikafka_connections_accepted", "Client connections accepted",
                                  value=sum(p.connections_served for p in self._processors))


class ReplicationCollector(Collector):
    """This broker's replicas by role, its under-replicated partitions, ISR changes, controller status."""

    def __init__(self, replicas: ReplicationStatus):
        self._replicas = replicas

    def collect(self) -> Iterator[Metric]:
        replicas = self._replicas
        roles = GaugeMetricFamily("trikafka_replicas", "Replicas of replicated partitions this broker holds, "
                                  "by role", labels=["role"])
        counts = {"leader": 0, "follower": 0, "none": 0}
        under = 0
        for hosted in list(replicas.hosted.values()):
            counts[hosted.role] += 1
            leader = hosted.leader
            if leader is not None and len(leader.isr) < len(leader.replicas):
                under += 1
        for role, count in counts.items():
            roles.add_metric([role], count)
        yield roles
        yield GaugeMetricFamily("trikafka_under_replicated_partitions", "Partitions this broker leads whose "
                                "ISR lacks a replica", value=under)
        offline = sum(1 for state in list(replicas.states.values()) if state.leader < 0)
        yield GaugeMetricFamily("trikafka_offline_partitions", "Replicated partitions without a leader, as "
                                "this broker last read ZooKeeper", value=offline)
        yield CounterMetricFamily("trikafka_isr_changes", "ISR shrinks and expands this broker wrote as leader",
                                  value=replicas.isr_changes)
        controller = replicas.controller
        yield GaugeMetricFamily("trikafka_controller_active", "1 while this broker is the controller",
                                value=1 if controller.active else 0)
        yield CounterMetricFamily("trikafka_controller_elections", "Leader elections this broker wrote as "
                                  "controller", value=controller.stats.elections)


def _readiness_collector(is_ready: Callable[[], bool]) -> Collector:
    """A ``trikafka_ready`` gauge: 1 while ``/readyz`` answers 200."""

    class ReadyCollector(Collector):
        def collect(self) -> Iterator[Metric]:
            yield GaugeMetricFamily("trikafka_ready", "1 once the logs are recovered and the broker is "
                                    "registered (when ZooKeeper is used) and serving; 0 before and "
                                    "while shutting down", value=1 if is_ready() else 0)

    return ReadyCollector()
