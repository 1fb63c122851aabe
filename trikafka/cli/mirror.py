"""``trikafka mirror``: copy topics of source clusters into a target cluster (logic in ``trikafka.mirror``)."""

from __future__ import annotations

from trikafka.mirror.commands import mirror_command
from trikafka.mirror.mirror import DEFAULT_GROUP


def add_parser(commands) -> None:
    """Register ``mirror`` on the ``trikafka`` subparsers."""
    mirror = commands.add_parser("mirror")
    mirror.add_argument("--source-zookeeper", action="append", required=True, metavar="HOST:PORT[,...][/CHROOT]",
                        help="a source cluster's ZooKeeper, host:port[/chroot] (repeatable)")
    mirror.add_argument("--target-zookeeper", required=True, metavar="HOST:PORT[,...][/CHROOT]",
                        help="the target cluster's ZooKeeper")
    mirror.add_argument("--whitelist", required=True, metavar="REGEX",
                        help="topics to mirror (Java regex matching whole names)")
    mirror.add_argument("--group", default=DEFAULT_GROUP, metavar="NAME", help=f"consumer group on the sources "
                                                               f"(default {DEFAULT_GROUP})")
    mirror.add_argument("--consumer-id", metavar="ID", help="consumer id in that group (default: the host name)")
    mirror.add_argument("--acks", type=int, choices=(1, -1), default=1,
                        help="target acknowledgement: 1 appended, -1 flushed (default 1)")
    mirror.add_argument("--commit-interval-ms", type=int, default=1000, metavar="MS",
                        help="how often acknowledged offsets are committed (default 1000)")
    mirror.set_defaults(func=mirror_command)
