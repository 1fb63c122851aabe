"""The Spark load's audit tier: loaded enveloped counts land on trikafka-audit and the audit reads them."""

from __future__ import annotations

import pytest
import trio

from tests.helpers.zk_brokers import broker_process
from trikafka.mirror.audit import tally_clusters
from trikafka.spark.load_job import LoadConfig, publish_loaded_counts
from trikafka.wire.envelope import encode_envelope

pytest_plugins = ["tests.helpers.spark_cluster"]
pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.zookeeper]

W = 60_000


async def test_loaded_counts_are_published_and_audited(spark, tmp_path, zk_chroot):
    rows = [("pv", encode_envelope(b"{}", 61_000 + i, i, "h", "p")) for i in range(7)]
    rows += [("pv", encode_envelope(b"{}", 130_000, 7, "h", "p")), ("pv", b"plain, not counted")]
    frame = spark.createDataFrame(rows, "topic STRING, payload BINARY")
    config = LoadConfig({}, str(tmp_path / "out"), str(tmp_path / "cp"), zookeeper=zk_chroot,
                        audit_tier="spark:test", audit_window_s=60)
    async with broker_process(tmp_path, zk_chroot, 1) as broker:
        await broker.wait_ready()
        assert await trio.to_thread.run_sync(publish_loaded_counts, frame, config) == 2
        # The broker registers the new audit topic in ZooKeeper on its own time: poll until it is there.
        with trio.fail_after(30):
            while True:
                tally = await tally_clusters([zk_chroot])
                loaded = {(r.window_start_ms, r.window_ms, r.distinct) for r in tally.rows()
                          if r.tier == "spark:test"}
                if loaded:
                    break
                await trio.sleep(0.1)
    assert loaded == {(60_000, W, 7), (120_000, W, 1)}
