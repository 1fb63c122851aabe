"""Consumer groups of other people's clients on trikafka's coordinator (docs/protocol.md §17.4, §17.5):
librdkafka, kafka-python, aiokafka and ``kcat -G`` share a topic's partitions, take over a leaving
member's, make room for a new one, and commit what they consumed."""

from __future__ import annotations

import asyncio
import logging
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest

from tests.helpers.kafka_clients import create_topic
from tests.helpers.kafka_groups import ConfluentGroup, committed, kafka_python_member, produce
from trikafka.testing import running_kafka_broker
from trikafka.testing.kafka_broker import RunningKafkaBroker

logger = logging.getLogger(__name__)

PARTITIONS = 6
PER_PARTITION = 50
WAIT_S = 60.0


@pytest.fixture(scope="module")
def kafka() -> Iterator[RunningKafkaBroker]:
    with running_kafka_broker(num_partitions=1, offsets_topic_num_partitions=10) as running:
        yield running


def _topic(kafka: RunningKafkaBroker, name: str) -> str:
    create_topic(kafka.bootstrap, name, partitions=PARTITIONS)
    produce(kafka.bootstrap, name, PARTITIONS, PER_PARTITION)
    return name


def test_confluent_group_of_three_shares_takes_over_and_makes_room(kafka):
    topic = _topic(kafka, "ck-group")
    everything = {(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION)}
    group = ConfluentGroup(kafka.bootstrap, "ck", topic)
    try:
        for name in ("a", "b", "c"):
            group.add(name)
        assert group.poll_until(lambda: group.balanced(PARTITIONS, 3) and group.delivered() >= everything)
        assert all(len(group.assigned[n]) == 2 for n in ("a", "b", "c"))
        for name in ("a", "b", "c"):
            group.commit(name)
        leaving = set(group.assigned["c"])
        left_at = time.monotonic()
        group.close("c")  # LeaveGroup: a and b take over its partitions
        assert group.poll_until(lambda: group.balanced(PARTITIONS, 2))
        logger.info("rebalance after a member left: %.2f s", time.monotonic() - left_at)
        assert leaving <= group.assigned["a"] | group.assigned["b"]
        group.add("d")
        assert group.poll_until(lambda: group.balanced(PARTITIONS, 3))
        produce(kafka.bootstrap, topic, PARTITIONS, 10, start=PER_PARTITION)
        more = {(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION + 10)}
        assert group.poll_until(lambda: group.delivered() >= more)
    finally:
        group.close_all()
    assert committed(kafka.bootstrap, "ck", topic, PARTITIONS) == {p: PER_PARTITION + 10 for p in range(PARTITIONS)}


def test_a_killed_member_is_removed_by_its_session_timeout_and_the_others_take_over(kafka):
    """A member SIGKILLed (no LeaveGroup) is removed when its session times out (§17.4)."""
    topic = _topic(kafka, "ck-killed")
    group = ConfluentGroup(kafka.bootstrap, "ck-killed", topic)
    child = subprocess.Popen([sys.executable, "-m", "tests.helpers.kafka_group_child", kafka.bootstrap, "ck-killed",
                              topic], stdout=subprocess.PIPE, text=True, cwd=str(Path(__file__).parents[2]))
    try:
        child_share: list[set[int]] = []

        def read_child() -> None:
            assert child.stdout is not None
            for line in child.stdout:
                child_share.append({int(p) for p in line.split()[1:]})

        reader = threading.Thread(target=read_child, daemon=True)
        reader.start()
        for name in ("a", "b"):
            group.add(name)

        def three_way() -> bool:
            held = group.assigned["a"] | group.assigned["b"]
            return (len(group.assigned["a"]) == len(group.assigned["b"]) == 2 and bool(child_share)
                    and child_share[-1] == set(range(PARTITIONS)) - held)

        assert group.poll_until(three_way)
        killed_share = child_share[-1]
        child.kill()
        child.wait()
        killed_at = time.monotonic()
        assert group.poll_until(lambda: group.balanced(PARTITIONS, 2))
        logger.info("rebalance after a member was killed: %.2f s (its session timeout is 6 s)",
                    time.monotonic() - killed_at)
        assert killed_share <= group.assigned["a"] | group.assigned["b"]
    finally:
        child.kill()
        child.wait()
        group.close_all()


