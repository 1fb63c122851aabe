"""Delivery: one request per broker for routed messages, retried until answered or given up.

A failed request is retried ``num_retries`` times, re-routed each time (keyed
messages move only if the partition list changed).  With ``acks`` 1/-1 a
message is reported delivered only when the broker said it was appended (1)
or flushed (-1); a retry after a lost answer can therefore duplicate a
message, never lose one silently.

Failover rounds on replicated topics (docs/protocol.md §12.13: a leader moved or
is not known, and, on a replicated topic, acks -1 answers that the write is
not committed yet: 23, 24, 6) do not use up ``num_retries`` until
``leader_wait_s`` has passed since the first of them; every round waits a
doubling backoff, so a failover is never a busy loop.
"""

from __future__ import annotations

import logging
from typing import Sequence

import trio

from trikafka.client.connection import Connection
from trikafka.client.errors import BrokerConnectionError, BrokerError, ExtensionNotSupported
from trikafka.client.leaders import DEFAULT_REFRESH_BACKOFF_MAX_S, LeaderNotAvailableError
from trikafka.wire import (
    NO_LEADER,
    ErrorCode,
    LocalProtocolError,
    ProduceAckedResult,
    ProducePart,
    is_retriable,
    needs_leader_refresh,
)

from .audit import AuditTrail
from .config import ProducerConfig
from .encoding import encode_part
from .errors import AcksNotSupportedError, BrokerRejectedError, NoBrokersAvailableError, ProducerError
from .pool import BrokerPool
from .results import SendResult, SendStats
from .routing import Message, Part, RetryErrors, Router

log = logging.getLogger("trikafka.producer.producer")  # one logger for the whole producer


