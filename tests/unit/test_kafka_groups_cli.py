"""``trikafka groups --kafka``'s tables from scripted admin answers (docs/protocol.md §17.8)."""

from __future__ import annotations

import argparse

import pytest

from trikafka.cli import build_parser, kafka_groups
from trikafka.client.kafka import (GroupDescription, GroupListing, GroupMemberDescription, KafkaAdmin,
                                   KafkaResponseError, OffsetAt)
from trikafka.client.kafka.group_offsets import TopicPartition
from trikafka.kafka.consumer_protocol import Assignment


def parse(*argv: str) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.validate(parser, args)
    return args


GROUP = GroupDescription("g", "Stable", "consumer", "range", (
    GroupMemberDescription("m-1", "i-1", "app", "/10.0.0.1", Assignment({"t": (0, 1)})),
    GroupMemberDescription("m-2", None, "app", "/10.0.0.2", Assignment({"t": (2,)})),
    GroupMemberDescription("m-3", None, "other", "/10.0.0.3", None)))


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    calls: dict[str, object] = {}

    async def list_groups(self: KafkaAdmin) -> list[GroupListing]:
        return [GroupListing("a", "consumer", "Empty"), GroupListing("b", "connect", "")]

    async def describe_groups(self: KafkaAdmin, group_ids: list[str]) -> dict[str, GroupDescription]:
        return {"g": GROUP}

    async def list_group_offsets(self: KafkaAdmin, group_id: str) -> dict[TopicPartition, int]:
        # partition 3: committed by a member gone since; partition 2: never committed
        return {TopicPartition("t", 0): 5, TopicPartition("t", 1): 9, TopicPartition("t", 3): 1}

    async def list_offsets(self: KafkaAdmin, topic: str, partitions: dict[int, int]) -> dict[int, OffsetAt]:
        return {p: OffsetAt({0: 8, 1: 9, 2: 4, 3: 6}[p], -1) for p in partitions}

    async def delete_groups(self: KafkaAdmin, group_ids: list[str]) -> dict[str, KafkaResponseError | None]:
        calls["deleted"] = list(group_ids)
        return {g: KafkaResponseError(68, f"group {g}") if g == "busy" else None for g in group_ids}
    for name, fn in dict(list_groups=list_groups, describe_groups=describe_groups, list_offsets=list_offsets,
                         list_group_offsets=list_group_offsets, delete_groups=delete_groups).items():
        monkeypatch.setattr(KafkaAdmin, name, fn)
    return calls


async def test_list(scripted: dict[str, object], capsys: pytest.CaptureFixture[str]) -> None:
    assert await kafka_groups.groups(parse("groups", "--kafka", "h:9093")) == 0
    assert capsys.readouterr().out.splitlines() == [
        "group\tprotocol_type\tstate", "a\tconsumer\tEmpty", "b\tconnect\t-"]


async def test_describe_shows_members_offsets_log_ends_and_lag(scripted: dict[str, object],
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert await kafka_groups.groups(parse("groups", "--kafka", "h:9093", "g")) == 0
    assert capsys.readouterr().out.splitlines() == [
        "group g: Stable, protocol consumer/range, 3 members",
        "member\tinstance\tclient_id\thost\tassignment",
        "m-1\ti-1\tapp\t/10.0.0.1\tt-0,t-1",
        "m-2\t-\tapp\t/10.0.0.2\tt-2",
        "m-3\t-\tother\t/10.0.0.3\t?",
        "topic\tpartition\tmember\tcommitted\tlog_end\tlag",
        "t\t0\tm-1\t5\t8\t3",
        "t\t1\tm-1\t9\t9\t0",
        "t\t2\tm-2\t-\t4\t-",
        "t\t3\t-\t1\t6\t5"]


async def test_delete(scripted: dict[str, object], capsys: pytest.CaptureFixture[str]) -> None:
    assert await kafka_groups.groups(parse("groups", "--kafka", "h:9093", "idle", "--delete")) == 0
    assert await kafka_groups.groups(parse("groups", "--kafka", "h:9093", "busy", "--delete")) == 1
    assert scripted["deleted"] == ["busy"]
    assert "NON_EMPTY_GROUP" in capsys.readouterr().err
