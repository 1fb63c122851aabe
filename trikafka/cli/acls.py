"""``trikafka acls add|remove|list``: the access control lists of the Kafka listener (docs/protocol.md §18.3).

Standalone, the ACLs live in ``<log-dir>/.trikafka-acls.json``; in a cluster
(``--zookeeper``) in the znode ``/trikafka/acls``.  A running broker sees a
change without a restart.
"""

from __future__ import annotations

import argparse
import functools
import sys

import trio

from trikafka.cli.common import DEFAULT_DATA_DIR, add_zookeeper, plural, run_client_value

ACTIONS = ("add", "remove", "list")
# --topic/--group/--transactional-id/--cluster: the resource type each names (the model's labels).
RESOURCE_FLAGS = {"topic": "Topic", "group": "Group", "transactional_id": "TransactionalId"}


def add_parser(commands) -> None:
    """Register ``acls`` on the ``trikafka`` subparsers."""
    acls = commands.add_parser("acls")
    acls.add_argument("action", choices=ACTIONS, help="add or remove one ACL, or list them all")
    acls.add_argument("--principal", metavar="User:NAME", help="who the ACL is for (User:* for everyone)")
    acls.add_argument("--operation", metavar="OP",
                      help="Read, Write, Create, Delete, Alter, Describe, DescribeConfigs, AlterConfigs, "
                           "ClusterAction, IdempotentWrite or All")
    acls.add_argument("--deny", action="store_true", help="a Deny ACL (default Allow); a deny wins over allows")
    resource = acls.add_mutually_exclusive_group()
    resource.add_argument("--topic", metavar="T", help="the topic (or * for every topic)")
    resource.add_argument("--group", metavar="G", help="the consumer group (or *)")
    resource.add_argument("--transactional-id", metavar="X", help="the transactional id (or *)")
    resource.add_argument("--cluster", action="store_true", help="the cluster")
    acls.add_argument("--prefixed", action="store_true", help="the name is a prefix: every resource starting with it")
    acls.add_argument("--host", default="*", help=argparse.SUPPRESS)
    acls.add_argument("--log-dir", metavar="DIR", default=None,
                      help=f"a standalone broker's log directory (default ./{DEFAULT_DATA_DIR})")
    add_zookeeper(acls, "a cluster's ZooKeeper (the ACLs in /trikafka/acls)", default=False)
    acls.set_defaults(func=cmd_acls, validate=_validate)


def _validate(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.zookeeper is not None and args.log_dir is not None:
        parser.error("acls takes --log-dir (standalone) or --zookeeper (cluster), not both")
    if args.action == "list":
        return
    if not args.principal or not args.operation:
        parser.error(f"acls {args.action} needs --principal User:NAME and --operation OP")
    if not (args.topic or args.group or args.transactional_id or args.cluster):
        parser.error(f"acls {args.action} needs --topic T, --group G, --transactional-id X or --cluster")
    if args.cluster and args.prefixed:
        parser.error("--prefixed names a topic, group or transactional id prefix, not the cluster")


def binding(args: argparse.Namespace):
    """The ACL the flags describe; ValueError (one line) for a bad principal, operation or name."""
    from trikafka.broker.kafka.acl.model import (CLUSTER_NAME, AclBinding, Operation, PatternType, Permission,
                                                 ResourceType)

    if args.cluster:
        resource_type, name = ResourceType.CLUSTER, CLUSTER_NAME
    else:
        flag = next(f for f in RESOURCE_FLAGS if getattr(args, f))
        resource_type, name = ResourceType.parse(RESOURCE_FLAGS[flag]), getattr(args, flag)
    operation = Operation.parse(args.operation)
    if operation is Operation.ANY:
        raise ValueError("--operation ANY is a filter, not an ACL's operation")
    return AclBinding(resource_type, name, PatternType.PREFIXED if args.prefixed else PatternType.LITERAL,
                      args.principal, args.host, operation, Permission.DENY if args.deny else Permission.ALLOW)


def describe(acl) -> str:
    """One ACL as a line of ``acls list``."""
    return "\t".join((acl.principal, acl.permission.label, acl.operation.label, acl.resource_type.label,
                      acl.pattern_type.label, acl.name, acl.host))


def cmd_acls(args: argparse.Namespace) -> int:
    from trikafka.broker.kafka.acl.store import AclStoreError, added, removed

    try:
        edit = None if args.action == "list" else (added if args.action == "add" else removed)([binding(args)])
    except ValueError as exc:
        print(f"trikafka: {exc}", file=sys.stderr)
        return 2
    try:
        if args.zookeeper is not None:
            before_after = run_client_value(_in_zookeeper, (args.zookeeper, edit))
        else:
            before_after = _in_file(args.log_dir or DEFAULT_DATA_DIR, edit)
    except AclStoreError as exc:
        print(f"trikafka: {exc}", file=sys.stderr)
        return 1
    if before_after is None:
        return 1
    before, after = before_after
    if args.action == "list":
        print("principal\tpermission\toperation\tresource_type\tpattern_type\tname\thost")
        for acl in after.acls:
            print(describe(acl))
        return 0
    changed = abs(len(after) - len(before))
    print(f"{'added' if args.action == 'add' else 'removed'} {plural(changed, 'ACL')} ({len(after)} in all)")
    return 0


def _in_file(log_dir: str, edit):
    from trikafka.broker.kafka.acl.store import FileAcls
    from trikafka.log.fs import OsFileSystem

    store = FileAcls(OsFileSystem(), log_dir)
    before = store.read()
    return before, before if edit is None else store.update(edit)


async def _in_zookeeper(call):
    from trikafka.broker.kafka.acl.store import ZooKeeperAcls
    from trikafka.zk import KazooZooKeeperClient

    connect, edit = call
    async with KazooZooKeeperClient(connect) as zk:
        store = ZooKeeperAcls(zk)
        before = await store.read()
        return before, before if edit is None else await store.update(edit)
