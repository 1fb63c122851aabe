"""Broker configuration: defaults, 0.7 server.properties, TOML, command-line flags (spec §14.1)."""

from __future__ import annotations

import logging

import pytest

from trikafka.broker.config import BrokerConfig, ConfigError
from trikafka.broker.config_sources import field_name, load, load_file, parse_properties
from trikafka.cli import build_parser, main
from trikafka.cli.serve import _serve_config
from trikafka.log.config import HOUR_MS

# A 0.7-style server.properties (written for this test): comments, every
# separator form, a continuation line, and settings trikafka has no use for.
SERVER_PROPERTIES = r"""
# The id of the broker.
brokerid=3
port = 9093
hostname: broker3.example
log.dir=/var/kafka-logs
num.partitions 4
topic.partition.count.map=clicks:8,\
    views:2
num.threads=3
socket.send.buffer=1048576
max.socket.request.bytes=1000000
log.flush.interval=10000
log.default.flush.interval.ms=1000
topic.flush.intervals.ms=clicks:200
log.default.flush.scheduler.interval.ms=500
log.retention.hours=72
topic.log.retention.hours=views:24
log.file.size=536870912
log.cleanup.interval.mins=1
enable.zookeeper=false
zk.connect=127.0.0.1:2181
zk.connectiontimeout.ms=1000000
! a bang comment
socket.timeout.ms=30000
"""


def test_defaults_are_the_0_7_ones_except_port_and_bind_address():
    config = BrokerConfig()
    assert (config.host, config.port) == ("127.0.0.1", 9092)
    assert (config.num_partitions, config.max_socket_request_bytes, config.max_message_size) == (1, 104857600, 1000000)
    assert (config.log_flush_interval, config.log_default_flush_scheduler_interval_ms) == (500, 3000)
    assert config.flush_interval_ms == 3000  # log.default.flush.interval.ms defaults to the scheduler's
    assert (config.log_cleanup_interval_mins, config.log_retention_hours, config.log_retention_size) == (10, 168, -1)
    assert config.log_file_size == 1073741824 and config.max_topic_name_length == 255


def test_a_0_7_server_properties_file_is_accepted(tmp_path, caplog):
    path = tmp_path / "server.properties"
    path.write_text(SERVER_PROPERTIES)
    with caplog.at_level(logging.WARNING):
        config = load_file(str(path))
    assert "socket.timeout.ms" in caplog.text  # unknown 0.7 keys are logged, not fatal
    assert (config.broker_id, config.port, config.hostname, config.log_dir) == (3, 9093, "broker3.example",
                                                                                "/var/kafka-logs")
    assert config.published_hostname == "broker3.example" and config.host == "127.0.0.1"
    assert config.topic_partition_count_map == {"clicks": 8, "views": 2}
    assert [config.partitions(t) for t in ("clicks", "views", "other")] == [8, 2, 4]
    assert (config.num_threads, config.socket_send_buffer, config.max_socket_request_bytes) == (3, 1048576, 1000000)
    assert config.enable_zookeeper is False and config.zk_connect == "127.0.0.1:2181"
    assert config.zk_connectiontimeout_ms == 1000000
    clicks, views, other = config.log_config("clicks"), config.log_config("views"), config.log_config("other")
    assert (clicks.flush_interval_ms, views.flush_interval_ms, other.flush_interval_ms) == (200, 1000, 1000)
    assert (clicks.retention_ms, views.retention_ms) == (72 * HOUR_MS, 24 * HOUR_MS)
    assert other.segment_bytes == 536870912 and other.flush_interval_messages == 10000
    assert set(config.topic_log_configs()) == {"clicks", "views"}


def test_properties_escapes_and_continuations():
    parsed = parse_properties("a\\ b=c\\td\nkey:\\u0041\nlong=1,\\\n  2,\\\n  3\n  # an indented comment\n")
    assert parsed == {"a b": "c\td", "key": "A", "long": "1,2,3"}


def test_toml_accepts_snake_case_dotted_names_and_tables(tmp_path):
    path = tmp_path / "broker.toml"
    path.write_text("""
broker_id = 7
port = 0
"num.partitions" = 2
[log]
dir = "data"
flush_interval = 1
[topic_partition_count_map]
wide = 16
""")
    config = load_file(str(path))
    assert (config.broker_id, config.port, config.num_partitions, config.log_dir) == (7, 0, 2, "data")
    assert config.log_flush_interval == 1 and config.partitions("wide") == 16


@pytest.mark.parametrize("text, message", [
    ("prot = 9092", "unknown setting 'prot'"),  # a typo in our own file is loud
    ("port = 70000", "port must be in"),
    ("num_partitions = 0", "num_partitions must be >= 1"),
    ("port = true", "bad value"),
    ("port = ", "broker.toml"),  # not TOML
    ("[topic_partition_count_map]\nt = 0", "needs >= 1 partition"),
])
def test_bad_toml_is_an_error_that_names_the_problem(tmp_path, text, message):
    path = tmp_path / "broker.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        load_file(str(path))


def test_a_bad_value_names_the_setting_as_written_and_where():
    with pytest.raises(ConfigError) as caught:
        load(overrides={"log.flush.interval": "abc"})
    assert str(caught.value) == "bad value 'abc' for log.flush.interval in command line: expected an integer"


