"""The inter-broker login's settings (docs/protocol.md §18.5): checked with the config, the password read at start."""

from __future__ import annotations

import pytest

from trikafka.broker.config import INTER_BROKER_PASSWORD_VARIABLE, BrokerConfig, ConfigError
from trikafka.broker.kafka.peer_connector import PeerSettingError, inter_broker_login
from trikafka.cli import build_parser
from trikafka.cli.serve import _serve_config
from trikafka.kafka.sasl import SaslMechanism
from trikafka.kafka.sasl_client import SaslLogin

CLUSTER = dict(kafka_port=0, enable_zookeeper=True, zk_connect="127.0.0.1:2181/peers")


def test_a_sasl_listener_joining_an_ensemble_needs_an_inter_broker_user() -> None:
    with pytest.raises(ConfigError, match="kafka.security.protocol SASL_PLAINTEXT in a ZooKeeper cluster needs "
                                          "sasl.inter.broker.username"):
        BrokerConfig(kafka_security_protocol="SASL_PLAINTEXT", **CLUSTER)
    BrokerConfig(kafka_security_protocol="SASL_PLAINTEXT", sasl_inter_broker_username="broker", **CLUSTER)
    BrokerConfig(kafka_security_protocol="SASL_PLAINTEXT", kafka_port=0, enable_zookeeper=True)  # private: a warning
    BrokerConfig(kafka_security_protocol="SASL_PLAINTEXT", kafka_port=0)  # standalone: never calls a peer
    BrokerConfig(kafka_security_protocol="PLAINTEXT", **CLUSTER)


@pytest.mark.parametrize(("settings", "message"), [
    ({"sasl_mechanism_inter_broker_protocol": "GSSAPI"}, "sasl.mechanism.inter.broker.protocol: unknown SASL mechanism"),
    ({"sasl_inter_broker_username": "a,b"}, "sasl.inter.broker.username: user name 'a,b'"),
])
def test_a_bad_mechanism_or_user_name_is_a_config_error(settings: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        BrokerConfig(**settings)


def test_the_password_comes_from_the_file_else_the_environment(tmp_path) -> None:
    password_file = tmp_path / "password"
    password_file.write_text("from-file\nsecond line\n")
    config = BrokerConfig(kafka_security_protocol="SASL_SSL", kafka_port=0, sasl_inter_broker_username="broker",
                          sasl_mechanism_inter_broker_protocol="PLAIN", ssl_certificate_location="c.pem",
                          ssl_key_location="k.pem")
    environ = {INTER_BROKER_PASSWORD_VARIABLE: "from-env"}
    assert inter_broker_login(config, environ) == SaslLogin(SaslMechanism.PLAIN, "broker", "from-env")
    from_file = config.replace(sasl_inter_broker_password_file=str(password_file))
    assert inter_broker_login(from_file, environ) == SaslLogin(SaslMechanism.PLAIN, "broker", "from-file")
    assert inter_broker_login(config.replace(sasl_inter_broker_username=None), environ) is None
    assert inter_broker_login(config.replace(kafka_security_protocol="SSL"), environ) is None


@pytest.mark.parametrize(("content", "message"), [
    (None, r"sasl.inter.broker.password.file .*missing: No such file"),
    ("\n", r"sasl.inter.broker.username broker needs a password: sasl.inter.broker.password.file .* is empty"),
    ("", r"needs a password: give sasl.inter.broker.password.file \(--inter-broker-sasl-password-file\) or "
         r"\$TRIKAFKA_INTER_BROKER_SASL_PASSWORD"),
])
def test_a_missing_password_is_a_one_line_setting_error(tmp_path, content: str | None, message: str) -> None:
    path = None
    if content is not None:
        path = tmp_path / "password"
        path.write_text(content)
    config = BrokerConfig(kafka_security_protocol="SASL_PLAINTEXT", kafka_port=0, sasl_inter_broker_username="broker",
                          sasl_inter_broker_password_file=None if content == "" else str(path or tmp_path / "missing"))
    with pytest.raises(PeerSettingError, match=message):
        inter_broker_login(config, environ={})


def test_serve_refuses_a_sasl_cluster_broker_without_inter_broker_credentials(tmp_path) -> None:
    flags = ["serve", "--zookeeper", "127.0.0.1:2181/peers", "--kafka-security", "SASL_PLAINTEXT",
             "--log-dir", str(tmp_path / "data")]
    with pytest.raises(ConfigError, match=r"sasl.inter.broker.username \(--inter-broker-sasl-username\)") as refused:
        _serve_config(build_parser().parse_args(flags))
    assert "\n" not in str(refused.value)
    missing = [*flags, "--inter-broker-sasl-username", "broker", "--inter-broker-sasl-password-file",
               str(tmp_path / "missing")]
    with pytest.raises(ConfigError, match="sasl.inter.broker.password.file .*missing"):
        _serve_config(build_parser().parse_args(missing))
    password_file = tmp_path / "password"
    password_file.write_text("broker-secret\n")
    config = _serve_config(build_parser().parse_args([*missing[:-1], str(password_file),
                                                      "--inter-broker-sasl-mechanism", "PLAIN"]))
    assert inter_broker_login(config) == SaslLogin(SaslMechanism.PLAIN, "broker", "broker-secret")
