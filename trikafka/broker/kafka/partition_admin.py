"""ElectLeaders, AlterPartitionReassignments and ListPartitionReassignments (docs/protocol.md §16.4).

Elections and moves are the controller's (§12.7, §12.12.3): the handlers
check what the broker's view of the partition states says, ask through
ZooKeeper (an unclean-election request znode, the topic znode's reassignment
plan) and, for ElectLeaders, wait until the states this broker watches show
the outcome.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, Sequence

import trio
from kio.schema.errors import ErrorCode

from trikafka.kafka.framing import Request
from trikafka.wire.metadata import BrokerAddress
from trikafka.zk.replication_values import NO_LEADER, PartitionState, TopicAssignment

from ..engine.errors import EngineError
from ..engine.metadata import PartitionView
from .entities import NO_THROTTLE, Reply
from .topics import TopicError

if TYPE_CHECKING:
    from ..engine.engine import Engine
    from ..seams import Replicas
    from .acl.authorizer import Authorizer
    from .needs import TopicRegistry

PREFERRED, UNCLEAN = 0, 1  # ElectLeaders' election_type (v0: preferred)
ELECTION_POLL_S = 0.05  # how often a waiting ElectLeaders looks at the partition states again


class PartitionAdmin(Protocol):
    """What these apis need of their broker: the ACL check, its view of the topics and states, ZooKeeper."""

    authorizer: Authorizer
    broker_id: int

    @property
    def engine(self) -> Engine: ...

    @property
    def registry(self) -> TopicRegistry | None: ...

    def topic_names(self) -> list[str]: ...

    def kafka_brokers(self) -> list[BrokerAddress]: ...


def _replicas(service: PartitionAdmin, topic: str) -> Replicas | None:
    """The replica manager when ``topic`` is replicated (§12), else None."""
    replicas = service.engine.directory.replicas
    return replicas if service.registry is not None and replicas is not None and replicas.is_replicated(topic) else None


def _refusal(service: PartitionAdmin, request: Request, reply: Reply, **answer: Any) -> Any | None:
    """The api's answer when the authorizer denies it (§18.3): the denial as the answer's error, no
    message, ``answer`` for the rest (its lists, empty or each item refused); None when it is allowed."""
    denied = service.authorizer.denied(request.api)
    if denied is None:
        return None
    return reply.response(throttle_time=NO_THROTTLE, error_code=denied, error_message=None,
                          **{field: value(denied) if callable(value) else value for field, value in answer.items()})


def _partition(service: PartitionAdmin, topic: str, index: int) -> PartitionView | None:
    described = service.engine.admin.topic_metadata(topic, service.broker_id)
    if described.error != EngineError.NO_ERROR:
        return None
    return next((p for p in described.partitions if p.partition == index), None)


# ----------------------------------------------------------------- ElectLeaders


@dataclass(slots=True)
class _Election:
    topic: str
    partition: int
    error: ErrorCode | None = None  # None while waiting for ``done``
    done: Callable[[PartitionView], bool] | None = None
    message: str | None = None


async def elect_leaders(service: PartitionAdmin, request: Request) -> Any:
    reply = Reply(request.api_key, request.api_version)
    body: Any = request.body  # Any: this api's request class at the request's version
    election_type = int(getattr(body, "election_type", PREFERRED))
    asked = ([(t.topic, tuple(t.partitions)) for t in body.topic_partitions] if body.topic_partitions is not None
             else [(name, tuple(p.partition for p in service.engine.admin.topic_metadata(name, service.broker_id)
                                .partitions)) for name in service.topic_names()])
    elections = [_Election(topic, p) for topic, partitions in asked for p in partitions]
    refused = _refusal(service, request, reply, replica_election_results=lambda denied: _election_results(
        reply, [_Election(e.topic, e.partition, denied) for e in elections]))
    if refused is not None:  # every partition answers the denial too, as Kafka's does
        return refused
    live = {b.broker_id for b in service.kafka_brokers()}
    for election in elections:
        await _start(service, election, election_type, live)
    deadline = trio.current_time() + max(body.timeout.total_seconds(), 0.0)
    while any(e.error is None for e in elections) and trio.current_time() < deadline:
        await trio.sleep(ELECTION_POLL_S)  # the states arrive by this broker's ZooKeeper watches (§12.2)
        for election in elections:
            if election.error is None and election.done is not None:
                found = _partition(service, election.topic, election.partition)
                if found is not None and election.done(found):
                    election.error = ErrorCode.none
    return reply.response(throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                          replica_election_results=_election_results(reply, elections))


def _election_results(reply: Reply, elections: Sequence[_Election]) -> tuple[Any, ...]:
    """Each topic's ``ReplicaElectionResult``; an election still waiting timed out."""
    results: dict[str, list[Any]] = {}
    for election in elections:
        error = election.error if election.error is not None else ErrorCode.request_timed_out
        results.setdefault(election.topic, []).append(reply.nested(
            "PartitionResult", partition_id=election.partition, error_code=error, error_message=election.message))
    return tuple(reply.nested("ReplicaElectionResult", topic=topic, partition_result=tuple(parts))
                 for topic, parts in results.items())


