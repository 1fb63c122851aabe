"""What TLS costs on the Kafka listener (docs/protocol.md §18.1): produce and consume, PLAINTEXT vs SSL.

    python bench/tls_bench.py [--messages N] [--size B] [--rounds R]

Starts two ``trikafka serve --standalone`` subprocesses, one whose Kafka
listener is ``PLAINTEXT`` and one with ``--kafka-security SSL`` (a test CA's
ECDSA P-256 certificate, from ``tests/helpers/certificates.py``; TLS 1.3 with
OpenSSL's default suite, AES-256-GCM).  On each, in alternating rounds:

1. produce N (default 200,000) B-byte (default 1,000) values with
   confluent-kafka (acks 1, linger.ms 5, no compression) to a one-partition
   topic, until every delivery report is in;
2. consume them from the beginning with kcat (``-C -c N``, the whole process
   timed, start-up and handshake included): Fetch throughput.  Plaintext
   fetches go out by ``sendfile``; TLS fetches read each file region in a
   worker thread in 1 MiB pieces and encrypt them on the event loop.

Prints msg/s and MB/s of values per run, the broker's CPU time (utime + stime
from /proc), the medians, and SSL's rate as a share of PLAINTEXT's.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from kafka_bench import consume_with_kcat, create_topic, line, produce, timed  # noqa: E402
from served_broker import served_broker  # noqa: E402
from tests.helpers.certificates import make_certificates  # noqa: E402
from trikafka.cli.serve import read_ready_file  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=1000, help="value bytes")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per protocol (median)")
    args = parser.parse_args()
    if not shutil.which("kcat"):
        sys.exit("tls_bench: needs kcat on the PATH")
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; "
          f"{args.messages:,} messages of {args.size} B per run", flush=True)
    root = Path(tempfile.mkdtemp(prefix="trikafka-tls-bench-"))
    try:
        files = make_certificates(str(root))
        protocols = {
            "PLAINTEXT": ([], {}, []),
            "SSL": (["--kafka-security", "SSL", "--tls-cert", files.broker_cert_path, "--tls-key",
                     files.broker_key_path],
                    {"security.protocol": "SSL", "ssl.ca.location": files.ca_path},
                    ["-X", "security.protocol=SSL", "-X", f"ssl.ca.location={files.ca_path}"]),
        }
        rates: dict[tuple[str, str], list[float]] = {}
        with served_broker(["--standalone", "--kafka-port", "0", "--log-dir", str(root / "plain")],
                           root / "plain.ready") as (plain, _), \
                served_broker(["--standalone", "--kafka-port", "0", "--log-dir", str(root / "tls"),
                               *protocols["SSL"][0]], root / "tls.ready") as (tls, _):
            brokers = {"PLAINTEXT": (plain.pid, read_ready_file(str(root / "plain.ready"))[1]),
                       "SSL": (tls.pid, read_ready_file(str(root / "tls.ready"))[1])}
            for round_ in range(1, args.rounds + 1):
                for name, (pid, kafka_port) in brokers.items():
                    _, client, kcat = protocols[name]
                    bootstrap = f"127.0.0.1:{kafka_port}"
                    topic = f"bench-{round_}"
                    create_topic(bootstrap, topic, 1, client)
                    elapsed, cpu_s = timed([pid], lambda: produce({"bootstrap.servers": bootstrap, **client},
                                                                  topic, args.messages, args.size))
                    rates.setdefault((name, "produce"), []).append(
                        line(f"produce {name} #{round_}", args.messages, args.size, elapsed, cpu_s))
                    elapsed, cpu_s = timed([pid], lambda: consume_with_kcat(bootstrap, topic, args.messages, *kcat))
                    rates.setdefault((name, "consume"), []).append(
                        line(f"consume (kcat) {name} #{round_}", args.messages, args.size, elapsed, cpu_s))
        for what in ("produce", "consume"):
            plain_rate = statistics.median(rates[("PLAINTEXT", what)])
            tls_rate = statistics.median(rates[("SSL", what)])
            print(f"{what + ' medians':34} PLAINTEXT {plain_rate * args.size / 1e6:8.1f} MB/s, "
                  f"SSL {tls_rate * args.size / 1e6:8.1f} MB/s: SSL at {tls_rate / plain_rate:.0%} of PLAINTEXT",
                  flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}", flush=True)


if __name__ == "__main__":
    main()
