"""``KafkaGroupConsumer``'s Trio driver against a scripted one-member coordinator (docs/protocol.md §17.8).

The records come from a real trikafka broker; the group apis are answered in
process by ``ScriptedCoordinator`` with ``kio`` response bodies, so the
driver (membership, leader assignment, starting offsets, commits, rebalance
callbacks) is tested without a group coordinator in the broker.
"""

from __future__ import annotations

import datetime
from typing import Iterator

import pytest
import trio
from kio.index import load_response_schema
from kio.schema.errors import ErrorCode

from trikafka.client.kafka import KafkaAdmin, KafkaClient, KafkaProducer, NewTopic, schema
from trikafka.client.kafka.group import KafkaGroupConsumer, KafkaGroupMessage
from trikafka.client.kafka.group_offsets import TopicPartition
from trikafka.client.kafka.membership import GroupRequest
from trikafka.testing import running_kafka_broker
from trikafka.testing.kafka_broker import RunningKafkaBroker

# (api key, version) of each answer the coordinator gives
VERSIONS = {"FIND_COORDINATOR": (10, 4), "JOIN_GROUP": (11, 9), "SYNC_GROUP": (14, 5), "HEARTBEAT": (12, 4),
            "LEAVE_GROUP": (13, 5), "OFFSET_COMMIT": (8, 8), "OFFSET_FETCH": (9, 7)}


