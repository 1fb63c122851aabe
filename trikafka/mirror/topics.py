"""Creating a mirrored topic on the target cluster (docs/protocol.md §13.3)."""

from __future__ import annotations

import logging

import trio

from trikafka.client import ClientError, ExtensionNotSupported, connect
from trikafka.wire import ErrorCode
from trikafka.zk import paths
from trikafka.zk.client import ZooKeeperClient
from trikafka.zk.errors import NoNodeError
from trikafka.zk.registry_values import parse_broker_registration, parse_partition_count

log = logging.getLogger(__name__)


async def registered_counts(zk: ZooKeeperClient, topic: str) -> dict[int, int]:
    """``{broker id: partitions}`` that a cluster's brokers register for ``topic``."""
    try:
        children = await zk.children(paths.broker_topic(topic))
    except NoNodeError:
        return {}
    counts: dict[int, int] = {}
    for child in children:
        if not child.isdigit():
            continue
        try:
            data, _stat = await zk.get(paths.broker_topic_id(topic, int(child)))
            counts[int(child)] = parse_partition_count(data)
        except (NoNodeError, ValueError, UnicodeDecodeError):
            continue
    return counts


async def live_brokers(zk: ZooKeeperClient) -> dict[int, tuple[str, int]]:
    """``{broker id: (host, port)}`` of a cluster's registered brokers."""
    brokers: dict[int, tuple[str, int]] = {}
    try:
        children = await zk.children(paths.broker_ids())
    except NoNodeError:
        return brokers
    for child in children:
        if not child.isdigit():
            continue
        try:
            data, _stat = await zk.get(paths.broker_id(int(child)))
            info = parse_broker_registration(data)
        except (NoNodeError, ValueError, UnicodeDecodeError):
            continue
        brokers[int(child)] = (info.host, info.port)
    return brokers


class TargetTopics:
    """Creates each mirrored topic once on every live target broker.

    The count is the largest any source broker registers for the topic; a
    target that already has the topic keeps its count (error 9), and a plain
    0.7 target (no CREATE_TOPIC) keeps whatever its settings give.  ``ensure``
    returns once every broker that created the topic registered it in ZooKeeper
    (or after ``register_timeout_s``), so the producer sees its partitions.
    """

    def __init__(self, target_zk: ZooKeeperClient, *, connect_timeout_s: float = 5.0,
                 register_timeout_s: float = 10.0) -> None:
        self._zk = target_zk
        self._done: set[str] = set()
        self._lock = trio.Lock()
        self.connect_timeout_s = connect_timeout_s
        self.register_timeout_s = register_timeout_s

    async def ensure(self, topic: str, source_zk: ZooKeeperClient) -> None:
        if topic in self._done:
            return
        async with self._lock:
            if topic in self._done:
                return
            counts = await registered_counts(source_zk, topic)
            partitions = max(counts.values(), default=1)
            outcomes = {broker_id: await self._create_on(broker_id, host, port, topic, partitions)
                        for broker_id, (host, port) in sorted((await live_brokers(self._zk)).items())}
            if False in outcomes.values():
                return
            await self._wait_registered(topic, {b for b, created in outcomes.items() if created})
            self._done.add(topic)

    async def _wait_registered(self, topic: str, brokers: set[int]) -> None:
        # A broker registers a new topic in ZooKeeper on its own time; a producer that looked
        # before that would see no partitions for it and send the first set to the wrong one.
        with trio.move_on_after(self.register_timeout_s):
            async for _children in self._zk.watch_children(paths.broker_topic(topic)):
                if brokers <= set(await registered_counts(self._zk, topic)):
                    return
        log.warning("%s is not registered by every target broker after %.0f s; mirroring anyway",
                    topic, self.register_timeout_s)

    async def _create_on(self, broker_id: int, host: str, port: int, topic: str, partitions: int) -> bool | None:
        """True: the broker has the topic; None: it has no CREATE_TOPIC; False: failed (retried later)."""
        try:
            async with await connect(host, port, connect_timeout_s=self.connect_timeout_s,
                                     request_timeout_s=self.connect_timeout_s) as conn:
                result = await conn.create_topic(topic, partitions)
        except ExtensionNotSupported:
            log.info("target broker %d has no CREATE_TOPIC; %s keeps its configured count", broker_id, topic)
            return None
        except (ClientError, OSError) as exc:
            log.warning("creating %s on target broker %d failed: %s (retried later)", topic, broker_id, exc)
            return False
        if result.error not in (ErrorCode.NO_ERROR, ErrorCode.TOPIC_ALREADY_EXISTS):
            log.warning("target broker %d refused to create %s with %d partitions: error %d", broker_id, topic,
                        partitions, int(result.error))
        elif result.error != ErrorCode.NO_ERROR:
            log.info("%s already has %d partitions on target broker %d", topic, result.partitions, broker_id)
        return True


__all__ = ["TargetTopics", "live_brokers", "registered_counts"]