def test_bad_values_in_properties_are_errors_too(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text("num.partitions=many\n")
    with pytest.raises(ConfigError, match="num.partitions in .*server.properties: expected an integer"):
        load_file(str(path))
    path.write_text("topic.partition.count.map=clicks\n")
    with pytest.raises(ConfigError, match="topic.partition.count.map"):
        load_file(str(path))


def test_overrides_beat_the_file_and_none_means_not_given(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text("port=9093\nnum.partitions=4\n")
    config = load(str(path), {"port": 0, "num_partitions": None, "log.flush.interval": "7"})
    assert (config.port, config.num_partitions, config.log_flush_interval) == (0, 4, 7)
    with pytest.raises(ConfigError, match="command line"):
        load(None, {"no.such.setting": "1"})


def test_field_names_of_0_7_keys():
    assert field_name("brokerid") == "broker_id"
    assert field_name("log.default.flush.scheduler.interval.ms") == "log_default_flush_scheduler_interval_ms"
    assert field_name("socket.timeout.ms") is None


def test_serve_flags_over_a_config_file(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text("port=9093\nlog.dir=from-file\nbrokerid=1\nnum.partitions=4\n")
    args = build_parser().parse_args(["serve", "--config", str(path), "--port", "0", "--log-dir", "from-flag",
                                      "--broker-id", "5", "--set", "log.flush.interval=9", "--standalone"])
    config = _serve_config(args)
    assert (config.port, config.log_dir, config.broker_id, config.num_partitions) == (0, "from-flag", 5, 4)
    assert config.log_flush_interval == 9 and config.enable_zookeeper is False
    args = build_parser().parse_args(["serve", "--num-partitions", "3"])
    config = _serve_config(args)
    assert (config.host, config.port, config.num_partitions) == ("127.0.0.1", 9092, 3)


def test_a_bad_serve_configuration_exits_2_with_a_message(tmp_path, capsys):
    assert main(["serve", "--num-partitions", "0", "--log-dir", str(tmp_path)]) == 2
    assert "num_partitions must be >= 1" in capsys.readouterr().err
    assert main(["serve", "--set", "nonsense", "--log-dir", str(tmp_path)]) == 2
    assert main(["serve", "--config", str(tmp_path / "missing.toml")]) == 2


def test_metrics_port_is_off_by_default_and_checked(tmp_path):
    assert BrokerConfig().metrics_port is None
    path = tmp_path / "broker.toml"
    path.write_text("metrics_port = 9100\n")
    assert load(str(path)).metrics_port == 9100
    assert load(None, {"metrics.port": "0"}).metrics_port == 0  # a free port
    with pytest.raises(ConfigError, match="metrics_port must be in"):
        load(None, {"metrics_port": "70000"})


def test_the_kafka_security_protocol(tmp_path, capsys):
    from trikafka.broker.security import SecurityProtocol

    assert BrokerConfig().kafka_security is SecurityProtocol.PLAINTEXT
    assert [(p.name, p.tls, p.sasl) for p in SecurityProtocol] == [
        ("PLAINTEXT", False, False), ("SSL", True, False), ("SASL_PLAINTEXT", False, True), ("SASL_SSL", True, True)]
    assert SecurityProtocol.parse("sasl_plaintext") is SecurityProtocol.SASL_PLAINTEXT
    with pytest.raises(ConfigError, match="unknown security protocol 'KERBEROS'"):
        load(None, {"kafka.security.protocol": "KERBEROS"})
    args = build_parser().parse_args(["serve", "--standalone", "--kafka-security", "SASL_PLAINTEXT",
                                      "--log-dir", str(tmp_path)])
    assert _serve_config(args).kafka_security is SecurityProtocol.SASL_PLAINTEXT
    assert main(["serve", "--standalone", "--kafka-security", "SASL_SSL", "--log-dir", str(tmp_path)]) == 2
    assert "TLS needs ssl.certificate.location" in capsys.readouterr().err  # SASL_SSL is TLS too
    assert BrokerConfig().connection_failed_authentication_delay_ms == 100
    with pytest.raises(ConfigError, match="sasl_handshake_timeout_ms"):
        load(None, {"sasl.handshake.timeout.ms": "0"})


def test_producer_expiration_keys_have_kafkas_names_and_defaults_and_reach_the_logs():
    config = load(overrides={"producer.id.expiration.ms": "5000", "producer.id.expiration.check.interval.ms": "70"})
    assert (config.producer_id_expiration_ms, config.producer_id_expiration_check_interval_ms) == (5000, 70)
    assert config.log_config("t").producer_id_expiration_ms == 5000
    default = BrokerConfig()
    assert (default.producer_id_expiration_ms, default.producer_id_expiration_check_interval_ms) == (86400000, 600000)
    for name in ("producer_id_expiration_ms", "producer_id_expiration_check_interval_ms"):
        with pytest.raises(ConfigError, match=name):
            BrokerConfig(**{name: 0})


def test_acks_all_fsync_keeps_the_flush_before_the_answer_unless_set_false(tmp_path):
    """docs/protocol.md §12.6: the strict promise is the default; the key is read like every boolean."""
    assert BrokerConfig().acks_all_fsync is True
    args = build_parser().parse_args(["serve", "--set", "acks.all.fsync=false", "--standalone"])
    assert _serve_config(args).acks_all_fsync is False
    with pytest.raises(ConfigError, match="^bad value 'maybe' for acks.all.fsync in command line: "):
        load(overrides={"acks.all.fsync": "maybe"})