def test_a_restarted_confluent_group_resumes_from_its_commits(kafka):
    topic = _topic(kafka, "ck-resume")
    first = ConfluentGroup(kafka.bootstrap, "ck-resume", topic)
    first.add("a")
    try:
        assert first.poll_until(lambda: len(first.seen) >= PARTITIONS * PER_PARTITION)
    finally:
        first.close_all()
    produce(kafka.bootstrap, topic, PARTITIONS, 5, start=PER_PARTITION)
    second = ConfluentGroup(kafka.bootstrap, "ck-resume", topic)
    second.add("b")
    try:
        assert second.poll_until(lambda: len(second.seen) >= PARTITIONS * 5)
        assert second.poll_until(lambda: False, wait_s=1.0) is False  # drains anything more it would get
    finally:
        second.close_all()
    assert sorted(second.delivered()) == [(p, o) for p in range(PARTITIONS)
                                          for o in range(PER_PARTITION, PER_PARTITION + 5)]


def test_a_static_member_comes_back_to_its_partitions_without_a_rebalance(kafka):
    """KIP-345: a member with a group.instance.id that closes (no LeaveGroup) and starts again under the
    same instance id gets its old partitions back, and the other member is never revoked."""
    topic = _topic(kafka, "ck-static")
    group = ConfluentGroup(kafka.bootstrap, "ck-static", topic, **{"session.timeout.ms": 30000})
    try:
        group.add("a", **{"group.instance.id": "instance-a"})
        group.add("b", **{"group.instance.id": "instance-b"})
        assert group.poll_until(lambda: group.balanced(PARTITIONS, 2))
        before = set(group.assigned["a"])
        revoked_b = group.revocations.get("b", 0)
        group.close("a")
        group.add("a2", **{"group.instance.id": "instance-a"})
        assert group.poll_until(lambda: group.balanced(PARTITIONS, 2))
        assert group.assigned["a2"] == before
        assert group.revocations.get("b", 0) == revoked_b
    finally:
        group.close_all()


def test_kafka_python_group_consumes_to_the_end_commits_and_a_successor_resumes(kafka):
    """A kafka-python member of group "kp" consumes the topic to the end and commits; a second member,
    started after the first closed, resumes from those commits.  (Two kafka-python consumers polled
    concurrently in one process were seen to stall one of them on the client side after a successful
    SyncGroup, with no request sent; librdkafka and aiokafka cover concurrent members here.)"""
    topic = _topic(kafka, "kp-group")

    def consume(count: int) -> set[tuple[int, int]]:
        consumer = kafka_python_member(kafka.bootstrap, "kp", topic, auto_offset_reset="earliest",
                                       enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=500)
        seen: set[tuple[int, int]] = set()
        try:
            deadline = time.monotonic() + WAIT_S
            while len(seen) < count and time.monotonic() < deadline:
                polled = consumer.poll(timeout_ms=100)
                for records in polled.values():
                    seen.update((r.partition, r.offset) for r in records)
                if polled:
                    consumer.commit()
            assert {tp.partition for tp in consumer.assignment()} == set(range(PARTITIONS))
        finally:
            consumer.close()
        return seen

    assert consume(PARTITIONS * PER_PARTITION) == {(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION)}
    assert committed(kafka.bootstrap, "kp", topic, PARTITIONS) == {p: PER_PARTITION for p in range(PARTITIONS)}
    produce(kafka.bootstrap, topic, PARTITIONS, 3, start=PER_PARTITION)
    resumed = {(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION, PER_PARTITION + 3)}
    assert consume(PARTITIONS * 3) == resumed
    assert committed(kafka.bootstrap, "kp", topic, PARTITIONS) == {p: PER_PARTITION + 3 for p in range(PARTITIONS)}


