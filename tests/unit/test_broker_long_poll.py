"""The one long poll (``VisibleEndWaiters.long_poll``): FETCH_WAIT, Kafka Fetch and REPLICA_FETCH wait through it."""

from __future__ import annotations

import trio

from trikafka.broker.engine.waiters import VisibleEndWaiters

KEY = ("t", 0)


async def test_an_answer_ready_at_once_does_not_wait(autojump_clock):
    waiters = VisibleEndWaiters()
    attempts = []

    async def attempt():
        attempts.append(trio.current_time())
        return 10

    assert await waiters.long_poll([KEY], trio.current_time() + 5, attempt, lambda n: n >= 10) == 10
    assert len(attempts) == 1 and waiters.waiting_count() == 0


async def test_an_advance_wakes_the_poll_and_it_asks_again(nursery, autojump_clock):
    waiters = VisibleEndWaiters()
    available = [0]

    async def attempt():
        return available[0]

    async def advance():
        await trio.sleep(1)
        available[0] = 10
        waiters.notify(KEY)

    nursery.start_soon(advance)
    start = trio.current_time()
    assert await waiters.long_poll([KEY], start + 5, attempt, lambda n: n >= 10) == 10
    assert trio.current_time() - start == 1  # woken by the advance, not the deadline


async def test_at_the_deadline_it_asks_once_more_and_answers_what_is_there(autojump_clock):
    waiters = VisibleEndWaiters()
    attempts = []

    async def attempt():
        attempts.append(trio.current_time())
        return 3

    start = trio.current_time()
    assert await waiters.long_poll([KEY], start + 5, attempt, lambda n: n >= 10) == 3
    assert attempts == [start, start + 5] and waiters.waiting_count() == 0


async def test_shutdown_ends_the_poll(nursery, autojump_clock):
    waiters = VisibleEndWaiters()

    async def attempt():
        return 0

    nursery.start_soon(_close_after, waiters, 1)
    start = trio.current_time()
    assert await waiters.long_poll([KEY], start + 60, attempt, lambda n: n > 0) == 0
    assert trio.current_time() - start == 1


async def _close_after(waiters, delay_s):
    await trio.sleep(delay_s)
    waiters.close()
