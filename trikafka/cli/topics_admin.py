"""``trikafka topics create|describe|alter|reassign`` on the topics' ZooKeeper state (docs/protocol.md §12.12).

``topics create NAME --partitions N`` without ``--replication-factor``,
``--config`` or ``--zookeeper`` stays the plain CREATE_TOPIC of ``topics.py``;
with ``--zookeeper`` alone it is CREATE_TOPIC on every broker registered there.  With
``--replication-factor R`` (1 included) the topic is replicated; with only
``--config`` it is a plain topic whose settings go to ZooKeeper (``--zookeeper``)
or ride its CREATE_TOPIC to the one broker named (``--broker``, docs §9.5).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Awaitable, Callable, TypedDict

from trikafka.cli.common import default_zookeeper, plural, run_client_value

ACTIONS = ("describe", "alter", "reassign")
USAGE = {
    "create": "trikafka topics create NAME --partitions N [--replication-factor R] [--config K=V ...] "
              "--zookeeper HOST:PORT",
    "describe": "trikafka topics describe NAME --zookeeper HOST:PORT [--json]",
    "alter": "trikafka topics alter NAME --config K=V ... [--delete-config K ...] --zookeeper HOST:PORT",
    "reassign": "trikafka topics reassign NAME --partition P --replicas ID,ID,... --zookeeper HOST:PORT",
}


class AdminError(Exception):
    """A refusal to print as one line (exit status ``status``)."""

    def __init__(self, message: str, status: int = 1):
        super().__init__(message)
        self.status = status


def add_options(topics: argparse.ArgumentParser) -> None:
    """The options of the ZooKeeper actions, on the ``topics`` parser."""
    topics.add_argument("--replication-factor", type=int, metavar="R",
                        help="with create: a replicated topic with R copies of each partition (needs R live brokers)")
    topics.add_argument("--config", action="append", metavar="KEY=VALUE",
                        help="with create/alter: a topic setting (cleanup.policy, retention.ms, min.insync.replicas, "
                             "...); repeat for several")
    topics.add_argument("--delete-config", action="append", metavar="KEY",
                        help="with alter: remove a topic setting (the broker's own applies again)")
    topics.add_argument("--partition", type=int, metavar="P", help="with reassign: the partition to move")
    topics.add_argument("--replicas", metavar="ID,ID,...", help="with reassign: the partition's new replica list")


def wants_admin(args: argparse.Namespace) -> bool:
    """Whether the command line is one of this module's actions."""
    action = args.topic[:1]
    if action == ["create"]:
        return args.replication_factor is not None or bool(args.config) or args.zookeeper is not None
    return bool(action) and action[0] in ACTIONS


