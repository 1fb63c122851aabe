"""Streaming reads: ``spark.readStream.format("trikafka")``.

Offsets are JSON documents ``{topic: {"<broker>-<partition>": byte_offset}}``
(see ``trikafka.spark.offsets``) that Spark writes to its checkpoint before a
micro-batch runs and replays unchanged after a restart, so a batch's input
is a pure function of its (start, end) documents.  Three rules keep it so:

* **Every end offset is an entry boundary.**  Ends come from OFFSETS (the
  visible end E, always a boundary, spec §5.5/§7.2) or, under a byte limit,
  from walking the entries with ``wire.parse_entries`` (``valid_bytes``).
* **Keys never disappear.**  A partition whose broker is down keeps its start
  offset, so it cannot later re-enter as "new".
* **New partitions enter without data.**  A partition that appears mid-query
  is added at its earliest offset S in one batch and read from there in the
  next, so its starting point is itself checkpointed.

``maxBytesPerTrigger`` bounds the bytes of a micro-batch without ever
splitting a message: the budget is shared among lagging partitions in
proportion to their lag and each advances to its last boundary within its
share (which reads those bytes once more: 0.7 cannot find boundaries
otherwise).  If no share fits a whole message, the most lagging partition
advances by exactly one entry, so a message bigger than the budget still
passes.  ``Trigger.AvailableNow`` caps every partition at the visible end seen
when the trigger started.

One Spark limitation to know: a query killed before its *first* batch commits
asks ``initialOffset()`` again on restart (the Python source API has no
place to keep it), so ``startingOffsets=latest`` (or -1 in JSON) is decided
anew then; ``earliest``, byte offsets and group offsets are stable.

``commit(end)`` is advisory in Spark (it lags a batch); with
``commitToGroup`` it publishes the offsets to ZooKeeper for lag monitoring.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Iterator

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxBytes, ReadAllAvailable, SupportsTriggerAvailableNow

from .blocking_client import BrokerConnectionError
from .cluster import StaticCluster, ZooKeeperCluster
from .offsets import PartitionKey, offsets_from_document, offsets_to_document
from .options import SourceOptions
from .planning import (
    ConnectionPool,
    PlanningError,
    check_start_boundaries,
    discover_keys,
    ranges_between,
    resolve_offsets,
)
from .reading import FetchSizing, last_boundary_within, next_entry_end
from .tasks import RangePartition, commit_to_group, read_partition

log = logging.getLogger("trikafka.spark")
Offsets = dict[PartitionKey, int]


class TrikafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader; driver-side state (connections, AvailableNow target) is not pickled."""

    def __init__(self, options: SourceOptions):
        self.options = options
        self._cluster: StaticCluster | ZooKeeperCluster | None = None
        self._pool: ConnectionPool | None = None
        self._target: Offsets | None = None

    def __getstate__(self) -> dict:
        # Tasks get a copy of this reader: ship the options only, never sockets.
        return {"options": self.options}

    def __setstate__(self, state: dict) -> None:
        TrikafkaStreamReader.__init__(self, state["options"])

    # -- driver side (the streaming source runner) ---------------------------

    def _connect(self) -> tuple[StaticCluster | ZooKeeperCluster, ConnectionPool]:
        if self._cluster is None:
            self._cluster = self.options.open_cluster()
            if isinstance(self._cluster, StaticCluster):
                self._cluster.skip_unreachable = True  # their partitions wait at their offsets
        if self._pool is None:
            self._pool = ConnectionPool(self._cluster.brokers(), self.options)
        else:
            self._pool.update(self._cluster.brokers())
        return self._cluster, self._pool

    def initialOffset(self) -> dict:
        cluster, pool = self._connect()
        keys = discover_keys(self.options, cluster, require_topics=True)  # a fresh query starts on real topics
        try:
            offsets = resolve_offsets(
                self.options.starting, keys, pool, cluster=cluster,
                group_default=self.options.group_default_offset,
            )
            check_start_boundaries(self.options.starting, offsets, pool)
        except BrokerConnectionError as exc:
            raise PlanningError(f"cannot resolve startingOffsets: {exc}") from exc
        return offsets_to_document(offsets)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_bytes_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxBytes(self.options.max_bytes_per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._available_ends({}, new_keys_at_start=False)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        start_offsets = offsets_from_document(start)
        ends = self._available_ends(start_offsets)
        if self._target is not None:
            ends = _cap_at_target(start_offsets, ends, self._target)
        if isinstance(limit, ReadMaxBytes):
            ends = self._limit_bytes(start_offsets, ends, limit.max_bytes)
        return offsets_to_document(ends)

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        _, pool = self._connect()
        ranges = ranges_between(offsets_from_document(start), offsets_from_document(end), pool)
        return [RangePartition(r) for r in ranges]

    def commit(self, end: dict) -> None:
        try:
            commit_to_group(self.options, offsets_from_document(end))
        except Exception as exc:  # advisory: a registry hiccup must not stop the query
            log.warning("could not commit offsets to group %s: %s", self.options.commit_to_group, exc)

    # -- tasks -----------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator["object"]:
        return read_partition(self.options, partition)

    # -- helpers ---------------------------------------------------------------

    def _available_ends(self, start: Offsets, *, new_keys_at_start: bool = True) -> Offsets:
        """Visible ends of the keys in ``start``; keys not in it at their earliest offset
        (or, without ``new_keys_at_start``, at their visible end too); unreachable keys unmoved."""
        cluster, pool = self._connect()
        keys = set(discover_keys(self.options, cluster)) | set(start)
        # A broker's partitions wait together; a replicated partition alone (its leader moves).
        by_source: dict[tuple, list[PartitionKey]] = defaultdict(list)
        for key in keys:
            by_source[(0, key.broker, "", 0) if key.broker is not None else (1, 0, key.topic, key.partition)].append(key)
        ends: Offsets = {}
        for source in sorted(by_source):
            group = sorted(by_source[source])
            broker_id = source[1] if source[0] == 0 else f"leading {group[0]}"
            try:
                for key in group:
                    if key in start:
                        # Never move backwards, even if crash recovery truncated the log.
                        ends[key] = max(start[key], pool.visible_end(key))
                    elif new_keys_at_start:
                        ends[key] = pool.log_start(key)
                    else:
                        ends[key] = pool.visible_end(key)
            except (BrokerConnectionError, PlanningError) as exc:
                log.warning("broker %s unavailable, its partitions wait: %s", broker_id, exc)
                for key in group:
                    if key in start:
                        ends[key] = start[key]
                    else:
                        ends.pop(key, None)
        return ends

    def _limit_bytes(self, start: Offsets, ends: Offsets, budget: int) -> Offsets:
        lags = {k: ends[k] - start[k] for k in ends if k in start and ends[k] > start[k]}
        total = sum(lags.values())
        if total <= budget:
            return ends
        _, pool = self._connect()
        sizing = FetchSizing(self.options.fetch_bytes, self.options.max_fetch_bytes)
        limited = {k: (start[k] if k in lags else v) for k, v in ends.items()}
        for key, lag in sorted(lags.items()):
            share = budget * lag // total
            if share > 0:
                limited[key] = self._boundary(pool, key, start[key], start[key] + share, sizing)
        if all(limited[k] == start[k] for k in lags):
            key = max(sorted(lags), key=lambda k: lags[k])
            limited[key] = self._one_entry(pool, key, start[key], ends[key])
        return limited

    @staticmethod
    def _boundary(pool: ConnectionPool, key: PartitionKey, start: int, limit: int, sizing: FetchSizing) -> int:
        try:
            return last_boundary_within(pool.for_key(key), key, start, limit, sizing)
        except (BrokerConnectionError, PlanningError) as exc:
            log.warning("%s: cannot size the next batch, it waits: %s", key, exc)
            return start

    @staticmethod
    def _one_entry(pool: ConnectionPool, key: PartitionKey, start: int, end: int) -> int:
        try:
            entry_end = next_entry_end(pool.for_key(key), key, start)
        except (BrokerConnectionError, PlanningError) as exc:
            log.warning("%s: cannot size the next batch, it waits: %s", key, exc)
            return start
        return entry_end if entry_end is not None and entry_end <= end else start


def _cap_at_target(start: Offsets, ends: Offsets, target: Offsets) -> Offsets:
    """Trigger.AvailableNow: read nothing that became visible after the trigger started."""
    capped: Offsets = {}
    for key, end in ends.items():
        if key in target:
            capped[key] = max(start.get(key, 0), min(end, target[key])) if key in start else end
        elif key in start:
            capped[key] = start[key]
        # else: appeared after the trigger started; it joins on a later run
    return capped
