"""TxnOffsetCommit (docs/protocol.md §19.5.4): a transaction's offsets, checked with the
transaction coordinator (§19.5.7), written by the group coordinator as a transactional batch of
the producer and pending until its marker."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from trikafka.kafka.framing import Request
from trikafka.kafka.apis import KafkaApi
from trikafka.kafka.group_records import OFFSETS_TOPIC, RecordKey, RecordValue

from ..acl.model import ResourceType
from ..needs import GroupApis
from ..entities import NO_THROTTLE, Reply
from ..transactions.api import for_version
from ..transactions.verification import Verification, retriable_for, verify_partition
from .access import group_partition
from .offsets_api import commit_record

FIRST_MEMBER_CHECK_VERSION = 3  # v3 carries the member id and generation (KIP-447)


async def txn_offset_commit(service: GroupApis, request: Request) -> Any:
    reply = Reply(request.api_key, request.api_version)
    body: Any = request.body  # Any: this api's request class at the request's version
    asked = [(str(t.name), p) for t in body.topics for p in t.partitions]
    errors = await _commit(service, request, body, asked)
    return reply.response(throttle_time=NO_THROTTLE, topics=tuple(
        reply.nested("TxnOffsetCommitResponseTopic", name=t.name, partitions=tuple(
            reply.nested("TxnOffsetCommitResponsePartition", partition_index=p.partition_index,
                         error_code=errors[(str(t.name), p.partition_index)])
            for p in t.partitions)) for t in body.topics))


async def _commit(service: GroupApis, request: Request, body: Any,
                  asked: list[tuple[str, Any]]) -> dict[tuple[str, int], ErrorCode]:
    """Each partition's error; the accepted offsets are written as one transactional batch."""
    api = request.api
    keys = [(name, int(part.partition_index)) for name, part in asked]
    denied = service.authorizer.denied(api, body.transactional_id, ResourceType.TRANSACTIONAL_ID)
    if denied is not None:
        return {key: denied for key in keys}
    groups = await group_partition(service, api, body.group_id)
    if isinstance(groups, ErrorCode):
        return {key: groups for key in keys}
    group = groups.group_or_new(body.group_id)
    refused = ErrorCode.none
    member_id = getattr(body, "member_id", "")
    generation = getattr(body, "generation_id", -1)
    if request.api_version >= FIRST_MEMBER_CHECK_VERSION and (member_id or generation >= 0):
        refused = group.check_commit(member_id, generation, body.group_instance_id,
                                     service.groups.membership.now_ms())
    errors: dict[tuple[str, int], ErrorCode] = {}
    records: list[tuple[RecordKey, RecordValue | None]] = []
    for name, part in asked:
        errors[(name, int(part.partition_index))] = commit_record(service, api, body.group_id, name, part, refused,
                                                                  records)
    if records:
        verified = await _verify(service, body, groups.index)
        written = verified.error
        if written == ErrorCode.none:
            written = await service.groups.write_transactional(groups, body.producer_id, body.producer_epoch,
                                                               records, verified.guard)
        if written != ErrorCode.none:
            errors = {key: written if error == ErrorCode.none else error for key, error in errors.items()}
    groups.forget_if_empty(body.group_id)
    return errors


async def _verify(service: GroupApis, body: Any, index: int) -> Verification:
    """KIP-890 for offsets (§19.5.7): the group's partition must be in the producer's ongoing
    transaction (AddOffsetsToTxn) before its offsets are written; a fenced epoch answers
    INVALID_PRODUCER_EPOCH, as the served versions of TxnOffsetCommit do; a coordinator that could not
    answer, COORDINATOR_NOT_AVAILABLE.  The write presents the verification's guard."""
    if service.verifier is None:
        return Verification(ErrorCode.coordinator_not_available, None)
    verified = await verify_partition(service, service.verifier, body.transactional_id, body.producer_id,
                                      body.producer_epoch, OFFSETS_TOPIC, index)
    error = for_version(retriable_for(KafkaApi.TXN_OFFSET_COMMIT, verified.error), KafkaApi.TXN_OFFSET_COMMIT, 0)
    return verified._replace(error=error)
