"""A simulated Kafka group consumer of the Kafka-groups world (docs/simulation.md).

``SimMember`` behaves as a Kafka client of the classic rebalance protocol:
FindCoordinator; JoinGroup (an empty member id first, then the one
MEMBER_ID_REQUIRED gives); the leader assigns the topic's partitions with
the range assignor; SyncGroup; OffsetFetch for its partitions; then it
consumes them up to their log ends, commits its positions with its
generation every ``COMMIT_INTERVAL_MS``, and heartbeats on its own timer.
REBALANCE_IN_PROGRESS makes it commit (its partitions are revoked) and
rejoin; ILLEGAL_GENERATION and UNKNOWN_MEMBER_ID make it drop its partitions
uncommitted and rejoin (the second with a new member id); NOT_COORDINATOR,
COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS and a dropped
connection make it find the coordinator again.

A member is one *incarnation* of a process: each request carries the
member's ``token``, and an answer to an older token (a request sent before a
pause or a crash) is dropped, as a client drops answers on a closed socket.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from kio.schema.errors import ErrorCode

from trikafka.broker.kafka.groups.member import JoinAnswer, SyncAnswer
from trikafka.client.kafka.assignors import GroupMember, RangeAssignor
from trikafka.kafka.consumer_protocol import (Subscription, decode_assignment, decode_subscription,
                                              encode_assignment, encode_subscription)

from .kafka_coordinator import JoinRequest, GroupWorld

PROTOCOL = "range"
SESSION_TIMEOUT_MS = 3000
REBALANCE_TIMEOUT_MS = 5000
HEARTBEAT_INTERVAL_MS = 1000
POLL_INTERVAL_MS = 100
COMMIT_INTERVAL_MS = 500
RETRY_BACKOFF_MS = 100

# What a client does on each error of the group protocol.
FIND_COORDINATOR = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
                              ErrorCode.coordinator_load_in_progress, ErrorCode.network_exception})
REJOIN = {ErrorCode.rebalance_in_progress: "revoke", ErrorCode.illegal_generation: "lost",
          ErrorCode.unknown_member_id: "unknown"}


@dataclass
class MemberConnection:
    """A process's connection: its requests arrive, and its answers return, in the order sent."""

    request_ms: int = 0  # when its last request arrives
    answer_ms: int = 0  # when its last answer returns


