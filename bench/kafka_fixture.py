"""How long ``trikafka.testing.kafka_broker()`` takes to start and stop (docs/protocol.md §16).

    python bench/kafka_fixture.py [--runs N]

Times, in this process (trikafka already imported: a test session pays the
import once), from entering ``running_kafka_broker()`` until a real Kafka
client's first Metadata answer arrives (confluent-kafka's ``list_topics``), and
the stop.  Prints median and worst of N runs.  The usual alternative, a Kafka
container, needs Docker and a JVM and takes seconds.
"""

from __future__ import annotations

import argparse
import statistics
import time

from confluent_kafka.admin import AdminClient

from trikafka.testing import running_kafka_broker


def one_run() -> tuple[float, float, float]:
    """(seconds to the broker's readiness, to a client's first Metadata answer, to the stop)."""
    started = time.perf_counter()
    with running_kafka_broker() as kafka:
        ready = time.perf_counter()
        AdminClient({"bootstrap.servers": kafka.bootstrap}).list_topics(timeout=10)
        answered = time.perf_counter()
        stop_from = time.perf_counter()
    stopped = time.perf_counter()
    return ready - started, answered - started, stopped - stop_from


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    one_run()  # warm-up: modules, page cache
    runs = [one_run() for _ in range(args.runs)]
    for label, values in zip(("ready", "first Metadata answer", "stop"), zip(*runs)):
        print(f"{label:>22}: median {statistics.median(values) * 1000:7.1f} ms, "
              f"worst {max(values) * 1000:7.1f} ms ({args.runs} runs)")


if __name__ == "__main__":
    main()
