"""``trikafka users add|delete|list``: the SASL credential store (docs/protocol.md §18.2).

Standalone brokers read ``<log-dir>/.trikafka-users.json`` (``--log-dir``);
a cluster reads ``/trikafka/config/users`` (``--zookeeper``).  Passwords are
salted into SCRAM-SHA-256 and SCRAM-SHA-512 records here; keys are never
printed.
"""

from __future__ import annotations

import argparse
import sys

from trikafka.broker.credentials import (CredentialError, CredentialFile, UserRecord, new_record, zk_add_user,
                                         zk_delete_user, zk_users)
from trikafka.cli.common import run_client_value
from trikafka.kafka.sasl import MIN_ITERATIONS


def add_parser(commands) -> None:
    """Register ``users`` on the ``trikafka`` subparsers."""
    users = commands.add_parser("users")
    actions = users.add_subparsers(dest="users_action", required=True, metavar="ACTION",
                                   help="add, delete or list users")
    add = actions.add_parser("add", help="store a user's SCRAM-SHA-256 and SCRAM-SHA-512 credentials "
                                         "(replacing any it had)")
    add.add_argument("name", metavar="NAME")
    add.add_argument("--password-stdin", action="store_true", required=True,
                     help="read the password from the first line of standard input")
    add.add_argument("--iterations", type=int, default=MIN_ITERATIONS, metavar="N",
                     help=f"PBKDF2 iterations (default and minimum {MIN_ITERATIONS})")
    delete = actions.add_parser("delete", help="remove a user")
    delete.add_argument("name", metavar="NAME")
    listing = actions.add_parser("list", help="print each user and its mechanisms (never keys)")
    for sub in (add, delete, listing):
        where = sub.add_mutually_exclusive_group(required=True)
        where.add_argument("--log-dir", metavar="DIR", help="a standalone broker's data directory")
        where.add_argument("--zookeeper", metavar="HOST:PORT[,...][/CHROOT]", help="a cluster's ZooKeeper")
    users.set_defaults(func=cmd_users)


def cmd_users(args: argparse.Namespace) -> int:
    try:
        record = _password_record(args) if args.users_action == "add" else None
        if args.log_dir is not None:
            return _on_file(args, record)
        status = run_client_value(_on_zookeeper, (args, record))
        return 1 if status is None else status
    except CredentialError as exc:
        print(f"trikafka: {exc}", file=sys.stderr)
        return 1


def _password_record(args: argparse.Namespace) -> UserRecord:
    password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        raise CredentialError("no password on standard input")
    return new_record(password, args.iterations)


def _print_users(users: dict[str, UserRecord]) -> None:
    for name in sorted(users):
        print(f"{name}\t{','.join(m.value for m in users[name])}")


def _on_file(args: argparse.Namespace, record: UserRecord | None) -> int:
    store = CredentialFile(args.log_dir)
    if args.users_action == "add":
        assert record is not None
        store.add(args.name, record)
        print(f"trikafka: user {args.name} stored", file=sys.stderr)
    elif args.users_action == "delete":
        if not store.delete(args.name):
            print(f"trikafka: no user {args.name}", file=sys.stderr)
            return 1
    else:
        _print_users(store.read())
    return 0


async def _on_zookeeper(work: tuple[argparse.Namespace, UserRecord | None]) -> int:
    from trikafka.zk import KazooZooKeeperClient

    args, record = work
    async with KazooZooKeeperClient(args.zookeeper, ensure_chroot=False) as zk:
        if args.users_action == "add":
            assert record is not None
            await zk_add_user(zk, args.name, record)
            print(f"trikafka: user {args.name} stored", file=sys.stderr)
        elif args.users_action == "delete":
            if not await zk_delete_user(zk, args.name):
                print(f"trikafka: no user {args.name}", file=sys.stderr)
                return 1
        else:
            _print_users(await zk_users(zk))
    return 0

