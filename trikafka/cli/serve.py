"""``trikafka serve``: a broker registered in ZooKeeper, a private ZooKeeper, or standalone."""

from __future__ import annotations

import argparse
import functools
import logging
import os
import sys

import trio

from trikafka.broker.config import DEFAULT_HOST, DEFAULT_PORT, BrokerConfig, ConfigError
from trikafka.broker.config_sources import load
from trikafka.cli.common import leaf_exceptions
from trikafka.cli.logsetup import announce

logger = logging.getLogger("trikafka.cli")

READY_LINE = "trikafka: serving on {host}:{port}"


def add_parser(commands) -> None:
    """Register ``serve`` on the ``trikafka`` subparsers."""
    serve = commands.add_parser("serve", help="run a broker")
    serve.add_argument("--config", help="TOML file, or a 0.7 server.properties")
    serve.add_argument("--host", help=f"address to bind (default {DEFAULT_HOST})")
    serve.add_argument("--port", type=int, help=f"port (default {DEFAULT_PORT}; 0 picks a free one)")
    serve.add_argument("--log-dir", help="data directory (default ./trikafka-data)")
    serve.add_argument("--broker-id", type=int)
    serve.add_argument("--num-partitions", type=int)
    serve.add_argument("--standalone", action="store_true",
                       help="no ZooKeeper (0.7's enable.zookeeper=false)")
    serve.add_argument("--zookeeper", metavar="CONNECT",
                       help="join this ZooKeeper ensemble, host:port[,host:port][/chroot] "
                            "(default: start a private ZooKeeper next to the log dir)")
    serve.add_argument("--ready-file", help="write the bound port here once serving")
    serve.add_argument("--metrics-port", type=int, metavar="N",
                       help="serve /metrics (Prometheus), /healthz and /readyz over HTTP on this port "
                            "(0 picks a free one; default: off)")
    serve.add_argument("--set", action="append", metavar="KEY=VALUE",
                       help="any setting, 0.7 or snake_case name (repeatable)")
    serve.set_defaults(func=cmd_serve)

def _serve_config(args: argparse.Namespace) -> BrokerConfig:
    overrides: dict[str, object] = {}
    for item in args.set or ():
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        overrides[key.strip()] = value
    flags = {"port": args.port, "host": args.host, "log_dir": args.log_dir, "broker_id": args.broker_id,
             "num_partitions": args.num_partitions, "metrics_port": args.metrics_port}
    overrides.update({k: v for k, v in flags.items() if v is not None})
    if args.standalone and args.zookeeper:
        raise ConfigError("--standalone and --zookeeper exclude each other")
    if args.standalone:
        overrides["enable_zookeeper"] = False
    if args.zookeeper:
        overrides.update(enable_zookeeper=True, zk_connect=args.zookeeper)
    # 0.7's enable.zookeeper defaults to true: so does the command (not the library).
    config = load(args.config, overrides, base=BrokerConfig(enable_zookeeper=True))
    if config.enable_zookeeper and config.zk_connect:
        from trikafka.zk import parse_connect_string

        try:
            parse_connect_string(config.zk_connect)
        except ValueError as exc:
            raise ConfigError(f"zk.connect: {exc}") from None
    return config


def _write_ready_file(path: str, port: int) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(f"{port}\n")
    os.replace(tmp, path)  # readers never see a half-written file


async def _serve_main(config: BrokerConfig, ready_file: str | None) -> None:
    from trikafka.broker.server import serve

    async with trio.open_nursery() as nursery:
        broker = await nursery.start(functools.partial(serve, config, handle_signals=True))
        if broker.zookeeper is not None:
            zk = broker.zookeeper
            where = (f"private ZooKeeper {zk.connect_string} (pid {zk.private_server.pid}, "
                     f"data {zk.private_server.data_dir})" if zk.private else f"ZooKeeper {zk.connect_string}")
            announce(logger, f"trikafka: broker {config.broker_id} registered in {where}")
        if broker.metrics_address is not None:
            host, port = broker.metrics_address
            announce(logger, f"trikafka: metrics on http://{host}:{port}/metrics", metrics_port=port)
        if ready_file:  # before the ready line, so a reader of the line finds the file
            _write_ready_file(ready_file, broker.port)
        announce(logger, READY_LINE.format(host=broker.host, port=broker.port), host=broker.host, port=broker.port)


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        config = _serve_config(args)
    except (ConfigError, OSError) as exc:
        print(f"trikafka: bad configuration: {exc}", file=sys.stderr)
        return 2
    from trikafka.broker.zookeeper import ZooKeeperSetupError
    from trikafka.zk import CoordinatorError

    if config.enable_zookeeper and logging.getLogger("kazoo").level == logging.NOTSET:
        logging.getLogger("kazoo").setLevel(logging.WARNING)  # connection chatter at INFO
    os_errors: list[BaseException] = []
    interrupted = False
    try:
        trio.run(_serve_main, config, args.ready_file)
    except* (CoordinatorError, ZooKeeperSetupError) as group:  # e.g. the broker id is taken
        os_errors.extend(leaf_exceptions(group))
    except* OSError as group:  # e.g. the port is taken, the log dir is not writable
        os_errors.extend(leaf_exceptions(group))
    except* KeyboardInterrupt:  # before the signal handler was installed: no clean marker
        interrupted = True
    # Anything else (a failed log, a bug) propagates with its traceback: exit status 1.
    for exc in os_errors:
        print(f"trikafka: {exc}", file=sys.stderr)
    if interrupted:
        print("trikafka: interrupted", file=sys.stderr)
        return 130
    return 1 if os_errors else 0
