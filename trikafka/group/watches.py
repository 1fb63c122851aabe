"""The watches that request a rebalance: group members, subscribed topics, their brokers and leaders."""

from __future__ import annotations

from typing import Callable

import trio

from trikafka.zk import paths
from trikafka.zk.client import ZooKeeperClient

from .registry import StaticTopicCount, TopicCount


class RebalanceTriggers:
    """Calls ``request_rebalance`` whenever the group's members, the subscribed
    topics, their brokers or (replicated topics, docs/protocol.md §12.9) their
    assignments change.  ``start(nursery)`` starts the watches there."""

    def __init__(self, zk: ZooKeeperClient, group: str, topic_count: TopicCount,
                 request_rebalance: Callable[[], None]):
        self._zk = zk
        self._group = group
        self._topic_count = topic_count
        self._request_rebalance = request_rebalance
        self._nursery: trio.Nursery | None = None
        self._topic_watch_scopes: dict[str, trio.CancelScope] = {}

    def start(self, nursery: trio.Nursery) -> None:
        """Start watching, in ``nursery`` (the consumer's)."""
        self._nursery = nursery
        nursery.start_soon(self._watch_members)
        nursery.start_soon(self._watch_topics)

    async def _watch_members(self) -> None:
        async for _members in self._zk.watch_children(paths.consumer_ids(self._group)):
            self._request_rebalance()

    async def _watch_topics(self) -> None:
        assert self._nursery is not None
        topic_count = self._topic_count
        if isinstance(topic_count, StaticTopicCount):
            for topic in topic_count.counts:
                self._start_topic_watch(topic)
            return
        self._nursery.start_soon(self._watch_replicated_topic_list)
        async for topics in self._zk.watch_children(paths.broker_topics()):
            wanted = set(topic_count.streams_per_topic(topics or []))
            for topic in wanted - set(self._topic_watch_scopes):
                self._start_topic_watch(topic)
            for topic in set(self._topic_watch_scopes) - wanted:
                self._topic_watch_scopes.pop(topic).cancel()
            self._request_rebalance()

    async def _watch_replicated_topic_list(self) -> None:
        first = True
        async for _topics in self._zk.watch_children(paths.REPLICATED_TOPICS):
            if not first:
                self._request_rebalance()  # a wildcard may match the new replicated topic
            first = False

    def _start_topic_watch(self, topic: str) -> None:
        scope = trio.CancelScope()
        self._topic_watch_scopes[topic] = scope
        assert self._nursery is not None
        self._nursery.start_soon(self._watch_topic, topic, scope)

    async def _watch_topic(self, topic: str, scope: trio.CancelScope) -> None:
        with scope:
            async with trio.open_nursery() as nursery:
                # A replicated topic appears (or changes) under /trikafka/topics (§12.9).
                nursery.start_soon(self._watch_replicated_topic, topic)
                async for _brokers in self._zk.watch_children(paths.broker_topic(topic)):
                    self._request_rebalance()

    async def _watch_replicated_topic(self, topic: str) -> None:
        first = True
        async for _value in self._zk.watch_data(paths.replicated_topic(topic)):
            if not first:
                self._request_rebalance()
            first = False
