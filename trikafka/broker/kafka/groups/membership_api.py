"""JoinGroup, SyncGroup, Heartbeat and LeaveGroup (docs/protocol.md §17.4)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from trikafka.kafka.framing import Request

from ..connection import CLIENT_PEER
from ..needs import GroupApis
from ..entities import NO_THROTTLE, Reply
from .access import group_partition
from .member import JoinAnswer

REQUIRE_KNOWN_MEMBER_ID_FROM = 4  # JoinGroup v4+: an empty member id is answered MEMBER_ID_REQUIRED (KIP-394)
BATCHED_LEAVE_FROM = 3  # LeaveGroup v3+: a list of members


def client_host() -> str:
    """The requesting connection's host as Kafka names a member's: ``/<address>`` ("" when unknown)."""
    peer = CLIENT_PEER.get()
    return "" if peer == "?" else "/" + peer.rsplit(":", 1)[0]


def _ms(value: Any) -> int:
    """A kio duration field (a timedelta) in ms."""
    return int(value.total_seconds() * 1000)


async def join_group(service: GroupApis, request: Request) -> Any:
    reply = Reply(request.api_key, request.api_version)
    body: Any = request.body  # Any: this api's request class at the request's version
    groups = await group_partition(service, request.api, body.group_id)
    if isinstance(groups, ErrorCode):
        return _join_reply(reply, JoinAnswer(groups, body.member_id))
    clash = await service.groups.clash(body.group_id)
    if clash is not None:
        return _join_reply(reply, JoinAnswer(ErrorCode.inconsistent_group_protocol, body.member_id), clash)
    session_ms = _ms(body.session_timeout)
    rebalance = getattr(body, "rebalance_timeout", None)
    rebalance_ms = session_ms if rebalance is None else _ms(rebalance)
    membership = service.groups.membership
    group = groups.group_or_new(body.group_id)
    member_id, answer, effects = group.join(
        membership.now_ms(), body.member_id, getattr(body, "group_instance_id", None), request.client_id or "",
        client_host(), session_ms, rebalance_ms, body.protocol_type,
        tuple((p.name, p.metadata) for p in body.protocols),
        request.api_version >= REQUIRE_KNOWN_MEMBER_ID_FROM)
    answer = await membership.join(groups, group, member_id, answer, effects, rebalance_ms)
    groups.forget_if_empty(body.group_id)
    return _join_reply(reply, answer)


def _join_reply(reply: Reply, answer: JoinAnswer, message: str | None = None) -> Any:
    members = tuple(reply.nested("JoinGroupResponseMember", member_id=member_id, group_instance_id=instance_id,
                                 metadata=metadata) for member_id, instance_id, metadata in answer.members)
    return reply.response(throttle_time=NO_THROTTLE, error_code=answer.error, generation_id=answer.generation,
                          protocol_type=answer.protocol_type, protocol_name=answer.protocol or "",
                          leader=answer.leader, member_id=answer.member_id, members=members)


async def sync_group(service: GroupApis, request: Request) -> Any:
    reply = Reply(request.api_key, request.api_version)
    body: Any = request.body  # Any: this api's request class at the request's version
    groups = await group_partition(service, request.api, body.group_id)
    if isinstance(groups, ErrorCode):
        return _sync_reply(reply, groups)
    group = groups.group(body.group_id)
    if group is None:
        return _sync_reply(reply, ErrorCode.unknown_member_id)
    membership = service.groups.membership
    answer, effects = group.sync(membership.now_ms(), body.member_id, getattr(body, "group_instance_id", None),
                                 body.generation_id, getattr(body, "protocol_type", None),
                                 getattr(body, "protocol_name", None),
                                 {a.member_id: a.assignment for a in body.assignments})
    member = group.members.get(body.member_id)
    timeout_ms = member.rebalance_timeout_ms if member is not None else 0
    answer = await membership.sync(groups, group, body.member_id, answer, effects, timeout_ms)
    return _sync_reply(reply, answer.error, answer.protocol_type, answer.protocol, answer.assignment)


def _sync_reply(reply: Reply, error: ErrorCode, protocol_type: str | None = None, protocol: str | None = None,
                assignment: bytes = b"") -> Any:
    return reply.response(throttle_time=NO_THROTTLE, error_code=error, protocol_type=protocol_type,
                          protocol_name=protocol, assignment=assignment)


async def heartbeat(service: GroupApis, request: Request) -> Any:
    reply = Reply(request.api_key, request.api_version)
    body: Any = request.body  # Any: this api's request class at the request's version
    groups = await group_partition(service, request.api, body.group_id)
    if isinstance(groups, ErrorCode):
        error = groups
    else:
        group = groups.group(body.group_id)
        error = ErrorCode.unknown_member_id if group is None else group.heartbeat(
            service.groups.membership.now_ms(), body.member_id, getattr(body, "group_instance_id", None),
            body.generation_id)  # a heartbeat only moves a deadline later: the timer task needs no wake
    return reply.response(throttle_time=NO_THROTTLE, error_code=error)


async def leave_group(service: GroupApis, request: Request) -> Any:
    reply = Reply(request.api_key, request.api_version)
    body: Any = request.body  # Any: this api's request class at the request's version
    batched = request.api_version >= BATCHED_LEAVE_FROM
    leaving: list[tuple[str, str | None]] = ([(m.member_id, m.group_instance_id) for m in body.members] if batched
                                             else [(body.member_id, None)])
    groups = await group_partition(service, request.api, body.group_id)
    group = None if isinstance(groups, ErrorCode) else groups.group(body.group_id)
    if isinstance(groups, ErrorCode):
        error, errors = groups, [groups] * len(leaving)
    elif group is None:
        error, errors = ErrorCode.none, [ErrorCode.unknown_member_id] * len(leaving)
    else:
        membership = service.groups.membership
        errors, effects = group.leave(membership.now_ms(), leaving)
        await membership.carry_out(groups, group, effects)
        error = ErrorCode.none
    if not batched:
        return reply.response(throttle_time=NO_THROTTLE, error_code=error if error != ErrorCode.none else errors[0])
    members = tuple(reply.nested("MemberResponse", member_id=member_id, group_instance_id=instance_id,
                                 error_code=code) for (member_id, instance_id), code in zip(leaving, errors))
    return reply.response(throttle_time=NO_THROTTLE, error_code=error, members=members)
