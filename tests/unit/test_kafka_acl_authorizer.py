"""The authorizer, the api table and the ACL store (docs/protocol.md §18.3)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import trio
from kio.schema.errors import ErrorCode

from trikafka.broker.config import ConfigError
from trikafka.broker.config_sources import from_mapping
from trikafka.broker.kafka.acl.authorizer import Authorizer
from trikafka.broker.kafka.acl.model import (WILDCARD, AclBinding, AclSet, Operation, PatternType, Permission,
                                             ResourceType)
from trikafka.broker.kafka.acl.store import AclStoreError, FileAcls, added, follow_file, removed
from trikafka.broker.kafka.acl.table import API_NEEDS
from trikafka.broker.kafka.connection import CLIENT_PRINCIPAL
from trikafka.kafka.apis import KafkaApi
from trikafka.log.fs import OsFileSystem

PROTOCOL_MD = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"
NEVER_CHECKED = {KafkaApi.API_VERSIONS, KafkaApi.SASL_HANDSHAKE, KafkaApi.SASL_AUTHENTICATE}  # before any principal


def acl(operation: Operation, resource_type: ResourceType, name: str, principal: str = "User:alice",
        permission: Permission = Permission.ALLOW, pattern: PatternType = PatternType.LITERAL) -> AclBinding:
    return AclBinding(resource_type, name, pattern, principal, WILDCARD, operation, permission)


def as_principal(principal: str, check):
    token = CLIENT_PRINCIPAL.set(principal)
    try:
        return check()
    finally:
        CLIENT_PRINCIPAL.reset(token)


def test_off_by_default_allows_everything():
    config = from_mapping({})
    authorizer = Authorizer.from_settings(config.authorizer, config.super_users)
    assert not authorizer.enabled
    assert authorizer.denied(KafkaApi.PRODUCE, "t") is None


def test_on_denies_by_default_with_the_tables_error_and_super_users_bypass():
    config = from_mapping({"authorizer": "acl", "super.users": "User:admin; User:ops"})
    authorizer = Authorizer.from_settings(config.authorizer, config.super_users)
    authorizer.replace(AclSet([acl(Operation.ALL, ResourceType.TOPIC, "t", permission=Permission.DENY,
                                   principal="User:*")]))
    assert as_principal("User:alice", lambda: authorizer.denied(KafkaApi.PRODUCE, "t")) == \
        ErrorCode.topic_authorization_failed
    assert as_principal("User:alice", lambda: authorizer.denied(KafkaApi.JOIN_GROUP, "g", ResourceType.GROUP)) == \
        ErrorCode.group_authorization_failed
    assert as_principal("User:alice", lambda: authorizer.denied(KafkaApi.CREATE_ACLS)) == \
        ErrorCode.cluster_authorization_failed
    assert as_principal("User:ops", lambda: authorizer.denied(KafkaApi.PRODUCE, "t")) is None


def test_create_on_the_cluster_suffices_for_creating_any_topic():
    authorizer = Authorizer(enabled=True)
    authorizer.replace(AclSet([acl(Operation.CREATE, ResourceType.CLUSTER, "kafka-cluster")]))
    assert as_principal("User:alice", lambda: authorizer.denied(KafkaApi.CREATE_TOPICS, "new")) is None
    assert as_principal("User:bob", lambda: authorizer.denied(KafkaApi.CREATE_TOPICS, "new")) == \
        ErrorCode.topic_authorization_failed


@pytest.mark.parametrize("settings", [{"authorizer": "ranger"}, {"super.users": "admin"}])
def test_bad_settings_are_one_line_config_errors(settings):
    with pytest.raises(ConfigError, match=r"^[^\n]+$"):
        from_mapping(settings)


def test_every_api_is_in_the_table_and_in_the_docs_table():
    section = PROTOCOL_MD.read_text()
    section = section[section.index("### 18.3"):section.index("### 18.4")]
    documented = " ".join(re.findall(r"^\| ([^|]+) \|", section, re.M))
    for api in KafkaApi:
        assert api in API_NEEDS or api in NEVER_CHECKED, api
        assert api.label in documented, f"{api.label} missing from §18.3's table"


def test_the_file_store_edits_atomically_and_keeps_the_last_good_set(tmp_path):
    store = FileAcls(OsFileSystem(), str(tmp_path))
    write = acl(Operation.WRITE, ResourceType.TOPIC, "t")
    read = acl(Operation.READ, ResourceType.GROUP, "g-", pattern=PatternType.PREFIXED)
    assert store.update(added([write, read])).acls == AclSet([write, read]).acls
    assert store.update(removed([write])).acls == (read,)
    assert list(tmp_path.iterdir()) == [Path(store.path)]  # no temporary file left behind
    Path(store.path).write_text('[{"resource_type": "Topic"}]')
    with pytest.raises(AclStoreError, match=store.path):
        store.read()

    seen: list[AclSet] = []

    async def follow() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(follow_file, store, trio.to_thread.run_sync, seen.append)
            nursery.cancel_scope.cancel()

    trio.run(follow)
    assert seen == []  # a file that does not decode delivers nothing: the broker keeps what it had
