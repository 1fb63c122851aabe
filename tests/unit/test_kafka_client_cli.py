"""``--kafka`` on produce, consume and topics: parsing, and the listener file's ``kafka HOST:PORT`` line (§7.1)."""

from __future__ import annotations

import argparse

import pytest

from trikafka.cli import build_parser
from trikafka.cli.common import DEFAULT_KAFKA_BOOTSTRAP, LOCAL_KAFKA, default_broker, kafka_bootstrap


def parse(*argv: str) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.validate(parser, args)
    return args


def test_kafka_alone_before_topics_words_leaves_them_to_the_command() -> None:
    args = parse("topics", "--kafka", "create", "t", "--partitions", "2")
    assert args.topic == ["create", "t"] and args.kafka == LOCAL_KAFKA


def test_kafka_takes_an_address_list() -> None:
    args = parse("produce", "t", "--kafka", "h1:9093,h2:9093")
    assert kafka_bootstrap(args) == "h1:9093,h2:9093"


def test_a_bad_kafka_address_is_a_usage_error() -> None:
    with pytest.raises(SystemExit):
        parse("consume", "t", "--kafka", "h1:port")


@pytest.mark.parametrize("argv", [("produce", "t", "--kafka", "--zookeeper", "z:2181"),
                                  ("consume", "t", "--kafka", "--group", "g", "--streams", "2"),
                                  ("consume", "t", "--kafka", "--group", "g", "--whitelist"),
                                  ("groups", "--kafka", "h:9093", "--delete")])
def test_kafka_excludes_the_zookeeper_paths(argv: tuple[str, ...]) -> None:
    with pytest.raises(SystemExit):
        parse(*argv)


def test_kafka_consume_joins_a_group() -> None:
    args = parse("consume", "t", "--kafka", "h:9093", "--group", "g", "--from", "latest")
    assert (args.group, kafka_bootstrap(args), args.from_) == ("g", "h:9093", "latest")


@pytest.mark.parametrize("argv", [("groups", "--kafka", "billing"), ("groups", "billing", "--kafka")])
def test_groups_kafka_names_a_group_of_the_local_listener(argv: tuple[str, ...]) -> None:
    args = parse(*argv)
    assert args.group == "billing" and kafka_bootstrap(args) == kafka_bootstrap(parse("topics", "--kafka"))


def test_the_listener_files_kafka_line_is_the_local_bootstrap(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert kafka_bootstrap(parse("topics", "--kafka")) == DEFAULT_KAFKA_BOOTSTRAP  # no local broker
    (tmp_path / "trikafka-data").mkdir()
    (tmp_path / "trikafka-data" / ".trikafka-listener").write_text("127.0.0.1:4001\nkafka 127.0.0.1:4002\n")
    assert kafka_bootstrap(parse("topics", "--kafka")) == "127.0.0.1:4002"
    assert default_broker() == ("127.0.0.1", 4001)  # the 0.7 commands read the first line as before
    (tmp_path / "trikafka-data" / ".trikafka-listener").write_text("127.0.0.1:4001\n")
    assert kafka_bootstrap(parse("topics", "--kafka")) == DEFAULT_KAFKA_BOOTSTRAP
    assert default_broker() == ("127.0.0.1", 4001)
