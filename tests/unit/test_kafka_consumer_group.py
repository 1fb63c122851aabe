"""Kafka 4's consumer group state machine and its assignors (docs/protocol.md §17.9)."""

from __future__ import annotations

import uuid

from hypothesis import given, settings, strategies as st
from kio.schema.errors import ErrorCode

from trikafka.broker.kafka.groups.assignors import range_, uniform
from trikafka.broker.kafka.groups.consumer_group import ConsumerGroup, ConsumerSettings, Heartbeat, to_topic_partitions
from trikafka.kafka.group_records import ConsumerKey, MemberState, decode_record, encode_key, encode_value
from trikafka.kafka.topic_ids import topic_id

SESSION_MS = 10_000
T = topic_id("t")


def topics(**counts: int) -> dict[str, tuple[uuid.UUID, int]]:
    return {name: (topic_id(name), count) for name, count in counts.items()}


class Client:
    """A client that does what the coordinator asks: owns what its last assignment said."""

    def __init__(self, group: ConsumerGroup, member_id: str, subscription: tuple[str, ...] = ("t",),
                 instance_id: str | None = None):
        self.group, self.member_id, self.subscription, self.instance_id = group, member_id, subscription, instance_id
        self.epoch = 0
        self.owned: dict[uuid.UUID, frozenset[int]] = {}

    def beat(self, now_ms: int, metadata: dict[str, tuple[uuid.UUID, int]], **fields) -> ErrorCode:
        joining = self.epoch == 0
        answer = self.group.heartbeat(now_ms, Heartbeat(
            self.member_id, self.epoch, self.instance_id,
            subscribed_topic_names=self.subscription if joining else None,
            owned=None if joining else dict(self.owned), **fields), metadata)
        if answer.error == ErrorCode.none:
            self.member_id, self.epoch = answer.member_id, answer.member_epoch
            if answer.assignment is not None:
                self.owned = answer.assignment
        return answer.error

    def partitions(self) -> set[int]:
        return set(self.owned.get(T, ()))


def owned_twice(group: ConsumerGroup) -> bool:
    seen: set[tuple[uuid.UUID, int]] = set()
    for member in group.members.values():
        for topic, parts in list(member.assigned.items()) + list(member.pending_revocation.items()):
            for p in parts:
                if (topic, p) in seen:
                    return True
                seen.add((topic, p))
    return False


def settle(clients: list[Client], meta: dict[str, tuple[uuid.UUID, int]], rounds: int = 4) -> None:
    """Each client heartbeats ``rounds`` times, in turn, at times 0, 1, ...: the group reaches its target."""
    for now in range(rounds):
        for client in clients:
            client.beat(now, meta)


def new_group() -> ConsumerGroup:
    return ConsumerGroup("g", ConsumerSettings(session_timeout_ms=SESSION_MS, heartbeat_interval_ms=100))


def test_a_first_member_gets_every_partition_at_epoch_1():
    group = new_group()
    a = Client(group, "a")
    assert a.beat(0, topics(t=4)) == ErrorCode.none
    assert (a.epoch, a.partitions()) == (1, {0, 1, 2, 3})
    assert group.state == "Stable"


def test_a_partition_moves_only_after_its_owner_revokes_it():
    group, meta = new_group(), topics(t=4)
    a, b = Client(group, "a"), Client(group, "b")
    a.beat(0, meta)
    b.beat(1, meta)
    assert b.partitions() == set()  # a still owns all four
    assert group.members["b"].state is MemberState.UNRELEASED_PARTITIONS
    a_before = a.partitions()
    a.beat(2, meta)  # told to revoke two; its epoch does not move yet
    assert group.members["a"].state is MemberState.UNREVOKED_PARTITIONS and a.epoch == 1
    revoked = a_before - a.partitions()
    assert len(revoked) == 2
    b.beat(3, meta)
    assert b.partitions() == set()  # a has not told the coordinator it let them go
    a.beat(4, meta)  # owns only its two now: it reaches the new epoch
    assert a.epoch == group.assignment_epoch == 2
    b.beat(5, meta)
    assert b.partitions() == revoked and b.epoch == 2
    assert not owned_twice(group) and group.state == "Stable"


def test_a_leaving_member_s_partitions_go_to_the_others():
    group, meta = new_group(), topics(t=4)
    a, b = Client(group, "a"), Client(group, "b")
    settle([a, b], meta)
    assert len(a.partitions()) == len(b.partitions()) == 2
    answer = group.heartbeat(10, Heartbeat("b", -1), meta)
    assert (answer.error, answer.member_epoch) == (ErrorCode.none, -1)
    a.beat(11, meta)
    assert a.partitions() == {0, 1, 2, 3}