class ScriptedCoordinator:
    """A coordinator of one group with one member; ``heartbeat_errors`` are answered in turn first."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.generation_id = 0
        self.committed: dict[TopicPartition, int] = {}
        self.heartbeat_errors: list[ErrorCode] = []
        self.fetch_errors: list[ErrorCode] = []
        self.assignment = b""
        self.asked: list[str] = []

    def answer(self, request: GroupRequest) -> object:
        self.asked.append(request.api)
        key, version = VERSIONS[request.api]
        return schema.entity(load_response_schema(key, version), throttle_time=datetime.timedelta(0),
                             **getattr(self, request.api.lower())(request.values))

    def find_coordinator(self, values: dict) -> dict:
        return {"coordinators": [{"key": values["key"], "node_id": 0, "host": self.host, "port": self.port,
                                  "error_code": ErrorCode.none, "error_message": None}]}

    def join_group(self, values: dict) -> dict:
        common = {"protocol_type": "consumer", "protocol_name": values["protocols"][0]["name"],
                  "skip_assignment": False, "leader": "member-1", "generation_id": self.generation_id}
        if not values["member_id"]:
            return {**common, "error_code": ErrorCode.member_id_required, "member_id": "member-1", "members": []}
        self.generation_id += 1
        return {**common, "error_code": ErrorCode.none, "member_id": "member-1", "generation_id": self.generation_id,
                "members": [{"member_id": "member-1", "group_instance_id": values["group_instance_id"],
                             "metadata": values["protocols"][0]["metadata"]}]}

    def sync_group(self, values: dict) -> dict:
        assert values["generation_id"] == self.generation_id
        self.assignment = values["assignments"][0]["assignment"]
        return {"error_code": ErrorCode.none, "protocol_type": "consumer",
                "protocol_name": values["protocol_name"], "assignment": self.assignment}

    def heartbeat(self, values: dict) -> dict:
        return {"error_code": self.heartbeat_errors.pop(0) if self.heartbeat_errors else ErrorCode.none}

    def leave_group(self, values: dict) -> dict:
        return {"error_code": ErrorCode.none, "members": []}

    def offset_commit(self, values: dict) -> dict:
        for topic in values["topics"]:
            for part in topic["partitions"]:
                self.committed[TopicPartition(topic["name"], part["partition_index"])] = part["committed_offset"]
        return {"topics": [{"name": t["name"], "partitions": [
            {"partition_index": p["partition_index"], "error_code": ErrorCode.none} for p in t["partitions"]]}
            for t in values["topics"]]}

    def offset_fetch(self, values: dict) -> dict:
        if self.fetch_errors:
            return {"error_code": self.fetch_errors.pop(0), "topics": []}
        return {"error_code": ErrorCode.none, "topics": [{"name": t["name"], "partitions": [
            {"partition_index": p, "committed_offset": self.committed.get(TopicPartition(t["name"], p), -1),
             "committed_leader_epoch": -1, "metadata": "", "error_code": ErrorCode.none}
            for p in t["partition_indexes"]]} for t in values["topics"]]}


@pytest.fixture(scope="module")
def kafka() -> Iterator[RunningKafkaBroker]:
    with running_kafka_broker(num_partitions=1) as running:
        yield running


@pytest.fixture
def coordinator(kafka: RunningKafkaBroker, monkeypatch: pytest.MonkeyPatch) -> ScriptedCoordinator:
    scripted = ScriptedCoordinator("127.0.0.1", kafka.kafka_port)

    async def answer(self: KafkaGroupConsumer, request: GroupRequest) -> object:
        await trio.lowlevel.checkpoint()
        return scripted.answer(request)
    monkeypatch.setattr(KafkaGroupConsumer, "_coordinator_request", answer)
    monkeypatch.setattr(KafkaGroupConsumer, "_any_request", answer)
    return scripted


async def _produce(client: KafkaClient, topic: str, partitions: int, count: int, first: int = 0) -> None:
    async with KafkaProducer.open(client, acks=1) as producer:
        for i in range(first, first + count):
            await producer.send(topic, f"m{i}".encode(), partition=i % partitions)


async def _take(consumer: KafkaGroupConsumer, count: int) -> list[KafkaGroupMessage]:
    taken: list[KafkaGroupMessage] = []
    async for message in consumer:
        taken.append(message)
        if len(taken) == count:
            break
    return taken


async def test_consumes_commits_and_a_new_member_starts_from_the_commits(
        kafka: RunningKafkaBroker, coordinator: ScriptedCoordinator) -> None:
    async with KafkaClient(kafka.bootstrap) as client:
        assert await KafkaAdmin(client).create_topics([NewTopic("driver-a", 2)]) == {"driver-a": None}
        await _produce(client, "driver-a", 2, 10)
        assigned: list[list[TopicPartition]] = []
        revoked: list[list[TopicPartition]] = []

        async def on_assigned(partitions: list[TopicPartition]) -> None:
            assigned.append(partitions)

        async def on_revoked(partitions: list[TopicPartition]) -> None:
            revoked.append(partitions)
        async with KafkaGroupConsumer(client, "g-a", ["driver-a"], auto_offset_reset="earliest",
                                      enable_auto_commit=False, on_assigned=on_assigned, on_revoked=on_revoked,
                                      max_wait_s=0.1) as consumer:
            taken = await _take(consumer, 10)
            await consumer.commit()
        both = [TopicPartition("driver-a", 0), TopicPartition("driver-a", 1)]
        assert sorted(m.record.value for m in taken) == sorted(f"m{i}".encode() for i in range(10))
        assert assigned == [both] and revoked == [both]
        # the tenth message's loop body never finished: it is not consumed, so not committed
        last = taken[-1]
        expected = {TopicPartition("driver-a", 0): 5, TopicPartition("driver-a", 1): 5}
        expected[TopicPartition(last.topic, last.partition)] -= 1
        assert coordinator.committed == expected
        assert coordinator.asked[:4] == ["FIND_COORDINATOR", "JOIN_GROUP", "JOIN_GROUP", "SYNC_GROUP"]
        assert coordinator.asked[-1] == "LEAVE_GROUP"

        await _produce(client, "driver-a", 2, 4, first=10)
        async with KafkaGroupConsumer(client, "g-a", ["driver-a"], auto_offset_reset="earliest",
                                      max_wait_s=0.1) as consumer:
            again = await _take(consumer, 5)
        assert sorted(m.record.value for m in again) == sorted([last.record.value] + [
            f"m{i}".encode() for i in range(10, 14)])


async def test_a_rebalance_revokes_commits_and_assigns_again(
        kafka: RunningKafkaBroker, coordinator: ScriptedCoordinator) -> None:
    async with KafkaClient(kafka.bootstrap) as client:
        assert await KafkaAdmin(client).create_topics([NewTopic("driver-b", 1)]) == {"driver-b": None}
        await _produce(client, "driver-b", 1, 3)
        generations: list[int] = []

        async def on_assigned(partitions: list[TopicPartition]) -> None:
            generations.append(coordinator.generation_id)
        async with KafkaGroupConsumer(client, "g-b", ["driver-b"], auto_offset_reset="earliest",
                                      heartbeat_interval_s=0.01, on_assigned=on_assigned, max_wait_s=0.1) as consumer:
            first = await _take(consumer, 2)  # the first message is consumed
            coordinator.heartbeat_errors.append(ErrorCode.rebalance_in_progress)
            with trio.fail_after(10):
                while len(generations) < 2:
                    await trio.sleep(0.01)
            rest = await _take(consumer, 2)
        assert generations == [1, 2]
        # committed at the revocation (1) and on leaving (2: the last message's body never finished)
        assert coordinator.committed[TopicPartition("driver-b", 0)] == 2
        # the second message was delivered but its body had not finished at the rebalance: delivered again
        assert [m.record.offset for m in first + rest] == [0, 1, 1, 2]


async def test_a_consumer_closed_while_its_sync_group_is_in_flight_leaves(
        kafka: RunningKafkaBroker, coordinator: ScriptedCoordinator, monkeypatch: pytest.MonkeyPatch) -> None:
    """The SyncGroup's answer, arriving after the close asked to leave, must not make the member
    Stable: it took the assignment, heartbeated on and never sent LeaveGroup, its close waiting out
    the request timeout (the Kafka simulation world's seed 1)."""
    sync_sent, release = trio.Event(), trio.Event()
    answer_now = KafkaGroupConsumer._coordinator_request

    async def held_sync(self: KafkaGroupConsumer, request: GroupRequest) -> object:
        if request.api == "SYNC_GROUP":
            sync_sent.set()
            await release.wait()
        return await answer_now(self, request)
    monkeypatch.setattr(KafkaGroupConsumer, "_coordinator_request", held_sync)
    async with KafkaClient(kafka.bootstrap, request_timeout_s=2.0) as client:
        assert await KafkaAdmin(client).create_topics([NewTopic("driver-d", 1)]) == {"driver-d": None}
        assigned: list[list[TopicPartition]] = []

        async def on_assigned(partitions: list[TopicPartition]) -> None:
            assigned.append(partitions)
        async with KafkaGroupConsumer(client, "g-d", ["driver-d"], on_assigned=on_assigned, max_wait_s=0.1):
            await sync_sent.wait()
            release.set()  # answered once the close below has asked to leave (no checkpoint between)
        assert assigned == []
        assert coordinator.asked[-2:] == ["SYNC_GROUP", "LEAVE_GROUP"]


async def test_starting_offsets_are_asked_again_while_the_coordinator_loads(
        kafka: RunningKafkaBroker, coordinator: ScriptedCoordinator) -> None:
    async with KafkaClient(kafka.bootstrap, retry_backoff_s=0.01) as client:
        assert await KafkaAdmin(client).create_topics([NewTopic("driver-c", 1)]) == {"driver-c": None}
        await _produce(client, "driver-c", 1, 4)
        coordinator.committed[TopicPartition("driver-c", 0)] = 2
        coordinator.fetch_errors = [ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_load_in_progress]
        async with KafkaGroupConsumer(client, "g-c", ["driver-c"], max_wait_s=0.1) as consumer:
            taken = await _take(consumer, 2)
        assert [m.record.offset for m in taken] == [2, 3]
        assert coordinator.asked.count("OFFSET_FETCH") == 3


async def test_cli_consume_as_a_group_member_prints_and_commits(
        kafka: RunningKafkaBroker, coordinator: ScriptedCoordinator, capsys: pytest.CaptureFixture[str]) -> None:
    from trikafka.cli import build_parser, kafka_groups

    async with KafkaClient(kafka.bootstrap) as client:
        assert await KafkaAdmin(client).create_topics([NewTopic("driver-cli", 1)]) == {"driver-cli": None}
        await _produce(client, "driver-cli", 1, 5)
    parser = build_parser()
    args = parser.parse_args(["consume", "driver-cli", "--kafka", kafka.bootstrap, "--group", "g-cli",
                              "--max-messages", "3", "--no-flush"])
    args.validate(parser, args)
    assert await kafka_groups.consume(args) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == ["m0", "m1", "m2"]
    assert "group g-cli assigned driver-cli-0" in captured.err
    assert coordinator.committed == {TopicPartition("driver-cli", 0): 3}
