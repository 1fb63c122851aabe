"""Values of the replication znodes under /trikafka (docs/protocol.md §12.2) and topic settings.

Pure: JSON bytes in, frozen dataclasses out, and back.  Readers ignore keys
they do not know, so a later version may add some.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Mapping

from trikafka.util.settings import parse_bool

NO_LEADER = -1
VALUE_VERSION = 1

MIN_INSYNC_REPLICAS = "min.insync.replicas"
UNCLEAN_ELECTION = "unclean.leader.election.enable"
REPLICA_ACK_FSYNC = "replica.ack.fsync"
REPLICA_LAG_TIME_MAX_MS = "replica.lag.time.max.ms"
TOPIC_CONFIG_DEFAULTS = {
    MIN_INSYNC_REPLICAS: "1",
    UNCLEAN_ELECTION: "false",
    REPLICA_ACK_FSYNC: "false",
    REPLICA_LAG_TIME_MAX_MS: "10000",
}


class ReplicationValueError(ValueError):
    """A replication znode value that cannot be understood."""


def _dumps(obj: dict) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode("utf-8")


def _loads(raw: bytes, what: str) -> dict:
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ReplicationValueError(f"{what}: not JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise ReplicationValueError(f"{what}: not a JSON object")
    return obj


def _int_list(value: object, what: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise ReplicationValueError(f"{what}: expected a list of integers, got {value!r}")
    return tuple(value)


def _bool_setting(text: str, key: str) -> bool:
    try:
        return parse_bool(text)
    except ValueError:
        raise ReplicationValueError(f"{key}={text!r}: expected true or false") from None


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """The per-topic replication settings, parsed and checked."""

    min_insync_replicas: int = 1
    unclean_leader_election: bool = False
    replica_ack_fsync: bool = False
    replica_lag_time_max_ms: int = 10_000

    @classmethod
    def from_strings(cls, config: dict[str, str]) -> "TopicConfig":
        """Parse string settings (unknown keys are kept by the caller, ignored here)."""
        merged = {**TOPIC_CONFIG_DEFAULTS, **config}
        try:
            min_isr = int(merged[MIN_INSYNC_REPLICAS])
            lag_ms = int(merged[REPLICA_LAG_TIME_MAX_MS])
        except ValueError as exc:
            raise ReplicationValueError(f"topic config: {exc}") from None
        if min_isr < 1 or lag_ms < 1:
            raise ReplicationValueError(f"{MIN_INSYNC_REPLICAS} and {REPLICA_LAG_TIME_MAX_MS} must be >= 1")
        return cls(min_isr, _bool_setting(merged[UNCLEAN_ELECTION], UNCLEAN_ELECTION),
                   _bool_setting(merged[REPLICA_ACK_FSYNC], REPLICA_ACK_FSYNC), lag_ms)


@dataclass(frozen=True, slots=True)
class TopicAssignment:
    """``/trikafka/topics/<t>``: replica lists per partition and string settings."""

    replicas: tuple[tuple[int, ...], ...]
    config: dict[str, str] = field(default_factory=dict)
    # Pending reassignments (docs: §12.12.3): partition -> the replica list it moves to.
    targets: dict[int, tuple[int, ...]] = field(default_factory=dict)
    # And the list it had before (what a cancel goes back to); absent in a move of an earlier release.
    origins: dict[int, tuple[int, ...]] = field(default_factory=dict)

    def settings(self, defaults: Mapping[str, str] | None = None) -> TopicConfig:
        """The parsed replication settings; a key the topic does not set takes ``defaults``' value (the
        brokers' dynamic settings, docs §20.4), else the built-in one."""
        return TopicConfig.from_strings({**(defaults or {}), **self.config})

    def encode(self) -> bytes:
        """The znode value (``targets`` and ``origins`` only while a move is pending)."""
        parts = {str(p): list(r) for p, r in enumerate(self.replicas)}
        value = {"version": VALUE_VERSION, "partitions": parts, "config": dict(self.config)}
        for key, lists in (("targets", self.targets), ("origins", self.origins)):
            if lists:
                value[key] = {str(p): list(r) for p, r in sorted(lists.items())}
        return _dumps(value)

    @classmethod
    def decode(cls, raw: bytes) -> "TopicAssignment":
        """Parse a znode value; raises ReplicationValueError."""
        obj = _loads(raw, "topic assignment")
        parts = obj.get("partitions")
        if not isinstance(parts, dict) or sorted(parts, key=lambda s: (len(s), s)) != [str(i) for i in range(len(parts))]:
            raise ReplicationValueError("topic assignment: partitions must be numbered 0..N-1")
        replicas = tuple(_int_list(parts[str(i)], f"partition {i}") for i in range(len(parts)))
        config = obj.get("config", {})
        if not isinstance(config, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in config.items()):
            raise ReplicationValueError("topic assignment: config must map strings to strings")
        targets, origins = (_partition_lists(obj, key, len(replicas)) for key in ("targets", "origins"))
        return cls(replicas, dict(config), targets, origins)


def _partition_lists(obj: dict, key: str, partitions: int) -> dict[int, tuple[int, ...]]:
    """The ``{"<p>": [ids]}`` map under ``key`` of a topic znode (empty when absent)."""
    raw = obj.get(key, {})
    if not isinstance(raw, dict) or not all(k.isdigit() and int(k) < partitions for k in raw):
        raise ReplicationValueError(f"topic assignment: {key} must map partition numbers to lists")
    return {int(k): _int_list(v, f"{key[:-1]} of partition {k}") for k, v in raw.items()}


@dataclass(frozen=True, slots=True)
class PartitionState:
    """``/trikafka/topics/<t>/partitions/<p>/state``: who leads, in which epoch, the ISR."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int

    def encode(self) -> bytes:
        """The znode value."""
        return _dumps({"version": VALUE_VERSION, "leader": self.leader, "leader_epoch": self.leader_epoch,
                       "isr": list(self.isr), "controller_epoch": self.controller_epoch})

    @classmethod
    def decode(cls, raw: bytes) -> "PartitionState":
        """Parse a znode value; raises ReplicationValueError."""
        obj = _loads(raw, "partition state")
        try:
            leader, epoch, ctrl = obj["leader"], obj["leader_epoch"], obj["controller_epoch"]
        except KeyError as exc:
            raise ReplicationValueError(f"partition state: missing {exc}") from None
        ints = (leader, epoch, ctrl)
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in ints):
            raise ReplicationValueError("partition state: leader, leader_epoch, controller_epoch must be integers")
        return cls(leader, epoch, _int_list(obj.get("isr"), "isr"), ctrl)