def validate(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Usage checks (argparse's errors); settings are checked by the command (one line, exit 2)."""
    action = args.topic[0]
    if len(args.topic) != 2:
        parser.error(f"usage: {USAGE[action]}")
    if action == "create":
        if args.partitions is None or args.partitions < 1:
            parser.error("topics create needs --partitions N (N >= 1)")
        if args.replication_factor is not None and args.replication_factor < 1:
            parser.error("--replication-factor must be >= 1")
    if action == "alter" and not args.config and not args.delete_config:
        parser.error("topics alter needs --config KEY=VALUE or --delete-config KEY")
    if action == "reassign" and (args.partition is None or args.replicas is None):
        parser.error("topics reassign needs --partition P and --replicas ID,ID,...")


def cmd_admin(args: argparse.Namespace) -> int:
    action = args.topic[0]
    if args.zookeeper is None:
        if action == "create" and args.replication_factor is None:
            # A plain topic with settings, created through one broker: CREATE_TOPIC carries them (§9.5).
            status = run_client_value(_guarded, (_create_through_broker, args))
            return 1 if status is None else status
        if args.broker_given:
            # These actions read and write ZooKeeper's state, which a broker address does not locate.
            print(f"trikafka: topics {action} works on the topics' state in ZooKeeper: give --zookeeper HOST:PORT "
                  "(--broker is not used)", file=sys.stderr)
            return 2
        args.zookeeper = default_zookeeper()
    run = {"create": _create, "describe": _describe, "alter": _alter, "reassign": _reassign}[action]
    status = run_client_value(_guarded, (run, args))
    return 1 if status is None else status


async def _guarded(call: tuple[Callable[[argparse.Namespace], Awaitable[int]], argparse.Namespace]) -> int:
    from trikafka.broker.replication.assignment import AssignmentError
    from trikafka.broker.topic_settings import TopicConfigError
    from trikafka.zk.errors import InvalidPathError
    from trikafka.zk.replication_values import ReplicationValueError

    run, args = call
    try:
        return await run(args)
    except AdminError as exc:
        print(f"trikafka: {exc}", file=sys.stderr)
        return exc.status
    except (TopicConfigError, AssignmentError, InvalidPathError) as exc:
        print(f"trikafka: {exc}", file=sys.stderr)
        return 2
    except ReplicationValueError as exc:
        print(f"trikafka: ZooKeeper at {args.zookeeper} holds an unreadable value: {exc}", file=sys.stderr)
        return 1


def _settings(args: argparse.Namespace, *, replicated: bool) -> dict[str, str]:
    """``--config`` checked for a topic of that kind, its warnings printed."""
    from trikafka.broker.topic_settings import check_topic_config, parse_config_items

    config = parse_config_items(args.config)
    for warning in check_topic_config(config, replicated=replicated):
        print(f"trikafka: {warning}", file=sys.stderr)
    return config


def _zookeeper(args: argparse.Namespace):
    from trikafka.zk import KazooZooKeeperClient

    return KazooZooKeeperClient(args.zookeeper)


async def _create(args: argparse.Namespace) -> int:
    from trikafka.zk import paths

    name = paths.validate_topic(args.topic[1])
    replicated = args.replication_factor is not None
    config = _settings(args, replicated=replicated)
    async with _zookeeper(args) as zk:
        if replicated:
            return await _create_replicated(zk, name, args.partitions, args.replication_factor, config)
        return await _create_plain(zk, name, args.partitions, config, args)


async def _create_replicated(zk, name: str, partitions: int, factor: int, config: dict[str, str]) -> int:
    """§12.12.2: place the replicas, write the topic and its first states in one transaction."""
    from trikafka.broker.replication.assignment import assign_replicas
    from trikafka.zk import paths
    from trikafka.zk.registry import live_brokers
    from trikafka.zk.replication_store import TopicExistsError, create_assigned_topic, read_assignment
    from trikafka.zk.replication_values import TopicAssignment

    for plain in (paths.broker_topic(name), paths.topic_config(name)):
        if await zk.exists(plain) is not None:
            raise AdminError(f"cannot create replicated topic {name!r}: a plain topic of that name exists ({plain})")
    replicas = assign_replicas(set(await live_brokers(zk)), partitions, factor)
    try:
        await create_assigned_topic(zk, name, TopicAssignment(replicas, config))
    except TopicExistsError:
        existing = await read_assignment(zk, name)
        if existing is None or [len(r) for r in existing.replicas] != [factor] * partitions \
                or existing.config != config:
            raise AdminError(f"cannot create replicated topic {name!r}: it exists with another shape or config "
                             "(`trikafka topics describe` shows it)") from None
        print(f"trikafka: replicated topic {name!r} already exists with {plural(partitions, 'partition')}, "
              f"replication factor {factor}")
        return 0
    placement = " ".join(f"{p}:{','.join(map(str, r))}" for p, r in enumerate(replicas))
    print(f"trikafka: replicated topic {name!r} created with {plural(partitions, 'partition')}, "
          f"replication factor {factor} (replicas {placement})")
    return 0


async def _create_plain(zk, name: str, partitions: int, config: dict[str, str], args: argparse.Namespace) -> int:
    """§12.12.1: the settings znode first (when there are settings), then CREATE_TOPIC on every live broker."""
    from trikafka.zk import NodeExistsError, paths
    from trikafka.zk.registry import live_brokers
    from trikafka.zk.topic_config_store import create_topic_config, read_topic_settings

    if await zk.exists(paths.replicated_topic(name)) is not None:
        raise AdminError(f"topic {name!r} is a replicated topic; change its settings with `trikafka topics alter`")
    if config:
        try:
            await create_topic_config(zk, name, config)
        except NodeExistsError:
            stored = await read_topic_settings(zk, name)
            if stored is None or stored.replicated or stored.config != config:
                raise AdminError(f"topic {name!r} already has settings in ZooKeeper "
                                 f"({paths.topic_config(name)}); change them with `trikafka topics alter`") from None
    brokers = await live_brokers(zk)
    if not brokers:
        raise AdminError(f"settings of {name!r} stored, but no broker is registered in {args.zookeeper} "
                         "to create it on")
    created = [await create_on_broker(info.host, info.port, name, partitions) for info in brokers.values()]
    return 0 if all(created) else 1


async def _create_through_broker(args: argparse.Namespace) -> int:
    """``topics create NAME --partitions N --config K=V --broker H:P``: the settings ride CREATE_TOPIC."""
    config = _settings(args, replicated=False)
    host, port = args.broker
    return 0 if await create_on_broker(host, port, args.topic[1], args.partitions, config) else 1


async def create_on_broker(host: str, port: int, name: str, partitions: int,
                           settings: dict[str, str] | None = None) -> bool:
    """CREATE_TOPIC on one broker, the result printed (a one-line reason on stderr); whether it exists now."""
    from trikafka.client import connect
    from trikafka.wire import ErrorCode

    async with await connect(host, port) as conn:
        result = await conn.create_topic(name, partitions, settings)
    if result.error == ErrorCode.NO_ERROR:
        print(f"trikafka: topic {name!r} has {plural(result.partitions, 'partition')} on {host}:{port}")
        return True
    if result.error == ErrorCode.INVALID_TOPIC:
        reason = "the broker rejects the topic name"
    elif result.error == ErrorCode.INVALID_CONFIG:
        reason = "the broker rejects a setting (see its log)"
    elif result.partitions >= 0:
        reason = f"it exists with {plural(result.partitions, 'partition')}"
    else:
        reason = f"the broker answered {result.error.name}"
    print(f"trikafka: cannot create topic {name!r} with {plural(partitions, 'partition')} on "
          f"{host}:{port}: {reason}", file=sys.stderr)
    return False


class _PartitionRow(TypedDict):
    """One partition of a replicated topic as ``describe`` prints it (and ``--json`` dumps it)."""

    partition: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]


async def _describe(args: argparse.Namespace) -> int:
    from trikafka.zk import NoNodeError, paths
    from trikafka.zk.replication_store import read_assignment, read_state
    from trikafka.zk.replication_values import NO_LEADER
    from trikafka.zk.topic_config_store import read_topic_settings

    name = paths.validate_topic(args.topic[1])
    async with _zookeeper(args) as zk:
        assignment = await read_assignment(zk, name)
        if assignment is None:
            return await _describe_plain(zk, name, args)
        rows: list[_PartitionRow] = []
        for p, replicas in enumerate(assignment.replicas):
            try:
                state = (await read_state(zk, name, p)).state
                leader, epoch, isr = state.leader, state.leader_epoch, list(state.isr)
            except NoNodeError:
                leader, epoch, isr = NO_LEADER, -1, []
            rows.append(_PartitionRow(partition=p, leader=leader, leader_epoch=epoch, replicas=list(replicas),
                                      isr=isr))
        settings = await read_topic_settings(zk, name)
    if args.json:
        print(json.dumps({"topic": name, "partitions": rows}))
        return 0
    config = " ".join(f"{k}={v}" for k, v in sorted((settings.config if settings else {}).items()))
    print(f"topic {name}: replicated, {plural(len(rows), 'partition')}, {replication_factor_text(assignment)}"
          f"{', config ' + config if config else ''}")
    print("partition\tleader\tleader_epoch\treplicas\tisr\tstatus")
    for row in rows:
        status = partition_status(row["leader"], row["replicas"], row["isr"],
                                  assignment.targets.get(row["partition"]))
        print(f"{row['partition']}\t{row['leader']}\t{row['leader_epoch']}\t{_ids(row['replicas'])}\t"
              f"{_ids(row['isr'])}\t{status}")
    return 0


async def _describe_plain(zk, name: str, args: argparse.Namespace) -> int:
    from trikafka.zk import paths
    from trikafka.zk.topic_config_store import read_topic_settings

    settings = await read_topic_settings(zk, name)
    registered = await zk.exists(paths.broker_topic(name)) is not None
    if settings is None and not registered:
        raise AdminError(f"no topic {name!r} in ZooKeeper at {args.zookeeper}")
    config = settings.config if settings else {}
    if args.json:
        print(json.dumps({"topic": name, "replicated": False, "config": config}))
    else:
        shown = " ".join(f"{k}={v}" for k, v in sorted(config.items())) or "none (the brokers' own)"
        print(f"topic {name}: plain (unreplicated); settings {shown}; "
              f"`trikafka topics {name} --zookeeper {args.zookeeper}` shows its partitions")
    return 0


def replication_factor_text(assignment) -> str:
    """``replication factor N`` over every partition's intended replicas: a pending move's target,
    else its replicas (during a move the replicas are the union of old and new, §12.12.3)."""
    factors = sorted({len(assignment.targets.get(p, replicas)) for p, replicas in enumerate(assignment.replicas)})
    if len(factors) <= 1:
        return f"replication factor {factors[0] if factors else 0}"
    return f"replication factors {factors[0]} to {factors[-1]}"


def partition_status(leader: int, replicas: list[int], isr: list[int], target=None) -> str:
    """``ok``, ``offline`` (no leader), ``under-replicated`` (|isr| < |replicas|), plus a pending move."""
    status = "offline" if leader < 0 else "under-replicated" if len(isr) < len(replicas) else "ok"
    return status if target is None else f"{status}, reassigning to {_ids(target)}"


def _ids(ids) -> str:
    return ",".join(map(str, ids)) or "-"


async def _alter(args: argparse.Namespace) -> int:
    from trikafka.broker.topic_settings import check_topic_config, parse_config_items
    from trikafka.zk import paths
    from trikafka.zk.topic_config_store import update_topic_config

    name = paths.validate_topic(args.topic[1])
    changes = parse_config_items(args.config)
    warnings = check_topic_config(changes, replicated=True)  # the warnings of what is set now

    def change(current: dict[str, str], replicated: bool) -> dict[str, str]:
        new = {**current, **changes}
        for key in args.delete_config or ():
            new.pop(key, None)
        check_topic_config(new, replicated=replicated)
        return new

    async with _zookeeper(args) as zk:
        settings = await update_topic_config(zk, name, change)
    for warning in warnings:
        print(f"trikafka: {warning}", file=sys.stderr)
    shown = " ".join(f"{k}={v}" for k, v in sorted(settings.config.items())) or "none"
    kind = "replicated topic" if settings.replicated else "topic"
    print(f"trikafka: {kind} {name!r} settings now: {shown}")
    return 0


async def _reassign(args: argparse.Namespace) -> int:
    from trikafka.broker.replication.assignment import AssignmentError
    from trikafka.broker.replication.reassign import start_reassignment
    from trikafka.zk import paths

    name = paths.validate_topic(args.topic[1])
    try:
        target = tuple(int(part) for part in args.replicas.split(","))
    except ValueError:
        raise AssignmentError(f"--replicas takes broker ids like 1,2,3, not {args.replicas!r}") from None
    async with _zookeeper(args) as zk:
        started = await start_reassignment(zk, name, args.partition, target)
    if started is None:
        raise AdminError(f"no replicated topic {name!r} in ZooKeeper at {args.zookeeper}")
    assignment, planned = started
    current = assignment.replicas[args.partition]
    if not planned and current == target:
        print(f"trikafka: {name}-{args.partition} already has replicas {_ids(target)}")
    else:
        print(f"trikafka: {name}-{args.partition} moving from {_ids(current)} to {_ids(target)}; the controller "
              f"finishes once the new replicas are in sync (`trikafka topics describe {name}` shows it)")
    return 0
