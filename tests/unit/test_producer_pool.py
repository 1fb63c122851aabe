"""BrokerPool: one connection per broker, reconnect backoff that doubles and resets."""

from __future__ import annotations

import pytest
import trio

from trikafka.client import BrokerConnectionError
from trikafka.producer.pool import BrokerPool
from trikafka.testing import open_cluster


@pytest.fixture
async def cluster(autojump_clock):
    async with open_cluster(2) as running:
        yield running


def make_pool(cluster, addresses):
    return BrokerPool(addresses.get, connect_timeout_s=1, request_timeout_s=1, reconnect_backoff_s=0.5,
                      reconnect_backoff_max_s=2, connector=cluster.connector)


async def test_one_connection_per_broker_until_it_fails(cluster, autojump_clock):
    h = cluster.brokers[0].address
    pool = make_pool(cluster, {0: h})
    first = await pool.get(0)
    assert await pool.get(0) is first
    await pool.failed(0, first)
    assert first.closed and not pool.available(0)
    start = trio.current_time()
    second = await pool.get(0)  # waits out the backoff, then reconnects
    assert second is not first and trio.current_time() - start == pytest.approx(0.5)
    assert cluster.network.connects[h] == 2
    await pool.aclose()
    assert second.closed


async def test_failed_connects_back_off_doubling_up_to_the_cap(cluster, autojump_clock):
    await cluster.kill(0)  # nothing answers at broker 0's address
    pool = make_pool(cluster, {0: cluster.brokers[0].address})
    attempts = []
    for _ in range(5):
        with pytest.raises(BrokerConnectionError):
            await pool.get(0)
        attempts.append(trio.current_time())
    gaps = [round(b - a, 3) for a, b in zip(attempts, attempts[1:])]
    assert gaps == [0.5, 1.0, 2.0, 2.0]
    cluster.revive(0)
    await pool.get(0)
    pool.succeeded(0)
    assert pool.available(0)


async def test_a_stale_failure_does_not_close_the_replacement(cluster, autojump_clock):
    pool = make_pool(cluster, {0: cluster.brokers[0].address})
    old = await pool.get(0)
    await pool.failed(0, old)
    new = await pool.get(0)
    await pool.failed(0, old)  # another task reporting the same old failure
    assert not new.closed and await pool.get(0) is new


async def test_a_broker_that_moved_gets_a_new_connection(cluster, autojump_clock):
    addresses = {0: cluster.brokers[0].address}
    pool = make_pool(cluster, addresses)
    old = await pool.get(0)
    addresses[0] = cluster.brokers[1].address
    new = await pool.get(0)
    assert old.closed and new.address == cluster.brokers[1].address
    del addresses[0]
    with pytest.raises(BrokerConnectionError, match="not registered"):
        await pool.get(0)
