"""Routing and delivery: messages to partitions, one request per broker, retries on moved partitions.

Replicated topics (docs/protocol.md §12) are routed to each partition's
current leader (``view.leaders``).  A part refused because the leader moved
(NOT_LEADER_FOR_PARTITION, LEADER_NOT_AVAILABLE, a fenced epoch) or whose
leader's connection broke forgets that leader; the next round asks METADATA
again (``client.LeaderDirectory``, with its own backoff) and sends to the new
one.  Such failover rounds (and, on a replicated topic, acks -1 answers that
the write is not committed yet: 23, 24, 6) do not use up ``num_retries`` until
``leader_wait_s`` has passed since the first of them; every round waits a
doubling backoff, so a failover is never a busy loop.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

import trio

from trikafka.client import BrokerConnectionError, BrokerError, ExtensionNotSupported, ProducePart
from trikafka.client.leaders import DEFAULT_REFRESH_BACKOFF_MAX_S, LeaderDirectory, LeaderNotAvailableError
from trikafka.wire import NO_LEADER, ErrorCode, LocalProtocolError, is_retriable, needs_leader_refresh

from .encoding import encode_part
from .errors import (
    AcksNotSupportedError,
    BrokerRejectedError,
    NoBrokersAvailableError,
    PartitionerError,
    ProducerError,
)
from .partitioner import BrokerPartition
from .results import SendResult

log = logging.getLogger("trikafka.producer.producer")  # one logger for the whole producer

# A queued message: (topic, key, payload, delivery or None).
_Message = tuple[str, Any, bytes, "Delivery | None"]


class Routing:
    """The path both modes share: route messages, send each broker its parts, collect results.

    Part of ``Producer``: the state it uses is set up in ``Producer.__init__``.
    """

    async def _deliver(self, messages: Sequence[_Message]) -> list[SendResult]:
        """Send ``messages`` (retrying as configured); one result per message, in order."""
        results: list[SendResult | None] = [None] * len(messages)
        last_error: dict[int, ProducerError | BrokerConnectionError] = {}
        todo = list(range(len(messages)))
        attempts = self.config.num_retries + 1
        assert self._discovery is not None
        attempt = rounds = 0
        leader_deadline: float | None = None
        while True:
            if rounds:
                backoff_s = self.config.retry_backoff_s * 2 ** (rounds - 1)
                cap_s = self.config.reconnect_backoff_max_s
                if leader_deadline is not None:  # a failover: look again soon
                    cap_s = min(cap_s, DEFAULT_REFRESH_BACKOFF_MAX_S)
                await trio.sleep(min(backoff_s, cap_s))
            rounds += 1
            topics = {messages[i][0] for i in todo}
            for topic in topics:
                await self._discovery.ensure_topic(topic)
            await self._refresh_leaders(topics)
            by_broker = self._route(messages, todo, results, last_error)
            if len(by_broker) == 1:
                [(broker_id, parts)] = by_broker.items()
                await self._send_to_broker(broker_id, parts, messages, results, last_error)
            elif by_broker:
                async with trio.open_nursery() as nursery:
                    for broker_id, parts in by_broker.items():
                        nursery.start_soon(self._send_to_broker, broker_id, parts, messages, results,
                                           last_error)
            todo = [i for i in todo if results[i] is None]
            if not todo:
                break
            if all(self._leader_trouble(messages[i][0], last_error.get(i)) for i in todo):
                now = trio.current_time()
                if leader_deadline is None:
                    leader_deadline = now + self.config.leader_wait_s
                if now < leader_deadline:
                    continue  # waiting out a failover does not use up num_retries
            attempt += 1
            if attempt >= attempts:
                break
        for i in todo:
            cause = last_error.get(i)
            error = NoBrokersAvailableError(
                f"no broker took the message for {messages[i][0]!r} in {attempts} attempt(s)"
                + (f"; last error: {cause}" if cause is not None else ""))
            error.__cause__ = cause
            results[i] = SendResult(messages[i][0], None, None, error=error)
        failures = sum(1 for r in results if r is not None and r.error is not None)
        if self.audit is not None:  # count each message once, when it is finally delivered
            for message, result in zip(messages, results):
                if result is not None and result.error is None:
                    self.audit.delivered(message[0], message[2])
        self.messages_failed += failures
        self.messages_sent += len(messages) - failures
        return results  # type: ignore[return-value]

    def _leaders_directory(self) -> LeaderDirectory:
        directory = self._leader_directory
        if directory is None:
            assert self._discovery is not None
            view = self._discovery.view
            config = self.config
            kwargs = {} if self._connector is None else {"connector": self._connector}
            directory = self._leader_directory = LeaderDirectory(
                lambda: [view.brokers[b] for b in sorted(view.brokers)], cache=view.leaders,
                connect_kwargs=dict(connect_timeout_s=config.connect_timeout_s,
                                    request_timeout_s=config.request_timeout_s), **kwargs)
        return directory

    async def _refresh_leaders(self, topics) -> None:
        """METADATA for the replicated ``topics`` with a partition whose leader is not known."""
        assert self._discovery is not None
        leaders = self._discovery.view.leaders
        stale = [t for t in topics if leaders.replicated(t) and leaders.missing_leaders([t])]
        if stale:
            await self._leaders_directory().refresh(stale)
            self._discovery.view.leaders_changed()

    def _leader_moved(self, topic: str, partition: int) -> None:
        assert self._discovery is not None
        self._discovery.view.leaders.invalidate(topic, partition)
        self._discovery.view.leaders_changed()

    def _leader_trouble(self, topic: str, error: BaseException | None) -> bool:
        """Whether a message failed only because of a failover in progress: its leader moved
        or is not known, or (a replicated topic) its leader broke off or could not commit it
        yet because the ISR has not shrunk past a dead follower (23, 24, 6)."""
        if isinstance(error, LeaderNotAvailableError):
            return True
        if isinstance(error, BrokerRejectedError) and needs_leader_refresh(error.error_code):
            return True
        assert self._discovery is not None
        if not self._discovery.view.leaders.replicated(topic):
            return False
        if isinstance(error, BrokerRejectedError):
            return is_retriable(error.error_code)
        return isinstance(error, BrokerConnectionError)

    def _targets(self, topic: str) -> tuple[list[BrokerPartition], list[BrokerPartition]]:
        """(every partition, those with a known leader on brokers not backing off) of ``topic``."""
        assert self._discovery is not None and self._pool is not None
        every = self._discovery.partitions(topic)
        led = [bp for bp in every if bp.broker_id != NO_LEADER]
        available = [bp for bp in led if self._pool.available(bp.broker_id)]
        return every, (available or led or every)

    def _route(self, messages: Sequence[_Message], todo: list[int], results: list[SendResult | None],
               last_error: dict) -> dict[int, list[tuple[str, int, list[int]]]]:
        """Group ``todo`` by broker, then by (topic, partition); routing failures are final."""
        per_topic: dict[str, tuple[list[BrokerPartition], list[BrokerPartition],
                                   dict[BrokerPartition, list[int]]]] = {}
        rand = self._rng.random
        partitioner = self._partitioner
        for i in todo:
            topic, key = messages[i][0], messages[i][1]
            info = per_topic.get(topic)
            if info is None:
                every, available = self._targets(topic)
                info = per_topic[topic] = (every, available, {})
            every, available, routed = info
            if not every:
                last_error[i] = NoBrokersAvailableError(f"no live broker is known for {topic!r}")
                continue
            if key is None:
                n = len(available)
                target = available[int(rand() * n)] if n > 1 else available[0]
            else:
                try:
                    index = partitioner(key, len(every))
                    if type(index) is not int or not 0 <= index < len(every):
                        raise ValueError(f"partitioner returned {index!r} for {len(every)} partitions")
                except Exception as exc:
                    error = PartitionerError(f"cannot partition key {key!r}: {exc}")
                    error.__cause__ = exc
                    results[i] = SendResult(topic, None, None, error=error)
                    continue
                target = every[index]
            if target.broker_id == NO_LEADER:
                last_error[i] = LeaderNotAvailableError(topic, target.partition)
                continue
            bucket = routed.get(target)
            if bucket is None:
                routed[target] = [i]
            else:
                bucket.append(i)
        by_broker: dict[int, list[tuple[str, int, list[int]]]] = {}
        for topic, (_every, _available, routed) in per_topic.items():
            for target, indices in routed.items():
                by_broker.setdefault(target.broker_id, []).append((topic, target.partition, indices))
        return by_broker

    async def _send_to_broker(self, broker_id: int, parts: list[tuple[str, int, list[int]]],
                              messages: Sequence[_Message], results: list[SendResult | None],
                              last_error: dict) -> None:
        """One request to ``broker_id``; fills ``results`` (or ``last_error`` for a retry)."""
        assert self._pool is not None
        config = self.config
        payloads = [[messages[i][2] for i in indices] for _, _, indices in parts]
        try:
            conn = await self._pool.get(broker_id)  # backs off by itself when it cannot connect
        except BrokerConnectionError as exc:
            self._forget_leaders(parts)
            for _, _, indices in parts:
                for i in indices:
                    last_error[i] = exc
            return
        try:
            encoded = [encode_part(p, config.codec_for(topic), config.max_message_size, config.gzip_level)
                       for p, (topic, _, _) in zip(payloads, parts)]
            self.requests_sent += 1
            if config.acks == 0:
                if len(parts) == 1:
                    await conn.produce(parts[0][0], parts[0][1], encoded[0].data)
                else:
                    await conn.multiproduce([ProducePart(t, p, e.data) for (t, p, _), e in zip(parts, encoded)])
                acked = None
            else:
                acked = await conn.produce_acked(
                    [ProducePart(t, p, e.data) for (t, p, _), e in zip(parts, encoded)],
                    acks=config.acks, timeout_ms=int(config.ack_timeout_s * 1000))
        except ExtensionNotSupported as exc:
            # A plain 0.7 broker closes at once on PRODUCE_ACKED, but so does a broker
            # that dies just then: only a second time in a row on a new connection
            # (a dead one refuses the connect) is taken as a plain 0.7 broker.
            strikes = self._extension_strikes[broker_id] = self._extension_strikes.get(broker_id, 0) + 1
            if strikes < 2:
                await self._pool.failed(broker_id, conn)
                for _, _, indices in parts:
                    for i in indices:
                        last_error[i] = exc
                return
            error = AcksNotSupportedError(
                f"broker {broker_id} is a plain 0.7 broker without PRODUCE_ACKED; use acks=0 ({exc})")
            for topic, partition, indices in parts:
                for i in indices:
                    results[i] = SendResult(topic, broker_id, partition, error=error)
            return
        except (BrokerError, LocalProtocolError) as exc:
            # A top-level error code, or a request the protocol cannot express:
            # sending it again would not help.
            error = ProducerError(f"broker {broker_id} could not take the request: {exc}")
            error.__cause__ = exc
            for topic, partition, indices in parts:
                for i in indices:
                    results[i] = SendResult(topic, broker_id, partition, error=error)
            return
        except BrokerConnectionError as exc:
            await self._pool.failed(broker_id, conn)
            self._forget_leaders(parts)
            log.info("broker %d failed (%s); %d message(s) to retry", broker_id, exc,
                     sum(len(ix) for _, _, ix in parts))
            for _, _, indices in parts:
                for i in indices:
                    last_error[i] = exc
            return
        self._pool.succeeded(broker_id)
        self._extension_strikes.pop(broker_id, None)
        if acked is None:
            for topic, partition, indices in parts:
                shared = SendResult(topic, broker_id, partition)  # acks 0: nothing more is known
                for i in indices:
                    results[i] = shared
            return
        for (topic, partition, indices), part_payloads, enc, answer in zip(parts, payloads, encoded, acked):
            if answer.error == ErrorCode.NO_ERROR:
                offsets = enc.message_offsets(part_payloads, answer.base_offset)
                for i, (offset, next_offset) in zip(indices, offsets):
                    results[i] = SendResult(topic, broker_id, answer.partition, offset, next_offset)
                continue
            error = BrokerRejectedError(answer.error, topic, broker_id, partition)
            if needs_leader_refresh(answer.error):
                self._leader_moved(topic, partition)
            for i in indices:
                if is_retriable(answer.error):
                    last_error[i] = error
                else:
                    results[i] = SendResult(topic, broker_id, partition, error=error)

    def _forget_leaders(self, parts: list[tuple[str, int, list[int]]]) -> None:
        """The connection to a leader broke: look its replicated partitions up again."""
        assert self._discovery is not None
        for topic, partition, _ in parts:
            if self._discovery.view.leaders.replicated(topic):
                self._leader_moved(topic, partition)
