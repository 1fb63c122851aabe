"""KIP-890 part 1 from the partition side (docs/protocol.md §19.5.7): is this partition in the
producer's ongoing transaction?

``verify_partition`` is what a Produce and a TxnOffsetCommit call: a partition whose producer
state already holds this producer's open transaction at this epoch needs no question;
otherwise it records the producer's verification guard and asks the ``TransactionVerifier``,
and the append presents the guard.  ``RoutedVerifier`` is that verifier: the id's coordinator
is asked, on this broker directly, on another through AddPartitionsToTxn v4 with
``verify_only``.  ``retriable_for`` turns a coordinator that could not answer into the error
each api's clients retry.
"""

from __future__ import annotations

import logging
from typing import Any, NamedTuple

from kio.schema.add_partitions_to_txn.v4.request import (AddPartitionsToTxnRequest, AddPartitionsToTxnTopic,
                                                         AddPartitionsToTxnTransaction)
from kio.schema.errors import ErrorCode
from kio.schema.types import ProducerId, TopicName, TransactionalId
from kio.static.primitive import i16, i32

from trikafka.kafka.apis import KafkaApi
from trikafka.log.verification_guard import VerificationGuard
from trikafka.wire.metadata import BrokerAddress

from ...engine.partition import Refused
from ..needs import PartitionLookup, PeerReach, TransactionCoordination, TransactionVerifier
from ..peer_call import PeerCallError, peer_call

logger = logging.getLogger(__name__)

VERIFY_VERSION = 4  # AddPartitionsToTxn's first version with verify_only (§19.5.4)

# The coordinator could not say (§19.5.7): nothing was appended and the client may ask again.
UNANSWERED = frozenset({
    ErrorCode.not_coordinator,
    ErrorCode.coordinator_not_available,
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.concurrent_transactions,
    ErrorCode.network_exception,
})

# What each verified api answers in place of an UNANSWERED error: one its clients retry without
# failing the transaction (§19.5.7).
RETRIABLE_AS: dict[KafkaApi, ErrorCode] = {
    KafkaApi.PRODUCE: ErrorCode.not_enough_replicas,
    KafkaApi.TXN_OFFSET_COMMIT: ErrorCode.coordinator_not_available,
}


# A fenced producer's verification as its Produce or TxnOffsetCommit answers it: the error clients treat
# as fatal there, as Kafka answers it (§19.5.7).
FENCED_AS = {ErrorCode.producer_fenced: ErrorCode.invalid_producer_epoch}


def retriable_for(api: KafkaApi, error: ErrorCode) -> ErrorCode:
    """``error`` of a verification as ``api`` answers it (§19.5.7)."""
    return RETRIABLE_AS[api] if error in UNANSWERED else FENCED_AS.get(error, error)


class Verification(NamedTuple):
    """A verification's answer: ``error`` (NONE: append) and the guard the append presents (§19.5.7)."""

    error: ErrorCode
    guard: VerificationGuard | None


async def verify_partition(service: PartitionLookup, verifier: TransactionVerifier, transactional_id: str,
                           producer_id: int, producer_epoch: int, topic: str, partition: int) -> Verification:
    """§19.5.7 for a transactional batch of ``producer_id`` at ``producer_epoch`` on this broker's
    ``topic``-``partition``: no question when its transaction is open here; else the producer's
    guard is recorded, then ``verifier`` asked.  A partition not served here records nothing
    (its append is refused anyway)."""
    guard = None
    target = await service.partition_for(topic, partition, write=False)
    if not isinstance(target, ErrorCode):
        try:
            producers = target.read_view().log.producers
        except Refused:
            pass
        else:  # no wait between the look and the record: the guard is the state's own (§19.5.7)
            guard = producers.start_verification(producer_id, producer_epoch)
            if guard is None:
                return Verification(ErrorCode.none, None)
    error = await verifier.verify(transactional_id, producer_id, producer_epoch, topic, partition)
    return Verification(error, guard)


class RoutedVerifier:
    """The partition side's question to a transaction coordinator, here or on another broker."""

    def __init__(self, service: PeerReach, local: TransactionCoordination):
        self._service = service
        self._local = local

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int, topic: str,
                     partition: int) -> ErrorCode:
        """NONE when ``topic``-``partition`` is in the producer's ongoing transaction at this epoch."""
        located = await self._local.coordinator_of(transactional_id)
        if isinstance(located, ErrorCode):
            return located
        if located.broker_id == self._service.broker_id:
            return await self._local.verify(transactional_id, producer_id, producer_epoch, topic, partition)
        return await self._remote(located, transactional_id, producer_id, producer_epoch, topic, partition)

    async def _remote(self, coordinator: BrokerAddress, transactional_id: str, producer_id: int,
                      producer_epoch: int, topic: str, partition: int) -> ErrorCode:
        api = KafkaApi.ADD_PARTITIONS_TO_TXN
        body = AddPartitionsToTxnRequest(transactions=(AddPartitionsToTxnTransaction(
            transactional_id=TransactionalId(transactional_id), producer_id=ProducerId(producer_id),
            producer_epoch=i16(producer_epoch), verify_only=True,
            topics=(AddPartitionsToTxnTopic(name=TopicName(topic), partitions=(i32(partition),)),)),))
        try:
            # Any: kio's response class
            answer: Any = await peer_call(self._service.peer_connections, coordinator, api, VERIFY_VERSION, body)
        except PeerCallError as exc:
            logger.info("transaction %s: could not verify %s-%d with broker %d: %s", transactional_id, topic,
                        partition, coordinator.broker_id, exc)
            return ErrorCode.network_exception
        if answer.error_code != ErrorCode.none:
            logger.warning("transaction %s: broker %d refused to verify %s-%d: %r", transactional_id,
                           coordinator.broker_id, topic, partition, answer.error_code)
            return ErrorCode.coordinator_not_available
        for result in answer.results_by_transaction:
            for topic_result in result.topic_results:
                for part in topic_result.results_by_partition:
                    if str(topic_result.name) == topic and int(part.partition_index) == partition:
                        return ErrorCode(part.partition_error_code)
        return ErrorCode.coordinator_not_available
