"""``trikafka serve`` reuses the memory of a request's buffers (``trikafka.util.malloc``): 1 MB Produce
requests, one after another, cost the broker process few minor page faults each, not one per 4 KiB
page of every buffer the request passes through (measured: about 360 a request without it)."""

from __future__ import annotations

import platform
from pathlib import Path

import pytest
import trio

from kio.schema.errors import ErrorCode

from tests.helpers.kafka_batches import make_batch
from tests.helpers.kafka_clients import create_topic
from tests.helpers.kafka_processes import kafka_serve
from tests.helpers.kafka_wire import produce_records

REQUESTS = 20
RECORDS = [b"v" * 200] * 4_700  # about 1 MB in one batch, as librdkafka's batch.size fills one
FAULTS_PER_REQUEST_MAX = 60  # measured: 0 with it, about 350 without (256 pages make a 1 MiB buffer)


def _minor_faults(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[7])


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
async def test_serve_does_not_fault_in_each_produce_requests_buffers_again(tmp_path: Path) -> None:
    records = make_batch(RECORDS)
    async with kafka_serve(tmp_path / "logs") as broker:
        await trio.to_thread.run_sync(create_topic, broker.bootstrap, "t")

        def produce_all() -> None:
            for _ in range(REQUESTS):
                assert produce_records(broker.bootstrap, "t", 0, records, acks=1)[0] == ErrorCode.none

        await trio.to_thread.run_sync(produce_all)  # warm up: the heap grows to its size
        before = _minor_faults(broker.child.pid)
        await trio.to_thread.run_sync(produce_all)
        faults_per_request = (_minor_faults(broker.child.pid) - before) / REQUESTS
    assert faults_per_request < FAULTS_PER_REQUEST_MAX, faults_per_request
