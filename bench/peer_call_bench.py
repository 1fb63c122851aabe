"""What a broker's own call to another broker costs per security protocol (docs/protocol.md §18.5).

    python bench/peer_call_bench.py [--calls N]

A peer call opens one connection a call (§19.5.7): TCP, TLS where the Kafka
listener speaks it, the inter-broker SASL login (SCRAM-SHA-512) where it asks
for one, then the request.  Against an in-process broker of each protocol, times
N DescribeCluster calls of a ``PeerConnector`` built from the same settings, one
after another.  Prints median and worst per protocol.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import trio
from kio.schema.describe_cluster.v0.request import DescribeClusterRequest

from trikafka.broker.credentials import CredentialFile, new_record
from trikafka.broker.kafka.peer_call import peer_call
from trikafka.broker.kafka.peer_connector import PeerConnector
from trikafka.kafka.apis import KafkaApi
from trikafka.testing import running_kafka_broker
from trikafka.testing.certificates import make_certificates
from trikafka.testing.kafka_broker import kafka_broker_config
from trikafka.wire.metadata import BrokerAddress

USER, PASSWORD = "broker", "broker-password"
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


async def calls_s(connector: PeerConnector, port: int, calls: int) -> list[float]:
    """Seconds per call (connect, handshake, log in, DescribeCluster), one after another."""
    address = BrokerAddress(0, "127.0.0.1", port)
    body = DescribeClusterRequest(include_cluster_authorized_operations=False)
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        await peer_call(connector, address, KafkaApi.DESCRIBE_CLUSTER, 0, body)
        times.append(time.perf_counter() - started)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=50)
    args = parser.parse_args()
    scratch = tempfile.mkdtemp(prefix="peer-call-bench-")
    certificates = make_certificates(scratch)
    password_file = os.path.join(scratch, "inter-broker-password")
    with open(password_file, "w") as f:
        f.write(PASSWORD + "\n")
    for protocol in PROTOCOLS:
        log_dir = tempfile.mkdtemp(prefix=f"{protocol.lower()}-", dir=scratch)
        CredentialFile(log_dir).add(USER, new_record(PASSWORD))
        settings = dict(kafka_security_protocol=protocol, **certificates.broker_settings())
        with running_kafka_broker(log_dir, **settings) as kafka:
            connector = PeerConnector.from_config(kafka_broker_config(
                tempfile.mkdtemp(dir=scratch), sasl_inter_broker_username=USER,
                sasl_inter_broker_password_file=password_file, **settings))
            trio.run(calls_s, connector, kafka.kafka_port, 2)  # warm-up
            times = trio.run(calls_s, connector, kafka.kafka_port, args.calls)
        print(f"{protocol:>15}: median {statistics.median(times) * 1000:7.2f} ms, worst {max(times) * 1000:7.2f} ms "
              f"({len(times)} calls)")


if __name__ == "__main__":
    main()
