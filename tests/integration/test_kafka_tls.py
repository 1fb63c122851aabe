"""TLS on the Kafka listener with real clients (docs/protocol.md §18.1).

confluent-kafka (librdkafka's OpenSSL), aiokafka and kafka-python (Python's
``ssl``) and kcat produce and consume over ``SSL``; with mutual TLS a client
certificate names the connection's principal.  A client without a
certificate, with an expired one, or trusting another CA fails the way its
library reports it, and the broker goes on serving the next client.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import struct
import subprocess
import time
from typing import Any, Iterator

import pytest
from confluent_kafka import Producer
from kafka import KafkaProducer

from tests.helpers.broker_testing import child_process
from tests.helpers.certificates import CertificateFiles
from tests.helpers.cli import cli
from tests.helpers.kafka_clients import CLIENT_TIMEOUT_S, create_topic, read_with_confluent
from trikafka.testing import running_kafka_broker
from trikafka.testing.kafka_broker import RunningKafkaBroker

KCAT = "/usr/bin/kcat"
SOCKET_TIMEOUT_S = 30.0
API_VERSIONS_V0 = struct.pack(">ihhih", 10, 18, 0, 1, 0)  # size, api key, version, correlation id, client id ""


@pytest.fixture(scope="module")
def tls_broker(certificates: CertificateFiles) -> Iterator[RunningKafkaBroker]:
    with running_kafka_broker(num_partitions=1, kafka_security_protocol="SSL",
                              **certificates.broker_settings()) as running:
        yield running


@pytest.fixture(scope="module")
def mtls_broker(certificates: CertificateFiles) -> Iterator[RunningKafkaBroker]:
    with running_kafka_broker(num_partitions=1, kafka_security_protocol="SSL",
                              **certificates.broker_settings(mutual=True)) as running:
        yield running


def confluent_tls(certificates: CertificateFiles, client_name: str | None = None, **extra: Any) -> dict[str, Any]:
    """librdkafka's settings for SSL to the test broker (with ``client_name``'s certificate)."""
    settings: dict[str, Any] = {"security.protocol": "SSL", "ssl.ca.location": certificates.ca_path, **extra}
    if client_name is not None:
        client = certificates.client(client_name)
        settings.update({"ssl.certificate.location": client.cert_path, "ssl.key.location": client.key_path})
    return settings


def produce_with_confluent(bootstrap: str, topic: str, values: list[bytes], settings: dict[str, Any]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", **settings})
    for value in values:
        producer.produce(topic, value=value)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0


def still_serves(broker: RunningKafkaBroker, certificates: CertificateFiles, topic: str, client: str | None) -> None:
    """A well-configured client produces and reads back after whatever went before."""
    settings = confluent_tls(certificates, client)
    produce_with_confluent(broker.bootstrap, topic, [b"after"], settings)
    seen = read_with_confluent(broker.bootstrap, topic, 1, 1, **settings)
    assert [s.value for s in seen][-1:] == [b"after"]


def test_confluent_produces_and_consumes_over_tls_regions_larger_than_a_piece(tls_broker, certificates):
    # 3 MiB in one partition: the fetches read file regions in several 1 MiB pieces through the TLS stream.
    values = [bytes([i % 251]) * 10_000 + str(i).encode() for i in range(300)]
    settings = confluent_tls(certificates, **{"fetch.max.bytes": 8 << 20, "max.partition.fetch.bytes": 8 << 20})
    create_topic_over_tls(tls_broker, certificates, "confluent-tls")
    produce_with_confluent(tls_broker.bootstrap, "confluent-tls", values, settings)
    seen = read_with_confluent(tls_broker.bootstrap, "confluent-tls", 1, len(values), **settings)
    assert [s.value for s in seen] == values


def create_topic_over_tls(broker: RunningKafkaBroker, certificates: CertificateFiles, topic: str,
                          client: str | None = None) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **confluent_tls(certificates, client)})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(CLIENT_TIMEOUT_S)


def test_aiokafka_round_trip_over_tls(tls_broker, certificates):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    topic = "aiokafka-tls"
    create_topic_over_tls(tls_broker, certificates, topic)
    tls = {"security_protocol": "SSL", "ssl_context": certificates.client_context()}

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(bootstrap_servers=tls_broker.bootstrap, **tls)
        await producer.start()
        try:
            for i in range(50):
                await producer.send(topic, f"m{i}".encode())
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=tls_broker.bootstrap, enable_auto_commit=False,
                                    auto_offset_reset="earliest", **tls)
        await consumer.start()
        got: list[bytes] = []
        try:
            consumer.assign([TopicPartition(topic, 0)])
            await consumer.seek_to_beginning()
            while len(got) < 50:
                batches = await asyncio.wait_for(consumer.getmany(timeout_ms=500), CLIENT_TIMEOUT_S)
                got += [r.value for records in batches.values() for r in records]
        finally:
            await consumer.stop()
        return got

    assert asyncio.run(run()) == [f"m{i}".encode() for i in range(50)]


def test_kafka_python_produces_over_tls(tls_broker, certificates):
    topic = "kafka-python-tls"
    create_topic_over_tls(tls_broker, certificates, topic)
    producer = KafkaProducer(bootstrap_servers=tls_broker.bootstrap, security_protocol="SSL",
                             ssl_cafile=certificates.ca_path, acks=1)
    try:
        metadata = [producer.send(topic, f"p{i}".encode()).get(timeout=CLIENT_TIMEOUT_S) for i in range(20)]
    finally:
        producer.close()
    assert [m.offset for m in metadata] == list(range(20))
    seen = read_with_confluent(tls_broker.bootstrap, topic, 1, 20, **confluent_tls(certificates))
    assert [s.value for s in seen] == [f"p{i}".encode() for i in range(20)]


def test_kcat_produces_and_consumes_over_tls(tls_broker, certificates):
    tls = ["-X", "security.protocol=SSL", "-X", f"ssl.ca.location={certificates.ca_path}"]
    lines = [f"line-{i}" for i in range(100)]

    def kcat(*args: str, stdin: str | None = None) -> str:
        done = subprocess.run([KCAT, "-b", tls_broker.bootstrap, *tls, *args], input=stdin, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    create_topic_over_tls(tls_broker, certificates, "kcat-tls")
    kcat("-P", "-t", "kcat-tls", stdin="\n".join(lines) + "\n")
    assert kcat("-C", "-t", "kcat-tls", "-o", "beginning", "-e").splitlines() == lines


def test_a_plaintext_client_on_a_tls_listener_gets_no_answer_and_the_broker_serves_on(tls_broker, certificates):
    with socket.create_connection(("127.0.0.1", tls_broker.kafka_port), timeout=SOCKET_TIMEOUT_S) as sock:
        sock.sendall(API_VERSIONS_V0)
        data = sock.recv(4096)
    # The broker answers a ClientHello it cannot parse with a TLS alert record (content type 21), or closes.
    assert data == b"" or data[:1] == b"\x15", data[:20]
    create_topic_over_tls(tls_broker, certificates, "after-plaintext")
    still_serves(tls_broker, certificates, "after-plaintext", None)


# --------------------------------------------------------------------------- mutual TLS


def open_api_versions(broker: RunningKafkaBroker, context: ssl.SSLContext) -> ssl.SSLSocket:
    """A TLS connection that has sent ApiVersions v0 and read its answer's size (the handshake is over)."""
    sock = context.wrap_socket(socket.create_connection(("127.0.0.1", broker.kafka_port), timeout=SOCKET_TIMEOUT_S),
                               server_hostname="127.0.0.1")
    sock.sendall(API_VERSIONS_V0)
    head = sock.recv(4)
    assert len(head) == 4, "no answer to ApiVersions"
    return sock