def test_a_silent_member_is_removed_at_its_session_timeout():
    group, meta = new_group(), topics(t=2)
    a, b = Client(group, "a"), Client(group, "b")
    settle([a, b], meta)
    assert group.next_deadline_ms() == 3 + SESSION_MS
    assert group.tick(SESSION_MS) == []
    a.beat(SESSION_MS, meta)
    assert group.tick(3 + SESSION_MS) == ["b"]
    a.beat(SESSION_MS + 10, meta)
    assert a.partitions() == {0, 1}


def test_epochs_are_fenced_but_a_lost_answer_is_forgiven():
    group, meta = new_group(), topics(t=2)
    a = Client(group, "a")
    a.beat(0, meta)
    assert group.heartbeat(1, Heartbeat("a", 7, owned={}), meta).error == ErrorCode.fenced_member_epoch
    assert group.heartbeat(1, Heartbeat("x", 1, owned={}), meta).error == ErrorCode.unknown_member_id
    b = Client(group, "b")
    b.beat(2, meta)
    a.beat(3, meta)
    a.beat(4, meta)  # a at epoch 2 now, owning one partition
    assert a.epoch == 2
    # The answer that moved a to epoch 2 lost: a asks again with epoch 1, owning a subset.
    answer = group.heartbeat(5, Heartbeat("a", 1, owned=dict(a.owned)), meta)
    assert answer.error == ErrorCode.none and answer.member_epoch == 2


def test_a_static_member_comes_back_with_its_partitions_and_no_new_epoch():
    group, meta = new_group(), topics(t=4)
    a, b = Client(group, "a", instance_id="ia"), Client(group, "b", instance_id="ib")
    settle([a, b], meta)
    mine, epoch = a.partitions(), group.group_epoch
    again = Client(group, "a2", instance_id="ia")
    assert again.beat(5, meta) == ErrorCode.unreleased_instance_id  # a is still active
    assert group.heartbeat(6, Heartbeat("a", -2, "ia"), meta).member_epoch == -2
    assert again.beat(7, meta) == ErrorCode.none
    assert again.partitions() == mine and group.group_epoch == epoch and "a" not in group.members
    assert group.heartbeat(8, Heartbeat("a", a.epoch, "ia", owned={}), meta).error in (
        ErrorCode.fenced_instance_id, ErrorCode.unknown_member_id)


def test_bad_joins_are_refused():
    group, meta = new_group(), topics(t=1)
    assert group.heartbeat(0, Heartbeat("a", 0), meta).error == ErrorCode.invalid_request
    assert group.heartbeat(0, Heartbeat("", 0, subscribed_topic_names=("t",)), meta).error == ErrorCode.invalid_request
    answer = group.heartbeat(0, Heartbeat("", 0, subscribed_topic_names=("t",), server_names_member=True), meta)
    assert answer.error == ErrorCode.none and answer.member_id
    refused = group.heartbeat(0, Heartbeat("b", 0, subscribed_topic_names=("t",), server_assignor="sticky"), meta)
    assert refused.error == ErrorCode.unsupported_assignor


def test_a_refused_heartbeat_to_a_new_group_leaves_nothing_to_write():
    group = new_group()
    assert group.heartbeat(0, Heartbeat("ghost", -1), topics(t=1)).error == ErrorCode.unknown_member_id
    assert group.heartbeat(0, Heartbeat("ghost", 3, owned={}), topics(t=1)).error == ErrorCode.unknown_member_id
    assert group.changes()[0] == [] and group.forgettable


def test_commits_check_the_member_epoch():
    group, meta = new_group(), topics(t=1)
    a = Client(group, "a")
    a.beat(0, meta)
    assert group.check_commit("a", 1, commit_version=9) == ErrorCode.none
    assert group.check_commit("a", 0) == ErrorCode.stale_member_epoch
    assert group.check_commit("a", 2) == ErrorCode.stale_member_epoch  # Kafka 4: any other epoch is stale
    assert group.check_commit("x", 1) == ErrorCode.unknown_member_id
    assert group.check_commit("", -1) == ErrorCode.unknown_member_id  # a simple commit needs an empty group
    assert group.check_commit("a", 1, commit_version=8) == ErrorCode.unsupported_version


def test_a_new_partition_raises_the_group_epoch_and_is_assigned():
    group = new_group()
    a = Client(group, "a")
    a.beat(0, topics(t=2))
    a.beat(1, topics(t=3))
    assert a.partitions() == {0, 1, 2} and a.epoch == 2


def test_a_regex_subscription_matches_whole_names():
    group = new_group()
    answer = group.heartbeat(0, Heartbeat("a", 0, subscribed_topic_regex="t.*"), topics(t=1, tx=1, other=1))
    assert set(answer.assignment or {}) == {topic_id("t"), topic_id("tx")}


