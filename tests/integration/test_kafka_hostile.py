"""Hostile and broken input on the Kafka port (docs/protocol.md §16.2, §16.6, §18.2, §18.4).

Garbage frames, a size prefix over ``max.socket.request.bytes``, truncated
headers, an unknown api key and an unsupported version close the sender's
connection (ApiVersions of an unknown version is answered); a Produce with a
corrupt batch is answered with an error code and appends nothing.  After
every test a real client (confluent-kafka) still produces and reads back on
the same broker: bad input costs its sender, never anyone else.  On a TLS
listener, a silent peer, garbage, a truncated or replayed ClientHello are
dropped at the handshake timeout or at once; connections over
``max.connections.per.ip`` are closed unanswered.  On a SASL_PLAINTEXT broker,
garbage, truncated, replayed and out-of-place handshake messages fail or close
the connection, a peer that stops mid-handshake is dropped, and a real client
still logs in afterwards.
"""

from __future__ import annotations

import datetime
import socket
import ssl
import struct
import time
from typing import Any, Iterator

import pytest
from confluent_kafka import Producer
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v1.request import MetadataRequest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from kio.schema.produce.v3.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.static.primitive import i16, i32

from tests.helpers.certificates import CertificateFiles
from tests.helpers.kafka_batches import make_batch
from tests.helpers.kafka_clients import create_topic, high_watermarks, read_with_confluent
from trikafka.broker.credentials import CredentialFile, new_record
from trikafka.broker.kafka import connection as kafka_connection
from trikafka.kafka.apis import KafkaApi
from trikafka.kafka.sasl import SaslMechanism
from trikafka.kafka.sasl_client import ScramClient, plain_token
from trikafka.kafka.batch import batch_crc
from trikafka.kafka.framing import decode_response, encode_request
from trikafka.testing import running_kafka_broker
from trikafka.testing.kafka_broker import RunningKafkaBroker

MAX_REQUEST_BYTES = 64 * 1024
SOCKET_TIMEOUT_S = 30.0
TOPIC = "attacked"
_SIZE = struct.Struct(">i")


@pytest.fixture(scope="module")
def kafka() -> Iterator[RunningKafkaBroker]:
    with running_kafka_broker(num_partitions=1, max_socket_request_bytes=MAX_REQUEST_BYTES) as running:
        create_topic(running.bootstrap, TOPIC)
        yield running


@pytest.fixture
def unharmed(kafka: RunningKafkaBroker) -> Iterator[None]:
    """After the test: a real client produces and reads back, and the attacked topic grew by exactly that."""
    (before,) = high_watermarks(kafka.bootstrap, TOPIC, 1)
    yield
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "acks": "all"})
    producer.produce(TOPIC, value=b"after the attack")
    assert producer.flush(30) == 0
    seen = read_with_confluent(kafka.bootstrap, TOPIC, 1, before + 1)
    assert [s.value for s in seen][-1:] == [b"after the attack"] and len(seen) == before + 1


def connect(kafka: RunningKafkaBroker) -> socket.socket:
    return socket.create_connection(("127.0.0.1", kafka.kafka_port), timeout=SOCKET_TIMEOUT_S)


def assert_closed(sock: socket.socket) -> None:
    """The broker closes the connection: EOF (or a reset) before any response byte."""
    try:
        data = sock.recv(4096)
    except ConnectionResetError:
        data = b""
    assert data == b"", f"the broker answered {data[:40]!r} instead of closing"
    sock.close()


def receive_frame(sock: socket.socket) -> bytes:
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        assert chunk, "the broker closed the connection"
        head += chunk
    (size,) = _SIZE.unpack(head)
    body = b""
    while len(body) < size:
        chunk = sock.recv(size - len(body))
        assert chunk, "the broker closed the connection mid-response"
        body += chunk
    return body


def header(api_key: int, version: int, correlation_id: int = 7, client_id: bytes = b"hostile") -> bytes:
    return struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id


