"""Producer expiration on the broker's logs (docs/protocol.md §19.2.1).

Every ``producer.id.expiration.check.interval.ms`` each log of the broker,
leader's or follower's, drops the producers silent for
``producer.id.expiration.ms`` with no open transaction (``Log.expire_producers``,
each log by its own clock and ``LogConfig``).  A pass is in memory only, on
the event loop, as appends change the same state.
"""

from __future__ import annotations

import logging
from typing import Callable, Iterable

import trio

from ..seams import BrokerLog

logger = logging.getLogger(__name__)


class ProducerExpiry:
    """The periodic expiration pass over the logs ``logs()`` lists."""

    def __init__(self, logs: Callable[[], Iterable[BrokerLog]], interval_s: float):
        self._logs = logs
        self.interval_s = interval_s

    def expire(self) -> int:
        """One pass over every log; how many producer states were dropped."""
        removed = 0
        for log in self._logs():
            expired = log.expire_producers()
            if expired:
                logger.debug("%s-%d: producers %s expired", log.topic, log.partition, expired)
                removed += len(expired)
        return removed

    async def run(self) -> None:
        """A pass every interval, until cancelled."""
        while True:
            await trio.sleep(self.interval_s)
            self.expire()
