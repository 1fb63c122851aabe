"""What a SASL login costs on the Kafka listener (docs/protocol.md §18.2).

    python bench/sasl_bench.py [--logins N] [--iterations 4096]

Against an in-process broker with ``kafka_security_protocol=SASL_PLAINTEXT``,
times N connections of trikafka's own client (``open_kafka_connection``:
connect, ApiVersions, then the login) per mechanism, and the same without a
login against a PLAINTEXT broker.  Both sides derive PBKDF2 keys in worker
threads: SCRAM's cost is the client's PBKDF2 (the broker's share is a few
HMACs), PLAIN's the broker's.  Prints median and worst per mechanism.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import trio

from trikafka.broker.credentials import CredentialFile, new_record
from trikafka.client.kafka.connection import open_kafka_connection
from trikafka.kafka.sasl import SaslMechanism
from trikafka.kafka.sasl_client import SaslLogin
from trikafka.testing import running_kafka_broker

USER, PASSWORD = "bench", "bench-password"


async def connections_s(port: int, logins: int, login: SaslLogin | None) -> list[float]:
    """Seconds per connection (open, negotiate, log in), one after another."""
    times = []
    for _ in range(logins):
        started = time.perf_counter()
        connection = await open_kafka_connection("127.0.0.1", port, sasl=login)
        times.append(time.perf_counter() - started)
        await connection.aclose()
    return times


def report(label: str, times: list[float]) -> None:
    print(f"{label:>15}: median {statistics.median(times) * 1000:7.2f} ms, worst {max(times) * 1000:7.2f} ms "
          f"({len(times)} connections)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logins", type=int, default=50)
    parser.add_argument("--iterations", type=int, default=4096, help="PBKDF2 iterations of the stored user")
    args = parser.parse_args()
    with running_kafka_broker() as plain:
        report("PLAINTEXT", trio.run(connections_s, plain.kafka_port, args.logins, None))
    log_dir = tempfile.mkdtemp(prefix="sasl-bench-")
    CredentialFile(log_dir).add(USER, new_record(PASSWORD, args.iterations))
    with running_kafka_broker(log_dir, kafka_security_protocol="SASL_PLAINTEXT") as kafka:
        for mechanism in SaslMechanism:
            login = SaslLogin(mechanism, USER, PASSWORD)
            trio.run(connections_s, kafka.kafka_port, 2, login)  # warm-up
            report(mechanism.value, trio.run(connections_s, kafka.kafka_port, args.logins, login))


if __name__ == "__main__":
    main()
