"""``trikafka audit``: producers' audit counts against what each cluster holds (logic in ``trikafka.mirror``)."""

from __future__ import annotations

from trikafka.mirror.commands import audit_command


def add_parser(commands) -> None:
    """Register ``audit`` on the ``trikafka`` subparsers."""
    audit = commands.add_parser("audit")
    audit.add_argument("--zookeeper", action="append", required=True, metavar="HOST:PORT[,...][/CHROOT]",
                       help="a cluster to count (repeatable); the first one holds the audit events")
    audit.add_argument("--json", action="store_true", help="print the per-window table as JSON")
    audit.add_argument("--all", action="store_true", help="print every window, not only those with problems")
    audit.set_defaults(func=audit_command)
