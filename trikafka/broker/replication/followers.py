"""The follower tasks of one broker: one per partition it follows (docs/protocol.md §12.4).

Each task copies the leader of one epoch over its own connection, reconnecting
with backoff, until the partition's role changes; a new role (another leader, a
new epoch, or leading) replaces the task.
"""

from __future__ import annotations

import functools
import logging
from typing import Awaitable, Callable

import trio

from ...wire.errors import RemoteProtocolError
from ...wire.metadata import BrokerAddress
from .fetch_rules import FollowerPartition
from .fetcher import FollowerStopped, StreamLeaderLink, follow
from .hosted import FollowerLog, HostedPartition

logger = logging.getLogger(__name__)

FOLLOW_RETRY_MIN_S = 0.05
FOLLOW_RETRY_MAX_S = 1.0

TopicPartition = tuple[str, int]


class FollowerTasks:
    """Starts, replaces and stops the task that copies each followed partition's leader."""

    def __init__(self, *, broker_id: int, brokers: Callable[[], dict[int, BrokerAddress]],
                 open_stream: Callable[[str, int], Awaitable[trio.abc.Stream]],
                 on_high_watermark: Callable[[HostedPartition, int], None]):
        self._broker_id = broker_id
        self._brokers = brokers  # who listens where, as the broker-address watch last saw it
        self._open_stream = open_stream
        self._on_high_watermark = on_high_watermark
        self._running: dict[TopicPartition, tuple[FollowerPartition, trio.CancelScope]] = {}

    def update(self, hosted: HostedPartition, nursery: trio.Nursery) -> None:
        """Match the task of ``hosted`` to its role now: none unless it follows, one per follower role."""
        key = hosted.key
        running = self._running.get(key)
        if running is not None and running[0] is hosted.follower:
            return
        if running is not None:
            running[1].cancel()
            del self._running[key]
        if hosted.follower is not None:
            scope = trio.CancelScope()
            self._running[key] = (hosted.follower, scope)
            nursery.start_soon(self._follow, hosted, hosted.follower, scope)

    async def _follow(self, hosted: HostedPartition, follower: FollowerPartition, scope: trio.CancelScope) -> None:
        """Copy the leader of one epoch, reconnecting with backoff, until the role changes."""
        retry_s = FOLLOW_RETRY_MIN_S
        with scope:
            while hosted.follower is follower:
                address = self._brokers().get(follower.leader_id)
                reason = f"leader {follower.leader_id} is not registered"
                if address is not None:
                    try:
                        stream = await self._open_stream(address.host, address.port)
                        async with stream:
                            link = StreamLeaderLink(stream, replica_id=self._broker_id,
                                                    leader_epoch=follower.leader_epoch,
                                                    topic=hosted.topic, partition=hosted.partition)
                            retry_s = FOLLOW_RETRY_MIN_S
                            await follow(FollowerLog(hosted, follower), link, follower,
                                         on_high_watermark=functools.partial(self._on_high_watermark, hosted))
                    except FollowerStopped as exc:
                        reason = exc.error.name
                    except (OSError, trio.BrokenResourceError, trio.ClosedResourceError,
                            RemoteProtocolError) as exc:
                        reason = str(exc) or type(exc).__name__
                logger.debug("%s-%d: following %d in epoch %d paused: %s", hosted.topic, hosted.partition,
                             follower.leader_id, follower.leader_epoch, reason)
                follower.needs_truncation = True
                await trio.sleep(retry_s)
                retry_s = min(retry_s * 2, FOLLOW_RETRY_MAX_S)