class SimMember:
    """One process of a group member (named ``m<i>.<incarnation>`` in the trace)."""

    def __init__(self, world: GroupWorld, slot: int, incarnation: int):
        self.world, self.slot = world, slot
        self.name = f"m{slot}.{incarnation}"
        self.token = 0
        self.alive = True
        self.coordinator: int | None = None
        self.member_id = ""
        self.generation = -1
        self.owned: tuple[int, ...] = ()
        self.positions: dict[int, int] = {}
        self.stable = False
        self.busy = False  # a request of the main thread is out (heartbeats have their own)
        self.rejoin: str | None = None  # why the next poll rejoins: revoke, lost, unknown
        self.next_commit_ms = 0
        self.delayed_until_ms = -1  # message-delay: its requests are slow until then
        self.connection = MemberConnection()

    # ----------------------------------------------------------------- life

    def start(self) -> None:
        self.token += 1
        self.world.at(self.world.now_ms, self._poll, self.token)
        self.world.at(self.world.now_ms + HEARTBEAT_INTERVAL_MS, self._heartbeat, self.token)

    def crash(self) -> None:
        self.alive = False
        self.token += 1

    def close(self) -> None:
        """A clean close: it commits what it holds, then leaves the group (LeaveGroup); it stops either way."""
        self.alive = False
        self.token += 1
        if self.coordinator is None or not self.member_id:
            return
        member_id, generation, offsets = self.member_id, self.generation, dict(self.positions)

        def leave(_answer: object = None) -> None:
            self.world.send(self, "leave", member_id, lambda _error: None)

        if self.stable and offsets:
            def committed(answer: object) -> None:
                assert isinstance(answer, dict)
                if set(answer.values()) == {ErrorCode.none}:
                    self.world.acknowledged(self, generation, offsets)
                leave()
            self.world.send(self, "commit", (member_id, generation, offsets), committed)
        else:
            leave()

    def pause(self) -> None:
        self.token += 1  # everything in flight is answered to a frozen process: lost

    def wake(self) -> None:
        """Back from a pause: whatever it sent timed out; an overdue commit of what it held goes first,
        with the generation it had (a zombie, when the group moved on meanwhile)."""
        self.busy = False
        if self.stable and self.owned:
            self.world.trace.add(f"{self.name} wakes holding {list(self.owned)} of generation {self.generation}")
            self.next_commit_ms = self.world.now_ms
        self.start()

    # ----------------------------------------------------------------- the main thread

    def _poll(self, token: int) -> None:
        if token != self.token or not self.alive:
            return
        self.world.at(self.world.now_ms + POLL_INTERVAL_MS, self._poll, token)
        if self.busy:
            return
        if self.coordinator is None:
            self._find()
        elif self.rejoin is not None:
            self._rejoin()
        elif not self.stable:
            self._join()
        elif self.world.now_ms >= self.next_commit_ms:
            self._commit()
        else:
            self._consume()

    def _send(self, kind: str, request: object, on_answer: Callable[[object], None]) -> None:
        """Send on the main thread; ``on_answer`` takes the answer of this kind (a JoinAnswer, a
        SyncAnswer, an ErrorCode, offsets by partition) unless the member moved on meanwhile."""
        self.busy = True
        token = self.token

        def answered(answer: object) -> None:
            if token != self.token or not self.alive:
                return
            self.busy = False
            on_answer(answer)

        self.world.send(self, kind, request, answered)

    def _find(self) -> None:
        def found(broker: object) -> None:
            if isinstance(broker, int):
                self.coordinator = broker
        self._send("find", None, found)

    def _coordinator_error(self, error: ErrorCode) -> bool:
        if error in FIND_COORDINATOR:
            self.coordinator = None
            return True
        return False

    def _join(self) -> None:
        subscription = encode_subscription(Subscription(topics=(self.world.topic,)))
        self._send("join", JoinRequest(self.member_id, f"m{self.slot}", SESSION_TIMEOUT_MS, REBALANCE_TIMEOUT_MS,
                                       ((PROTOCOL, subscription),)), self._joined)

    def _joined(self, answer: object) -> None:
        assert isinstance(answer, JoinAnswer)
        if self._coordinator_error(answer.error):
            return
        if answer.error == ErrorCode.member_id_required:
            self.member_id = answer.member_id
            self.world.name_member(answer.member_id, self.name)
            return
        if answer.error == ErrorCode.unknown_member_id:
            self.member_id = ""
            return
        if answer.error != ErrorCode.none:
            return  # REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION: join again at the next poll
        self.member_id, self.generation = answer.member_id, answer.generation
        self.world.name_member(answer.member_id, self.name)
        assignments = self._assign(answer) if answer.leader == answer.member_id else {}
        self._send("sync", (self.member_id, self.generation, assignments, answer.protocol), self._synced)

    def _assign(self, answer: JoinAnswer) -> dict[str, bytes]:
        """The leader's range assignment of every subscribed member (client-side, relayed by the broker)."""
        members = [GroupMember(member_id, instance_id, decode_subscription(metadata)[1])
                   for member_id, instance_id, metadata in answer.members]
        plan = RangeAssignor().assign({self.world.topic: self.world.partitions}, members)
        return {member_id: encode_assignment(assignment) for member_id, assignment in plan.items()}

    def _synced(self, answer: object) -> None:
        assert isinstance(answer, SyncAnswer)
        if self._coordinator_error(answer.error):
            return
        if answer.error != ErrorCode.none:
            self._lose(answer.error == ErrorCode.unknown_member_id)
            return
        self.owned = tuple(decode_assignment(answer.assignment)[1].partitions.get(self.world.topic, ()))
        self.world.owns(self, self.generation, self.owned)
        self._send("fetch", self.owned, self._fetched)

    def _fetched(self, answer: object) -> None:
        if isinstance(answer, ErrorCode):
            self._coordinator_error(answer)
            return  # it syncs again (the stable group answers its assignment again)
        assert isinstance(answer, dict)
        self.positions = {p: max(offset, 0) for p, offset in answer.items()}
        self.stable = True
        self.next_commit_ms = self.world.now_ms + COMMIT_INTERVAL_MS

    def _consume(self) -> None:
        for partition in self.owned:
            end = self.world.log_ends[partition]
            start = self.positions[partition]
            if end > start:
                self.world.consumed(self, partition, start, end)
                self.positions[partition] = end

    def _commit(self, then_rejoin: bool = False) -> None:
        self.next_commit_ms = self.world.now_ms + COMMIT_INTERVAL_MS
        offsets = dict(self.positions)
        if not offsets:
            if then_rejoin:
                self._lose(False)
            return

        def committed(answer: object) -> None:
            assert isinstance(answer, dict)
            errors = set(answer.values())
            if errors == {ErrorCode.none}:
                self.world.acknowledged(self, self.generation, offsets)
            else:
                self.world.trace.add(f"{self.name} commit of generation {self.generation} refused: "
                                     f"{', '.join(sorted(e.name for e in errors))}")
            for error in errors:
                if not self._coordinator_error(error) and error in REJOIN and self.rejoin is None:
                    self.rejoin = REJOIN[error]
            if then_rejoin:
                self._lose(False)

        self._send("commit", (self.member_id, self.generation, offsets), committed)

    def _rejoin(self) -> None:
        why, self.rejoin = self.rejoin, None
        if why == "revoke" and self.stable:
            self._commit(then_rejoin=True)  # a client commits what it revokes before it joins again
        else:
            self._lose(why == "unknown")

    def _lose(self, unknown: bool) -> None:
        """Its partitions are gone (uncommitted when lost); it joins again at the next poll."""
        self.stable, self.owned, self.positions = False, (), {}
        if unknown:
            self.member_id = ""

    # ----------------------------------------------------------------- the heartbeat thread

    def _heartbeat(self, token: int) -> None:
        if token != self.token or not self.alive:
            return
        self.world.at(self.world.now_ms + HEARTBEAT_INTERVAL_MS, self._heartbeat, token)
        if self.coordinator is None or not self.member_id or self.generation < 0:
            return

        def answered(error: object) -> None:
            if token != self.token or not self.alive:
                return
            assert isinstance(error, ErrorCode)
            if not self._coordinator_error(error) and error in REJOIN and self.rejoin is None and self.stable:
                self.rejoin = REJOIN[error]

        self.world.send(self, "heartbeat", (self.member_id, self.generation), answered)
