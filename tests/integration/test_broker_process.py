"""Graceful shutdown of a real ``python -m trikafka serve`` process (SIGTERM, SIGINT).

The broker runs as a child on a free loopback port; the test talks to it over
TCP, signals it by PID, and checks the exit code, the clean-shutdown marker
and that a restarted broker serves the data (spec §7.2-§7.3).
"""

from __future__ import annotations

import os
import re
import signal
import sys

import pytest

from trikafka.wire import (
    ErrorCode,
    FetchPart,
    FetchRequest,
    FetchWaitRequest,
    ProduceAckedRequest,
    ProducePart,
    ProduceRequest,
    decode_multifetch_payload,
    decode_produce_acked_payload,
)

from tests.helpers.broker_testing import READY_MARKER, RawClient, child_process, messages, serve_process

CLEAN_SHUTDOWN_MARKER = ".kafka_cleanshutdown"
NO_TIMER_FLUSH = ("--set", "log.default.flush.scheduler.interval.ms=3600000", "--set", "log.flush.interval=100000")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
async def test_a_signal_flushes_writes_the_marker_and_exits_0(tmp_path, signum):
    log_dir = tmp_path / "data"
    acked, plain = messages(b"appended, not yet flushed"), messages(b"a plain 0.7 produce")
    async with serve_process(log_dir, *NO_TIMER_FLUSH) as (broker, port):
        client = await RawClient.connect(port)
        response = await client.call(ProduceAckedRequest(1, 10_000, (ProducePart("t", 0, acked),)))
        assert decode_produce_acked_payload(response.payload)[0].error == ErrorCode.NO_ERROR
        await client.send(ProduceRequest(ProducePart("t", 0, plain)))
        assert await client.offsets("t", 0, -1, 1) == [0]  # both appended, nothing visible yet
        poller = await RawClient.connect(port)
        await poller.send(FetchWaitRequest(600_000, 1, (FetchPart("quiet", 0, 0, 100),)))
        idle = await RawClient.connect(port)
        assert await idle.offsets("other", 0, -2, 1) == [0]

        broker.signal(signum)
        # The long poll is answered at once, the idle connection closed, the process exits 0.
        assert decode_multifetch_payload((await poller.receive_frame()).payload) == [(ErrorCode.NO_ERROR, b"")]
        await idle.assert_closed()
        assert await broker.wait() == 0
    assert os.path.exists(log_dir / CLEAN_SHUTDOWN_MARKER)
    with open(log_dir / "t-0" / ("0" * 20 + ".kafka"), "rb") as f:
        assert f.read() == acked + plain  # shutdown flushed (and fsynced) the appended bytes
    assert b"clean shutdown marker written" in broker.stderr

    async with serve_process(log_dir, *NO_TIMER_FLUSH) as (broker, port):
        assert b"recovery not needed" in broker.stderr  # the marker was trusted
        client = await RawClient.connect(port)
        response = await client.call(FetchRequest(FetchPart("t", 0, 0, 1000)))
        assert (response.error_code, response.payload) == (ErrorCode.NO_ERROR, acked + plain)
        broker.signal(signal.SIGTERM)
        assert await broker.wait() == 0


async def test_a_killed_broker_leaves_no_marker_and_the_restart_recovers(tmp_path):
    log_dir = tmp_path / "data"
    data = messages(b"flushed before the crash")
    async with serve_process(log_dir) as (broker, port):
        client = await RawClient.connect(port)
        response = await client.call(ProduceAckedRequest(-1, 10_000, (ProducePart("t", 0, data),)))
        assert decode_produce_acked_payload(response.payload)[0].error == ErrorCode.NO_ERROR
        broker.signal(signal.SIGKILL)
        assert await broker.wait() == -signal.SIGKILL
    assert not os.path.exists(log_dir / CLEAN_SHUTDOWN_MARKER)
    async with serve_process(log_dir) as (broker, port):
        assert b"recovery ran" in broker.stderr
        client = await RawClient.connect(port)
        response = await client.call(FetchRequest(FetchPart("t", 0, 0, 1000)))
        assert response.payload == data
        broker.signal(signal.SIGTERM)
        assert await broker.wait() == 0