async def _start(service: PartitionAdmin, election: _Election, election_type: int, live: set[int]) -> None:
    """Decide ``election``'s answer now (§16.4), or what it waits for (asking the controller first)."""
    found = _partition(service, election.topic, election.partition)
    if found is None:
        election.error = ErrorCode.unknown_topic_or_partition
    elif election_type not in (PREFERRED, UNCLEAN):
        election.error, election.message = ErrorCode.invalid_request, f"unknown election type {election_type}"
    elif _replicas(service, election.topic) is None:
        election.error = ErrorCode.election_not_needed  # its one broker leads it (§16.4)
    elif election_type == PREFERRED:
        preferred = found.replicas[0] if found.replicas else NO_LEADER
        if found.leader == preferred:
            election.error = ErrorCode.election_not_needed
        elif preferred not in live or preferred not in found.isr:
            election.error = ErrorCode.preferred_leader_not_available
        else:  # the controller moves leadership to it by itself (§12.7)
            election.done = lambda p: p.leader == preferred
    elif found.leader != NO_LEADER:
        election.error = ErrorCode.election_not_needed
    elif not live & set(found.replicas):
        election.error = ErrorCode.eligible_leaders_not_available
    else:
        registry = service.registry
        assert registry is not None  # _replicas found the topic replicated
        try:
            await registry.ask_unclean_election(election.topic, election.partition)
        except TopicError as exc:
            election.error, election.message = exc.code, str(exc)
            return
        election.done = lambda p: p.leader != NO_LEADER


# ----------------------------------------------------------------- reassignments


async def alter_partition_reassignments(service: PartitionAdmin, request: Request) -> Any:
    reply = Reply(request.api_key, request.api_version)
    body: Any = request.body  # Any: this api's request class at the request's version
    if (refused := _refusal(service, request, reply, responses=())) is not None:
        return refused
    responses = []
    for topic in body.topics:
        partitions = []
        for part in topic.partitions:
            error, message = await _reassign(service, topic.name, part.partition_index, part.replicas)
            partitions.append(reply.nested("ReassignablePartitionResponse", partition_index=part.partition_index,
                                           error_code=error, error_message=message))
        responses.append(reply.nested("ReassignableTopicResponse", name=topic.name, partitions=tuple(partitions)))
    return reply.response(throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
                          responses=tuple(responses))


async def _reassign(service: PartitionAdmin, topic: str, index: int,
                    target: Sequence[int] | None) -> tuple[ErrorCode, str | None]:
    """One partition's move (§16.4, §12.12.3): (error, message)."""
    registry = service.registry
    if _partition(service, topic, index) is None:
        return ErrorCode.unknown_topic_or_partition, None
    if _replicas(service, topic) is None or registry is None:
        return ErrorCode.invalid_request, f"{topic!r} is not a replicated topic: its partitions do not move"
    try:
        if target is None:
            await registry.cancel_reassignment(topic, index)
        else:
            await registry.reassign(topic, index, tuple(int(r) for r in target))
    except TopicError as exc:
        return exc.code, str(exc)
    return ErrorCode.none, None


async def list_partition_reassignments(service: PartitionAdmin, request: Request) -> Any:
    reply = Reply(request.api_key, request.api_version)
    body: Any = request.body  # Any: this api's request class at the request's version
    if (refused := _refusal(service, request, reply, topics=())) is not None:
        return refused
    replicas = service.engine.directory.replicas if service.registry is not None else None
    assignments: Mapping[str, TopicAssignment] = replicas.topics if replicas is not None else {}
    states: Mapping[tuple[str, int], PartitionState] = replicas.states if replicas is not None else {}
    asked = ([(name, None) for name in sorted(assignments)] if body.topics is None
             else [(t.name, set(t.partition_indexes)) for t in body.topics])
    topics = []
    for name, indexes in asked:
        assignment = assignments.get(name)
        if assignment is None:
            continue
        moving = []
        for index, target in sorted(assignment.targets.items()):
            if indexes is not None and index not in indexes:
                continue
            current = assignment.replicas[index]
            state = states.get((name, index))
            isr = state.isr if state is not None else ()
            moving.append(reply.nested(
                "OngoingPartitionReassignment", partition_index=index, replicas=current,
                adding_replicas=tuple(r for r in target if r not in isr),
                removing_replicas=tuple(r for r in current if r not in target)))
        if moving:
            topics.append(reply.nested("OngoingTopicReassignment", name=name, partitions=tuple(moving)))
    return reply.response(throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
                          topics=tuple(topics))
