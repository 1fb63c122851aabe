"""A lost tail stays lost until it is copied again (docs/protocol.md §12.2).

After a reboot without a clean stop a broker's replicas may lack bytes that
were committed; ``tail_intact`` in ``/trikafka/brokers/<id>`` tells the
controller not to elect it.  A clean stop before the bytes were copied back
must not make it trustworthy again, so the state is kept on disk
(``.trikafka-tail-lost``) and cleared only once every replica this broker
hosts caught up with its leader.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Iterable

from ...log.fs import FileSystem
from ...log.names import TAIL_LOST_FILE

if TYPE_CHECKING:
    from .hosted import HostedPartition


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


def copied_again(broker_id: int, hosted: Iterable[HostedPartition]) -> bool:
    """Whether every hosted replica (``HostedPartition``) follows a leader and has caught up with
    it since this start: it then holds every byte committed before, lost tail included."""
    return all(h.follower is not None and h.follower.caught_up for h in hosted if broker_id in h.replicas)
