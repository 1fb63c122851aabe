"""``trikafka serve``: a broker registered in ZooKeeper, a private ZooKeeper, or standalone."""

from __future__ import annotations

import argparse
import functools
import gc
import logging
import os
import sys

import trio

from trikafka.broker.config import (DEFAULT_HOST, DEFAULT_KAFKA_PORT, DEFAULT_PORT, INTER_BROKER_PASSWORD_VARIABLE,
                                    KAFKA_PORT_OFF, BrokerConfig, ConfigError, default_kafka_port)
from trikafka.broker.config_sources import load
from trikafka.util.errors import leaf_exceptions
from trikafka.util.malloc import keep_freed_memory
from trikafka.cli.logsetup import announce

logger = logging.getLogger("trikafka.cli")

READY_LINE = "trikafka: serving on {host}:{port}"
KAFKA_READY_SUFFIX = " (Kafka protocol on {host}:{port})"


def add_parser(commands) -> None:
    """Register ``serve`` on the ``trikafka`` subparsers."""
    serve = commands.add_parser("serve")
    serve.add_argument("--config", metavar="FILE", help="TOML file, or a 0.7 server.properties")
    serve.add_argument("--host", metavar="HOST", help=f"address to bind (default {DEFAULT_HOST})")
    serve.add_argument("--port", type=int, metavar="PORT", help=f"port (default {DEFAULT_PORT}; 0 picks a free one)")
    serve.add_argument("--kafka-port", type=int, metavar="PORT",
                       help=f"port of the Apache Kafka protocol listener (default {DEFAULT_KAFKA_PORT} beside the "
                            f"default port, else a free one; 0 picks a free one; -1 turns it off)")
    serve.add_argument("--log-dir", metavar="DIR", help="data directory (default ./trikafka-data)")
    serve.add_argument("--broker-id", type=int, metavar="ID", help="this broker's id (0.7's brokerid; default 0)")
    serve.add_argument("--num-partitions", type=int, metavar="N",
                       help="partitions of a topic created by its first produce (default 1)")
    serve.add_argument("--standalone", action="store_true",
                       help="no ZooKeeper (0.7's enable.zookeeper=false)")
    serve.add_argument("--zookeeper", metavar="CONNECT",
                       help="join this ZooKeeper ensemble, host:port[,host:port][/chroot] "
                            "(default: start a private ZooKeeper next to the log dir)")
    serve.add_argument("--zookeeper-port", type=int, metavar="PORT",
                       help="port of the private ZooKeeper (default 2181; 0 picks a free one); a taken port is "
                            "an error. Its connect string is written to <log-dir>-zookeeper/zookeeper-connect, "
                            "where client commands run in the same directory find it")
    serve.add_argument("--ready-file", metavar="FILE", help="write the bound port here once serving")
    serve.add_argument("--metrics-port", type=int, metavar="N",
                       help="serve /metrics (Prometheus), /healthz and /readyz over HTTP on this port "
                            "(0 picks a free one; default: off)")
    tls = serve.add_argument_group("security (docs/protocol.md §18)")
    tls.add_argument("--kafka-security", metavar="PROTOCOL",
                     help="the Kafka listener's security protocol: PLAINTEXT (default), SSL, SASL_PLAINTEXT, "
                          "SASL_SSL (kafka.security.protocol; SASL users from `trikafka users`)")
    tls.add_argument("--port-security", metavar="PROTOCOL",
                     help="the 0.7 port's, which also carries replica traffic: PLAINTEXT (default) or SSL "
                          "(port.security.protocol)")
    tls.add_argument("--tls-cert", metavar="PEM", help="the broker's certificate chain (ssl.certificate.location)")
    tls.add_argument("--tls-key", metavar="PEM", help="its private key (ssl.key.location)")
    tls.add_argument("--tls-client-ca", metavar="PEM",
                     help="require client certificates signed by these CAs: mutual TLS (ssl.client.ca.location)")
    tls.add_argument("--tls-ca", metavar="PEM",
                     help="CAs trusted for other brokers' certificates (ssl.ca.location; default: the system's)")
    tls.add_argument("--inter-broker-sasl-mechanism", metavar="MECHANISM",
                     help="on a SASL listener, the mechanism brokers log in to each other with: SCRAM-SHA-512 "
                          "(default), SCRAM-SHA-256 or PLAIN (sasl.mechanism.inter.broker.protocol, §18.5)")
    tls.add_argument("--inter-broker-sasl-username", metavar="NAME",
                     help="the user brokers log in to each other as (sasl.inter.broker.username); needed on a "
                          "SASL listener with --zookeeper")
    tls.add_argument("--inter-broker-sasl-password-file", metavar="FILE",
                     help="its password: the file's first line (sasl.inter.broker.password.file; default: "
                          f"${INTER_BROKER_PASSWORD_VARIABLE})")
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
    flags = {"port": args.port, "kafka_port": args.kafka_port, "host": args.host, "log_dir": args.log_dir, "broker_id": args.broker_id,
             "num_partitions": args.num_partitions, "metrics_port": args.metrics_port,
             "private_zookeeper_port": args.zookeeper_port,
             "kafka_security_protocol": args.kafka_security, "port_security_protocol": args.port_security,
             "ssl_certificate_location": args.tls_cert, "ssl_key_location": args.tls_key,
             "ssl_client_ca_location": args.tls_client_ca, "ssl_ca_location": args.tls_ca,
             "sasl_mechanism_inter_broker_protocol": args.inter_broker_sasl_mechanism,
             "sasl_inter_broker_username": args.inter_broker_sasl_username,
             "sasl_inter_broker_password_file": args.inter_broker_sasl_password_file}
    overrides.update({k: v for k, v in flags.items() if v is not None})
    if args.standalone and args.zookeeper:
        raise ConfigError("--standalone and --zookeeper exclude each other")
    if args.zookeeper_port is not None and (args.standalone or args.zookeeper):
        raise ConfigError("--zookeeper-port is the private ZooKeeper's: not with --standalone or --zookeeper")
    if args.standalone:
        overrides["enable_zookeeper"] = False
    if args.zookeeper:
        overrides.update(enable_zookeeper=True, zk_connect=args.zookeeper)
    # 0.7's enable.zookeeper defaults to true: so does the command (not the library).
    config = load(args.config, overrides, base=BrokerConfig(enable_zookeeper=True))
    if config.kafka_port is None:  # §16.1: the command serves the Kafka protocol unless told -1
        config = config.replace(kafka_port=default_kafka_port(config.port))
    elif config.kafka_port == KAFKA_PORT_OFF:
        config = config.replace(kafka_port=None)
    if config.enable_zookeeper and config.zk_connect:
        from trikafka.zk import parse_connect_string

        try:
            parse_connect_string(config.zk_connect)
        except ValueError as exc:
            raise ConfigError(f"zk.connect: {exc}") from None
    from trikafka.broker.kafka.peer_connector import PeerSettingError, inter_broker_login
    from trikafka.broker.security import TlsSettingError, check_files

    try:
        check_files(config)  # a bad certificate or key: one line now, not a traceback from the listener
        inter_broker_login(config)  # likewise a missing inter-broker password (§18.5)
    except (TlsSettingError, PeerSettingError) as exc:
        raise ConfigError(str(exc)) from None
    return config