class Dispatcher:
    """Sends messages where ``router`` says, over ``pool``'s connections, as ``config`` says.

    Counts into ``stats``; with ``audit``, counts each delivered message there once.
    """

    def __init__(self, config: ProducerConfig, router: Router, pool: BrokerPool, stats: SendStats,
                 audit: AuditTrail | None = None) -> None:
        self._config = config
        self._router = router
        self._pool = pool
        self._stats = stats
        self._audit = audit
        self._extension_strikes: dict[int, int] = {}  # broker id -> PRODUCE_ACKED refusals in a row

    async def deliver(self, messages: Sequence[Message]) -> list[SendResult]:
        """Send ``messages`` (retrying as configured); one result per message, in order."""
        config = self._config
        results: list[SendResult | None] = [None] * len(messages)
        last_error: RetryErrors = {}
        todo = list(range(len(messages)))
        attempts = config.num_retries + 1
        attempt = rounds = 0
        leader_deadline: float | None = None
        while True:
            if rounds:
                backoff_s = config.retry_backoff_s * 2 ** (rounds - 1)
                cap_s = config.reconnect_backoff_max_s
                if leader_deadline is not None:  # a failover: look again soon
                    cap_s = min(cap_s, DEFAULT_REFRESH_BACKOFF_MAX_S)
                await trio.sleep(min(backoff_s, cap_s))
            rounds += 1
            await self._router.prepare({messages[i][0] for i in todo})
            by_broker = self._router.route(messages, todo, results, last_error)
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
            if all(self._router.leader_trouble(messages[i][0], last_error.get(i)) for i in todo):
                now = trio.current_time()
                if leader_deadline is None:
                    leader_deadline = now + config.leader_wait_s
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
        done = [r for r in results if r is not None]
        assert len(done) == len(messages)  # every message got its result above
        failures = sum(1 for r in done if r.error is not None)
        if self._audit is not None:  # count each message once, when it is finally delivered
            for message, result in zip(messages, done):
                if result.error is None:
                    self._audit.delivered(message[0], message[2])
        self._stats.messages_failed += failures
        self._stats.messages_sent += len(messages) - failures
        return done

    async def _send_to_broker(self, broker_id: int, parts: list[Part], messages: Sequence[Message],
                              results: list[SendResult | None], last_error: RetryErrors) -> None:
        """One request to ``broker_id``; fills ``results`` (or ``last_error`` for a retry)."""
        config = self._config
        payloads = [[messages[i][2] for i in indices] for _, _, indices in parts]
        try:
            conn = await self._pool.get(broker_id)  # backs off by itself when it cannot connect
        except BrokerConnectionError as exc:
            self._router.forget_leaders(parts)
            _retry(parts, last_error, exc)
            return
        acked: list[ProduceAckedResult] | None
        try:
            encoded = [encode_part(p, config.codec_for(topic), config.max_message_size, config.gzip_level)
                       for p, (topic, _, _) in zip(payloads, parts)]
            self._stats.requests_sent += 1
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
            await self._refused_acks(broker_id, conn, parts, results, last_error, exc)
            return
        except (BrokerError, LocalProtocolError) as exc:
            # A top-level error code, or a request the protocol cannot express:
            # sending it again would not help.
            error = ProducerError(f"broker {broker_id} could not take the request: {exc}")
            error.__cause__ = exc
            _fail(parts, broker_id, results, error)
            return
        except BrokerConnectionError as exc:
            await self._pool.failed(broker_id, conn)
            self._router.forget_leaders(parts)
            log.info("broker %d failed (%s); %d message(s) to retry", broker_id, exc,
                     sum(len(ix) for _, _, ix in parts))
            _retry(parts, last_error, exc)
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
                self._router.leader_moved(topic, partition)
            for i in indices:
                if is_retriable(answer.error):
                    last_error[i] = error
                else:
                    results[i] = SendResult(topic, broker_id, partition, error=error)

    async def _refused_acks(self, broker_id: int, conn: Connection, parts: list[Part],
                            results: list[SendResult | None], last_error: RetryErrors,
                            exc: ExtensionNotSupported) -> None:
        # A plain 0.7 broker closes at once on PRODUCE_ACKED, but so does a broker
        # that dies just then: only a second time in a row on a new connection
        # (a dead one refuses the connect) is taken as a plain 0.7 broker.
        strikes = self._extension_strikes[broker_id] = self._extension_strikes.get(broker_id, 0) + 1
        if strikes < 2:
            await self._pool.failed(broker_id, conn)
            _retry(parts, last_error, exc)
            return
        _fail(parts, broker_id, results, AcksNotSupportedError(
            f"broker {broker_id} is a plain 0.7 broker without PRODUCE_ACKED; use acks=0 ({exc})"))

    async def send_prebuilt(self, topic: str, position: int, message_set: bytes) -> SendResult:
        """Send ``message_set`` byte for byte to ``topic``'s partition at ``position`` mod the
        partition count: no encoding, no compression, no envelope, so compressed wrappers
        keep their exact bytes (a mirror's fetched sets).  One attempt; the caller retries.

        With ``acks`` 1/-1 the result has the broker's offsets (``offset`` where
        the set starts, ``next_offset`` the log end after it); with 0 it only says
        the request went out.  Failures come back as the result's ``error``.
        """
        config, pool, router = self._config, self._pool, self._router
        await router.prepare([topic])
        every = router.partitions(topic)
        if not every:
            return SendResult(topic, None, None,
                              error=NoBrokersAvailableError(f"no live broker is known for {topic!r}"))
        broker_id, partition = every[position % len(every)]
        if broker_id == NO_LEADER:
            return _failed(topic, broker_id, partition, LeaderNotAvailableError(topic, partition))
        try:
            conn = await pool.get(broker_id)
        except BrokerConnectionError as exc:
            router.forget_leaders([(topic, partition, [])])
            return _failed(topic, broker_id, partition, exc)
        try:
            self._stats.requests_sent += 1
            if config.acks == 0:
                await conn.produce(topic, partition, message_set)
                pool.succeeded(broker_id)
                return SendResult(topic, broker_id, partition)
            [answer] = await conn.produce_acked([ProducePart(topic, partition, message_set)], acks=config.acks,
                                                timeout_ms=int(config.ack_timeout_s * 1000))
        except ExtensionNotSupported as exc:
            await pool.failed(broker_id, conn)
            error = AcksNotSupportedError(f"broker {broker_id} answered no PRODUCE_ACKED: {exc}")
            return _failed(topic, broker_id, partition, error)
        except BrokerConnectionError as exc:
            await pool.failed(broker_id, conn)
            router.forget_leaders([(topic, partition, [])])
            return _failed(topic, broker_id, partition, exc)
        except (BrokerError, LocalProtocolError) as exc:
            return _failed(topic, broker_id, partition, exc)
        pool.succeeded(broker_id)
        if answer.error != ErrorCode.NO_ERROR:
            if needs_leader_refresh(answer.error):
                router.leader_moved(topic, partition)  # the caller's retry goes to the new leader
            return SendResult(topic, broker_id, partition,
                              error=BrokerRejectedError(answer.error, topic, broker_id, partition))
        return SendResult(topic, broker_id, answer.partition, answer.base_offset, answer.next_offset)


def _retry(parts: list[Part], last_error: RetryErrors, error: BrokerConnectionError) -> None:
    """Every message of ``parts`` waits for another round; ``error`` says why."""
    for _, _, indices in parts:
        for i in indices:
            last_error[i] = error


def _fail(parts: list[Part], broker_id: int, results: list[SendResult | None], error: ProducerError) -> None:
    """Every message of ``parts`` failed for good with ``error``."""
    for topic, partition, indices in parts:
        for i in indices:
            results[i] = SendResult(topic, broker_id, partition, error=error)


def _failed(topic: str, broker_id: int, partition: int, cause: BaseException) -> SendResult:
    if isinstance(cause, ProducerError):
        return SendResult(topic, broker_id, partition, error=cause)
    error = ProducerError(f"broker {broker_id}: {cause}")
    error.__cause__ = cause
    return SendResult(topic, broker_id, partition, error=error)


__all__ = ["Dispatcher"]
