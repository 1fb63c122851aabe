"""The ACL model and its decision rule (docs/protocol.md §18.3), sans I/O.

Enum values are Kafka's wire codes, so the ACL apis carry them as they are;
``label`` is the spelling of the CLI, the store and Kafka's tools.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Iterable, Mapping, Self

CLUSTER_NAME = "kafka-cluster"  # the one Cluster resource, named as in Kafka
WILDCARD = "*"  # a literal name matching every resource of its type; also User:* and host *
WILDCARD_PRINCIPAL = "User:*"
AUTHORIZER_ACL = "acl"  # the ``authorizer`` setting that turns authorization on (empty: off)


class _Labelled(enum.IntEnum):
    """A Kafka enum: wire code as value, ``label`` as Kafka's tools spell it."""

    @property
    def label(self) -> str:
        return "".join(word.capitalize() for word in self.name.split("_"))

    @classmethod
    def parse(cls, text: str) -> Self:
        """The member whose label (or name) is ``text``, any case; ValueError naming the choices."""
        wanted = text.replace("_", "").replace("-", "").lower()
        for member in cls:
            if member.label.lower() == wanted:
                return member
        choices = ", ".join(m.label for m in cls if m.value > 1)
        raise ValueError(f"unknown {cls.__name__} {text!r} (one of {choices})")


class ResourceType(_Labelled):
    ANY = 1  # filters only
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5


class PatternType(_Labelled):
    ANY = 1  # filters only
    MATCH = 2  # filters only: every pattern that matches the filter's name
    LITERAL = 3
    PREFIXED = 4


class Operation(_Labelled):
    ANY = 1  # filters only
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


class Permission(_Labelled):
    ANY = 1  # filters only
    DENY = 2
    ALLOW = 3


# Operations an Allow ACL grants besides its own (Kafka's implied operations).
IMPLIED_BY: Mapping[Operation, frozenset[Operation]] = {
    Operation.DESCRIBE: frozenset({Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER}),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.ALTER_CONFIGS}),
}


@dataclass(frozen=True, order=True)
class AclBinding:
    """One ACL: ``permission`` for ``principal`` from ``host`` to ``operation`` on a resource pattern."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def __post_init__(self) -> None:
        if self.resource_type is ResourceType.ANY or self.pattern_type in (PatternType.ANY, PatternType.MATCH) \
                or self.operation is Operation.ANY or self.permission is Permission.ANY:
            raise ValueError("an ACL names one resource type, pattern type, operation and permission (not ANY)")
        if not self.name:
            raise ValueError("an ACL's resource name is empty")
        if not self.principal.startswith("User:") or self.principal == "User:":
            raise ValueError(f"principal {self.principal!r} is not User:NAME")

    def matches_resource(self, resource_type: ResourceType, name: str) -> bool:
        """Whether this ACL's pattern covers the resource ``(resource_type, name)``."""
        if resource_type is not self.resource_type:
            return False
        if self.pattern_type is PatternType.PREFIXED:
            return name.startswith(self.name)
        return self.name == name or self.name == WILDCARD

    def to_json(self) -> dict[str, str]:
        """The store's object for this ACL (§18.3)."""
        return {"resource_type": self.resource_type.label, "name": self.name,
                "pattern_type": self.pattern_type.label, "principal": self.principal, "host": self.host,
                "operation": self.operation.label, "permission": self.permission.label}

    @classmethod
    def from_json(cls, value: Mapping[str, str]) -> AclBinding:
        """The ACL a store object holds; ValueError (or KeyError) for a malformed one."""
        return cls(ResourceType.parse(value["resource_type"]), str(value["name"]),
                   PatternType.parse(value["pattern_type"]), str(value["principal"]),
                   str(value.get("host", WILDCARD)), Operation.parse(value["operation"]),
                   Permission.parse(value["permission"]))


