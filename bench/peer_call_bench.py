"""What a broker's own call to another broker costs per security protocol (docs/protocol.md §18.5).

    python bench/peer_call_bench.py [--calls N]

A peer call runs on a connection kept from the previous call to the same
peer, or opens one (§18.5): TCP, TLS where the Kafka listener speaks it, the
inter-broker SASL login (SCRAM-SHA-512) where it asks for one, then the
request.  Against an in-process broker of each protocol, times N
DescribeCluster calls of a ``PeerConnector`` built from the same settings, one
after another, each on a new connection and then on a kept one.  Prints median
and worst per protocol and way.
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
from trikafka.broker.kafka.peer_connections import PeerConnections
from trikafka.broker.kafka.peer_connector import PeerConnector
from trikafka.kafka.apis import KafkaApi
from trikafka.testing import running_kafka_broker
from trikafka.testing.certificates import make_certificates
from trikafka.testing.kafka_broker import kafka_broker_config
from trikafka.wire.metadata import BrokerAddress

USER, PASSWORD = "broker", "broker-password"
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


async def calls_s(connector: PeerConnector, port: int, calls: int, kept: bool) -> list[float]:
    """Seconds per call, one after another: DescribeCluster on a connection kept from the previous
    call (``kept``), else on a new one each (connect, handshake, log in, the request)."""
    address = BrokerAddress(0, "127.0.0.1", port)
    body = DescribeClusterRequest(include_cluster_authorized_operations=False)
    connections = PeerConnections(connector, max_idle_per_peer=1 if kept else 0)
    times = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(connections.run)
        for _ in range(calls):
            started = time.perf_counter()
            await peer_call(connections, address, KafkaApi.DESCRIBE_CLUSTER, 0, body)
            times.append(time.perf_counter() - started)
        nursery.cancel_scope.cancel()
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
            trio.run(calls_s, connector, kafka.kafka_port, 2, False)  # warm-up
            for kept in (False, True):
                times = trio.run(calls_s, connector, kafka.kafka_port, args.calls, kept)
                print(f"{protocol:>15} {'kept' if kept else 'new':>4}: median {statistics.median(times) * 1000:7.2f} "
                      f"ms, worst {max(times) * 1000:7.2f} ms ({len(times)} calls)", flush=True)


if __name__ == "__main__":
    main()