def test_the_records_rebuild_the_group():
    group, meta = new_group(), topics(t=4)
    a, b = Client(group, "a", instance_id="ia"), Client(group, "b")
    a.beat(0, meta)
    b.beat(1, meta)
    a.beat(2, meta)  # mid-rebalance: a has partitions pending revocation
    records, view = group.changes()
    group.written(view)
    assert group.changes()[0] == []  # nothing new to write
    loaded = ConsumerGroup("g", group.settings, loading=True)
    for key, value in records:
        decoded_key, decoded = decode_record(encode_key(key), encode_value(value))
        assert isinstance(decoded_key, ConsumerKey)
        loaded.load_record(decoded_key, decoded)  # type: ignore[arg-type]
    loaded.activate(100)
    assert loaded.view() == group.view()
    assert loaded.instances == {"ia": "a"} and loaded.next_deadline_ms() == 100 + SESSION_MS
    epoch = loaded.group_epoch  # the members go on at the new coordinator with the epochs they had
    assert loaded.heartbeat(101, Heartbeat("b", b.epoch, owned=dict(b.owned)), meta).error == ErrorCode.none
    assert loaded.group_epoch == epoch
    group.heartbeat(3, Heartbeat("b", -1), meta)
    tombstones = [key for key, value in group.changes()[0] if value is None]
    assert [k.kind.name for k in tombstones] == ["CURRENT_ASSIGNMENT", "TARGET_MEMBER", "MEMBER_METADATA"]


def test_range_gives_contiguous_runs_the_first_members_one_more():
    meta = topics(t=5, u=2)
    result = range_({"b": frozenset({"t", "u"}), "a": frozenset({"t"})}, meta, {})
    assert to_topic_partitions(result["a"]) == ((topic_id("t"), (0, 1, 2)),)
    assert dict(to_topic_partitions(result["b"])) == {topic_id("t"): (3, 4), topic_id("u"): (0, 1)}


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 12), st.lists(st.sampled_from("abcdef"), min_size=1, max_size=6, unique=True),
       st.lists(st.sampled_from("abcdef"), max_size=6, unique=True))
def test_uniform_is_balanced_complete_and_sticky(partitions, members, later):
    meta = topics(t=partitions)
    first = uniform({m: frozenset({"t"}) for m in members}, meta, {})
    counts = [len(first[m].get(T, ())) for m in members]
    assert sum(counts) == partitions and max(counts) - min(counts) <= 1
    second = uniform({m: frozenset({"t"}) for m in later or members}, meta, first)
    counts = [len(second[m].get(T, ())) for m in later or members]
    assert sum(counts) == partitions and max(counts) - min(counts) <= 1
    for m in set(members) & set(later or members):  # a member keeps up to its share of what it had
        kept = first[m].get(T, frozenset()) & second[m].get(T, frozenset())
        assert len(kept) >= min(len(first[m].get(T, ())), len(second[m].get(T, ())))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abcd"), st.sampled_from(["beat", "beat", "beat", "leave"])),
                min_size=1, max_size=60),
       st.integers(1, 8), st.sampled_from(["uniform", "range"]))
def test_no_partition_is_ever_owned_twice_and_the_group_settles(steps, partitions, assignor):
    group, meta = new_group(), topics(t=partitions)
    clients: dict[str, Client] = {}
    for now, (name, action) in enumerate(steps):
        client = clients.setdefault(name, Client(group, name))
        if action == "leave" and client.epoch > 0:
            group.heartbeat(now, Heartbeat(name, -1), meta)
            client.epoch, client.owned = 0, {}
        else:
            client.beat(now, meta, server_assignor=assignor if client.epoch == 0 else None)
        assert not owned_twice(group)
        owned_by_clients = [p for c in clients.values() for p in c.partitions()]
        assert len(owned_by_clients) == len(set(owned_by_clients))
    for round_ in range(6):  # every member heartbeats a few times: the group reaches its target
        for client in clients.values():
            if client.epoch > 0:
                client.beat(len(steps) + round_, meta)
    active = [c for c in clients.values() if c.epoch > 0]
    if active:
        assert group.state == "Stable"
        assert sorted(p for c in active for p in c.partitions()) == list(range(partitions))


def test_records_not_written_are_carried_by_the_next_write():
    group, meta = new_group(), topics(t=2)
    a = Client(group, "a")
    a.beat(0, meta)
    lost, _ = group.changes()  # this write fails: ``written`` is not called
    b = Client(group, "b")
    b.beat(1, meta)
    again, view = group.changes()
    assert {k for k, _ in lost} <= {k for k, _ in again}
    group.written(view)
    assert group.changes()[0] == []


def test_a_consumer_group_is_listed_and_counted_by_its_own_state():
    from trikafka.broker.kafka.groups.group import Group

    classic, consumer = Group("c"), Group("k")
    consumer.consumer_or_new().heartbeat(0, Heartbeat("m", 0, subscribed_topic_names=("t",)), topics(t=1))
    assert (classic.group_type, classic.listed_state) == ("classic", "Empty")
    assert (consumer.group_type, consumer.listed_state) == ("consumer", "Stable")