@dataclass(frozen=True)
class AclFilter:
    """What DescribeAcls and DeleteAcls select: ANY (or None) fields match everything."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def matches(self, acl: AclBinding) -> bool:
        if self.resource_type is not ResourceType.ANY and acl.resource_type is not self.resource_type:
            return False
        if self.principal is not None and acl.principal != self.principal:
            return False
        if self.host is not None and acl.host != self.host:
            return False
        if self.operation is not Operation.ANY and acl.operation is not self.operation:
            return False
        if self.permission is not Permission.ANY and acl.permission is not self.permission:
            return False
        if self.pattern_type is PatternType.MATCH:
            return self.name is None or acl.matches_resource(acl.resource_type, self.name)
        if self.pattern_type is not PatternType.ANY and acl.pattern_type is not self.pattern_type:
            return False
        return self.name is None or acl.name == self.name


class AclSet:
    """An immutable set of ACLs and the decision rule of §18.3."""

    def __init__(self, acls: Iterable[AclBinding] = ()):
        self.acls: tuple[AclBinding, ...] = tuple(sorted(set(acls)))
        # A decision reads only the ACLs that can match: the literal ones by (type, name), the wildcard
        # ones under (type, "*"), and the prefixed ones of the type (few, in practice).
        self._literal: dict[tuple[ResourceType, str], list[AclBinding]] = {}
        self._prefixed: dict[ResourceType, list[AclBinding]] = {}
        for acl in self.acls:
            if acl.pattern_type is PatternType.PREFIXED:
                self._prefixed.setdefault(acl.resource_type, []).append(acl)
            else:
                self._literal.setdefault((acl.resource_type, acl.name), []).append(acl)

    def allows(self, principal: str, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        """Whether ``principal`` may do ``operation`` on the resource: a matching Deny (for the
        operation or All) refuses; else a matching Allow (for it, All, or an operation implying it)
        grants; else refused."""
        implying = IMPLIED_BY.get(operation, frozenset())
        allowed = False
        candidates = (*self._literal.get((resource_type, name), ()), *self._literal.get((resource_type, WILDCARD), ()),
                      *self._prefixed.get(resource_type, ()))
        for acl in candidates:
            if acl.principal not in (principal, WILDCARD_PRINCIPAL) or acl.host != WILDCARD:
                continue
            if not acl.matches_resource(resource_type, name):
                continue
            if acl.permission is Permission.DENY:
                if acl.operation in (operation, Operation.ALL):
                    return False
            elif acl.operation in (operation, Operation.ALL) or acl.operation in implying:
                allowed = True
        return allowed

    def allows_some(self, principal: str, operation: Operation, resource_type: ResourceType) -> bool:
        """Whether ``principal`` may do ``operation`` on at least one resource of the type (KIP-679's
        "Write on any topic"): an Allow for it or All on some pattern, and no Deny of it or All on
        the whole type (the literal ``*``)."""
        mine = (principal, WILDCARD_PRINCIPAL)
        ops = (operation, Operation.ALL)
        if any(a.permission is Permission.DENY and a.principal in mine and a.operation in ops and a.host == WILDCARD
               for a in self._literal.get((resource_type, WILDCARD), ())):
            return False
        return any(a.resource_type is resource_type and a.permission is Permission.ALLOW and a.principal in mine
                   and a.operation in ops and a.host == WILDCARD for a in self.acls)

    def select(self, acl_filter: AclFilter) -> list[AclBinding]:
        """The ACLs ``acl_filter`` matches, sorted."""
        return [a for a in self.acls if acl_filter.matches(a)]

    def __len__(self) -> int:
        return len(self.acls)


def parse_principals(text: str) -> frozenset[str]:
    """``super.users``: ``;``-separated ``User:NAME`` principals (Kafka's form); ValueError otherwise."""
    principals = frozenset(p.strip() for p in text.split(";") if p.strip())
    for p in principals:
        if not p.startswith("User:") or p == "User:":
            raise ValueError(f"super.users: {p!r} is not User:NAME")
    return principals


def check_settings(authorizer: str, super_users: str) -> None:
    """ValueError (one line) unless ``authorizer`` is empty or ``acl`` and ``super.users`` parses."""
    if authorizer not in ("", AUTHORIZER_ACL):
        raise ValueError(f"authorizer {authorizer!r}: only {AUTHORIZER_ACL!r} (or empty: off)")
    parse_principals(super_users)