def test_aiokafka_group_of_two_consumes_to_the_end_and_commits(kafka):
    from aiokafka import AIOKafkaConsumer

    topic = _topic(kafka, "aio-group")

    async def consume() -> set[tuple[int, int]]:
        members = [AIOKafkaConsumer(topic, bootstrap_servers=kafka.bootstrap, group_id="aio",
                                    auto_offset_reset="earliest", enable_auto_commit=False,
                                    session_timeout_ms=6000, heartbeat_interval_ms=500) for _ in range(2)]
        seen: set[tuple[int, int]] = set()
        for member in members:
            await member.start()
        try:
            deadline = time.monotonic() + WAIT_S
            while len(seen) < PARTITIONS * PER_PARTITION and time.monotonic() < deadline:
                for member in members:
                    for records in (await member.getmany(timeout_ms=100)).values():
                        seen.update((r.partition, r.offset) for r in records)
                    if member.assignment():
                        await member.commit()
        finally:
            for member in members:
                await member.stop()
        return seen

    seen = asyncio.run(consume())
    assert seen == {(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION)}
    assert committed(kafka.bootstrap, "aio", topic, PARTITIONS) == {p: PER_PARTITION for p in range(PARTITIONS)}


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat_balanced_consumer_reads_the_topic_and_commits(kafka):
    topic = _topic(kafka, "kcat-group")
    command = ["kcat", "-b", kafka.bootstrap, "-G", "kcat", "-o", "beginning", "-e", "-q", "-f", "%p %o\n",
               "-X", "enable.auto.commit=true", "-X", "auto.commit.interval.ms=100", topic]
    done = subprocess.run(command, capture_output=True, timeout=WAIT_S, text=True)
    assert done.returncode == 0, done.stderr
    seen = {tuple(map(int, line.split())) for line in done.stdout.splitlines()}
    assert seen == {(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION)}
    assert committed(kafka.bootstrap, "kcat", topic, PARTITIONS) == {p: PER_PARTITION for p in range(PARTITIONS)}


