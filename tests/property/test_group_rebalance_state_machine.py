"""The consumer-group rebalancing state machine (spec §8.3), on both
ZooKeeper backends.

The Hypothesis machine is a *program generator*: its rules keep a small model
(which brokers run, which topics exist, which consumers are live) for their
preconditions and append one step per rule.  ``teardown`` runs the whole
program in a single ``trio.run`` against a :class:`~tests.helpers.group_world.GroupWorld`
(in-process brokers with their znodes, group consumers on their own
sessions).  One Trio run per example keeps Trio and Hypothesis apart, makes
each example deterministic under the mock clock, and still lets Hypothesis
shrink to the shortest failing program, which it prints step by step.

Checked at every ``settle`` step and at the end:

* every partition is owned by exactly one live consumer, and the ownership in
  ZooKeeper and in each consumer's ``owned`` equals ``assign_group`` of the
  live membership and the live brokers;

and at the end, after restarting every stopped broker and draining:

* every produced message was consumed at least once, and nothing else was;
* within a partition, each consumer delivers in order and (within one
  generation) without gaps;
* a message comes twice only if a consumer that crashed or lost its session
  had delivered it above the offset committed at that moment.

The fake backend runs under ``MockClock(autojump_threshold=0)``, so session
timeouts and rebalance back-offs cost no wall time.
"""

from __future__ import annotations

import math
import uuid

import pytest
import trio
import trio.testing
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule, run_state_machine_as_test

from tests.helpers.hypothesis_profiles import STATE_MACHINE_MIN_EXAMPLES
from tests.helpers.group_world import FakeBackend, GroupWorld, KazooBackend, group_config

BROKER_PARTITIONS = {0: 2, 1: 1, 2: 3}
TOPICS = ("a", "b", "c")
MAX_LIVE_CONSUMERS = 4
MAX_CONSUMERS = 7
# The real-ZooKeeper run costs real time per example (sessions, polls, back-offs):
# 30 examples of up to 12 steps; budget ~5 minutes on a loaded 2-core machine.
# The fake run takes STATE_MACHINE_MIN_EXAMPLES (1000 under ci) examples of up
# to 30 steps; budget ~3 minutes (mock clock: timeouts cost no wall time).
REAL_ZOOKEEPER_EXAMPLES = 30
REAL_ZOOKEEPER_STEPS = 12
FAKE_STEPS = 30


def make_config(autocommit: bool):
    return group_config(autocommit_enable=autocommit)


def make_subscription(wildcard: bool, streams: int):
    from trikafka.group.registry import whitelist

    if wildcard:
        return whitelist("[abc]")  # TopicFilter; its stream count comes from the consumer
    return {topic: streams for topic in TOPICS}


async def run_program(world: GroupWorld, steps: list[tuple]) -> None:
    """Execute the machine's steps, then the final checks."""
    counter = iter(range(10_000))

    async def add_consumer(wildcard: bool = False, streams: int = 1, autocommit: bool = False,
                           name: str | None = None, credit: float = 0) -> None:
        name = name or f"c{next(counter)}"
        await world.add_consumer(name, make_subscription(wildcard, streams), make_config(autocommit),
                                 credit=credit)

    for step, *args in steps:
        if step == "add_broker":
            (broker_id,) = args
            await world.start_broker(broker_id, BROKER_PARTITIONS[broker_id])
        elif step == "remove_broker":
            await world.stop_broker(*args)
        elif step == "add_topic":
            await world.add_topic(*args)
        elif step == "produce":
            await world.produce(*args)
        elif step == "add_consumer":
            name, wildcard, streams, autocommit, credit = args
            await add_consumer(wildcard, streams, autocommit, name, credit)
        elif step == "stop_consumer":
            await world.stop_consumer(*args)
        elif step == "crash_consumer":
            await world.crash_consumer(*args)
        elif step == "expire_consumer":
            await world.expire_consumer(*args)
        elif step == "consume":
            world.consume(*args)
            await trio.sleep(0.01)  # let it run a little before the next step
        elif step == "commit":
            await world.commit(*args)
        elif step == "settle":
            await world.settle()
        else:
            raise AssertionError(f"unknown step {step}")
    await world.finish(make_consumer=lambda: add_consumer(name="final"))


