"""Starting a broker's replication (docs/protocol.md §12): what it must know first.

``start_replication`` works out whether this broker's unflushed tail survived
its last stop (§12.2 ``tail_intact``: a clean stop, or a crash without a
reboot), builds the manager with the engine (``broker/engine/``) and the
``ReplicationView`` the engine's directory reads, and starts it in the
broker's services nursery.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Awaitable, Callable

import trio

from ..engine.waiters import VisibleEndWaiters
from ..seams import Flusher, LogDirectory, RunBlocking
from .manager import Replication, SettingsChanges
from .membership import record_boot_id, tail_intact
from .tail import keep_tail_status
from .view import ReplicationView

if TYPE_CHECKING:
    from ..engine.engine import Engine
    from ..zookeeper import BrokerZooKeeper

# How long a broker asked to stop waits for the controller to move its leaderships away.
CONTROLLED_SHUTDOWN_TIMEOUT_S = 5.0


async def start_replication(*, nursery: trio.Nursery, broker_id: int, zookeeper: BrokerZooKeeper,
                            engine: Engine, view: ReplicationView, log_manager: LogDirectory, flusher: Flusher,
                            waiters: VisibleEndWaiters,
                            run_blocking: RunBlocking,
                            open_stream: Callable[[str, int], Awaitable[trio.abc.Stream]],
                            kafka_port: int | None = None,
                            on_role: Callable[[str, int, str], None] | None = None,
                            broker_settings: SettingsChanges | None = None) -> Replication:
    """Start replication once the broker is registered; it, running.  It keeps ``view`` up to date:
    the engine's directory was built with it.  ``on_role``: told
    (topic, partition, role) after each partition state it applies (the Kafka listener's coordinators);
    ``broker_settings``: the dynamic settings it follows (§20.4)."""
    boot_now = await run_blocking(log_manager.fs.boot_id)
    previous = await run_blocking(functools.partial(record_boot_id, log_manager.fs, log_manager.log_dir, boot_now))
    # A log dir that held no logs had no tail to lose.
    clean = not log_manager.recovered or not log_manager.logs()
    intact = tail_intact(clean_shutdown=clean, boot_id_now=boot_now, boot_id_at_last_start=previous)
    intact = await run_blocking(functools.partial(keep_tail_status, log_manager.fs, log_manager.log_dir, intact))
    manager = Replication(broker_id=broker_id, zk=zookeeper.coordinator, address=engine.admin.self_broker,
                             view=view, directory=engine.directory, log_manager=log_manager, flusher=flusher, waiters=waiters,
                             run_blocking=run_blocking, open_stream=open_stream, tail_intact=intact,
                             on_replicated_topic=zookeeper.replicated.add, kafka_port=kafka_port,
                             on_role=on_role, broker_settings=broker_settings)
    return await nursery.start(manager.run)
