"""The engine's metadata view: the values both listeners describe a topic from (§9.4, §16.4)."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import EngineError


@dataclass(frozen=True, slots=True)
class PartitionView:
    """One partition: its leader (-1: none), leader epoch, replicas and in-sync replicas."""

    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    error: EngineError = EngineError.NO_ERROR


@dataclass(frozen=True, slots=True)
class TopicView:
    """One topic: its partitions, or the error that describes it instead."""

    name: str
    partitions: tuple[PartitionView, ...] = ()
    error: EngineError = EngineError.NO_ERROR