@pytest.mark.parametrize("frame", [
    _SIZE.pack(24) + bytes(range(24)),  # garbage: api key 1, version 0x0203 ...
    _SIZE.pack(12) + b"\xff" * 12,  # garbage that names no api
    _SIZE.pack(3) + b"\x00\x00\x00",  # a header cut after three bytes
    _SIZE.pack(9) + header(18, 0)[:9],  # a header cut inside its client id
    _SIZE.pack(0),  # an empty request
    _SIZE.pack(-5),  # a negative size
    _SIZE.pack(MAX_REQUEST_BYTES + 1) + b"\x00" * 100,  # over max.socket.request.bytes
    _SIZE.pack(len(header(999, 0))) + header(999, 0),  # an api key not in the table
    _SIZE.pack(len(header(0, 1))) + header(0, 1),  # Produce v1: below the served range
    _SIZE.pack(len(header(1, 99))) + header(1, 99),  # Fetch v99: above it
    _SIZE.pack(len(header(3, 1)) + 3) + header(3, 1) + b"\x00\x00\x7f",  # Metadata: a topics array cut short
    _SIZE.pack(len(header(11, 5)) + 4) + header(11, 5) + b"\x00\x01g\x00",  # JoinGroup cut after its group id
    _SIZE.pack(len(header(14, 3)) + 2) + header(14, 3) + b"\x7f\xff",  # SyncGroup: a group id longer than the frame
    _SIZE.pack(len(header(8, 2)) + 1) + header(8, 2) + b"\x00",  # OffsetCommit cut inside its group id length
    _SIZE.pack(len(header(11, 8))) + header(11, 8),  # JoinGroup v8: above the served range
], ids=["garbage", "no-api", "cut-header", "cut-client-id", "empty", "negative-size", "oversized", "unknown-api",
        "version-too-old", "version-too-new", "cut-body", "cut-join-group", "long-sync-group-id",
        "cut-offset-commit", "join-group-too-new"])
def test_undecodable_or_unserved_requests_close_the_connection(kafka, unharmed, frame):
    sock = connect(kafka)
    sock.sendall(frame)
    assert_closed(sock)


def test_api_versions_of_an_unknown_version_is_answered_with_the_table(kafka, unharmed):
    sock = connect(kafka)
    request = header(KafkaApi.API_VERSIONS, 99, correlation_id=42) + b"\x00" * 8
    sock.sendall(_SIZE.pack(len(request)) + request)
    correlation_id, body = decode_response(KafkaApi.API_VERSIONS, 0, receive_frame(sock))
    assert correlation_id == 42
    assert body.error_code == ErrorCode.unsupported_version
    assert {int(k.api_key) for k in body.api_keys} == {int(api) for api in KafkaApi}
    sock.close()


def _lying_batch() -> bytes:
    """Three records, lastOffsetDelta 5, a valid CRC: a lie about the offsets the batch takes (§16.6)."""
    good = bytearray(make_batch([b"a", b"b", b"c"]))
    struct.pack_into(">i", good, 23, 5)  # lastOffsetDelta, after attributes (covered by the CRC)
    struct.pack_into(">I", good, 17, batch_crc(good, 0, len(good)))
    return bytes(good)


def _bad_crc() -> bytes:
    data = bytearray(make_batch([b"payload"]))
    data[-1] ^= 0xFF
    return bytes(data)


def _bad_magic() -> bytes:
    data = bytearray(make_batch([b"payload"]))
    data[16] = 1
    return bytes(data)


@pytest.mark.parametrize("records, error", [
    (_bad_crc(), ErrorCode.corrupt_message),
    (_bad_magic(), ErrorCode.corrupt_message),
    (_lying_batch(), ErrorCode.invalid_record),
    (make_batch([b"ok"]) + _bad_crc(), ErrorCode.corrupt_message),  # one bad batch refuses the whole part
    (make_batch([b"cut"])[:-4], ErrorCode.corrupt_message),
], ids=["bad-crc", "wrong-magic", "last-offset-delta-lies", "good-then-bad", "cut-batch"])
def test_a_produce_with_a_corrupt_batch_is_refused_and_appends_nothing(kafka, unharmed, records, error):
    (before,) = high_watermarks(kafka.bootstrap, TOPIC, 1)
    body = ProduceRequest(transactional_id=None, acks=i16(-1), timeout=datetime.timedelta(seconds=10),
                          topic_data=(TopicProduceData(name=TOPIC, partition_data=(
                              PartitionProduceData(index=i32(0), records=records),)),))
    sock = connect(kafka)
    sock.sendall(encode_request(KafkaApi.PRODUCE, 3, 9, "hostile", body))
    correlation_id, response = decode_response(KafkaApi.PRODUCE, 3, receive_frame(sock))
    sock.close()
    assert correlation_id == 9
    (topic,) = response.responses
    (part,) = topic.partition_responses
    assert part.error_code == error
    assert high_watermarks(kafka.bootstrap, TOPIC, 1) == [before]