def principals(broker: RunningKafkaBroker) -> list[str]:
    import trio

    def collect() -> list[str]:
        return sorted(getattr(c, "principal", "") for p in broker.broker.processors for c in p.connections)

    return trio.from_thread.run_sync(collect, trio_token=broker.trio_token)


def test_mutual_tls_names_the_principal_from_the_client_certificate(mtls_broker, certificates):
    alice = certificates.client("alice")
    with open_api_versions(mtls_broker, certificates.client_context(alice)):
        assert alice.principal in principals(mtls_broker)
    assert alice.principal == "User:CN=alice,OU=clients,O=trikafka tests"


def test_confluent_and_aiokafka_over_mutual_tls(mtls_broker, certificates):
    from aiokafka import AIOKafkaProducer

    create_topic_over_tls(mtls_broker, certificates, "mtls", client="carol")
    produce_with_confluent(mtls_broker.bootstrap, "mtls", [b"from librdkafka"], confluent_tls(certificates, "carol"))

    async def aio() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=mtls_broker.bootstrap, security_protocol="SSL",
                                    ssl_context=certificates.client_context(certificates.client("dave")))
        await producer.start()
        try:
            await producer.send_and_wait("mtls", b"from aiokafka")
        finally:
            await producer.stop()

    asyncio.run(aio())
    seen = read_with_confluent(mtls_broker.bootstrap, "mtls", 1, 2, **confluent_tls(certificates, "carol"))
    assert [s.value for s in seen] == [b"from librdkafka", b"from aiokafka"]


@pytest.mark.parametrize("client, alert", [
    (None, "CERTIFICATE_REQUIRED"),
    ("expired", "CERTIFICATE_EXPIRED"),
    ("untrusted", "UNKNOWN_CA"),
])
def test_a_refused_client_certificate_fails_with_the_brokers_alert(mtls_broker, certificates, client, alert):
    """Python's ssl (what aiokafka and kafka-python report) names the alert the broker sent."""
    certificate = None
    if client is not None:
        certificate = certificates.client(f"mallory-{client}", expired=client == "expired",
                                          untrusted=client == "untrusted")
    with pytest.raises(ssl.SSLError, match=alert):
        with open_api_versions(mtls_broker, certificates.client_context(certificate)):
            pass
    create_topic_over_tls(mtls_broker, certificates, f"after-{client}", client="carol")
    still_serves(mtls_broker, certificates, f"after-{client}", "carol")


