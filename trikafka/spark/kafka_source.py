"""The source's Kafka-format mode: batch and streaming readers (``kafka.bootstrap.servers`` selects it).

A PySpark job written for spark-sql-kafka runs unchanged but for the format
name: the options and the columns are that source's (``kafka_options``,
``kafka_columns``), and so are the streaming offsets Spark checkpoints,
``{"topic": {"0": 23, "1": 40}}``: per partition the next offset to read,
keys in one canonical order (topics sorted, partitions by number) because
Spark compares offsets as JSON strings.

Streaming rules, as in Spark's Kafka source: a partition that appears
mid-query enters at its earliest offset, in a batch of its own entry, so its
start is checkpointed; an end never moves below its start;
``maxOffsetsPerTrigger`` shares the budget among lagging partitions in
proportion to their lag (the most lagging one moves by the whole budget when
no share reaches one offset); ``Trigger.AvailableNow`` stops at the ends seen
when it started.
"""

from __future__ import annotations

import json
import logging
from typing import Iterator

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from .kafka_options import EARLIEST, LATEST, KafkaSourceOptions, TopicPartition
from .kafka_reading import KafkaPlanner, KafkaRange, read_range
from .options import OptionError

log = logging.getLogger("trikafka.spark")
Offsets = dict[TopicPartition, int]


class KafkaRangePartition(InputPartition):
    """A Spark input partition holding one ``KafkaRange`` (plain, picklable data)."""

    def __init__(self, planned: KafkaRange):
        super().__init__(f"{planned.topic}-{planned.partition}[{planned.start},{planned.end})"
                         f"@{planned.host}:{planned.port}")
        self.planned = planned


def _read(options: KafkaSourceOptions, partition: InputPartition) -> Iterator["object"]:
    if isinstance(partition, KafkaRangePartition):  # Spark turns an empty plan into one placeholder
        yield from read_range(options, partition.planned)


class KafkaBatchReader(DataSourceReader):
    """``spark.read``: every selected partition from ``startingOffsets`` to ``endingOffsets``."""

    def __init__(self, options: KafkaSourceOptions):
        self.options = options

    def partitions(self) -> list[InputPartition]:
        with KafkaPlanner(self.options) as planner:
            tps = planner.partitions(require=True)
            start = planner.resolve(self.options.starting, tps, "startingOffsets")
            end = planner.resolve(self.options.ending, tps, "endingOffsets")
            return [KafkaRangePartition(r) for r in planner.ranges(start, end)]

    def read(self, partition: InputPartition) -> Iterator["object"]:
        return _read(self.options, partition)


def offsets_to_json_document(offsets: Offsets) -> dict[str, dict[str, int]]:
    """Spark's Kafka offsets document for ``offsets``, in canonical order."""
    doc: dict[str, dict[str, int]] = {}
    for (topic, partition) in sorted(offsets):
        doc.setdefault(topic, {})[str(partition)] = int(offsets[(topic, partition)])
    return doc


def offsets_from_json_document(doc: object) -> Offsets:
    """The offsets of a Spark Kafka offsets document (as Spark hands a checkpointed one back)."""
    if isinstance(doc, str):
        doc = json.loads(doc)
    if not isinstance(doc, dict):
        raise OptionError(f"a Kafka offsets document must be a JSON object, got {type(doc).__name__}")
    return {(str(topic), int(partition)): int(offset)
            for topic, parts in doc.items() for partition, offset in parts.items()}


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream``; driver-side state (connections, AvailableNow target) is not pickled."""

    def __init__(self, options: KafkaSourceOptions):
        self.options = options
        self._planner: KafkaPlanner | None = None
        self._target: Offsets | None = None

    def __getstate__(self) -> dict:
        return {"options": self.options}  # tasks get the options only, never sockets

    def __setstate__(self, state: dict) -> None:
        KafkaStreamReader.__init__(self, state["options"])

    def _connect(self) -> KafkaPlanner:
        if self._planner is None:
            self._planner = KafkaPlanner(self.options)
        return self._planner

    def initialOffset(self) -> dict:
        planner = self._connect()
        tps = planner.partitions(require=True)
        return offsets_to_json_document(planner.resolve(self.options.starting, tps, "startingOffsets"))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.options.max_offsets_per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._available_ends({}, new_at_start=False)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        start_offsets = offsets_from_json_document(start)
        ends = self._available_ends(start_offsets)
        if self._target is not None:
            target = self._target
            ends = {tp: (max(start_offsets[tp], min(end, target.get(tp, start_offsets[tp])))
                         if tp in start_offsets else end)
                    for tp, end in ends.items()}
        if isinstance(limit, ReadMaxRows):
            ends = limit_offsets(start_offsets, ends, limit.max_rows)
        return offsets_to_json_document(ends)

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        planner = self._connect()
        planner.refresh()
        ranges = planner.ranges(offsets_from_json_document(start), offsets_from_json_document(end))
        return [KafkaRangePartition(r) for r in ranges]

    def commit(self, end: dict) -> None:
        """Nothing to do: the offsets live in Spark's checkpoint, with the output."""

    def stop(self) -> None:
        if self._planner is not None:
            self._planner.close()
            self._planner = None

    def read(self, partition: InputPartition) -> Iterator["object"]:
        return _read(self.options, partition)

    def _available_ends(self, start: Offsets, *, new_at_start: bool = True) -> Offsets:
        """Each partition's end now (never below its start); a partition not in ``start`` at its
        earliest offset (without ``new_at_start``: at its end too)."""
        planner = self._connect()
        tps = sorted(set(planner.partitions(require=False)) | set(start))
        latest = planner.list_offsets(tps, LATEST)
        ends: Offsets = {}
        new = [tp for tp in tps if tp not in start]
        earliest = planner.list_offsets(new, EARLIEST) if new and new_at_start else {}
        for tp in tps:
            if tp in start:
                ends[tp] = max(start[tp], latest[tp])
            else:
                ends[tp] = earliest[tp] if new_at_start else latest[tp]
        return ends


def limit_offsets(start: Offsets, ends: Offsets, budget: int) -> Offsets:
    """``ends`` with at most ``budget`` offsets read in all, shared by lag (``maxOffsetsPerTrigger``)."""
    lags = {tp: ends[tp] - start[tp] for tp in ends if tp in start and ends[tp] > start[tp]}
    total = sum(lags.values())
    if total <= budget:
        return ends
    limited = dict(ends)
    for tp, lag in lags.items():
        limited[tp] = start[tp] + budget * lag // total
    if all(limited[tp] == start[tp] for tp in lags):
        tp = max(sorted(lags), key=lambda k: lags[k])
        limited[tp] = start[tp] + min(budget, lags[tp])
    return limited

