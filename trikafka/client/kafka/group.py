"""trikafka's group consumer over the Kafka protocol (docs/protocol.md §17.8).

``KafkaGroupConsumer`` joins a group through the group's coordinator and reads the
partitions the group hands it::

    async with KafkaGroupConsumer("localhost:9092", "billing", ["orders"]) as consumer:
        async for message in consumer:
            ...

Membership is ``GroupMembership`` (sans I/O); a task of this class drives it:
it sends what the state machine asks to the coordinator, feeds the answers
back, runs the assignor when this member leads, and acts on its events.  An
``Assigned`` event starts one ``PartitionConsumer`` per partition, from the
group's committed offset (OffsetFetch) or ``auto_offset_reset``; a
``Revoked`` event stops them, commits what was consumed (with auto-commit)
and calls ``on_revoked``.  A message counts as consumed once the body of the
``async for`` that got it has finished (the next message is asked for), so
a commit never covers a message still being handled: delivery is
at-least-once.

``group_protocol`` is Kafka's ``group.protocol``: "classic" (JoinGroup and
SyncGroup, the leader assigns) or "consumer" (Kafka 4's
ConsumerGroupHeartbeat, the coordinator assigns: ``ConsumerMembership``).
Events are incremental under "consumer": ``Revoked`` names only the
partitions taken away, ``Assigned`` only the ones added.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import AsyncIterator, Awaitable, Callable, Iterable, Sequence

import trio
from kio.schema.errors import ErrorCode

from trikafka.client.errors import BrokerConnectionError
from trikafka.kafka.consumer_protocol import Assignment, Subscription, encode_subscription
from trikafka.kafka.records import Record

from .admin import EARLIEST, LATEST
from .assignors import ASSIGNORS, DEFAULT_ASSIGNORS
from .client import KafkaClient
from .connection import KafkaConnection, UnsupportedApi
from .consumer import PartitionConsumer
from .consumer_membership import ConsumerMembership, heartbeat_topic_ids
from .errors import KafkaResponseError
from .group_offsets import (NO_OFFSET, ConsumerGroupMetadata, TopicPartition, commit_errors, commit_values,
                            fetch_values, fetched_offsets)
from .membership import (DEFAULT_HEARTBEAT_INTERVAL_S, DEFAULT_REBALANCE_TIMEOUT_S, DEFAULT_SESSION_TIMEOUT_S,
                         Assigned, GroupMembership, GroupRequest, Phase, Revoked, group_api)

DEFAULT_AUTO_COMMIT_INTERVAL_S = 5.0  # Kafka's auto.commit.interval.ms
_RESETS = {"earliest": EARLIEST, "latest": LATEST}
_GROUP_LANE = "group"  # the coordinator's requests: a long JoinGroup must not hold up fetches or produces
_REJOIN_ERRORS = frozenset({ErrorCode.illegal_generation, ErrorCode.unknown_member_id, ErrorCode.rebalance_in_progress})
RebalanceCallback = Callable[[list[TopicPartition]], Awaitable[None]]
Membership = GroupMembership | ConsumerMembership


@dataclass(frozen=True)
class _MembershipSettings:
    group_id: str
    topics: tuple[str, ...]
    assignors: Sequence[str]
    group_instance_id: str | None
    session_timeout_s: float
    rebalance_timeout_s: float
    heartbeat_interval_s: float
    retry_backoff_s: float


def _classic(s: _MembershipSettings) -> Membership:
    subscription = encode_subscription(Subscription(s.topics))
    return GroupMembership(
        s.group_id, [(name, subscription) for name in s.assignors], group_instance_id=s.group_instance_id,
        session_timeout_s=s.session_timeout_s, rebalance_timeout_s=s.rebalance_timeout_s,
        heartbeat_interval_s=s.heartbeat_interval_s, retry_backoff_s=s.retry_backoff_s)


def _consumer(s: _MembershipSettings) -> Membership:
    return ConsumerMembership(
        s.group_id, s.topics, group_instance_id=s.group_instance_id, session_timeout_s=s.session_timeout_s,
        rebalance_timeout_s=s.rebalance_timeout_s, heartbeat_interval_s=s.heartbeat_interval_s,
        retry_backoff_s=s.retry_backoff_s)


GROUP_PROTOCOLS: dict[str, Callable[[_MembershipSettings], Membership]] = {"classic": _classic, "consumer": _consumer}


@dataclass(frozen=True)
class KafkaGroupMessage:
    """A record and the partition it came from."""

    topic: str
    partition: int
    record: Record


class KafkaGroupConsumer:
    """A member of ``group_id`` consuming ``topics``; see the module docstring.

    ``bootstrap`` is ``HOST:PORT[,...]`` (the consumer opens and closes its
    own client) or an open ``KafkaClient``.  Settings default to Kafka's
    consumer defaults: ``session_timeout_s`` 45, ``rebalance_timeout_s`` 300
    (max.poll.interval.ms), ``heartbeat_interval_s`` 3, auto-commit every 5 s,
    ``auto_offset_reset`` "latest".  ``group_instance_id`` makes the member
    static (KIP-345).  ``on_assigned`` and ``on_revoked`` are awaited with the
    partitions at each rebalance.  ``group_protocol`` is "classic" or
    "consumer" (Kafka's ``group.protocol``, see the module docstring).
    """

    def __init__(self, bootstrap: str | KafkaClient, group_id: str, topics: Iterable[str], *,
                 assignors: Sequence[str] = DEFAULT_ASSIGNORS, group_instance_id: str | None = None,
                 session_timeout_s: float = DEFAULT_SESSION_TIMEOUT_S,
                 rebalance_timeout_s: float = DEFAULT_REBALANCE_TIMEOUT_S,
                 heartbeat_interval_s: float = DEFAULT_HEARTBEAT_INTERVAL_S, auto_offset_reset: str = "latest",
                 enable_auto_commit: bool = True, auto_commit_interval_s: float = DEFAULT_AUTO_COMMIT_INTERVAL_S,
                 on_assigned: RebalanceCallback | None = None, on_revoked: RebalanceCallback | None = None,
                 max_wait_s: float = 0.5, read_committed: bool = False, group_protocol: str = "classic"):
        if auto_offset_reset not in _RESETS:
            raise ValueError(f"auto_offset_reset must be one of {sorted(_RESETS)}, not {auto_offset_reset!r}")
        unknown = [name for name in assignors if name not in ASSIGNORS]
        if unknown or not assignors:
            raise ValueError(f"unknown assignors {unknown}; known: {sorted(ASSIGNORS)}")
        if group_protocol not in GROUP_PROTOCOLS:
            raise ValueError(f"group_protocol must be one of {sorted(GROUP_PROTOCOLS)}, not {group_protocol!r}")
        self._owns_client = isinstance(bootstrap, str)
        self.client = KafkaClient(bootstrap) if isinstance(bootstrap, str) else bootstrap
        self.group_id = group_id
        self.topics = tuple(topics)
        self.membership = GROUP_PROTOCOLS[group_protocol](_MembershipSettings(
            group_id, self.topics, tuple(assignors), group_instance_id, session_timeout_s, rebalance_timeout_s,
            heartbeat_interval_s, self.client.retry_backoff_s))
        self.reset = _RESETS[auto_offset_reset]
        self.enable_auto_commit = enable_auto_commit
        self.auto_commit_interval_s = auto_commit_interval_s
        self.on_assigned = on_assigned
        self.on_revoked = on_revoked
        self.max_wait_s = max_wait_s
        self.read_committed = read_committed  # §19.7: only committed transactions' records
        self.consumed: dict[TopicPartition, int] = {}  # the next offset to deliver, per assigned partition
        self._send, self._receive = trio.open_memory_channel[KafkaGroupMessage](0)
        self._wake = trio.Event()
        self._nursery: trio.Nursery | None = None
        self._fetching: dict[TopicPartition, trio.CancelScope] = {}  # one fetcher per assigned partition
        self._stopped = trio.Event()

    @property
    def assignment(self) -> list[TopicPartition]:
        """The partitions this member holds now."""
        return sorted(TopicPartition(t, p) for t, ids in self.membership.assignment.partitions.items() for p in ids)

    def group_metadata(self) -> ConsumerGroupMetadata:
        """The group id, generation, member id and instance id a transactional producer's
        ``send_offsets`` commits with (TxnOffsetCommit v3's fencing, §19.8)."""
        m = self.membership
        return ConsumerGroupMetadata(self.group_id, m.generation_id, m.member_id, m.group_instance_id)

    async def __aenter__(self) -> KafkaGroupConsumer:
        self._nursery_manager = trio.open_nursery()
        self._nursery = await self._nursery_manager.__aenter__()
        self._nursery.start_soon(self._drive)
        if self.enable_auto_commit:
            self._nursery.start_soon(self._auto_commit)
        return self

    async def __aexit__(self, *exc_info: object) -> bool | None:
        try:
            with trio.move_on_after(self.client.request_timeout_s or math.inf) as scope:
                scope.shield = True
                self.membership.leave()
                self._wake.set()
                await self._stopped.wait()
        finally:
            assert self._nursery is not None
            self._nursery.cancel_scope.cancel()
            suppressed = await self._nursery_manager.__aexit__(*exc_info)  # type: ignore[arg-type]
            await self.client.close_lane(_GROUP_LANE)
            if self._owns_client:
                await self.client.aclose()
        return suppressed

    async def __aiter__(self) -> AsyncIterator[KafkaGroupMessage]:
        async for message in self._receive:
            tp = TopicPartition(message.topic, message.partition)
            position = self.consumed.get(tp)
            if position is None or position > message.record.offset:
                continue  # fetched before a rebalance moved the partition away (and maybe back)
            yield message
            if tp in self.consumed:  # still this member's: the message is consumed
                self.consumed[tp] = message.record.offset + 1

    async def commit(self) -> None:
        """Commit the consumed position of every partition held (OffsetCommit to the coordinator).

        Raises ``KafkaResponseError`` for a refused partition, and
        COORDINATOR_NOT_AVAILABLE while the member knows no coordinator
        (nothing is sent: returning means the coordinator acknowledged, §17.8);
        a stale generation also makes the member rejoin.
        """
        offsets = {tp: offset for tp, offset in self.consumed.items() if offset >= 0}
        if not offsets:
            return
        if self.membership.coordinator is None:
            raise KafkaResponseError(ErrorCode.coordinator_not_available, f"commit of group {self.group_id}",
                                     "no coordinator known yet")
        m = self.membership
        answer = await self._coordinator_request(GroupRequest("OFFSET_COMMIT", commit_values(
            self.group_id, m.generation_id, m.member_id, m.group_instance_id, offsets)))
        errors = commit_errors(answer)
        if errors:
            if any(code in _REJOIN_ERRORS for code in errors.values()):
                m.rejoin(trio.current_time())
                self._wake.set()
            tp, code = next(iter(errors.items()))
            raise KafkaResponseError(code, f"commit of group {self.group_id} for {tp.topic}-{tp.partition}")

    # ------------------------------------------------------------------ the driver

    async def _drive(self) -> None:
        m = self.membership
        try:
            while m.phase not in (Phase.LEFT, Phase.FAILED):
                for event in m.take_events():
                    await (self._assigned(event) if isinstance(event, Assigned) else self._revoked(event))
                if isinstance(m, GroupMembership) and m.phase is Phase.ASSIGN:
                    assignments = await self._assign(m)
                    # A leave or rejoin meanwhile (close, a commit told of a new generation) left
                    # ASSIGN; only this driver enters it again, so the assignment is for a gone phase.
                    if m.phase is Phase.ASSIGN:
                        m.assign(assignments)
                    continue
                now = trio.current_time()
                request = m.poll(now)
                if request is None:
                    deadline = m.deadline_s(now)
                    with trio.move_on_at(math.inf if deadline is None else deadline):
                        await self._wake.wait()
                    self._wake = trio.Event()
                    continue
                try:
                    answer = await (self._coordinator_request(request) if request.to_coordinator
                                    else self._any_request(request))
                except UnsupportedApi:
                    raise
                except BrokerConnectionError:
                    m.connection_failed(trio.current_time())
                    continue
                if isinstance(m, ConsumerMembership):
                    await self._name_topics(m, answer)
                m.handle(answer, trio.current_time())
            for event in m.take_events():
                if isinstance(event, Revoked):
                    await self._revoked(event)
            if m.error is not None:
                raise m.error
        finally:
            self._stopped.set()

    async def _name_topics(self, m: ConsumerMembership, answer: object) -> None:
        """Learn the names of the topic ids an assignment names (Metadata v10+'s ``topic_id``)."""
        if heartbeat_topic_ids(answer) <= m.topic_names.keys():
            return
        try:
            fresh = await self.client.refresh_metadata(m.topics)
        except BrokerConnectionError:
            return  # the ids stay unnamed: the coordinator names them again until the member owns them
        m.topic_names.update({t.topic_id: name for name, t in fresh.topics.items() if t.topic_id is not None})

    async def _assign(self, m: GroupMembership) -> dict[str, Assignment]:
        topics = {t for member in m.members for t in member.subscription.topics}
        counts = {}
        for topic in sorted(topics):
            try:
                counts[topic] = await self.client.partition_count(topic)
            except KafkaResponseError:
                continue  # a topic that does not exist yet gets no partitions this generation
        assignor = ASSIGNORS[m.protocol_name or m.protocols[0][0]]
        return dict(assignor.assign(counts, m.members))

    async def _assigned(self, event: Assigned) -> None:
        partitions = [TopicPartition(t, p) for t, ids in event.assignment.partitions.items() for p in ids]
        committed = await self._committed(partitions) if partitions else {}
        self.consumed.update({tp: committed.get(tp, NO_OFFSET) for tp in partitions})
        assert self._nursery is not None
        for tp in partitions:
            running = self._fetching.get(tp)
            if running is not None:
                running.cancel()  # one fetcher per partition, even if it was assigned again without a revocation
            self._fetching[tp] = scope = trio.CancelScope()
            self._nursery.start_soon(self._fetch, tp, scope)
        if self.on_assigned is not None:
            await self.on_assigned(partitions)

    async def _revoked(self, event: Revoked) -> None:
        partitions = [TopicPartition(t, p) for t, ids in event.assignment.partitions.items() for p in ids]
        for tp in partitions:
            scope = self._fetching.pop(tp, None)
            if scope is not None:
                scope.cancel()
        if self.enable_auto_commit and not event.lost:
            try:
                await self.commit()
            except (KafkaResponseError, BrokerConnectionError):
                pass  # the generation is over: the next owner starts from the last commit that held
        if self.on_revoked is not None:
            await self.on_revoked(partitions)
        for tp in partitions:
            self.consumed.pop(tp, None)

    async def _fetch(self, tp: TopicPartition, scope: trio.CancelScope) -> None:
        start = self.consumed.get(tp, NO_OFFSET)
        with scope:
            async with PartitionConsumer(self.client, tp.topic, tp.partition, start if start >= 0 else self.reset,
                                         reset=self.reset, max_wait_s=self.max_wait_s,
                                         read_committed=self.read_committed) as consumer:
                async for record in consumer:
                    await self._send.send(KafkaGroupMessage(tp.topic, tp.partition, record))

    async def _committed(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        """OffsetFetch, asked again after a backoff while the coordinator is loading, moving or unreachable."""
        request = GroupRequest("OFFSET_FETCH", fetch_values(self.group_id, partitions))
        for attempt in range(self.client.max_retries + 1):
            try:
                return fetched_offsets(await self._coordinator_request(request), self.group_id)
            except KafkaResponseError as exc:
                if not exc.retriable or attempt == self.client.max_retries:
                    raise
            except UnsupportedApi:
                raise
            except BrokerConnectionError:
                if attempt == self.client.max_retries:
                    raise
            await trio.sleep(self.client.retry_backoff_s * (attempt + 1))
        raise AssertionError("unreachable: the last attempt raises")

    async def _auto_commit(self) -> None:
        while True:
            await trio.sleep(self.auto_commit_interval_s)
            if self.membership.phase is Phase.STABLE:
                try:
                    await self.commit()
                except (KafkaResponseError, BrokerConnectionError):
                    pass  # the next interval or the revocation commits again

    async def _coordinator_request(self, request: GroupRequest) -> object:
        coordinator = self.membership.coordinator
        if coordinator is None:
            raise BrokerConnectionError(f"group {self.group_id} has no coordinator")
        connection = await self.client.connection_to(coordinator.host, coordinator.port, _GROUP_LANE)
        return await self._request(connection, request)

    async def _any_request(self, request: GroupRequest) -> object:
        return await self._request(await self.client.any_connection(), request)

    async def _request(self, connection: KafkaConnection, request: GroupRequest) -> object:
        api = group_api(request.api)
        wait_s = self.membership.rebalance_timeout_s if api.name == "JOIN_GROUP" else 0.0
        return await connection.request(api, extra_wait_s=wait_s, **request.values)
