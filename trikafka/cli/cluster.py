"""``trikafka cluster``: brokers, the controller, under-replicated and offline partitions (docs/protocol.md §12.12.4)."""

from __future__ import annotations

import argparse
import json
import sys

from trikafka.cli import cluster_local
from trikafka.cli.common import add_zookeeper, run_client_value


def add_parser(commands) -> None:
    """Register ``cluster`` on the ``trikafka`` subparsers."""
    cluster = commands.add_parser(
        "cluster",
        description="What ZooKeeper says about the cluster: each live broker (id, host:port, whether its "
                    "unflushed tail survived its last stop), the controller and its epoch, and the partitions of "
                    "replicated topics that are under-replicated (fewer in-sync replicas than replicas) or "
                    "offline (no leader).")
    cluster.add_argument("action", nargs="?", choices=("up", "down"),
                         help="up: start a ZooKeeper and --brokers brokers on this machine, detached; down: stop "
                              "them (without ACTION: show the cluster)")
    add_zookeeper(cluster, "the cluster's ZooKeeper")
    cluster.add_argument("--json", action="store_true",
                         help='print {"brokers": [...], "controller": {...}, "under_replicated": [...], '
                              '"offline": [...]} instead of text')
    cluster_local.add_arguments(cluster)
    cluster.set_defaults(func=cmd_cluster)


async def cluster_view(args: argparse.Namespace) -> dict:
    """The JSON view of the cluster, read from ZooKeeper."""
    from trikafka.zk import KazooZooKeeperClient, NoNodeError, paths
    from trikafka.zk.registry import live_brokers
    from trikafka.zk.replication_store import partition_states
    from trikafka.zk.replication_values import NO_LEADER

    view: dict = {"brokers": [], "controller": None, "under_replicated": [], "offline": []}
    async with KazooZooKeeperClient(args.zookeeper, ensure_chroot=False) as zk:
        for broker_id, info in (await live_brokers(zk)).items():
            try:
                tail_intact = json.loads((await zk.get(paths.replication_broker(broker_id)))[0]).get("tail_intact")
            except (NoNodeError, ValueError, AttributeError):
                tail_intact = None
            view["brokers"].append({"id": broker_id, "host": info.host, "port": info.port,
                                    "tail_intact": tail_intact})
        try:
            controller = json.loads((await zk.get(paths.CONTROLLER))[0])
            view["controller"] = {"broker_id": controller["broker_id"],
                                  "controller_epoch": controller["controller_epoch"]}
        except (NoNodeError, ValueError, KeyError, TypeError):
            pass  # none yet, or a claim not written yet
        def skipping(topic: str, exc: Exception) -> None:
            print(f"trikafka: skipping topic {topic}: {exc}", file=sys.stderr)

        async for topic, partition, replicas, state in partition_states(zk, skipping):
            leader, isr = (state.leader, list(state.isr)) if state is not None else (NO_LEADER, [])
            row = {"topic": topic, "partition": partition, "replicas": list(replicas), "isr": isr}
            if leader == NO_LEADER:
                view["offline"].append(row)
            elif len(isr) < len(replicas):
                view["under_replicated"].append(row)
    return view


def _print_text(view: dict) -> None:
    print(f"brokers ({len(view['brokers'])}):")
    for b in view["brokers"]:
        intact = {True: "tail intact", False: "tail LOST at last stop", None: "tail unknown"}[b["tail_intact"]]
        print(f"  {b['id']}\t{b['host']}:{b['port']}\t{intact}")
    controller = view["controller"]
    print("controller: " + (f"broker {controller['broker_id']}, epoch {controller['controller_epoch']}"
                            if controller else "none"))
    for key, title in (("under_replicated", "under-replicated partitions"), ("offline", "offline partitions")):
        rows = view[key]
        print(f"{title}: {len(rows) or 'none'}")
        for row in rows:
            print(f"  {row['topic']}-{row['partition']}\treplicas {','.join(map(str, row['replicas']))}\t"
                  f"isr {','.join(map(str, row['isr'])) or '-'}")


def cmd_cluster(args: argparse.Namespace) -> int:
    if args.action is not None:
        return cluster_local.cmd_up_down(args)
    view = run_client_value(cluster_view, args)
    if view is None:
        return 1
    if args.json:
        print(json.dumps(view))
    else:
        _print_text(view)
    return 0