def _group_request(kafka: RunningKafkaBroker, api_key: int, version: int, body: object) -> object:
    sock = connect(kafka)
    try:
        sock.sendall(encode_request(api_key, version, 7, "hostile", body))
        return decode_response(api_key, version, receive_frame(sock))[1]
    finally:
        sock.close()


def test_group_requests_that_make_no_sense_are_answered_with_their_errors(kafka, unharmed):
    """§17.4, §17.5: a join without protocols, an impossible session timeout, a stranger's sync,
    heartbeat and leave, an oversized commit metadata: each one answered, the broker unharmed."""
    from kio.schema.heartbeat.v4.request import HeartbeatRequest
    from kio.schema.join_group.v7.request import JoinGroupRequest, JoinGroupRequestProtocol
    from kio.schema.leave_group.v4.request import LeaveGroupRequest, MemberIdentity
    from kio.schema.offset_commit.v8.request import (OffsetCommitRequest, OffsetCommitRequestPartition,
                                                     OffsetCommitRequestTopic)
    from kio.schema.sync_group.v5.request import SyncGroupRequestAssignment, SyncGroupRequest
    from kio.static.primitive import i64

    def join(session_ms: int, protocols: tuple[JoinGroupRequestProtocol, ...]) -> ErrorCode:
        answer: Any = _group_request(kafka, 11, 7, JoinGroupRequest(
            group_id="hostile-group", session_timeout=datetime.timedelta(milliseconds=session_ms),
            rebalance_timeout=datetime.timedelta(seconds=1), member_id="", group_instance_id=None,
            protocol_type="consumer", protocols=protocols))
        return answer.error_code

    assert join(10_000, ()) == ErrorCode.inconsistent_group_protocol
    assert join(1, (JoinGroupRequestProtocol(name="range", metadata=b""),)) == ErrorCode.invalid_session_timeout
    sync: Any = _group_request(kafka, 14, 5, SyncGroupRequest(
        group_id="hostile-group", generation_id=i32(1), member_id="stranger", group_instance_id=None,
        protocol_type="consumer", protocol_name="range",
        assignments=(SyncGroupRequestAssignment(member_id="stranger", assignment=b"\xff" * 100),)))
    assert sync.error_code == ErrorCode.unknown_member_id
    beat: Any = _group_request(kafka, 12, 4, HeartbeatRequest(
        group_id="hostile-group", generation_id=i32(-7), member_id="stranger", group_instance_id="nobody"))
    assert beat.error_code == ErrorCode.unknown_member_id
    leave: Any = _group_request(kafka, 13, 4, LeaveGroupRequest(
        group_id="hostile-group", members=(MemberIdentity(member_id="stranger", group_instance_id=None),)))
    assert [m.error_code for m in leave.members] == [ErrorCode.unknown_member_id]
    commit: Any = _group_request(kafka, 8, 8, OffsetCommitRequest(
        group_id="hostile-group", generation_id_or_member_epoch=i32(-1), member_id="", group_instance_id=None,
        topics=(OffsetCommitRequestTopic(name=TOPIC, partitions=(OffsetCommitRequestPartition(
            partition_index=i32(0), committed_offset=i64(-5), committed_leader_epoch=i32(-1),
            committed_metadata="x" * 5000),)),)))
    assert commit.topics[0].partitions[0].error_code == ErrorCode.offset_metadata_too_large



# --------------------------------------------------------------------------- TLS handshakes (§18.1, §18.4)

HANDSHAKE_TIMEOUT_MS = 300


@pytest.fixture(scope="module")
def tls_kafka(certificates: CertificateFiles) -> Iterator[RunningKafkaBroker]:
    with running_kafka_broker(num_partitions=1, kafka_security_protocol="SSL",
                              ssl_handshake_timeout_ms=HANDSHAKE_TIMEOUT_MS, **certificates.broker_settings()) as running:
        yield running


@pytest.fixture
def tls_unharmed(tls_kafka: RunningKafkaBroker, certificates: CertificateFiles) -> Iterator[None]:
    """After the test: a real client produces over TLS on the attacked broker."""
    yield
    producer = Producer({"bootstrap.servers": tls_kafka.bootstrap, "acks": "all", "security.protocol": "SSL",
                         "ssl.ca.location": certificates.ca_path})
    producer.produce(TOPIC, value=b"after the handshake attack")
    assert producer.flush(30) == 0