def _write_ready_file(path: str, port: int, kafka_port: int | None) -> None:
    """``--ready-file``: the 0.7 port on the first line, then ``kafka PORT`` when that listener serves (§16.1)."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(f"{port}\n" + (f"kafka {kafka_port}\n" if kafka_port is not None else ""))
    os.replace(tmp, path)  # readers never see a half-written file


def read_ready_file(path: str) -> tuple[int, int | None]:
    """(port, Kafka port or None) from a ``--ready-file``; ValueError if it is not one."""
    with open(path) as f:
        lines = f.read().split("\n")
    kafka_port = None
    for line in lines[1:]:
        key, _, value = line.partition(" ")
        if key == "kafka":
            kafka_port = int(value)
    return int(lines[0]), kafka_port


def _write_connect_file(config: BrokerConfig, connect_string: str) -> None:
    """Where client commands find this broker's private ZooKeeper (``common.default_zookeeper``)."""
    from trikafka.broker.zookeeper import private_zookeeper_dir
    from trikafka.cli.common import ZOOKEEPER_CONNECT_FILE

    path = os.path.join(private_zookeeper_dir(config), ZOOKEEPER_CONNECT_FILE)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(f"{connect_string}\n")
    os.replace(tmp, path)


def _private_port_taken(config: BrokerConfig) -> str | None:
    """Why the private ZooKeeper cannot have its port (None: it can, or there is none)."""
    from trikafka.zk.server_setup import port_is_free

    port = config.private_zookeeper_port
    if not config.enable_zookeeper or config.zk_connect or not port or port_is_free(port):
        return None
    return (f"port {port} for the private ZooKeeper is taken (another ZooKeeper?): give --zookeeper-port PORT "
            f"(0: any free port), or --zookeeper 127.0.0.1:{port} to join the one listening there")


