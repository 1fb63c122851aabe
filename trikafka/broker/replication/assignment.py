"""Replica placement and reassignment plans (docs/protocol.md §12.12.2-§12.12.3).

Pure: the admin CLI decides with these, then writes the topic znode.
"""

from __future__ import annotations

import dataclasses

from ...zk.replication_values import TopicAssignment


class AssignmentError(ValueError):
    """A placement or reassignment that cannot be made; the message says why."""


def assign_replicas(broker_ids: list[int] | set[int], partitions: int,
                    replication_factor: int) -> tuple[tuple[int, ...], ...]:
    """Round robin over the sorted live brokers: partition ``p`` gets ``b[(p + j) % n]``, ``j < R``.

    The first replica (the preferred leader) moves one broker on per
    partition, so leadership is spread evenly.
    """
    brokers = sorted(set(broker_ids))
    if partitions < 1:
        raise AssignmentError(f"a topic needs at least 1 partition, not {partitions}")
    if replication_factor < 1:
        raise AssignmentError(f"the replication factor must be >= 1, not {replication_factor}")
    if replication_factor > len(brokers):
        raise AssignmentError(f"replication factor {replication_factor} needs {replication_factor} live brokers, "
                              f"but {len(brokers)} {'is' if len(brokers) == 1 else 'are'} registered "
                              f"({', '.join(map(str, brokers)) or 'none'})")
    n = len(brokers)
    return tuple(tuple(brokers[(p + j) % n] for j in range(replication_factor)) for p in range(partitions))


def plan_reassignment(assignment: TopicAssignment, partition: int, target: tuple[int, ...],
                      live: set[int] | frozenset[int]) -> TopicAssignment | None:
    """The topic znode that starts moving ``partition`` to ``target``; None if it is there already.

    The replica list becomes the old one followed by the new replicas (so the
    preferred leader stays until the controller finishes), ``targets``
    records where it goes and ``origins`` where it came from.
    """
    if not 0 <= partition < len(assignment.replicas):
        raise AssignmentError(f"the topic has partitions 0..{len(assignment.replicas) - 1}, not {partition}")
    if not target:
        raise AssignmentError("--replicas needs at least one broker id")
    if len(set(target)) != len(target) or any(r < 0 for r in target):
        raise AssignmentError(f"--replicas must be distinct broker ids, not {','.join(map(str, target))}")
    current = assignment.replicas[partition]
    pending = assignment.targets.get(partition)
    if pending is not None and pending != target:
        raise AssignmentError(f"partition {partition} is already moving to {','.join(map(str, pending))}; "
                              "wait until it finished")
    if pending is None and target == current:
        return None
    missing = sorted(set(target) - set(current) - set(live))
    if missing:
        raise AssignmentError(f"broker(s) {', '.join(map(str, missing))} not registered in /brokers/ids: "
                              "a new replica must be live to catch up")
    if pending == target:
        return None  # already under way
    union = current + tuple(r for r in target if r not in current)
    replicas = assignment.replicas[:partition] + (union,) + assignment.replicas[partition + 1:]
    return dataclasses.replace(assignment, replicas=replicas, targets={**assignment.targets, partition: target},
                               origins={**assignment.origins, partition: current})


def finished(assignment: TopicAssignment, partition: int) -> TopicAssignment:
    """The topic znode once ``partition`` reached its target (the target list, the move's entries removed)."""
    return _settled(assignment, partition, assignment.targets[partition])


def cancelled(assignment: TopicAssignment, partition: int) -> TopicAssignment | None:
    """The topic znode with ``partition``'s move undone (its list from before, the move's entries removed);
    None when it is not moving.  Raises ``AssignmentError`` for a move that recorded no list from before."""
    if partition not in assignment.targets:
        return None
    origin = assignment.origins.get(partition)
    if origin is None:
        raise AssignmentError(f"partition {partition}'s move was started by an earlier release, which did not "
                              "record its replicas from before: it cannot be cancelled")
    return _settled(assignment, partition, origin)


def _settled(assignment: TopicAssignment, partition: int, replicas: tuple[int, ...]) -> TopicAssignment:
    lists = assignment.replicas[:partition] + (replicas,) + assignment.replicas[partition + 1:]
    return dataclasses.replace(assignment, replicas=lists,
                               targets={p: t for p, t in assignment.targets.items() if p != partition},
                               origins={p: o for p, o in assignment.origins.items() if p != partition})
