"""Sending a message set that is already built (a mirror's fetched sets), byte for byte.

No encoding, no compression, no envelope: the set goes out as it came, so
compressed wrappers keep their exact bytes.  One attempt; the caller retries.
"""

from __future__ import annotations

from typing import Any

from trikafka.client import BrokerConnectionError, BrokerError, ExtensionNotSupported, ProducePart
from trikafka.client.leaders import LeaderNotAvailableError
from trikafka.wire import NO_LEADER, ErrorCode, LocalProtocolError, needs_leader_refresh

from .errors import AcksNotSupportedError, BrokerRejectedError, NoBrokersAvailableError, ProducerError
from .results import SendResult


async def send_prebuilt(producer: Any, topic: str, position: int, message_set: bytes) -> SendResult:
    """Send ``message_set`` to ``topic``'s partition at ``position`` mod the partition count.

    With ``acks`` 1/-1 the result has the broker's offsets (``offset`` where
    the set starts, ``next_offset`` the log end after it); with 0 it only says
    the request went out.  Failures come back as the result's ``error``.
    """
    discovery, pool, config = producer.discovery, producer.pool, producer.config
    await discovery.ensure_topic(topic)
    await producer._refresh_leaders([topic])
    every = discovery.partitions(topic)
    if not every:
        return SendResult(topic, None, None, error=NoBrokersAvailableError(f"no live broker is known for {topic!r}"))
    target = every[position % len(every)]
    broker_id, partition = target.broker_id, target.partition
    if broker_id == NO_LEADER:
        return _failed(topic, broker_id, partition, LeaderNotAvailableError(topic, partition))
    try:
        conn = await pool.get(broker_id)
    except BrokerConnectionError as exc:
        producer._forget_leaders([(topic, partition, [])])
        return _failed(topic, broker_id, partition, exc)
    try:
        producer.requests_sent += 1
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
        producer._forget_leaders([(topic, partition, [])])
        return _failed(topic, broker_id, partition, exc)
    except (BrokerError, LocalProtocolError) as exc:
        return _failed(topic, broker_id, partition, exc)
    pool.succeeded(broker_id)
    if answer.error != ErrorCode.NO_ERROR:
        if needs_leader_refresh(answer.error):
            producer._leader_moved(topic, partition)  # the caller's retry goes to the new leader
        return SendResult(topic, broker_id, partition,
                          error=BrokerRejectedError(answer.error, topic, broker_id, partition))
    return SendResult(topic, broker_id, answer.partition, answer.base_offset, answer.next_offset)


def _failed(topic: str, broker_id: int, partition: int, cause: BaseException) -> SendResult:
    if isinstance(cause, ProducerError):
        return SendResult(topic, broker_id, partition, error=cause)
    error = ProducerError(f"broker {broker_id}: {cause}")
    error.__cause__ = cause
    return SendResult(topic, broker_id, partition, error=error)


__all__ = ["send_prebuilt"]
