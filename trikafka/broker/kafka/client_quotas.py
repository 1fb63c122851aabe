"""DescribeClientQuotas and AlterClientQuotas (docs/protocol.md §20.3, KIP-546).

Both read and change the entity settings of §20.1 (``entity_configs.EntityConfigStore``): the
log directory's file standalone, Kafka's ``/config`` znodes with ZooKeeper.
"""

from __future__ import annotations

from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from trikafka.kafka.apis import KafkaApi
from trikafka.kafka.framing import Request

from ..entity_configs import Component, Edit, EntityConfigStore, EntityError, components, entity_path
from ..entity_configs import CLIENT_ID, IP, USER
from ..quotas import QUOTA_KEYS, QuotaError, check_quota, quota_key
from .acl.authorizer import Authorizer
from .entities import NO_THROTTLE, Reply

# DescribeClientQuotas' match types.
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
CLUSTER_DENIED_MESSAGE = "Cluster authorization failed."


class QuotaHost(Protocol):
    """What these apis need of the broker."""

    @property
    def authorizer(self) -> Authorizer: ...

    @property
    def entity_configs(self) -> EntityConfigStore: ...


def _matches(filters: list[Any], entity: list[Component], strict: bool) -> bool:
    names = {c.kind: c.name for c in entity}
    for f in filters:
        if f.entity_type not in names:
            return False
        name = names[f.entity_type]
        if f.match_type == MATCH_EXACT and name != f.match:
            return False
        if f.match_type == MATCH_DEFAULT and name is not None:
            return False
        if f.match_type == MATCH_SPECIFIED and name is None:
            return False
    return not strict or len(names) == len(filters)


def describe_client_quotas(service: QuotaHost, request: Request) -> Any:
    reply = Reply(request.api_key, request.api_version)
    body: Any = request.body  # Any: this api's request class at the request's version

    def answer(code: ErrorCode, message: str | None, entries: tuple[Any, ...] | None) -> Any:
        return reply.response(throttle_time=NO_THROTTLE, error_code=code, error_message=message, entries=entries)

    if (denied := service.authorizer.denied(KafkaApi.DESCRIBE_CLIENT_QUOTAS)) is not None:
        return answer(denied, CLUSTER_DENIED_MESSAGE, None)
    filters = list(body.components)
    for f in filters:
        if f.entity_type not in (USER, CLIENT_ID, IP):
            return answer(ErrorCode.invalid_request, f"entity type {f.entity_type!r} is not served", None)
        if f.match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED):
            return answer(ErrorCode.invalid_request, f"unknown match type {f.match_type}", None)
    if len({f.entity_type for f in filters}) != len(filters):
        return answer(ErrorCode.invalid_request, "an entity type is named twice", None)
    entries = []
    for path, config in sorted(service.entity_configs.entities.items()):
        values = {k: float(v) for k, v in config.items() if k in QUOTA_KEYS}
        try:
            entity = components(path)
        except EntityError:
            continue
        if not values or not _matches(filters, entity, body.strict):
            continue
        entries.append(reply.nested(
            "EntryData",
            entity=tuple(reply.nested("EntityData", entity_type=c.kind, entity_name=c.name) for c in entity),
            values=tuple(reply.nested("ValueData", key=k, value=v) for k, v in sorted(values.items()))))
    return answer(ErrorCode.none, None, tuple(entries))


def _edit(ops: list[Any], kinds: frozenset[str]) -> Edit:
    """The edit of the settings of one entity of types ``kinds``; QuotaError (checked now) for a bad key
    or value."""
    changes: dict[str, str | None] = {}
    for op in ops:
        if op.key in changes:
            raise QuotaError(f"quota key {op.key!r} named twice")
        if op.remove:
            quota_key(op.key)
            changes[op.key] = None
        else:
            changes[op.key] = check_quota(op.key, op.value, kinds)

    def edit(current: dict[str, str]) -> dict[str, str]:
        after = dict(current)
        for key, value in changes.items():
            if value is None:
                after.pop(key, None)
            else:
                after[key] = value
        return after
    return edit


async def alter_client_quotas(service: QuotaHost, request: Request) -> Any:
    reply = Reply(request.api_key, request.api_version)
    body: Any = request.body  # Any: this api's request class at the request's version
    denied = service.authorizer.denied(KafkaApi.ALTER_CLIENT_QUOTAS)
    results: list[tuple[Any, ErrorCode, str | None]] = []
    edits: dict[str, Edit] = {}
    for entry in body.entries:
        code, message = ErrorCode.none, None
        try:
            if denied is not None:
                code, message = denied, CLUSTER_DENIED_MESSAGE
            else:
                entity = [Component(e.entity_type, e.entity_name) for e in entry.entity]
                path = entity_path(entity)
                if path in edits:
                    raise EntityError(f"entity {path!r} named twice")
                edits[path] = _edit(list(entry.ops), frozenset(c.kind for c in entity))
        except (EntityError, QuotaError) as exc:
            code, message = ErrorCode.invalid_request, str(exc)
        results.append((entry, code, message))
    if edits and not body.validate_only:
        await service.entity_configs.update(edits)
    return reply.response(throttle_time=NO_THROTTLE, entries=tuple(
        reply.nested("EntryData", error_code=code, error_message=message,
                     entity=tuple(reply.nested("EntityData", entity_type=e.entity_type, entity_name=e.entity_name)
                                  for e in entry.entity))
        for entry, code, message in results))
