"""The NetDB'11 experiment on loopback: one producer, one broker, one consumer.

    python bench/paper.py [--messages N] [--fetch-bytes B] [--set KEY=VALUE ...]

Starts ``trikafka serve --standalone`` as a subprocess on a free port and a temp
log dir, then:

1. produces N (default 1,000,000) 200-byte magic-0 messages with 0.7 PRODUCE
   (no acknowledgement, as in the paper) in batches of 1 and of 50, to one
   topic each.  Requests are pipelined; the run ends when a PRODUCE_ACKED with
   acks = -1 sent after them is answered (answers come in request order), so
   the time covers every message appended and flushed;
2. consumes the batch-50 topic from offset 0 with ~200 KB fetches, checking
   every message's framing and CRC, as a 0.7 simple consumer does.

Prints msgs/s and MB/s (200-byte payloads), the broker's CPU seconds per run and
per message, its total CPU seconds and peak RSS, bytes on disk per message, and
whether each floor of the issue is met.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import trio

from served_broker import served_broker
from trikafka.client import connect
from trikafka.wire.messageset import build_message_set, scan_valid_prefix
from trikafka.wire.requests import ProducePart, ProduceRequest, encode_request

PAYLOAD_BYTES = 200
FLOORS = {"produce batch 50": 400_000, "produce batch 1": 50_000, "consume": 1_000_000}
SEND_CHUNK_BYTES = 1 << 20
CLK_TCK = os.sysconf("SC_CLK_TCK")


def broker_process(log_dir: Path, settings: list[str]):
    args = ["--standalone", "--log-dir", str(log_dir)]
    for item in settings:
        args += ["--set", item]
    return served_broker(args, log_dir.parent / "ready")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def produce(port: int, topic: str, messages: int, batch: int) -> float:
    message_set = build_message_set([b"p" * PAYLOAD_BYTES] * batch, magic=0)
    frame = encode_request(ProduceRequest(ProducePart(topic, 0, message_set)))
    requests = messages // batch
    per_chunk = max(1, SEND_CHUNK_BYTES // len(frame))
    chunk = frame * per_chunk
    async with await connect("127.0.0.1", port) as conn:
        stream = conn._stream  # raw pipelined writes: PRODUCE has no answer to wait for
        started = time.perf_counter()
        sent = 0
        while sent + per_chunk <= requests:
            await stream.send_all(chunk)
            sent += per_chunk
        if requests > sent:
            await stream.send_all(frame * (requests - sent))
        # Answered only after every earlier request on this connection was handled,
        # and only once flushed: the clock stops with every message durable.
        results = await conn.produce_acked([(topic, 0, message_set[:PAYLOAD_BYTES + 9])], acks=-1,
                                           timeout_ms=60_000)
        elapsed = time.perf_counter() - started
    assert all(r.error == 0 for r in results), results
    return elapsed


async def consume(port: int, topic: str, expected: int, fetch_bytes: int) -> tuple[float, int]:
    async with await connect("127.0.0.1", port) as conn:
        started = time.perf_counter()
        offset, count = 0, 0
        while count < expected:
            result = await conn.fetch(topic, 0, offset, fetch_bytes)
            data = result.data
            valid = scan_valid_prefix(data)  # framing + CRC of each message
            if valid == 0:
                raise RuntimeError(f"fetch at {offset} returned no whole message")
            count += valid // (PAYLOAD_BYTES + 9)  # magic 0: 4 length + 1 magic + 4 CRC
            offset += valid
        elapsed = time.perf_counter() - started
    return elapsed, offset


def line(label: str, messages: int, seconds: float, broker_cpu_s: float) -> float:
    rate = messages / seconds
    floor = FLOORS.get(label)
    verdict = "" if floor is None else f"  floor {floor:,}: {'met' if rate >= floor else 'NOT met'}"
    print(f"{label:18} {rate:>12,.0f} msgs/s {messages * PAYLOAD_BYTES / seconds / 1e6:>8.1f} MB/s "
          f"({seconds:.2f} s; broker CPU {broker_cpu_s:.2f} s, {broker_cpu_s / messages * 1e6:.2f} us/msg){verdict}")
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--fetch-bytes", type=int, default=200 * 1024)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="broker setting, passed to trikafka serve --set")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="trikafka-paper-"))
    try:
        log_dir = root / "logs"
        with broker_process(log_dir, args.set) as (proc, port):
            cpu_before = cpu_seconds(proc.pid)
            print(f"broker pid {proc.pid} on 127.0.0.1:{port}; {args.messages:,} messages of {PAYLOAD_BYTES} B")
            for batch in (50, 1):
                run_cpu_s = cpu_seconds(proc.pid)
                elapsed = trio.run(produce, port, f"batch{batch}", args.messages, batch)
                line(f"produce batch {batch}", args.messages // batch * batch, elapsed,
                     cpu_seconds(proc.pid) - run_cpu_s)
            run_cpu_s = cpu_seconds(proc.pid)
            elapsed, consumed_bytes = trio.run(consume, port, "batch50", args.messages, args.fetch_bytes)
            line("consume", args.messages, elapsed, cpu_seconds(proc.pid) - run_cpu_s)
            cpu = cpu_seconds(proc.pid) - cpu_before
            rss = peak_rss_mb(proc.pid)
        on_disk = sum(f.stat().st_size for f in (log_dir / "batch50-0").iterdir())
        print(f"broker CPU {cpu:.1f} s for all three runs; peak RSS {rss:.0f} MB")
        print(f"on disk: {on_disk / args.messages:.1f} B per message "
              f"({on_disk / args.messages - PAYLOAD_BYTES:.0f} B overhead; 0.7 magic 0: 9 B)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
