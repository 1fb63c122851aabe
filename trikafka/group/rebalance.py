"""Rebalancing: read the group, assign, release what we lose, claim what we gain."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping

import trio
from trio_util import AsyncBool

from trikafka.client.leaders import LeaderDirectory
from trikafka.zk import paths
from trikafka.zk.client import ZooKeeperClient
from trikafka.zk.ops import CheckOp, CreateOp, Op
from trikafka.zk.replication_store import read_assignment, replicated_topics
from trikafka.zk.replication_values import ReplicationValueError
from trikafka.zk.errors import (
    BadVersionError,
    ConnectionLossError,
    NodeExistsError,
    NoNodeError,
    SessionExpiredError,
)

from .assign import consumer_assignment
from .commits import FencedCommits
from .config import GroupConfig
from .errors import RebalanceFailedError, _Conflict, _Reregister
from .fetch_control import Fetchers
from .fetcher import PartitionKey
from .membership import STALE_TAKEOVERS_MAX, Membership, take_over_stale
from .ownership import Ownership, key_of, offset_path, owner_path
from .registry import (
    RegistryValueError,
    TopicCount,
    decode_offset,
    decode_owner,
    decode_topic_count,
    encode_owner,
)

log = logging.getLogger("trikafka.group.consumer")  # one logger for the whole consumer


class Rebalancer:
    """Coalesced, incremental, all-or-nothing rebalances.

    ``request()`` asks for one; ``run()`` (a task) performs them, under
    ``lock``, releasing through ``commits`` and restarting ``fetchers`` at
    each ownership change.  ``rebalancing`` is True while one changes the
    ownership (delivery waits); ``rebalances`` counts those that did.
    """

    def __init__(self, zk: ZooKeeperClient, group: str, config: GroupConfig, *, lock: trio.Lock,
                 membership: Membership, ownership: Ownership, commits: FencedCommits, fetchers: Fetchers,
                 leaders: LeaderDirectory):
        self._zk = zk
        self._group = group
        self._config = config
        self._lock = lock
        self._membership = membership
        self._ownership = ownership
        self._commits = commits
        self._fetchers = fetchers
        self._leaders = leaders
        self.consumer_id = membership.consumer_id
        self.rebalances = 0  # successful rebalances that changed ownership
        self._needed = AsyncBool(True)
        self.rebalancing = AsyncBool(False)
        self._settled = AsyncBool(False)

    def request(self) -> None:
        """Something changed: rebalance (coalesced with other requests)."""
        self._needed.value = True
        self._settled.value = False

    def unsettle(self) -> None:
        """The ownership was dropped: not settled until the next rebalance."""
        self._settled.value = False

    async def wait_settled(self, timeout_s: float | None = None) -> bool:
        """Wait until no rebalance is pending or running; False on timeout."""
        with trio.move_on_after(math.inf if timeout_s is None else timeout_s):
            while True:
                await self._settled.wait_value(True)
                if not self._needed.value and not self.rebalancing.value:
                    return True
                await trio.sleep(0)
        return False

    async def run(self) -> None:
        """Rebalance whenever requested, forever."""
        while True:
            await self._needed.wait_value(True)
            if self._config.rebalance_coalesce_s:
                await trio.sleep(self._config.rebalance_coalesce_s)  # let a burst of events arrive
            self._needed.value = False
            await self._rebalance_with_retries()
            if not self._needed.value:
                self._settled.value = True

    async def _rebalance_with_retries(self) -> None:
        failures = 0
        while True:
            await self._zk.wait_connected()
            try:
                async with self._lock:
                    self._membership.check_session()
                    if not self._membership.registered:
                        await self._membership.register()
                    self._needed.value = False
                    await self._rebalance_once()
                return
            except (ConnectionLossError, SessionExpiredError) as exc:
                log.info("consumer %s: rebalance interrupted (%s); retrying", self.consumer_id, exc)
                await self._zk.wait_reconnected()
                continue
            except _Reregister:
                self._membership.registered = False
                continue
            except (_Conflict, NoNodeError, NodeExistsError, BadVersionError, RegistryValueError, KeyError) as exc:
                failures += 1
                if failures >= self._config.rebalance_retries_max:
                    raise RebalanceFailedError(
                        f"consumer {self.consumer_id} could not rebalance after {failures} attempts: {exc}"
                    ) from exc
                log.info("consumer %s: rebalance attempt %d failed: %s; retrying within %.2f s",
                         self.consumer_id, failures, exc, self._config.rebalance_backoff_s)
                if isinstance(exc, _Conflict) and exc.path is not None:
                    # The usual conflict: the previous owner has not released yet.  Retry
                    # as soon as it does (its release is a delete), within the back-off.
                    with trio.move_on_after(self._config.rebalance_backoff_s):
                        await self._wait_gone(exc.path)
                    continue
            await trio.sleep(self._config.rebalance_backoff_s)

    async def _wait_gone(self, path: str) -> None:
        watch = self._zk.watch_data(path)
        try:
            async for value in watch:
                if value is None:
                    return
        finally:
            watch.stop()

    async def _read_group(self) -> tuple[dict[str, TopicCount], dict[str, dict[int | None, int]]]:
        """Members' registry values and, for our topics, each broker's partition count.

        A replicated topic (``/trikafka/topics/<t>``, docs/protocol.md §12.9) counts as
        ``{None: n}``: partitions named ``<p>``, fetched from their current leader.
        """
        ids_path = paths.consumer_ids(self._group)
        members: dict[str, TopicCount] = {}
        for member in await self._zk.children(ids_path):
            try:
                data, _stat = await self._zk.get(f"{ids_path}/{member}")
            except NoNodeError:
                continue  # left meanwhile; its own departure triggers another rebalance
            members[member] = decode_topic_count(data)
        if self.consumer_id not in members:
            raise _Reregister()
        try:
            all_topics = await self._zk.children(paths.broker_topics())
        except NoNodeError:
            all_topics = []
        replicated = await replicated_topics(self._zk)
        all_topics = sorted(set(all_topics) | set(replicated))
        mine = set(members[self.consumer_id].streams_per_topic(all_topics))
        broker_topics: dict[str, dict[int | None, int]] = {t: {} for t in all_topics}
        for topic in mine:
            if topic in replicated:
                try:
                    assignment = await read_assignment(self._zk, topic)
                except ReplicationValueError as exc:
                    raise RegistryValueError(f"{paths.replicated_topic(topic)}: {exc}") from None
                if assignment is not None:
                    broker_topics[topic] = {None: len(assignment.replicas)}
                    self._leaders.cache.mark_replicated(topic, len(assignment.replicas))
                    continue
            try:
                brokers = await self._zk.children(paths.broker_topic(topic))
            except NoNodeError:
                continue
            for broker in brokers:
                try:
                    data, _stat = await self._zk.get(paths.broker_topic_id(topic, int(broker)))
                    broker_topics.setdefault(topic, {})[int(broker)] = int(data.decode("ascii"))
                except NoNodeError:
                    continue
                except ValueError as exc:
                    raise RegistryValueError(f"/brokers/topics/{topic}/{broker}: {exc}") from None
        return members, broker_topics

    async def _rebalance_once(self) -> None:
        """One attempt: release what we lose (committed first), claim what we gain."""
        ownership = self._ownership
        session_seen = self._membership.session_seen
        members, broker_topics = await self._read_group()
        self._membership.check_same_session(session_seen)
        assignment = consumer_assignment(self.consumer_id, members, broker_topics)
        target = {(topic, part): thread for topic, per_thread in assignment.items()
                  for thread, parts in per_thread.items() for part in parts}
        # A partition kept under another thread id (the thread ranges shifted) is
        # released and claimed again, so its owner node names the right thread.
        lose = {key for key in ownership.owned if target.get(key) != ownership.threads.get(key)}
        gain = {key: thread for key, thread in target.items()
                if key not in ownership.owned or key in lose}
        orphans = ownership.unrecorded - gain.keys()
        if not lose and not gain and not orphans:
            if ownership.generation == 0:  # never owned anything: an idle member says so (more members than partitions)
                log.info("consumer %s owns 0 partitions (generation 0)", self.consumer_id)
            return
        self.rebalancing.value = True
        try:
            self._fetchers.stop()
            ownership.new_generation()  # everything fetched so far is stale
            if lose or orphans:
                # Owner nodes of an interrupted claim that we no longer want go too.
                await self._commits.commit_and_release(lose, release=lose | orphans)
                self._membership.check_same_session(session_seen)
                if not self._membership.registered:
                    raise _Reregister()
                ownership.forget(lose)  # released, or already taken from us: either way not ours
                ownership.forget_unrecorded(orphans)
            if gain:
                await self._claim(gain, session_seen)
            self.rebalances += 1
            log.info("consumer %s owns %d partitions (generation %d)", self.consumer_id,
                     len(ownership.owned), ownership.generation)
        finally:
            self._fetchers.start(ownership.fetch_targets())
            self.rebalancing.value = False

    async def _claim(self, gain: Mapping[PartitionKey, str], session_seen: int) -> None:
        """Create every owner node of ``gain`` in one multi (or none), then read the offsets.

        Offsets are read only once the partitions are ours: the previous owner
        commits as it releases, so an earlier read could miss its last commit.
        A node this session already created in an interrupted attempt is
        adopted; one left by an earlier session of ours is replaced.
        """
        ownership, membership = self._ownership, self._membership
        for topic in {key[0] for key in gain}:
            await self._zk.ensure_path(paths.consumer_owners(self._group, topic))
            await self._zk.ensure_path(paths.consumer_offsets(self._group, topic))
        adopted = set(ownership.unrecorded & gain.keys())
        for _ in range(STALE_TAKEOVERS_MAX + len(gain)):
            ops: list[Op] = [CheckOp(membership.ids_path, membership.ids_version)]
            created = [key for key in sorted(gain) if key not in adopted]
            ops += [CreateOp(owner_path(self._group, key), encode_owner(gain[key]), ephemeral=True)
                    for key in created]
            try:
                await self._zk.multi(ops)
                ownership.created(created, 0)
                break
            except (NoNodeError, BadVersionError) as exc:
                if exc.op_index in (0, None):
                    await membership.raise_if_taken_over()
                    raise _Reregister() from None
                raise
            except NodeExistsError as exc:
                failed = ops[exc.op_index or 0]
                assert isinstance(failed, CreateOp)
                verdict, version = await self._inspect_owner_node(failed.path, failed.value)
                if verdict == "ours":
                    assert version is not None
                    key = key_of(failed.path)
                    adopted.add(key)
                    ownership.created([key], version)
                elif verdict != "gone":
                    holder = await self._holder(failed.path)
                    ownership.unrecord(adopted)  # released by the next attempt unless wanted
                    raise _Conflict(f"{failed.path} is held by {holder}", failed.path) from None
        else:
            raise _Conflict("owner nodes keep coming back")
        membership.check_same_session(session_seen)
        ownership.unrecord(gain.keys())  # until the offsets are read
        starts: dict[PartitionKey, int | None] = {}
        present: set[PartitionKey] = set()
        for key in gain:
            try:
                data, _stat = await self._zk.get(offset_path(self._group, key))
                present.add(key)
                starts[key] = decode_offset(data)
            except NoNodeError:
                starts[key] = None
        membership.check_same_session(session_seen)
        ownership.add(gain, starts, present)

    async def _inspect_owner_node(self, path: str, value: bytes) -> tuple[str, int | None]:
        """Who holds the owner node at ``path``: ``("ours", version)`` (this
        session, now or after replacing one left by another session with our
        thread id), ``("gone", None)`` (vanished: create it again) or
        ``("other", None)``."""
        verdict, version = await take_over_stale(self._zk, path, value, value, self.consumer_id)
        return ("ours" if verdict == "replaced" else verdict), version

    async def _holder(self, path: str) -> str:
        try:
            data, _stat = await self._zk.get(path)
            return decode_owner(data)
        except (NoNodeError, RegistryValueError):
            return "nobody (released meanwhile)"