def client_hello() -> bytes:
    """The first flight of a real TLS client: one ClientHello record."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ssl.create_default_context().wrap_bio(incoming, outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the broker sends before it closes (bounded by the socket timeout: a broker that
    never closes fails the test with ``socket.timeout``)."""
    received = b""
    while True:
        try:
            data = sock.recv(4096)
        except ConnectionResetError:
            return received
        if not data:
            return received
        received += data


@pytest.mark.parametrize("first_bytes", [
    b"",  # connects and sends nothing
    bytes(range(256)) * 4,  # garbage where a ClientHello belongs
    b"\x16\x03\x01\x40\x00" + b"\x01" * 40,  # a handshake record header announcing 16 KiB, then silence
], ids=["silent", "garbage", "announced-but-missing"])
def test_a_broken_or_silent_handshake_is_dropped(tls_kafka, tls_unharmed, first_bytes):
    sock = socket.create_connection(("127.0.0.1", tls_kafka.kafka_port), timeout=SOCKET_TIMEOUT_S)
    sock.sendall(first_bytes)
    received = read_until_closed(sock)
    assert received == b"" or received[:1] == b"\x15", received[:20]  # nothing, or a TLS alert record
    sock.close()


def test_a_truncated_client_hello_is_dropped(tls_kafka, tls_unharmed):
    hello = client_hello()
    sock = socket.create_connection(("127.0.0.1", tls_kafka.kafka_port), timeout=SOCKET_TIMEOUT_S)
    sock.sendall(hello[: len(hello) // 2])
    assert read_until_closed(sock) == b""  # the broker waits for the rest, then gives up
    sock.close()


def test_a_replayed_client_hello_gets_a_fresh_handshake_and_then_nothing(tls_kafka, tls_unharmed):
    """A ClientHello captured from one connection and sent on another starts a handshake the replayer
    cannot finish (it has no key for the broker's answer): dropped at the timeout like any stall."""
    hello = client_hello()
    sock = socket.create_connection(("127.0.0.1", tls_kafka.kafka_port), timeout=SOCKET_TIMEOUT_S)
    sock.sendall(hello)
    received = read_until_closed(sock)
    assert received[:1] == b"\x16"  # the broker's ServerHello, then the close
    sock.close()


# --------------------------------------------------------------------------- connections per address (§18.4)

MAX_PER_ADDRESS = 3
API_VERSIONS_V0 = _SIZE.pack(10) + struct.pack(">hhih", 18, 0, 1, 0)


@pytest.fixture(scope="module")
def limited() -> Iterator[RunningKafkaBroker]:
    with running_kafka_broker(num_partitions=1, max_connections_per_ip=MAX_PER_ADDRESS) as running:
        yield running


def answered(port: int) -> socket.socket | None:
    """A connection that got its ApiVersions answer, or None when the broker closed it unanswered."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=SOCKET_TIMEOUT_S)
    try:
        sock.sendall(API_VERSIONS_V0)
        if len(sock.recv(4)) == 4:
            return sock
    except (ConnectionResetError, BrokenPipeError):
        pass
    sock.close()
    return None


def test_connections_over_the_per_address_limit_are_closed_at_once(limited):
    held = [answered(limited.kafka_port) for _ in range(MAX_PER_ADDRESS)]
    assert all(held)
    assert answered(limited.kafka_port) is None
    zero_seven = socket.create_connection(("127.0.0.1", limited.port), timeout=SOCKET_TIMEOUT_S)
    assert read_until_closed(zero_seven) == b""  # the 0.7 port counts against the same limit
    zero_seven.close()
    held.pop().close()  # type: ignore[union-attr]
    deadline = time.monotonic() + SOCKET_TIMEOUT_S
    again = None
    while again is None and time.monotonic() < deadline:  # the broker notices the close, then admits
        again = answered(limited.kafka_port)
    assert again is not None
    for sock in [*held, again]:
        sock.close()  # type: ignore[union-attr]


# ----------------------------------------------------------------- SASL handshakes (§18.2, §18.4)

SASL_USER, SASL_PASSWORD = "alice", "alice-secret"
SASL_MAX_UNAUTHENTICATED_BYTES = 4096
SASL_HANDSHAKE_TIMEOUT_MS = 1000
FAILED_AUTHENTICATION_LINGER_S = 0.05
SCRAM = SaslMechanism.SCRAM_SHA_512


@pytest.fixture(scope="module")
def sasl_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningKafkaBroker]:
    log_dir = str(tmp_path_factory.mktemp("sasl-hostile"))
    CredentialFile(log_dir).add(SASL_USER, new_record(SASL_PASSWORD))
    with pytest.MonkeyPatch.context() as patch:
        # After a failed authentication the broker waits up to 1 s for its client to close first (§18.4);
        # these sockets never do (the tests wait for the broker's close), so a short linger will do.
        patch.setattr(kafka_connection, "FAILED_AUTHENTICATION_LINGER_S", FAILED_AUTHENTICATION_LINGER_S)
        with running_kafka_broker(log_dir, kafka_security_protocol="SASL_PLAINTEXT",
                                  max_socket_request_bytes=MAX_REQUEST_BYTES,
                                  sasl_max_unauthenticated_request_bytes=SASL_MAX_UNAUTHENTICATED_BYTES,
                                  sasl_handshake_timeout_ms=SASL_HANDSHAKE_TIMEOUT_MS) as running:
            yield running


@pytest.fixture
def sasl_unharmed(sasl_kafka: RunningKafkaBroker) -> Iterator[None]:
    """After the test: a real client logs in with SCRAM-SHA-512 and produces."""
    yield
    producer = Producer({"bootstrap.servers": sasl_kafka.bootstrap, "acks": "all",
                         "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": SCRAM.value,
                         "sasl.username": SASL_USER, "sasl.password": SASL_PASSWORD})
    producer.produce("after-sasl-attack", value=b"still serving")
    assert producer.flush(30) == 0


def ask(sock: socket.socket, api: KafkaApi, version: int, body: Any, correlation_id: int = 1) -> Any:
    """Send one request, read its answer's body."""
    sock.sendall(encode_request(api, version, correlation_id, "hostile", body))
    got, answer = decode_response(api, version, receive_frame(sock))
    assert got == correlation_id
    return answer


def sasl_handshake(sock: socket.socket, mechanism: str = SCRAM.value) -> Any:
    return ask(sock, KafkaApi.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism=mechanism))


def sasl_authenticate(sock: socket.socket, token: bytes) -> Any:
    return ask(sock, KafkaApi.SASL_AUTHENTICATE, 2, SaslAuthenticateRequest(auth_bytes=token))


def failed_then_closed(sock: socket.socket, token: bytes) -> None:
    """``token`` is answered SASL_AUTHENTICATION_FAILED with a message, then the connection closes."""
    answer = sasl_authenticate(sock, token)
    assert answer.error_code == ErrorCode.sasl_authentication_failed and answer.error_message
    assert_closed(sock)


def test_a_scram_login_over_a_socket_then_requests_are_served(sasl_kafka, sasl_unharmed):
    sock = connect(sasl_kafka)
    assert sasl_handshake(sock).error_code == ErrorCode.none
    client = ScramClient(SCRAM, SASL_USER, SASL_PASSWORD)
    first = sasl_authenticate(sock, client.first())
    final = sasl_authenticate(sock, client.final(first.auth_bytes))
    assert final.error_code == ErrorCode.none
    client.verify(final.auth_bytes)
    topics = ask(sock, KafkaApi.METADATA, 1, MetadataRequest(topics=None))
    assert topics.brokers
    sock.sendall(encode_request(KafkaApi.SASL_HANDSHAKE, 1, 9, "hostile", SaslHandshakeRequest(mechanism="PLAIN")))
    assert_closed(sock)  # no second authentication on one connection


def test_an_unsupported_mechanism_is_answered_and_another_may_follow(sasl_kafka, sasl_unharmed):
    sock = connect(sasl_kafka)
    refused = sasl_handshake(sock, "GSSAPI")
    assert refused.error_code == ErrorCode.unsupported_sasl_mechanism
    assert set(refused.mechanisms) == {"SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"}
    assert sasl_handshake(sock, "PLAIN").error_code == ErrorCode.none
    assert sasl_authenticate(sock, plain_token(SASL_USER, SASL_PASSWORD)).error_code == ErrorCode.none
    sock.close()


@pytest.mark.parametrize("token", [b"", b"\xff\xfe\x00garbage", b"n,,n=alice", b"n,,n=alice,r=",
                                   b"p=tls-unique,,n=alice,r=abc", b"n,,n=mallory,r=abc"],
                         ids=["empty", "garbage", "truncated", "empty-nonce", "channel-binding", "unknown-user"])
def test_a_bad_client_first_message_fails_and_closes(sasl_kafka, sasl_unharmed, token):
    sock = connect(sasl_kafka)
    assert sasl_handshake(sock).error_code == ErrorCode.none
    failed_then_closed(sock, token)


@pytest.mark.parametrize("cut", [lambda final: final[:len(final) // 2], lambda final: final + b"\x00\xff",
                                 lambda final: final.rpartition(b"p=")[0] + b"p=AAAA"],
                         ids=["truncated", "trailing-garbage", "wrong-proof"])
def test_a_bad_client_final_message_fails_and_closes(sasl_kafka, sasl_unharmed, cut):
    sock = connect(sasl_kafka)
    assert sasl_handshake(sock).error_code == ErrorCode.none
    client = ScramClient(SCRAM, SASL_USER, SASL_PASSWORD)
    first = sasl_authenticate(sock, client.first())
    failed_then_closed(sock, cut(client.final(first.auth_bytes)))


def test_a_client_final_replayed_from_another_connection_fails(sasl_kafka, sasl_unharmed):
    victim = connect(sasl_kafka)
    assert sasl_handshake(victim).error_code == ErrorCode.none
    client = ScramClient(SCRAM, SASL_USER, SASL_PASSWORD)
    final = client.final(sasl_authenticate(victim, client.first()).auth_bytes)
    assert sasl_authenticate(victim, final).error_code == ErrorCode.none
    victim.close()
    attacker = connect(sasl_kafka)
    assert sasl_handshake(attacker).error_code == ErrorCode.none
    sasl_authenticate(attacker, client.first())
    failed_then_closed(attacker, final)


@pytest.mark.parametrize("frame", [
    encode_request(KafkaApi.METADATA, 1, 1, "hostile", MetadataRequest(topics=None)),  # before authenticating
    encode_request(KafkaApi.SASL_AUTHENTICATE, 2, 1, "hostile", SaslAuthenticateRequest(auth_bytes=b"n,,")),
    _SIZE.pack(SASL_MAX_UNAUTHENTICATED_BYTES + 1) + b"\x00" * 64,  # under max.socket.request.bytes, over the bound
    b"\x00\x00\x00\x09n,,n=alice",  # a raw, unframed token (v0 handshake style) read as a frame
], ids=["metadata-first", "authenticate-before-handshake", "oversized-before-authentication", "raw-token"])
def test_requests_out_of_place_before_authentication_close_the_connection(sasl_kafka, sasl_unharmed, frame):
    sock = connect(sasl_kafka)
    sock.sendall(frame)
    assert_closed(sock)


def test_a_second_handshake_mid_exchange_closes_the_connection(sasl_kafka, sasl_unharmed):
    sock = connect(sasl_kafka)
    assert sasl_handshake(sock).error_code == ErrorCode.none
    sock.sendall(encode_request(KafkaApi.SASL_HANDSHAKE, 1, 2, "hostile", SaslHandshakeRequest(mechanism="PLAIN")))
    assert_closed(sock)


@pytest.mark.parametrize("stop_after", ["connect", "handshake", "client-first", "half-a-frame"])
def test_a_peer_that_stops_mid_handshake_is_dropped(sasl_kafka, sasl_unharmed, stop_after):
    """Dropped after sasl_handshake_timeout_ms (§18.4); the socket's own timeout bounds the wait."""
    sock = connect(sasl_kafka)
    if stop_after != "connect":
        assert sasl_handshake(sock).error_code == ErrorCode.none
    if stop_after == "client-first":
        sasl_authenticate(sock, ScramClient(SCRAM, SASL_USER, SASL_PASSWORD).first())
    if stop_after == "half-a-frame":
        sock.sendall(encode_request(KafkaApi.SASL_AUTHENTICATE, 2, 3, "hostile",
                                    SaslAuthenticateRequest(auth_bytes=b"n,,n=alice,r=abc"))[:10])
    assert_closed(sock)


def test_sasl_on_a_plaintext_listener_is_an_illegal_state(kafka, unharmed):
    sock = connect(kafka)
    assert sasl_handshake(sock).error_code == ErrorCode.illegal_sasl_state
    sock.close()
