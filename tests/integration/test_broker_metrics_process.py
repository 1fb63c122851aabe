"""A real ``trikafka serve`` process: its metrics endpoint, health, and log formats."""

from __future__ import annotations

import json
import os
import re
import signal

from trikafka.cli.serve import read_ready_file
from trikafka.wire import ProducePart, ProduceRequest

from tests.helpers.broker_testing import (
    READY_MARKER,
    RawClient,
    child_process,
    http_exchange,
    http_get,
    messages,
    scrape,
    serve_process,
)

METRICS_LINE = re.compile(rb"trikafka: metrics on http://127\.0\.0\.1:(\d+)/metrics")


def messages_in(samples: dict) -> float:
    """The received-messages counter summed over its labels."""
    return sum(value for (name, _), value in samples.items() if name == "trikafka_messages_in_total")


async def test_a_scrape_counts_every_message_produced_and_junk_gets_400(tmp_path):
    batches = [messages(*[b"m%d" % i for i in range(50)]) for _ in range(19)]
    singles = [messages(b"single %d" % i) for i in range(37)]
    async with serve_process(tmp_path / "data", "--metrics-port", "0") as (broker, port):
        metrics_port = int(METRICS_LINE.search(bytes(broker.stderr)).group(1))
        assert messages_in(await scrape(metrics_port)) == 0
        client = await RawClient.connect(port)
        for i, data in enumerate(batches + singles):
            await client.send(ProduceRequest(ProducePart(f"topic-{i % 3}", 0, data)))
        await client.offsets("topic-0", 0, -1, 1)  # answered after every produce before it on this connection
        samples = await scrape(metrics_port)
        assert messages_in(samples) == 19 * 50 + 37
        assert samples[("trikafka_request_duration_seconds_count", (("request", "produce"),))] == 19 + 37
        assert await http_get(metrics_port, "/healthz") == (200, b"ok\n")
        assert await http_get(metrics_port, "/readyz") == (200, b"ready\n")

        status, _ = await http_exchange(metrics_port, b"\x16\x03\x01 not HTTP at all\r\n\r\n")
        assert status == 400
        assert await http_get(metrics_port, "/healthz") == (200, b"ok\n")  # still serving HTTP
        await client.send(ProduceRequest(ProducePart("topic-0", 0, singles[0])))
        await client.offsets("topic-0", 0, -1, 1)  # and the broker still serves clients
        assert messages_in(await scrape(metrics_port)) == 19 * 50 + 37 + 1
    assert bytes(broker.stderr).count(b"serving on") == 1  # the ready line, printed once


async def test_json_logs_are_one_object_per_line_and_the_ready_line_comes_once(tmp_path):
    log_dir = tmp_path / "data"
    ready_file = str(tmp_path / "port")
    async with child_process("--log-format", "json", "serve", "--standalone", "--port", "0",
                             "--log-dir", str(log_dir), "--ready-file", ready_file) as broker:
        await broker.wait_for_stderr(READY_MARKER)  # the ready line is a record whose msg keeps it
        port, _ = read_ready_file(ready_file)
        client = await RawClient.connect(port)
        await client.send(b"\x00\x00\x00\x02\xff\xff")  # an unknown request type: the broker logs and closes
        await client.assert_closed()
        broker.signal(signal.SIGTERM)
        assert await broker.wait() == 0
    lines = bytes(broker.stderr).decode().splitlines()
    records = [json.loads(line) for line in lines]  # every line is JSON
    assert all(list(record)[:4] == ["ts", "level", "logger", "msg"] for record in records)
    ready = [r for r in records if "serving on" in r["msg"]]
    assert len(ready) == 1 and ready[0]["port"] == port and ready[0]["logger"] == "trikafka.cli"
    loggers = {r["logger"] for r in records}
    assert {"trikafka.broker.server", "trikafka.broker.connection", "trikafka.cli"} <= loggers
    assert any(r["msg"].startswith("broker stopped") for r in records)
    assert os.path.exists(log_dir)
