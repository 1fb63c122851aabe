"""Replica traffic over TLS (docs/protocol.md §18.1): three ``trikafka serve --zookeeper`` processes
whose 0.7 ports (where followers fetch from leaders) and Kafka listeners speak mutual TLS.

A topic of replication factor 3 with ``min.insync.replicas`` 3 takes ``acks=all`` writes only while
both followers fetch from the leader, so every acknowledged record crossed two TLS connections
between brokers; the replicas end byte-identical, and a plaintext peer on a 0.7 port is refused.
"""

from __future__ import annotations

import functools
import socket

import trio
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.helpers.certificates import make_certificates
from tests.helpers.kafka_clients import CLIENT_TIMEOUT_S, read_with_confluent
from tests.helpers.kafka_processes import kafka_cluster

TOPIC = "replicated-over-tls"
RECORDS = 200
WAIT_S = 60.0
BROKER_IDS = [1, 2, 3]


def partition_bytes(log_dir, partition: int = 0) -> bytes:
    directory = log_dir / f"{TOPIC}-{partition}"
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.kafka")))


async def test_an_rf3_cluster_replicates_over_mutual_tls(zk_chroot, tmp_path):
    files = make_certificates(str(tmp_path))
    tls_flags = ("--port-security", "SSL", "--kafka-security", "SSL", "--tls-cert", files.broker_cert_path,
                 "--tls-key", files.broker_key_path, "--tls-ca", files.ca_path, "--tls-client-ca", files.ca_path)
    client = files.client("replication-test")
    settings = {"security.protocol": "SSL", "ssl.ca.location": files.ca_path,
                "ssl.certificate.location": client.cert_path, "ssl.key.location": client.key_path}
    async with kafka_cluster(tmp_path / "cluster", zk_chroot, 3, *tls_flags) as cluster:
        bootstrap = cluster.bootstrap()
        admin = AdminClient({"bootstrap.servers": bootstrap, **settings})
        futures = admin.create_topics([NewTopic(TOPIC, 1, 3, config={"min.insync.replicas": "3"})])
        await trio.to_thread.run_sync(functools.partial(futures[TOPIC].result, CLIENT_TIMEOUT_S))

        def produce() -> list[str]:
            errors: list[str] = []
            producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 45_000,
                                 **settings})
            for i in range(RECORDS):
                producer.produce(TOPIC, value=f"r{i}".encode(),
                                 on_delivery=lambda err, msg: errors.append(str(err)) if err else None)
            assert producer.flush(WAIT_S) == 0
            return errors

        assert await trio.to_thread.run_sync(produce) == []
        seen = await trio.to_thread.run_sync(functools.partial(read_with_confluent, bootstrap, TOPIC, 1, RECORDS,
                                                               **settings))
        assert [s.value for s in seen] == [f"r{i}".encode() for i in range(RECORDS)]
        with trio.fail_after(WAIT_S):
            while True:
                replicas = [await trio.to_thread.run_sync(partition_bytes, cluster.brokers[b].log_dir)
                            for b in BROKER_IDS]
                if len(set(replicas)) == 1 and replicas[0]:
                    break
                await trio.sleep(0.1)

        def plaintext_on_the_0_7_port() -> bytes:
            with socket.create_connection(("127.0.0.1", cluster.brokers[1].port), timeout=30) as sock:
                sock.sendall(b"\x00\x00\x00\x0a" + b"\x00" * 10)  # a 0.7 frame where a ClientHello belongs
                return sock.recv(4096)

        answer = await trio.to_thread.run_sync(plaintext_on_the_0_7_port)
        assert answer == b"" or answer[:1] == b"\x15"  # closed, or a TLS alert: never a 0.7 answer
