"""DescribeAcls, CreateAcls and DeleteAcls (docs/protocol.md §18.3): the ACL store over the Kafka protocol.

They need Describe (DescribeAcls) or Alter (the others) on the Cluster, as
the table says; the change goes to the store every broker follows and, on
this broker, takes effect before the answer.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from trikafka.kafka.framing import Request

from ..needs import AclApis
from ..entities import NO_THROTTLE, Reply
from .model import AclBinding, AclFilter, Operation, PatternType, Permission, ResourceType
from .store import added, removed


class _BadAcl(ValueError):
    """A binding or filter of a request that does not make sense; answered INVALID_REQUEST."""


def _enum(kind: type[ResourceType] | type[PatternType] | type[Operation] | type[Permission], code: int) -> Any:
    # Any: the member of whichever of the four enums ``kind`` is.
    try:
        return kind(code)
    except ValueError:
        raise _BadAcl(f"unknown {kind.__name__} code {code}") from None


def _filter(entity: Any) -> AclFilter:
    """The filter a DescribeAcls request or a DeleteAcls filter entity (Any: its version's class) holds."""
    return AclFilter(_enum(ResourceType, entity.resource_type_filter), entity.resource_name_filter,
                     _enum(PatternType, getattr(entity, "pattern_type_filter", PatternType.LITERAL)),
                     entity.principal_filter, entity.host_filter, _enum(Operation, entity.operation),
                     _enum(Permission, entity.permission_type))


def _binding(creation: Any) -> AclBinding:
    """The ACL of a CreateAcls creation entity (Any: its version's class)."""
    try:
        return AclBinding(_enum(ResourceType, creation.resource_type), creation.resource_name,
                          _enum(PatternType, getattr(creation, "resource_pattern_type", PatternType.LITERAL)),
                          creation.principal, creation.host, _enum(Operation, creation.operation),
                          _enum(Permission, creation.permission_type))
    except _BadAcl:
        raise
    except ValueError as exc:
        raise _BadAcl(str(exc)) from None


async def describe_acls(service: AclApis, request: Request) -> Any:
    reply = Reply(request.api_key, request.api_version)
    if (denied := service.authorizer.denied(request.api)) is not None:
        return reply.response(throttle_time=NO_THROTTLE, error_code=denied, error_message=None, resources=())
    try:
        selected = (await service.read_acls()).select(_filter(request.body))
    except _BadAcl as exc:
        return reply.response(throttle_time=NO_THROTTLE, error_code=ErrorCode.invalid_request,
                              error_message=str(exc), resources=())
    by_resource: dict[tuple[ResourceType, str, PatternType], list[AclBinding]] = {}
    for acl in selected:
        by_resource.setdefault((acl.resource_type, acl.name, acl.pattern_type), []).append(acl)
    resources = tuple(
        reply.nested("DescribeAclsResource", resource_type=int(rtype), resource_name=name, pattern_type=int(ptype),
                     acls=tuple(reply.nested("AclDescription", principal=a.principal, host=a.host,
                                             operation=int(a.operation), permission_type=int(a.permission))
                                for a in acls))
        for (rtype, name, ptype), acls in by_resource.items())
    return reply.response(throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
                          resources=resources)


async def create_acls(service: AclApis, request: Request) -> Any:
    reply = Reply(request.api_key, request.api_version)
    body: Any = request.body  # Any: this api's request class at the request's version
    denied = service.authorizer.denied(request.api)
    results: list[tuple[ErrorCode, str | None]] = []
    bindings: list[AclBinding] = []
    for creation in body.creations:
        if denied is not None:
            results.append((denied, "CreateAcls needs Alter on the cluster"))
            continue
        try:
            bindings.append(_binding(creation))
            results.append((ErrorCode.none, None))
        except _BadAcl as exc:
            results.append((ErrorCode.invalid_request, str(exc)))
    if bindings:
        await service.update_acls(added(bindings))
    return reply.response(throttle_time=NO_THROTTLE, results=tuple(
        reply.nested("AclCreationResult", error_code=code, error_message=message) for code, message in results))


async def delete_acls(service: AclApis, request: Request) -> Any:
    reply = Reply(request.api_key, request.api_version)
    body: Any = request.body  # Any: this api's request class at the request's version
    denied = service.authorizer.denied(request.api)
    current = await service.read_acls()
    answers: list[tuple[ErrorCode, str | None, list[AclBinding]]] = []
    gone: set[AclBinding] = set()
    for entity in body.filters:
        if denied is not None:
            answers.append((denied, "DeleteAcls needs Alter on the cluster", []))
            continue
        try:
            matching = current.select(_filter(entity))
        except _BadAcl as exc:
            answers.append((ErrorCode.invalid_request, str(exc), []))
            continue
        gone.update(matching)
        answers.append((ErrorCode.none, None, matching))
    if gone:
        await service.update_acls(removed(gone))
    return reply.response(throttle_time=NO_THROTTLE, filter_results=tuple(
        reply.nested("DeleteAclsFilterResult", error_code=code, error_message=message, matching_acls=tuple(
            reply.nested("DeleteAclsMatchingAcl", error_code=ErrorCode.none, error_message=None,
                         resource_type=int(a.resource_type), resource_name=a.name, pattern_type=int(a.pattern_type),
                         principal=a.principal, host=a.host, operation=int(a.operation),
                         permission_type=int(a.permission))
            for a in matching))
        for code, message, matching in answers))
