"""The simulation's clock: MockClock's times at rate 0 with autojump, without reading a real clock."""

from __future__ import annotations

import random
import time

import trio
import trio.testing

from trikafka.sim.determinism import deterministic_trio, virtual_clock


async def _sleepers(seen: list[tuple[int, float]]) -> None:
    """Tasks that sleep drawn times (and one that times out); each wake-up noted with the time."""
    draws = random.Random(7)

    async def sleeper(index: int) -> None:
        for _ in range(50):
            await trio.sleep(draws.uniform(0, 0.03))
            seen.append((index, trio.current_time()))
        with trio.move_on_after(0.25):
            await trio.sleep_forever()
        seen.append((index, trio.current_time()))

    async with trio.open_nursery() as nursery:
        for index in range(4):
            nursery.start_soon(sleeper, index)


def test_the_times_are_a_mock_clock_s_to_the_bit():
    expected: list[tuple[int, float]] = []
    with deterministic_trio(3):
        trio.run(_sleepers, expected, clock=trio.testing.MockClock(autojump_threshold=0))
    seen: list[tuple[int, float]] = []
    with deterministic_trio(3):
        trio.run(_sleepers, seen, clock=virtual_clock())
    assert seen == expected and len(seen) == 204


def test_no_real_clock_is_read_and_no_run_statistics_are_gathered(monkeypatch):
    def refused(*_args: object) -> float:
        raise AssertionError("read the real clock or gathered run statistics")

    clock = virtual_clock()
    monkeypatch.setattr(time, "perf_counter", refused)
    monkeypatch.setattr(trio.lowlevel, "current_statistics", refused)
    monkeypatch.setattr(trio._core, "current_statistics", refused)
    seen: list[tuple[int, float]] = []
    trio.run(_sleepers, seen, clock=clock)
    assert seen[-1][1] > 0.25
