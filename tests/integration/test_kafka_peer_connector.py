"""A broker's own calls to another broker's Kafka listener (docs/protocol.md §18.5), one call each.

One in-process broker serves ``SASL_SSL`` with the user ``broker`` in its
credential store; a ``PeerConnector`` calls it as another broker would: the
settings' connector logs in and is answered, and each refusal (a wrong
password, an untrusted certificate, no TLS, no login) is one ``PeerCallError``
naming the peer and the reason.
"""

from __future__ import annotations

import ssl
from typing import Any, Iterator

import pytest
import trio
from kio.schema.describe_cluster.v0.request import DescribeClusterRequest
from kio.schema.errors import ErrorCode

from tests.helpers.certificates import CertificateFiles
from trikafka.broker.credentials import CredentialFile, new_record
from trikafka.broker.kafka.peer_call import PeerCallError, peer_call
from trikafka.broker.kafka.peer_connections import PeerConnections
from trikafka.broker.kafka.peer_connector import PeerConnector
from trikafka.kafka.apis import KafkaApi
from trikafka.kafka.sasl import SaslMechanism
from trikafka.kafka.sasl_client import SaslLogin
from trikafka.testing import running_kafka_broker
from trikafka.testing.kafka_broker import RunningKafkaBroker, kafka_broker_config
from trikafka.wire.metadata import BrokerAddress

USER, PASSWORD = "broker", "broker-secret"
CALL_TIMEOUT_S = 20.0


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, certificates: CertificateFiles) -> Iterator[RunningKafkaBroker]:
    log_dir = str(tmp_path_factory.mktemp("peer-sasl-ssl"))
    CredentialFile(log_dir).add(USER, new_record(PASSWORD))
    with running_kafka_broker(log_dir, kafka_security_protocol="SASL_SSL",
                              **certificates.broker_settings()) as running:
        yield running


def _settings_connector(certificates: CertificateFiles, tmp_path: Any, password: str) -> PeerConnector:
    """The connector a broker of the same cluster builds from its settings (§18.5)."""
    password_file = tmp_path / "inter-broker-password"
    password_file.write_text(password + "\n")
    config = kafka_broker_config(str(tmp_path), kafka_security_protocol="SASL_SSL", sasl_inter_broker_username=USER,
                                 sasl_inter_broker_password_file=str(password_file), **certificates.broker_settings())
    return PeerConnector.from_config(config)


def _describe_cluster(connector: PeerConnector, port: int) -> Any:  # Any: kio's response class
    address = BrokerAddress(0, "127.0.0.1", port)
    body = DescribeClusterRequest(include_cluster_authorized_operations=False)
    return trio.run(lambda: peer_call(PeerConnections(connector), address, KafkaApi.DESCRIBE_CLUSTER, 0, body,
                                      timeout_s=CALL_TIMEOUT_S))


def test_the_settings_connector_logs_in_over_tls(secured: RunningKafkaBroker, certificates: CertificateFiles,
                                                  tmp_path: Any) -> None:
    connector = _settings_connector(certificates, tmp_path, PASSWORD)
    assert connector.tls is not None and connector.login == SaslLogin(SaslMechanism.SCRAM_SHA_512, USER, PASSWORD)
    assert _describe_cluster(connector, secured.kafka_port).error_code == ErrorCode.none


def test_a_wrong_password_is_a_peer_call_error_naming_the_refusal(secured: RunningKafkaBroker,
                                                                  certificates: CertificateFiles,
                                                                  tmp_path: Any) -> None:
    connector = _settings_connector(certificates, tmp_path, "wrong")
    with pytest.raises(PeerCallError, match=r"DescribeCluster to broker 0 at 127\.0\.0\.1:\d+: SASL SCRAM-SHA-512 "
                                            r"login as broker refused: .*invalid credentials"):
        _describe_cluster(connector, secured.kafka_port)


@pytest.mark.parametrize("mechanism", [SaslMechanism.SCRAM_SHA_256, SaslMechanism.PLAIN])
def test_each_mechanism_logs_in(secured: RunningKafkaBroker, certificates: CertificateFiles,
                                mechanism: SaslMechanism) -> None:
    connector = PeerConnector(tls=certificates.client_context(), login=SaslLogin(mechanism, USER, PASSWORD))
    assert _describe_cluster(connector, secured.kafka_port).error_code == ErrorCode.none


def test_an_untrusted_certificate_is_a_peer_call_error(secured: RunningKafkaBroker,
                                                       certificates: CertificateFiles) -> None:
    untrusting = certificates.client_context(ca_path=certificates.untrusted_ca_path)
    connector = PeerConnector(tls=untrusting, login=SaslLogin(SaslMechanism.SCRAM_SHA_512, USER, PASSWORD))
    with pytest.raises(PeerCallError, match="TLS handshake with 127.0.0.1:.* failed: .*certificate verify failed"):
        _describe_cluster(connector, secured.kafka_port)


@pytest.mark.parametrize("tls", [False, True], ids=["plaintext", "tls-without-login"])
def test_a_call_without_tls_or_login_is_a_peer_call_error(secured: RunningKafkaBroker,
                                                          certificates: CertificateFiles, tls: bool) -> None:
    connector = PeerConnector(tls=certificates.client_context() if tls else None)
    with pytest.raises(PeerCallError, match=r"DescribeCluster to broker 0 at 127\.0\.0\.1:\d+: the peer closed the connection"):
        _describe_cluster(connector, secured.kafka_port)


def test_the_settings_connector_presents_the_broker_certificate_to_a_mutual_tls_listener(
        certificates: CertificateFiles, tmp_path: Any) -> None:
    tls = {**certificates.broker_settings(mutual=True), "kafka_security_protocol": "SSL"}
    with running_kafka_broker(str(tmp_path / "mutual"), **tls) as mutual:
        connector = PeerConnector.from_config(kafka_broker_config(str(tmp_path / "caller"), **tls))
        assert connector.login is None
        assert _describe_cluster(connector, mutual.kafka_port).error_code == ErrorCode.none
        without_certificate = PeerConnector(tls=certificates.client_context())
        # TLS 1.3: the listener refuses the certificate once the client's handshake is done, so either may fail.
        with pytest.raises(PeerCallError, match=r"DescribeCluster to broker 0 at 127\.0\.0\.1:\d+: "
                                                r"(the peer closed the connection|TLS handshake .* failed)"):
            _describe_cluster(without_certificate, mutual.kafka_port)


def test_the_settings_context_checks_the_peer_host_name(certificates: CertificateFiles, tmp_path: Any) -> None:
    connector = _settings_connector(certificates, tmp_path, PASSWORD)
    assert connector.tls is not None
    assert connector.tls.check_hostname and connector.tls.verify_mode == ssl.CERT_REQUIRED
