"""The range and roundrobin assignors give kafka-python's answers for the same group (docs/protocol.md §17.8)."""

from __future__ import annotations

from types import SimpleNamespace

from hypothesis import given
from hypothesis import strategies as st
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

from trikafka.client.kafka.assignors import ASSIGNORS, GroupMember, RangeAssignor, RoundRobinAssignor
from trikafka.kafka.consumer_protocol import Assignment, Subscription

TOPICS = ("a", "b", "c", "d")


@st.composite
def groups(draw: st.DrawFn) -> tuple[dict[str, int], list[GroupMember]]:
    counts = draw(st.dictionaries(st.sampled_from(TOPICS), st.integers(1, 12), min_size=1))
    known = sorted(counts)
    count = draw(st.integers(1, 6))
    members = []
    for index in range(count):
        topics = draw(st.lists(st.sampled_from([*known, "missing"]), min_size=1, unique=True))
        instance = draw(st.none() | st.just(f"static-{draw(st.integers(0, 99)):02d}-{index}"))
        members.append(GroupMember(f"member-{draw(st.integers(0, 999)):03d}-{index}", instance,
                                   Subscription(tuple(topics))))
    # kafka-python groups static and dynamic members with itertools.groupby, which needs
    # each kind contiguous: the order given does not matter to ours, so give it that one.
    members.sort(key=lambda m: m.group_instance_id is None)
    return counts, members


class _Cluster:
    def __init__(self, counts: dict[str, int]):
        self.counts = counts

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return set(range(self.counts[topic])) if topic in self.counts else None


def _theirs(assignor: type, counts: dict[str, int], members: list[GroupMember]) -> dict[str, Assignment]:
    given_members = [SimpleNamespace(member_id=m.member_id, group_instance_id=m.group_instance_id,
                                     metadata=SimpleNamespace(topics=list(m.subscription.topics)))
                     for m in members]
    answer = assignor.assign(_Cluster(counts), given_members)
    return {member: Assignment({topic: tuple(ids) for topic, ids in a.assigned_partitions if ids})
            for member, a in answer.items()}


@given(groups())
def test_range_matches_kafka_python(group: tuple[dict[str, int], list[GroupMember]]) -> None:
    counts, members = group
    assert RangeAssignor().assign(counts, members) == _theirs(RangePartitionAssignor, counts, members)


@given(groups())
def test_roundrobin_matches_kafka_python(group: tuple[dict[str, int], list[GroupMember]]) -> None:
    counts, members = group
    # kafka-python's loop that passes over an unsubscribed member rebinds its member id to a
    # tuple and fails, so it is compared on groups that never pass one over: a shared subscription.
    members = [GroupMember(m.member_id, m.group_instance_id, members[0].subscription) for m in members]
    assert RoundRobinAssignor().assign(counts, members) == _theirs(RoundRobinPartitionAssignor, counts, members)


@given(groups())
def test_every_known_subscribed_partition_goes_to_one_subscriber(
        group: tuple[dict[str, int], list[GroupMember]]) -> None:
    counts, members = group
    subscribed = {(t, p) for m in members for t in m.subscription.topics if t in counts for p in range(counts[t])}
    for assignor in ASSIGNORS.values():
        answer = assignor.assign(counts, members)
        given_out = [(t, p, member) for member, a in answer.items() for t, ids in a.partitions.items() for p in ids]
        assert sorted((t, p) for t, p, _ in given_out) == sorted(subscribed)
        by_id = {m.member_id: m for m in members}
        assert all(t in by_id[member].subscription.topics for t, _, member in given_out)


def test_six_partitions_over_three_members() -> None:
    members = [GroupMember(f"m{i}", None, Subscription(("t",))) for i in (2, 0, 1)]
    assert RangeAssignor().assign({"t": 6}, members) == {
        "m0": Assignment({"t": (0, 1)}), "m1": Assignment({"t": (2, 3)}), "m2": Assignment({"t": (4, 5)})}
    assert RoundRobinAssignor().assign({"t": 6}, members) == {
        "m0": Assignment({"t": (0, 3)}), "m1": Assignment({"t": (1, 4)}), "m2": Assignment({"t": (2, 5)})}


def test_roundrobin_passes_over_a_member_not_subscribed() -> None:
    members = [GroupMember("m0", None, Subscription(("a",))), GroupMember("m1", None, Subscription(("a", "b"))),
               GroupMember("m2", None, Subscription(("b",)))]
    # a0 m0, a1 m1, a2 m0 (m2 passed over), b0 m1, b1 m2
    assert RoundRobinAssignor().assign({"a": 3, "b": 2}, members) == {
        "m0": Assignment({"a": (0, 2)}), "m1": Assignment({"a": (1,), "b": (0,)}), "m2": Assignment({"b": (1,)})}


def test_static_members_come_first_whatever_their_member_ids() -> None:
    members = [GroupMember("a-dynamic", None, Subscription(("t",))),
               GroupMember("z-static", "instance-1", Subscription(("t",)))]
    assert RangeAssignor().assign({"t": 1}, members) == {"z-static": Assignment({"t": (0,)}),
                                                         "a-dynamic": Assignment()}
