"""InitProducerId (docs/protocol.md §19.1): new producer ids from the broker's ``ProducerIds``
(``producer_id_blocks``), and KIP-360's epoch bump; with a transactional id, the transaction
coordinator's (§19.5.4)."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.types import ProducerId
from kio.static.primitive import i16

from trikafka.kafka.apis import KafkaApi
from trikafka.kafka.framing import Request

from .acl.model import ResourceType
from .needs import TransactionApis
from .entities import NO_THROTTLE, Reply
from .transactions.api import for_version

MAX_EPOCH = 32766  # an epoch bump past it starts a new producer id (§19.1)
ONE_MS = datetime.timedelta(milliseconds=1)


async def init_producer_id(service: TransactionApis, request: Request) -> Any:
    """InitProducerId (§19.1): a new id at epoch 0, or (v3+, KIP-360) the next epoch of the id the
    producer has."""
    body: Any = request.body  # Any: this api's request class at the request's version
    reply = Reply(request.api_key, request.api_version)

    def answer(error: ErrorCode, producer_id: int = -1, epoch: int = -1) -> Any:
        return reply.response(throttle_time=NO_THROTTLE, error_code=error, producer_id=ProducerId(producer_id),
                              producer_epoch=i16(epoch))

    authorizer = service.authorizer
    had_id = getattr(body, "producer_id", -1)
    had_epoch = getattr(body, "producer_epoch", -1)
    if body.transactional_id is not None:
        denied = authorizer.denied(KafkaApi.INIT_PRODUCER_ID, body.transactional_id, ResourceType.TRANSACTIONAL_ID)
        if denied is not None:
            return answer(denied)
        if service.transactions is None:
            return answer(ErrorCode.coordinator_not_available)
        expected = (had_id, had_epoch) if had_id >= 0 else None
        error, producer_id, epoch = await service.transactions.init_producer_id(
            body.transactional_id, body.transaction_timeout // ONE_MS, expected)
        return answer(for_version(error, request.api, request.api_version), producer_id, epoch)
    denied = authorizer.denied(KafkaApi.INIT_PRODUCER_ID)
    if denied is not None and not authorizer.may_write_somewhere():  # KIP-679 (§18.3)
        return answer(denied)
    if (had_id < 0) != (had_epoch < 0):
        return answer(ErrorCode.invalid_request)
    if had_id >= 0 and had_epoch < MAX_EPOCH:
        return answer(ErrorCode.none, had_id, had_epoch + 1)
    return answer(ErrorCode.none, await service.producer_ids.new_id(), 0)
