"""A lost tail stays lost until it is copied again (docs/protocol.md §12.2).

After a reboot without a clean stop a broker's replicas may lack bytes that
were committed; ``tail_intact`` in ``/trikafka/brokers/<id>`` tells the
controller not to elect it.  A clean stop before the bytes were copied back
must not make it trustworthy again, so the state is kept on disk
(``.trikafka-tail-lost``) and cleared only once every replica this broker
hosts caught up with its leader.  Meanwhile each replica that caught up is
listed in ``tail_copied``, which makes the broker electable for it.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Awaitable, Callable, Mapping

from ...log.fs import FileSystem
from ...log.names import TAIL_LOST_FILE
from ...zk.errors import ZooKeeperClientError

if TYPE_CHECKING:
    from .hosted import HostedPartition

logger = logging.getLogger(__name__)
Hosted = Mapping[tuple[str, int], "HostedPartition"]  # (topic, partition) -> this broker's replica


def keep_tail_status(fs: FileSystem, log_dir: str, intact_now: bool) -> bool:
    """The ``tail_intact`` this start goes by: False while the tail-lost file exists,
    which a start that finds its tail lost creates (durably). Blocking."""
    path = os.path.join(log_dir, TAIL_LOST_FILE)
    if not intact_now and not fs.exists(path):
        fs.create_file(path)
        fs.fsync_dir(log_dir)
    return intact_now and not fs.exists(path)


def forget_tail_lost(fs: FileSystem, log_dir: str) -> None:
    """Remove the tail-lost file (durably): every replica was copied again. Blocking."""
    path = os.path.join(log_dir, TAIL_LOST_FILE)
    if fs.exists(path):
        fs.remove(path)
        fs.fsync_dir(log_dir)


def _caught_up(hosted: HostedPartition) -> bool:
    # Since this start, the follower held bytes of its leader's epoch and reached a response's HW.
    return hosted.follower is not None and hosted.follower.caught_up


def copied_again(broker_id: int, hosted: Hosted, copied: set[tuple[str, int]]) -> bool:
    """Whether every hosted replica (``(topic, partition) -> HostedPartition``) is in ``copied`` (those
    ``copied_partitions`` found since this start): the broker then holds every byte committed before,
    lost tail included.  (A replica may lead once copied, so it is not required to follow now.)"""
    return all(tp in copied for tp, h in hosted.items() if broker_id in h.replicas)


def copied_partitions(broker_id: int, hosted: Hosted) -> set[tuple[str, int]]:
    """The hosted replicas (``(topic, partition) -> HostedPartition``) that follow a leader and have
    caught up with it since this start: each holds every byte of its partition committed before."""
    return {tp for tp, h in hosted.items() if broker_id in h.replicas and _caught_up(h)}


class TailStatus:
    """A broker's §12.2 tail status: ``intact``, or lost with ``copied`` the replicas it copied again
    since this start (kept in memory only: a start with the tail-lost file begins with none)."""

    def __init__(self, broker_id: int, intact: bool) -> None:
        self.broker_id = broker_id
        self.intact = intact
        self.copied: set[tuple[str, int]] = set()

    async def until_copied(self, hosted: Hosted, progress: Callable[[], Awaitable[None]],
                           register: Callable[[], Awaitable[None]], connected: Callable[[], Awaitable[None]],
                           forget: Callable[[], Awaitable[None]]) -> None:
        """Follow the hosted replicas (``hosted`` is live; ``progress()`` returns after a change)
        until every one is copied again, then ``forget()`` the lost tail (``forget_tail_lost``).
        Each time more are copied, and at the end, ``register()`` writes the membership node
        again; a failed last one is retried once ``connected()`` returns."""
        published: set[tuple[str, int]] = set()
        while True:
            self.copied |= copied_partitions(self.broker_id, hosted)
            if copied_again(self.broker_id, hosted, self.copied):
                break
            if self.copied != published and await self._said(register):
                logger.info("tail copied again for %s", sorted(self.copied - published))
                published = set(self.copied)
            await progress()  # (a failed registration is tried again after the next change)
        await forget()
        self.intact = True  # every later registration says so
        logger.info("every replica caught up with its leader: this broker's tail is intact again")
        while not await self._said(register):
            await connected()

    @staticmethod
    async def _said(register: Callable[[], Awaitable[None]]) -> bool:
        try:
            await register()
            return True
        except ZooKeeperClientError as exc:
            logger.warning("could not say how much of the tail is copied again (%s); retrying", exc)
            return False