def test_librdkafka_without_its_certificate_is_disconnected(mtls_broker, certificates):
    failures = librdkafka_failures(mtls_broker.bootstrap, confluent_tls(certificates))
    assert any("certificate required" in line for line in failures), failures


def test_a_client_that_does_not_trust_the_broker_certificate_refuses_it(tls_broker, certificates):
    failures = librdkafka_failures(tls_broker.bootstrap, {"security.protocol": "SSL",
                                                          "ssl.ca.location": certificates.untrusted_ca_path})
    assert any("certificate verify failed" in line for line in failures), failures
    with pytest.raises(ssl.SSLCertVerificationError):
        open_api_versions(tls_broker, certificates.client_context(ca_path=certificates.untrusted_ca_path))


def librdkafka_failures(bootstrap: str, settings: dict[str, Any]) -> list[str]:
    """librdkafka's log lines and errors of a producer that tries to reach ``bootstrap`` until it gives up."""
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    log = logging.getLogger(f"librdkafka-{time.monotonic_ns()}")
    log.propagate = False
    log.addHandler(Collect())
    producer = Producer({"bootstrap.servers": bootstrap, "logger": log, **settings,
                         "error_cb": lambda error: lines.append(str(error))})
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while not any("brokers are down" in line for line in lines) and time.monotonic() < deadline:
        producer.poll(0.1)
    return lines


# --------------------------------------------------------------------------- trikafka's own clients


async def test_the_trikafka_cli_produces_and_consumes_over_mutual_tls(mtls_broker, certificates):
    client = certificates.client("cli")
    tls = ("--kafka", mtls_broker.bootstrap, "--tls-ca", certificates.ca_path, "--tls-cert", client.cert_path,
           "--tls-key", client.key_path)
    async with child_process("produce", "cli-tls", *tls, stdin=subprocess.PIPE) as producer:
        await producer.send_stdin(b"one\ntwo\n")
        assert await producer.wait() == 0, producer.stderr.decode()
    status, out, err = await cli("consume", "cli-tls", "-e", "-f", "%s\\n", *tls)
    assert (status, out.splitlines()) == (0, ["one", "two"]), err
    status, _, err = await cli("consume", "cli-tls", "-e", "--kafka", mtls_broker.bootstrap, "--tls-ca",
                               certificates.ca_path)  # no client certificate: the broker refuses it
    assert status == 1 and "certificate required" in err, err


def test_trikafka_0_7_client_produces_and_fetches_on_a_tls_0_7_port(certificates):
    import trio

    from trikafka.client import connect
    from trikafka.wire import ACKS_FLUSHED, build_message_set, iter_messages

    payloads = [bytes([i]) * 300_000 for i in range(8)]  # 2.4 MB: one fetch of several 1 MiB pieces

    async def round_trip(port: int) -> tuple[list[bytes], bytes]:
        async with await connect("127.0.0.1", port, ssl_context=certificates.client_context()) as conn:
            await conn.produce_acked([("zero-seven", 0, build_message_set(payloads))], acks=ACKS_FLUSHED)
            result = await conn.fetch("zero-seven", 0, 0, 4 << 20)
        plain = await trio.open_tcp_stream("127.0.0.1", port)  # plaintext on that port: refused
        received = b""
        async with plain:
            await plain.send_all(b"\x00\x00\x00\x02\x00\x00")
            while chunk := await plain.receive_some(4096):
                received += chunk
        return [m.payload for m in iter_messages(result.data)], received

    with running_kafka_broker(port_security_protocol="SSL", **certificates.broker_settings()) as running:
        fetched, refused = trio.run(round_trip, running.port)
    assert fetched == payloads
    assert refused == b"" or refused[:1] == b"\x15"


def test_the_testing_module_runs_a_tls_broker_with_its_own_certificates():
    from trikafka.testing import running_tls_kafka_broker

    with running_tls_kafka_broker(num_partitions=1) as (running, files):
        settings = {"security.protocol": "SSL", "ssl.ca.location": files.ca_path}
        produce_with_confluent(running.bootstrap, "fixture-tls", [b"over tls"], settings)
        assert [s.value for s in read_with_confluent(running.bootstrap, "fixture-tls", 1, 1, **settings)] == [
            b"over tls"]


def test_the_metrics_endpoint_speaks_https_where_asked(tmp_path, certificates: CertificateFiles) -> None:
    import http.client

    with running_kafka_broker(str(tmp_path / "data"), metrics_port=0, metrics_security_protocol="SSL",
                              **certificates.broker_settings()) as running:
        host, port = running.broker.metrics_address
        connection = http.client.HTTPSConnection(host, port, timeout=CLIENT_TIMEOUT_S,
                                                 context=certificates.client_context())
        connection.request("GET", "/metrics")
        answer = connection.getresponse()
        assert answer.status == 200 and b"trikafka" in answer.read()
        connection.close()
        plain = http.client.HTTPConnection(host, port, timeout=CLIENT_TIMEOUT_S)
        with pytest.raises((ConnectionError, http.client.HTTPException, OSError)):
            plain.request("GET", "/metrics")
            plain.getresponse()
        plain.close()