async def _serve_main(config: BrokerConfig, ready_file: str | None) -> None:
    from trikafka.broker.server import serve

    async with trio.open_nursery() as nursery:
        broker = await nursery.start(functools.partial(serve, config, handle_signals=True))
        # A signal during start-up asked for a shutdown the broker begins once started: nothing is
        # announced then (a script waiting for the ready line must not take a stopping broker for a
        # serving one).  Checked again after each await, and no await between the last check and the
        # ready line, so a signal is either seen here or handled after the line.
        if broker.shutting_down:
            return
        if broker.zookeeper is not None:
            zk = broker.zookeeper
            where = (f"private ZooKeeper {zk.connect_string} (pid {zk.private_server.pid}, "
                     f"data {zk.private_server.data_dir})" if zk.private else f"ZooKeeper {zk.connect_string}")
            announce(logger, f"trikafka: broker {config.broker_id} registered in {where}")
            if zk.private:
                await trio.to_thread.run_sync(_write_connect_file, config, zk.connect_string)
        if broker.metrics_address is not None:
            host, port = broker.metrics_address
            announce(logger, f"trikafka: metrics on http://{host}:{port}/metrics", metrics_port=port)
        # Files before the ready line, so a reader of the line finds them.
        listener_file = await trio.to_thread.run_sync(_write_listener_file, config, broker.host, broker.port,
                                                      broker.kafka_port)
        if broker.shutting_down:
            await trio.to_thread.run_sync(_remove_quietly, listener_file)
            return
        if ready_file:
            _write_ready_file(ready_file, broker.port, broker.kafka_port)
        line = READY_LINE.format(host=broker.host, port=broker.port)
        if broker.kafka_port is not None:
            line += KAFKA_READY_SUFFIX.format(host=broker.host, port=broker.kafka_port)
        announce(logger, line, host=broker.host, port=broker.port, kafka_port=broker.kafka_port)
        if logging.getLogger("kazoo").level == logging.ERROR:
            # Serving: a lost or re-established session is news again (cmd_serve quietened the start).
            logging.getLogger("kazoo").setLevel(logging.WARNING)
    # A clean stop: the address goes with the broker (a killed broker leaves it, naming a dead port).
    await trio.to_thread.run_sync(_remove_quietly, listener_file)


def _write_listener_file(config: BrokerConfig, host: str, port: int, kafka_port: int | None) -> str:
    """``<log_dir>/.trikafka-listener``: where client commands find this broker (docs/protocol.md §7.1):
    ``HOST:PORT``, then ``kafka HOST:PORT`` when the Kafka listener serves."""
    from trikafka.log.names import LISTENER_FILE

    path = os.path.join(config.log_dir, LISTENER_FILE)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(f"{host}:{port}\n" + (f"kafka {host}:{kafka_port}\n" if kafka_port is not None else ""))
    os.replace(tmp, path)
    return path


def _remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def _freeze_imported_objects() -> None:
    """Leave the objects of the modules imported so far out of the collector's passes.

    Modules, classes and functions (about 70,000 tracked objects) live as long as the process, yet
    a full collection walks every tracked object: 20-50 ms of CPU for these alone, charged to
    whatever request allocates next.  Frozen before the broker is built, so none of its own
    objects (logs, connections), which become cyclic garbage when they go, is kept past its life.
    No collection first: the imports leave a few hundred garbage objects, frozen for good, where a
    full pass would cost every broker start as much as the walk it saves.
    """
    gc.freeze()


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        config = _serve_config(args)
    except (ConfigError, OSError) as exc:
        print(f"trikafka: bad configuration: {exc}", file=sys.stderr)
        return 2
    from trikafka.broker.zookeeper import ZooKeeperSetupError
    from trikafka.zk import ZooKeeperClientError

    taken = _private_port_taken(config)
    if taken is not None:
        print(f"trikafka: {taken}", file=sys.stderr)
        return 1

    if (config.enable_zookeeper and logging.getLogger("kazoo").level == logging.NOTSET
            and logging.getLogger().getEffectiveLevel() > logging.DEBUG):
        # Until the broker serves, each failed connection attempt would be a warning of its own;
        # an unreachable ensemble is reported once, in one line, instead (--log-level DEBUG shows them).
        logging.getLogger("kazoo").setLevel(logging.ERROR)
    keep_freed_memory()  # a request's buffers reused, not faulted in again per request
    os_errors: list[BaseException] = []
    interrupted = False
    _freeze_imported_objects()
    try:
        trio.run(_serve_main, config, args.ready_file)
    except* (ZooKeeperClientError, ZooKeeperSetupError) as group:  # e.g. the broker id is taken
        os_errors.extend(leaf_exceptions(group))
    except* OSError as group:  # e.g. the port is taken, the log dir is not writable
        os_errors.extend(leaf_exceptions(group))
    except* KeyboardInterrupt:  # before the signal handler was installed: no clean marker
        interrupted = True
    # Anything else (a failed log, a bug) propagates with its traceback: exit status 1.
    for error in os_errors:
        print(f"trikafka: {error}", file=sys.stderr)
    if interrupted:
        print("trikafka: interrupted", file=sys.stderr)
        return 130
    return 1 if os_errors else 0