class ChildMember:
    """One ``tests.helpers.kafka_group_child`` process of ``client``, and the assignments it printed."""

    def __init__(self, kafka: RunningKafkaBroker, group: str, topic: str, client: str):
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.helpers.kafka_group_child", kafka.bootstrap, group, topic, client,
             "--commit"], stdout=subprocess.PIPE, text=True, cwd=str(Path(__file__).parents[2]))
        self.shares: list[set[int]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("assigned"):
                self.shares.append({int(p) for p in line.split()[1:]})

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()


def _split_among(members: list[ChildMember]) -> bool:
    """Whether the members' latest assignments share the topic's partitions evenly, each once."""
    if not all(m.shares for m in members):
        return False
    latest = [m.shares[-1] for m in members]
    return (sorted(p for share in latest for p in share) == list(range(PARTITIONS))
            and {len(share) for share in latest} == {PARTITIONS // len(members)})


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.05)  # polling a condition on other processes' output


@pytest.mark.parametrize("client", ["aiokafka", "kafka-python"])
def test_a_group_of_three_survives_a_killed_member_and_an_added_one(kafka, client):
    """§17.4: three members of one client in child processes share six partitions; one is SIGKILLed
    (no LeaveGroup) and the two others take its partitions when its session times out; a new member
    gets its share; what the group commits reaches every partition's end (nothing committed is lost)."""
    topic = _topic(kafka, f"{client}-kill")
    group = f"{client}-kill"
    members = [ChildMember(kafka, group, topic, client) for _ in range(3)]
    try:
        _wait_for(lambda: _split_among(members), "three members share the partitions")
        members[0].kill()
        live = members[1:]
        _wait_for(lambda: _split_among(live), "two members take over the killed one's partitions")
        live.append(ChildMember(kafka, group, topic, client))
        members.append(live[-1])
        _wait_for(lambda: _split_among(live), "the added member gets its share")
        produce(kafka.bootstrap, topic, PARTITIONS, 10, start=PER_PARTITION)
        everything = {p: PER_PARTITION + 10 for p in range(PARTITIONS)}
        _wait_for(lambda: committed(kafka.bootstrap, group, topic, PARTITIONS) == everything,
                  "the group commits every partition's end")
    finally:
        for member in members:
            member.kill()


def test_librdkafka_cooperative_sticky_members_keep_their_partitions_when_one_leaves(kafka):
    """§17.4: the coordinator relays any client-side assignor; librdkafka's cooperative-sticky
    (incremental rebalancing, KIP-429) shares the partitions and, when a member leaves, the others keep
    what they held and only take over its partitions."""
    from confluent_kafka import Consumer

    topic = _topic(kafka, "coop-group")
    members = {name: Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "coop",
                               "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                               "heartbeat.interval.ms": 500,
                               "partition.assignment.strategy": "cooperative-sticky"}) for name in "abc"}
    for consumer in members.values():
        consumer.subscribe([topic])

    def shares() -> dict[str, set[int]]:
        return {name: {tp.partition for tp in consumer.assignment()} for name, consumer in members.items()}

    def split(count: int) -> bool:
        for consumer in members.values():
            consumer.poll(0.05)
        held = shares()
        return (sorted(p for share in held.values() for p in share) == list(range(PARTITIONS))
                and all(len(share) == PARTITIONS // count for share in held.values()))

    try:
        _wait_for(lambda: split(3), "three cooperative members share the partitions")
        before = shares()
        members.pop("c").close()
        _wait_for(lambda: split(2), "two cooperative members take over the third's partitions")
        after = shares()
        assert before["a"] <= after["a"] and before["b"] <= after["b"]  # sticky: nothing moved but c's
        assert after["a"] | after["b"] == before["a"] | before["b"] | before["c"]
    finally:
        for consumer in members.values():
            consumer.close()


@pytest.mark.slow  # waits out librdkafka's real max.poll.interval.ms (12 s), which no clock of ours drives
def test_a_member_past_max_poll_interval_keeps_its_partition_until_it_leaves(kafka):
    """§17.4, librdkafka's 0089_max_poll_interval: a member that stops polling keeps its partition (its
    heartbeats go on) until librdkafka's max.poll.interval.ms makes it leave; only then does the other
    member get the partition.

    The stall begins once both members share one generation: a rebalance that began before the last
    poll may rightly end sooner (the rebalance timeout, which is max.poll.interval.ms, runs from its
    start), so it would not time what this test means."""
    max_poll_s = 12.0  # twice the session: a coordinator that lost heartbeats would move it at about 6 s
    create_topic(kafka.bootstrap, "max-poll", partitions=1)
    produce(kafka.bootstrap, "max-poll", 1, 10)
    group = ConfluentGroup(kafka.bootstrap, "max-poll", "max-poll", **{
        "heartbeat.interval.ms": 3000,  # librdkafka's default, as in 0089
        "max.poll.interval.ms": int(max_poll_s * 1000)})
    stalled: str | None = None
    try:
        group.add("a")
        group.add("b")
        # An empty share counts once it was given: then both members are in one generation.
        assert group.poll_until(lambda: group.balanced(1, 2) and all(group.assignments.get(n) for n in ("a", "b"))), \
            "the two members never shared the partition"
        stalled = next(name for name, share in group.assigned.items() if share)
        other = next(name for name in group.members if name != stalled)
        # librdkafka takes its last-poll time inside poll(): a clock read before the call is not later.
        stalled_at = time.monotonic()
        group.members[stalled].poll(0)  # its last poll
        deadline = stalled_at + WAIT_S
        while group.assigned[other] != {0}:  # only the other member polls now
            assert time.monotonic() < deadline, "the partition never went to the other member"
            group.members[other].poll(0.1)
        waited_s = time.monotonic() - stalled_at
        logger.info("the partition moved %.2f s after the stalled member's last poll", waited_s)
        assert waited_s >= max_poll_s
    finally:
        for name in list(group.members):
            group.close(name, commit=name != stalled)  # the stalled one left: its assignment is lost