class RebalanceMachine(RuleBasedStateMachine):
    """Rules build a program; ``teardown`` runs it (see module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.steps: list[tuple] = []
        self.running_brokers: set[int] = set()
        self.topics: list[str] = []
        self.live: list[str] = []
        self.consumer_count = 0

    # The backend and the run: subclasses.
    def execute(self, steps: list[tuple]) -> None:
        raise NotImplementedError

    @initialize(broker_id=st.sampled_from(sorted(BROKER_PARTITIONS)))
    def first_broker_and_topic(self, broker_id: int) -> None:
        self.steps += [("add_topic", "a"), ("add_broker", broker_id)]
        self.topics.append("a")
        self.running_brokers.add(broker_id)

    @precondition(lambda self: len(self.live) < MAX_LIVE_CONSUMERS and self.consumer_count < MAX_CONSUMERS)
    @rule(wildcard=st.booleans(), streams=st.integers(1, 2), autocommit=st.booleans(),
          credit=st.sampled_from([0, 3, 10, math.inf, math.inf]))
    def add_consumer(self, wildcard: bool, streams: int, autocommit: bool, credit: float) -> None:
        # ``credit``: how many messages it may take before a consume step allows more.
        name = f"c{self.consumer_count}"
        self.consumer_count += 1
        self.live.append(name)
        self.steps.append(("add_consumer", name, wildcard, streams, autocommit, credit))

    def _pick(self, index: int) -> str:
        return self.live[index % len(self.live)]

    @precondition(lambda self: self.live)
    @rule(index=st.integers(0, 7))
    def stop_consumer(self, index: int) -> None:
        name = self._pick(index)
        self.live.remove(name)
        self.steps.append(("stop_consumer", name))

    @precondition(lambda self: self.live)
    @rule(index=st.integers(0, 7))
    def crash_consumer(self, index: int) -> None:
        name = self._pick(index)
        self.live.remove(name)
        self.steps.append(("crash_consumer", name))

    @precondition(lambda self: self.live)
    @rule(index=st.integers(0, 7))
    def expire_consumer_session(self, index: int) -> None:
        self.steps.append(("expire_consumer", self._pick(index)))

    @precondition(lambda self: len(self.running_brokers) < len(BROKER_PARTITIONS))
    @rule(choice=st.integers(0, 2))
    def add_broker(self, choice: int) -> None:
        stopped = sorted(set(BROKER_PARTITIONS) - self.running_brokers)
        broker_id = stopped[choice % len(stopped)]
        self.running_brokers.add(broker_id)
        self.steps.append(("add_broker", broker_id))

    @precondition(lambda self: self.running_brokers)
    @rule(choice=st.integers(0, 2))
    def remove_broker(self, choice: int) -> None:
        running = sorted(self.running_brokers)
        broker_id = running[choice % len(running)]
        self.running_brokers.remove(broker_id)
        self.steps.append(("remove_broker", broker_id))

    @precondition(lambda self: len(self.topics) < len(TOPICS))
    @rule()
    def add_topic(self) -> None:
        topic = TOPICS[len(self.topics)]
        self.topics.append(topic)
        self.steps.append(("add_topic", topic))

    @precondition(lambda self: self.running_brokers)
    @rule(topic=st.integers(0, 2), broker=st.integers(0, 2), partition=st.integers(0, 2),
          count=st.integers(1, 8))
    def produce(self, topic: int, broker: int, partition: int, count: int) -> None:
        running = sorted(self.running_brokers)
        broker_id = running[broker % len(running)]
        self.steps.append(("produce", self.topics[topic % len(self.topics)], broker_id,
                           partition % BROKER_PARTITIONS[broker_id], count))

    @precondition(lambda self: self.live)
    @rule(index=st.integers(0, 7), count=st.integers(1, 20))
    def consume_some(self, index: int, count: int) -> None:
        self.steps.append(("consume", self._pick(index), count))

    @precondition(lambda self: self.live)
    @rule(index=st.integers(0, 7))
    def commit(self, index: int) -> None:
        self.steps.append(("commit", self._pick(index)))

    @rule()
    def settle(self) -> None:
        self.steps.append(("settle",))

    @invariant()
    def model_is_sane(self) -> None:
        assert len(set(self.live)) == len(self.live) <= MAX_LIVE_CONSUMERS

    def teardown(self) -> None:
        if self.steps:
            self.execute(self.steps)


class FakeRebalanceMachine(RebalanceMachine):
    def execute(self, steps: list[tuple]) -> None:
        async def main() -> None:
            async with GroupWorld.open(FakeBackend()) as world:
                await run_program(world, steps)

        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_rebalance_state_machine_fake_zookeeper() -> None:
    run_state_machine_as_test(FakeRebalanceMachine, settings=settings(
        max_examples=STATE_MACHINE_MIN_EXAMPLES, stateful_step_count=FAKE_STEPS))


@pytest.mark.zookeeper
@pytest.mark.slow
def test_rebalance_state_machine_real_zookeeper(zookeeper_server, zk_admin, tmp_path) -> None:
    hosts = zookeeper_server.connect_string
    examples = iter(range(1_000_000))

    class RealRebalanceMachine(RebalanceMachine):
        def execute(self, steps: list[tuple]) -> None:
            chroot = f"/rebalance-{uuid.uuid4().hex}"
            zk_admin.ensure_path(chroot)
            log_root = tmp_path / f"example-{next(examples)}"
            log_root.mkdir()
            try:
                async def main() -> None:
                    backend = KazooBackend(hosts + chroot, hosts, str(log_root))
                    async with GroupWorld.open(backend, log_root=str(log_root)) as world:
                        await run_program(world, steps)

                trio.run(main)
            finally:
                zk_admin.delete(chroot, recursive=True)

    run_state_machine_as_test(RealRebalanceMachine, settings=settings(
        max_examples=REAL_ZOOKEEPER_EXAMPLES, stateful_step_count=REAL_ZOOKEEPER_STEPS))
