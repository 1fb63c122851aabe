"""Tally: a burst of like events is one INFO line with its counts (a restart's partitions)."""

import logging

import trio
import trio.testing

from trikafka.broker.log_tally import QUIET_S, Tally

logger = logging.getLogger("tests.tally")


def lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == logger.name and r.levelno == logging.INFO]


def test_a_burst_is_one_line_once_quiet_and_the_next_burst_another(caplog):
    async def main():
        tally = Tally(logger, "partitions led")
        for topic, partition in (("b", 0), ("a", 0), ("b", 1), ("b", 0)):  # b-0 twice: one partition
            tally.note(topic, partition)
            await trio.sleep(QUIET_S / 2)  # within the burst
        assert lines(caplog) == []
        await trio.sleep(QUIET_S)
        assert lines(caplog) == ["partitions led: 3 (a 1, b 2)"]
        tally.note("c", 0)
        await trio.sleep(QUIET_S * 2)
        assert lines(caplog) == ["partitions led: 3 (a 1, b 2)", "partitions led: 1 (c 1)"]

    with caplog.at_level(logging.INFO, logger.name):
        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_a_burst_still_open_when_the_run_ends_is_reported(caplog):
    async def main():
        Tally(logger, "partitions dropped").note("t", 0)

    with caplog.at_level(logging.INFO, logger.name):
        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert lines(caplog) == ["partitions dropped: 1 (t 1)"]
