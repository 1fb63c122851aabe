"""The authorizer every Kafka-protocol handler consults (docs/protocol.md §18.3).

It holds the current ``AclSet`` (replaced whole when the store changes) and
the super users, and decides for the principal of the request being handled,
which it reads from ``CLIENT_PRINCIPAL``: the principal is its only input
that depends on how the client authenticated.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from trikafka.kafka.apis import KafkaApi

from ..connection import CLIENT_PRINCIPAL
from .model import AUTHORIZER_ACL, CLUSTER_NAME, AclSet, Operation, ResourceType, check_settings, parse_principals
from .table import API_NEEDS, Need


class Authorizer:
    """Decides the table's checks (``table.API_NEEDS``) for the current request's principal."""

    def __init__(self, *, enabled: bool, super_users: frozenset[str] = frozenset()):
        self.enabled = enabled
        self.super_users = super_users
        self.acls = AclSet()

    @classmethod
    def from_settings(cls, authorizer: str, super_users: str) -> Authorizer:
        """From the ``authorizer`` and ``super.users`` settings; ValueError for a bad value."""
        check_settings(authorizer, super_users)
        return cls(enabled=authorizer == AUTHORIZER_ACL, super_users=parse_principals(super_users))

    def replace(self, acls: AclSet) -> None:
        """Decide by ``acls`` from now on (the store changed)."""
        self.acls = acls

    def allows(self, need: Need, name: str) -> bool:
        """Whether the current principal meets ``need`` on the resource ``name``."""
        if not self.enabled:
            return True
        principal = CLIENT_PRINCIPAL.get()
        if principal in self.super_users:
            return True
        if self.acls.allows(principal, need.operation, need.resource_type, name):
            return True
        return need.or_cluster and self.acls.allows(principal, need.operation, ResourceType.CLUSTER, CLUSTER_NAME)

    def denied(self, api: KafkaApi, name: str = CLUSTER_NAME,
               resource_type: ResourceType | None = None) -> ErrorCode | None:
        """The error that refuses ``api`` on the resource ``name`` (of ``resource_type``: default the
        api's first check), or None when it is allowed."""
        needs = API_NEEDS[api]
        need = needs[resource_type] if resource_type is not None else next(iter(needs.values()))
        return None if self.allows(need, name) else need.denied

    def may_write_somewhere(self) -> bool:
        """KIP-679: an idempotent producer needs IdempotentWrite on the cluster, or Write on some topic."""
        if not self.enabled:
            return True
        principal = CLIENT_PRINCIPAL.get()
        return principal in self.super_users or self.acls.allows_some(principal, Operation.WRITE,
                                                                        ResourceType.TOPIC)
