"""Hypothesis properties of the ACL decision rule (docs/protocol.md §18.3)."""

from hypothesis import given
from hypothesis import strategies as st

from trikafka.broker.kafka.acl.model import (
    IMPLIED_BY,
    WILDCARD,
    AclBinding,
    AclFilter,
    AclSet,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)

USERS = ("User:alice", "User:bob", "User:*")
TYPES = [t for t in ResourceType if t is not ResourceType.ANY]
OPERATIONS = [o for o in Operation if o is not Operation.ANY]
names = st.text(alphabet="ab.", min_size=1, max_size=4)

acls = st.builds(AclBinding, st.sampled_from(TYPES), st.one_of(names, st.just(WILDCARD)),
                 st.sampled_from([PatternType.LITERAL, PatternType.PREFIXED]), st.sampled_from(USERS),
                 st.just(WILDCARD), st.sampled_from(OPERATIONS), st.sampled_from([Permission.ALLOW, Permission.DENY]))
requests = st.tuples(st.sampled_from(USERS[:2]), st.sampled_from([o for o in OPERATIONS if o is not Operation.ALL]),
                     st.sampled_from(TYPES), names)


def _covers(acl: AclBinding, principal: str, resource_type: ResourceType, name: str) -> bool:
    """An oracle of 'this ACL applies to that request', written apart from the matcher."""
    if acl.principal not in (principal, "User:*") or acl.resource_type != resource_type:
        return False
    if acl.pattern_type == PatternType.PREFIXED:
        return name[:len(acl.name)] == acl.name
    return acl.name in (name, "*")


@given(st.lists(acls, max_size=8), requests)
def test_decision_is_deny_wins_then_allow_or_implied(bindings, request):
    principal, operation, resource_type, name = request
    covering = [a for a in bindings if _covers(a, principal, resource_type, name)]
    denied = any(a.permission == Permission.DENY and a.operation in (operation, Operation.ALL) for a in covering)
    granted = any(a.permission == Permission.ALLOW
                  and (a.operation in (operation, Operation.ALL) or a.operation in IMPLIED_BY.get(operation, ()))
                  for a in covering)
    assert AclSet(bindings).allows(principal, operation, resource_type, name) == (granted and not denied)


@given(st.lists(acls, max_size=8), requests)
def test_a_deny_added_for_the_request_always_refuses(bindings, request):
    principal, operation, resource_type, name = request
    deny = AclBinding(resource_type, name, PatternType.LITERAL, principal, WILDCARD, operation, Permission.DENY)
    assert not AclSet([*bindings, deny]).allows(principal, operation, resource_type, name)


@given(requests)
def test_no_acl_means_deny(request):
    assert not AclSet().allows(*request)


@given(names, names)
def test_prefixed_matches_by_prefix_literal_only_exact(pattern, name):
    for pattern_type, expected in ((PatternType.PREFIXED, name.startswith(pattern)),
                                   (PatternType.LITERAL, name == pattern)):
        acl = AclBinding(ResourceType.TOPIC, pattern, pattern_type, "User:alice", WILDCARD, Operation.READ,
                         Permission.ALLOW)
        assert AclSet([acl]).allows("User:alice", Operation.READ, ResourceType.TOPIC, name) == expected


@given(st.sampled_from(sorted(IMPLIED_BY[Operation.DESCRIBE])), names)
def test_read_write_delete_alter_imply_describe_but_a_deny_implies_nothing(granting, name):
    allow = AclBinding(ResourceType.TOPIC, name, PatternType.LITERAL, "User:alice", WILDCARD, granting,
                       Permission.ALLOW)
    assert AclSet([allow]).allows("User:alice", Operation.DESCRIBE, ResourceType.TOPIC, name)
    deny = AclBinding(ResourceType.TOPIC, name, PatternType.LITERAL, "User:alice", WILDCARD, granting,
                      Permission.DENY)
    describe = AclBinding(ResourceType.TOPIC, name, PatternType.LITERAL, "User:alice", WILDCARD,
                          Operation.DESCRIBE, Permission.ALLOW)
    assert AclSet([deny, describe]).allows("User:alice", Operation.DESCRIBE, ResourceType.TOPIC, name)


@given(st.lists(acls, max_size=8))
def test_store_objects_round_trip(bindings):
    assert AclSet(AclBinding.from_json(a.to_json()) for a in bindings).acls == AclSet(bindings).acls


@given(st.lists(acls, max_size=8), names)
def test_match_filter_selects_exactly_the_acls_that_apply_to_a_resource(bindings, name):
    selected = AclSet(bindings).select(AclFilter(ResourceType.TOPIC, name, PatternType.MATCH))
    assert selected == [a for a in AclSet(bindings).acls
                        if a.resource_type == ResourceType.TOPIC and _covers(a, a.principal, ResourceType.TOPIC, name)]