async def test_a_taken_port_is_a_loud_failure(tmp_path):
    async with serve_process(tmp_path / "a") as (first, port):
        async with child_process("serve", "--standalone", "--port", str(port), "--log-dir",
                                 str(tmp_path / "b")) as second:
            assert await second.wait() == 1
            assert b"trikafka: " in second.stderr and b"serving on" not in second.stderr
        first.signal(signal.SIGTERM)
        assert await first.wait() == 0


async def test_a_signal_during_start_up_never_prints_the_ready_line(tmp_path, zookeeper_server):
    """SIGINT while the broker waits for ZooKeeper (its signal handler installed, its registration
    not yet done): start-up completes and the broker stops, and the ready line, which a script
    waits for, is never printed, nor the ready file written."""
    from tests.helpers.fault_proxy import FaultMode
    from tests.helpers.zookeeper_server import open_zookeeper_proxy

    async with open_zookeeper_proxy(zookeeper_server.connect_string) as proxy:
        proxy.set_mode(FaultMode.STALL)
        ready_file = tmp_path / "port"
        async with child_process("--log-level", "debug", "serve", "--zookeeper", proxy.connect_string,
                                 "--port", "0", "--log-dir", str(tmp_path / "data"),
                                 "--ready-file", str(ready_file)) as broker:
            await broker.wait_for_stderr(b"kazoo.client: Connecting to")  # signals are handled by now
            broker.signal(signal.SIGINT)
            await broker.wait_for_stderr(b"received SIGINT")
            proxy.set_mode(FaultMode.FORWARD)
            assert await broker.wait() == 0, broker.stderr.decode()
    assert b"clean shutdown marker written" in broker.stderr  # start-up went on to the end, then stopped
    assert READY_MARKER not in broker.stderr, broker.stderr.decode()
    assert not ready_file.exists()


async def test_a_failed_start_says_why_and_nothing_about_stopping(tmp_path):
    """A broker that never served (its port taken) reports the reason, not a 'broker stopped (no
    clean marker)' that would alarm about a broker that was never up."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        async with child_process("serve", "--port", str(port), "--zookeeper-port", "0",
                                 "--log-dir", str(tmp_path / "data")) as broker:
            assert await broker.wait() == 1
    err = broker.stderr.decode()
    assert f"trikafka: [Errno 98] broker port 127.0.0.1:{port}: Address already in use\n" in err, err
    assert "broker stopped" not in err and "clean marker" not in err, err


# Run as ``python -c`` in front of ``trikafka ARGS``: on exit, report the collector's frozen and
# walked (tracked, not frozen) object counts.
_REPORT_GC_AT_EXIT = """
import atexit, gc, sys
atexit.register(lambda: print(f"gc frozen {gc.get_freeze_count()} walked {len(gc.get_objects())}", file=sys.stderr))
from trikafka.cli import main
sys.exit(main())
"""


async def test_the_collector_no_longer_walks_the_imported_objects(tmp_path):
    """Modules, classes and functions live as long as the serving process: frozen before it serves,
    so a full collection walks the broker's own objects only, not the ~70,000 of its imports (each such
    walk cost 20-50 ms of CPU, landing on whatever request allocated next)."""
    ready_file = tmp_path / "port"
    async with child_process("serve", "--standalone", "--port", "0", "--log-dir", str(tmp_path / "data"),
                             "--ready-file", str(ready_file),
                             program=[sys.executable, "-c", _REPORT_GC_AT_EXIT]) as broker:
        await broker.wait_for_stderr(READY_MARKER)
        broker.signal(signal.SIGTERM)
        assert await broker.wait() == 0, broker.stderr.decode()
    found = re.search(rb"gc frozen (\d+) walked (\d+)", broker.stderr)
    assert found is not None, broker.stderr.decode()
    frozen, walked = int(found[1]), int(found[2])
    assert frozen > 2 * walked, (frozen, walked)
