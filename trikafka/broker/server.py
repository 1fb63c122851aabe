"""The broker: the composition root and one nursery tree, which owns every task it runs.

``_run_tree`` builds the broker top down, each object given what it needs at
construction: the flusher, retention and cleaner, the topics' overrides and the
dynamic settings (which the Kafka listener and replication are given and
follow); both listeners' sockets
bound (connections wait in the backlog); the ZooKeeper registration, which
holds the bound port; the engine (``engine/``: the partition directory, the
topic admin with the broker's address and where settings are kept, the
waiters, the metrics); the two listeners it is given (the 0.7
``RequestHandler``; the Kafka ``KafkaService`` with its cluster id, its
ZooKeeper session and its peer connector, ``open_kafka_service``); replication;
the processors; then accepting.  No object is finished after construction:
the partition directory reads what replication learns, and replication
writes to the directory's logs, so the root builds the ``ReplicationView``
first, the directory with it, and replication last with both
(docs/architecture.md, which also draws the layers and follows a produce and
a fetch).

::

    serve()
    ├── root nursery              the metrics and health HTTP server (``metrics_port``), up
    │                             before recovery so ``/readyz`` can answer 503 meanwhile
    └── services nursery          flush scheduler, retention deleter, cleaner, signal watcher,
        │                         ZooKeeper registration (``enable_zookeeper``, zookeeper.py),
        │                         replication (replication/manager.py), topic settings watcher,
        │                         and the Kafka listener's services (``KafkaService.start``:
        │                         group and transaction coordinators, producer expiry, peer
        │                         connections, credentials, registry, live group marks, ACLs)
        └── server nursery        N processors of the 0.7 listener and N of the Kafka
            │                     listener, each with its connections
            └── front nursery     both acceptors + shutdown watcher

Every long-lived service is started with ``nursery.start`` so readiness is
explicit; ``task_status.started`` hands the caller a ``Broker`` whose
``port`` is the bound one (port 0 works).  An exception in any service or
connection (other than the per-connection protocol errors, which only close
that connection) cancels the tree and propagates out of ``serve``: the broker
goes down loudly, and without the clean-shutdown marker, so the next start
recovers.

Graceful shutdown (``Broker.shutdown()``, SIGINT or SIGTERM):

1. the front nursery is cancelled: no more connections are accepted;
2. long polls answer now; connections finish what they have received whole,
   then close; the server nursery gets ``graceful_shutdown_timeout_s``, after
   which whatever is left is cancelled;
3. the services stop (a flush in flight completes first: it is shielded);
4. ``LogManager.close()`` flushes and fsyncs every log and writes the
   clean-shutdown marker (in a worker thread, shielded).

A second signal during step 2 skips the rest of the grace period.
"""

from __future__ import annotations

import functools
import logging
import random
import signal
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Awaitable, Callable, Iterable, TypeVar

import trio

from trikafka.util.errors import leaf_exceptions
from trikafka.log.clock import wall_clock_ms
from trikafka.log.fs import FileSystem, OsFileSystem
from trikafka.log.manager import LogManager

from trikafka.wire.metadata import BrokerAddress
from trikafka.wire.requests import RequestType
from trikafka.zk.client import ZooKeeperClient

from .acceptor import Acceptor, BoundAddress, ConnectionQuota
from .cleaner import CleanerService
from .config import BrokerConfig, published_host
from .dynamic_config import BrokerSettings
from .flusher import FlushScheduler
from .connection import ServedConnection07
from .engine.directory import PartitionDirectory
from .engine.engine import Engine
from .engine.topic_admin import TopicAdmin
from .engine.waiters import VisibleEndWaiters
from .handlers import RequestHandler
from .kafka.service import KafkaService, open_kafka_service
from .http import HttpServer, Routes
from .metrics import BrokerMetrics
from .processor import Processor, Secure
from .replication.startup import CONTROLLED_SHUTDOWN_TIMEOUT_S, start_replication
from .replication.view import ReplicationView
from .retention import RetentionDeleter
from .seams import RunBlocking
from .security import SecurityProtocol, TlsAcceptance, TlsContexts
from .engine.topic_admin import TopicSettingsStore
from .topic_config import TopicOverrides, ZooKeeperTopicSettings, watch_topic_configs
from .topic_settings_file import LocalTopicSettings

if TYPE_CHECKING:
    from .replication.manager import Replication
    from .zookeeper import BrokerZooKeeper

logger = logging.getLogger(__name__)

T = TypeVar("T")

SHUTDOWN_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# The broker's listeners, as ``Broker.connect_stream`` names them.
LISTENER_07 = "0.7"
LISTENER_KAFKA = "kafka"


class ShutdownRequest:
    """A graceful shutdown asked for (``Broker.shutdown``, SIGINT, SIGTERM): made before the broker,
    so that a signal is heard while the rest of the broker is still being built."""

    def __init__(self) -> None:
        self._requested = trio.Event()
        self.grace_scope = trio.CancelScope()  # the server nursery runs in it: its cancellation ends the grace period

    def request(self) -> None:
        """Ask for a shutdown (idempotent); asked twice, the rest of the grace period is skipped."""
        if self._requested.is_set():
            self.grace_scope.cancel()
        self._requested.set()

    @property
    def requested(self) -> bool:
        return self._requested.is_set()

    def begin_grace_period(self, timeout_s: float) -> None:
        """The acceptors stopped: what is left of the server nursery gets ``timeout_s`` more."""
        self.grace_scope.deadline = trio.current_time() + timeout_s

    async def wait(self) -> None:
        await self._requested.wait()


@dataclass
class Lifecycle:
    """How far the broker has come, made in ``serve`` before it: what comes up first (the HTTP
    endpoint's ``/readyz``) and what outlives it (``serve``'s close) read it, the tree writes it."""

    shutdown: ShutdownRequest = field(default_factory=ShutdownRequest)
    serving: bool = False  # recovered, registered (with ZooKeeper), accepting connections
    clean_shutdown: bool | None = None  # after serve() returns: whether the marker was written

    def ready(self) -> bool:
        """What ``/readyz`` answers: serving and not shutting down."""
        return self.serving and not self.shutdown.requested


@dataclass
class Broker:
    """A running broker, as returned by ``await nursery.start(serve, config)``."""

    config: BrokerConfig
    addresses: list[BoundAddress]
    log_manager: LogManager
    flusher: FlushScheduler
    retention: RetentionDeleter
    handler_07: RequestHandler  # the 0.7 listener's (the Kafka listener: ``kafka``)
    engine: Engine  # what both listeners share (broker/engine/)
    processors: list[Processor]  # every listener's
    lifecycle: Lifecycle = field(repr=False)  # serving, shutting down, the clean-shutdown marker
    zookeeper: BrokerZooKeeper | None = None  # once registered (enable_zookeeper)
    metrics: BrokerMetrics = field(default_factory=BrokerMetrics, repr=False)
    metrics_address: tuple[str, int] | None = None  # the HTTP endpoint's (host, port) with metrics_port
    cleaner: CleanerService | None = None  # compaction (docs/protocol.md §11)
    replicas: Replication | None = None  # with ZooKeeper (docs/protocol.md §12)
    kafka_addresses: list[BoundAddress] = field(default_factory=list)  # the Kafka listener's (§16.1)
    kafka: KafkaService | None = None
    # Each listener's processors (LISTENER_07, LISTENER_KAFKA): where connect_stream hands a stream.
    listener_processors: dict[str, list[Processor]] = field(default_factory=dict, repr=False)
    _next_processor: int = field(default=0, repr=False)

    @property
    def kafka_port(self) -> int | None:
        """The Kafka-protocol listener's bound port (None: not serving it)."""
        return self.kafka_addresses[0].port if self.kafka_addresses else None

    @property
    def host(self) -> str:
        return self.addresses[0].host

    @property
    def port(self) -> int:
        return self.addresses[0].port

    def start_serving(self) -> None:
        """Recovered, registered, accepting: ``/readyz`` answers ready from now on."""
        self.lifecycle.serving = True

    @property
    def serving(self) -> bool:
        """Recovered, registered (with ZooKeeper), accepting connections."""
        return self.lifecycle.serving

    @property
    def clean_shutdown(self) -> bool | None:
        """After ``serve`` returned: whether the clean-shutdown marker was written."""
        return self.lifecycle.clean_shutdown

    def shutdown(self) -> None:
        """Begin a graceful shutdown (idempotent); ``serve`` returns when it is done."""
        self.lifecycle.shutdown.request()

    @property
    def shutting_down(self) -> bool:
        return self.lifecycle.shutdown.requested

    async def wait_shutdown_requested(self) -> None:
        """Return once ``shutdown()`` was called (or a signal asked for it)."""
        await self.lifecycle.shutdown.wait()

    @property
    def ready(self) -> bool:
        """What ``/readyz`` answers: serving and not shutting down."""
        return self.lifecycle.ready()

    def connection_count(self) -> int:
        return sum(len(p.connections) for p in self.processors)

    async def connect_stream(self, stream: trio.abc.Stream, peer: str = "in-process", *,
                             listener: str = LISTENER_07) -> None:
        """Serve ``stream`` as if ``listener`` (``LISTENER_07`` or ``LISTENER_KAFKA``) had accepted it
        (tests use memory streams).  Raises ``ValueError`` for a listener the broker does not serve."""
        processors = self.listener_processors.get(listener)
        if not processors:
            raise ValueError(f"broker {self.config.broker_id} serves no {listener} listener")
        processor = processors[self._next_processor % len(processors)]
        self._next_processor += 1
        await processor.hand_off(stream, peer)

    async def flush_all(self) -> None:
        """Flush every log now and wait for it (tests and tools)."""
        for log in self.log_manager.logs():
            await self.flusher.flush(log)


async def serve(config: BrokerConfig, *, task_status: trio.TaskStatus[Broker] = trio.TASK_STATUS_IGNORED,
                fs: FileSystem | None = None, clock_ms: Callable[[], int] = wall_clock_ms,
                rng: random.Random | None = None, handle_signals: bool = False,
                run_blocking: RunBlocking | None = None,
                refuse_requests: Iterable[RequestType] = (), coordinator: ZooKeeperClient | None = None,
                open_stream: Callable[[str, int], Awaitable[trio.abc.Stream]] = trio.open_tcp_stream) -> None:
    """Run a broker until ``Broker.shutdown()``, a signal (with ``handle_signals``), or cancellation.

    ``fs``, ``clock_ms`` (wall clock, for retention and OFFSETS) and ``rng``
    (partition -1) are injectable for tests, and so is ``run_blocking(fn)``,
    which runs the blocking calls (log load and creation, fsyncs, retention's
    stats and unlinks, close); the default is a worker thread.  Tests on a mock clock with ``FakeFileSystem`` pass
    ``inline_blocking`` so the clock never jumps while an fsync "runs".
    Cancellation from outside also shuts down cleanly, without the grace period.
    ``refuse_requests`` lists request types the broker closes the connection on,
    as a plain 0.7 broker does for every extension (tests of clients' fallbacks).
    ``coordinator`` (with ``enable_zookeeper``; tests) replaces the connection
    to ``config.zk_connect``: an open ``ZooKeeperClient`` the broker registers in
    and does not close.  ``open_stream(host, port)`` is how followers reach
    their leaders and the Kafka listener's own calls reach other brokers (§18.5;
    tests pass an in-memory network's).
    """
    run_blocking = run_blocking or trio.to_thread.run_sync
    wiring = _Wiring(BrokerMetrics(), refuse_requests=frozenset(refuse_requests), coordinator=coordinator,
                     open_stream=open_stream)
    wiring.metrics.watch_readiness(wiring.lifecycle.ready)
    run = functools.partial(_serve, config, fs, clock_ms, rng, handle_signals, run_blocking, wiring, task_status)
    if config.metrics_port is None:
        await run(None)
        return
    async with trio.open_nursery() as root:
        secure = None
        if SecurityProtocol.parse(config.metrics_security_protocol).tls:  # HTTPS where asked (§18.1)
            tls = await run_blocking(functools.partial(TlsContexts.load, config))  # reads PEM files: off the loop
            secure = _secure(tls, config, config.metrics_security_protocol)
        http = HttpServer(config.host, config.metrics_port,
                          Routes(metrics=wiring.metrics.exposition, is_ready=wiring.lifecycle.ready), secure=secure)
        await run(await root.start(http.run))
        root.cancel_scope.cancel()


async def _serve(config: BrokerConfig, fs: FileSystem | None, clock_ms: Callable[[], int],
                 rng: random.Random | None, handle_signals: bool, run_blocking: RunBlocking,
                 wiring: _Wiring, task_status: trio.TaskStatus[Broker],
                 metrics_address: tuple[str, int] | None) -> None:
    """``serve`` without the HTTP endpoint (bound at ``metrics_address``, if any): recover, run the tree,
    close the logs."""
    lifecycle = wiring.lifecycle
    fs = fs if fs is not None else OsFileSystem()
    log_manager = LogManager(config.log_dir, config.log_config(), fs,
                             clock_ms=clock_ms, topic_configs=config.topic_log_configs(),
                             partitions=config.partitions, roll_on_append=False)  # rolls leave the loop
    await run_blocking(log_manager.open)  # recovery may scan a large segment
    if log_manager.logs():
        logger.info("log dir %s loaded (%d logs, recovery %s)", config.log_dir, len(log_manager.logs()),
                    "ran" if log_manager.recovered else "not needed")
    else:  # nothing to recover: "recovery ran" would alarm the reader of a new broker's log
        logger.info("log dir %s holds no logs yet", config.log_dir)
    clean = False
    try:
        await _run_tree(config, log_manager, fs, clock_ms, rng, handle_signals, run_blocking,
                        wiring, task_status, metrics_address)
        clean = True
    except BaseException as exc:
        clean = _only_cancellation(exc)
        if not clean:
            reasons = dict.fromkeys(f"{type(e).__name__}: {e}" for e in leaf_exceptions(exc))
            logger.critical("broker failed: %s", "; ".join(reasons))
        raise
    finally:
        with trio.CancelScope(shield=True):
            marker = await run_blocking(functools.partial(log_manager.close, clean))
        lifecycle.clean_shutdown = marker
        served = lifecycle.serving
        # A start that failed was reported (critical, above): a "stopped" line would speak of a
        # broker that was never up.
        logger.log(logging.INFO if marker or served else logging.DEBUG, "broker stopped (%s)",
                   "clean shutdown marker written" if marker else "no clean marker")


async def inline_blocking(fn: Callable[[], T]) -> T:
    """A ``run_blocking`` for tests: call ``fn`` on the loop (no thread), then checkpoint."""
    result = fn()
    await trio.lowlevel.checkpoint()
    return result


@dataclass
class _Wiring:
    """What ``serve`` makes before the tree: the metrics, and the broker's lifecycle."""

    metrics: BrokerMetrics
    lifecycle: Lifecycle = field(default_factory=Lifecycle)
    refuse_requests: frozenset[RequestType] = frozenset()  # closed on, as a 0.7 broker does
    coordinator: ZooKeeperClient | None = None  # an open ZooKeeperClient to register in instead of config.zk_connect (tests)
    open_stream: Callable[[str, int], Awaitable[trio.abc.Stream]] = trio.open_tcp_stream  # to other brokers


def _only_cancellation(exc: BaseException) -> bool:
    """True when ``exc`` is nothing but cancellation, i.e. a requested stop.

    KeyboardInterrupt is not: it may land in the middle of an append, so the
    next start must recover rather than trust the logs.
    """
    if isinstance(exc, BaseExceptionGroup):
        return all(_only_cancellation(e) for e in exc.exceptions)
    return isinstance(exc, trio.Cancelled)


async def _run_tree(config: BrokerConfig, log_manager: LogManager, fs: FileSystem, clock_ms: Callable[[], int],
                    rng: random.Random | None, handle_signals: bool,
                    run_blocking: RunBlocking,
                    wiring: _Wiring, task_status: trio.TaskStatus[Broker],
                    metrics_address: tuple[str, int] | None) -> None:
    wiring.metrics.watch_logs(log_manager)
    waiters = VisibleEndWaiters()
    tls = await run_blocking(functools.partial(TlsContexts.load, config))  # reads PEM files: off the loop
    kafka_secure = _secure(tls, config, config.kafka_security_protocol)
    port_secure = _secure(tls, config, config.port_security_protocol)
    open_to_broker = tls.open_to_broker(wiring.open_stream)
    quota = ConnectionQuota(config.max_connections_per_ip)
    async with trio.open_nursery() as services:
        flusher = await services.start(
            FlushScheduler(log_manager,
                           run_blocking=None if run_blocking is trio.to_thread.run_sync else run_blocking,
                           observe_flush_s=wiring.metrics.flushes.observe).run)
        cleaner = CleanerService(log_manager, config, fs, clock_ms,
                                 run_blocking=None if run_blocking is trio.to_thread.run_sync else run_blocking)
        topic_overrides = TopicOverrides(config, log_manager, cleaner)  # the topics' stored settings in force here
        # The dynamic settings (§20.4), told to the logs here; the Kafka listener, which puts them in
        # force from its entities, and replication add their own listeners as they are built.
        broker_settings = BrokerSettings(config, listeners=[functools.partial(
            _apply_log_settings, log_manager, cleaner, topic_overrides)])
        local_settings = None
        if not config.enable_zookeeper:  # per-topic settings from CREATE_TOPIC live in the log dir (§9.5)
            local_settings = LocalTopicSettings(fs, config.log_dir, topic_overrides, run_blocking)
            await run_blocking(local_settings.load)
        retention = await services.start(RetentionDeleter(
            log_manager, flusher, interval_s=config.log_cleanup_interval_mins * 60,
            first_run_delay_s=config.retention_first_run_delay_s, clock_ms=clock_ms, deletes=cleaner.deletes,
            run_blocking=run_blocking).run)
        await services.start(cleaner.run)
        shutdown = wiring.lifecycle.shutdown
        with shutdown.grace_scope:  # begin_grace_period bounds the drain
            async with trio.open_nursery() as server:
                if handle_signals:
                    await services.start(_watch_signals, shutdown)
                processors: list[Processor] = []
                async with trio.open_nursery() as front:
                    # Listening first (early clients wait in the backlog), then registered, then built
                    # and serving: the registration holds the bound port (§8.2), and what serves the
                    # connections is built knowing its addresses and its ZooKeeper session.
                    acceptor = Acceptor(config.host, config.port, socket_send_buffer=config.socket_send_buffer,
                                        socket_receive_buffer=config.socket_receive_buffer,
                                        unix_socket_path=config.unix_socket_path, quota=quota)
                    addresses = await front.start(acceptor.run)
                    kafka_acceptor = None
                    kafka_addresses: list[BoundAddress] = []
                    if config.serves_kafka:  # §16.1: the second listener, with its own processors
                        kafka_acceptor = Acceptor(config.host, config.kafka_port or 0,
                                                  socket_send_buffer=config.socket_send_buffer,
                                                  socket_receive_buffer=config.socket_receive_buffer, quota=quota)
                        kafka_addresses = await front.start(kafka_acceptor.run)
                    host = await published_host(config)  # looked up once, for both listeners
                    zookeeper = None
                    if config.enable_zookeeper:
                        from .zookeeper import run_broker_zookeeper

                        zookeeper = await services.start(functools.partial(
                            run_broker_zookeeper, config, log_manager, addresses[0].port,
                            coordinator=wiring.coordinator))
                    settings: TopicSettingsStore
                    if zookeeper is not None:
                        settings = ZooKeeperTopicSettings(zookeeper.coordinator)
                    else:
                        assert local_settings is not None
                        settings = local_settings
                    # What replication learns, read by the engine: built before both (replication/view.py).
                    replication_view = None if zookeeper is None else ReplicationView()
                    directory = PartitionDirectory(log_manager=log_manager, flusher=flusher, waiters=waiters,
                                                   partitions=log_manager.partitions_for,
                                                   max_topic_name_length=config.max_topic_name_length,
                                                   run_blocking=run_blocking, replicas=replication_view,
                                                   acks_all_fsync=config.acks_all_fsync)
                    admin = TopicAdmin(directory=directory, log_manager=log_manager,
                                       max_message_size=config.max_message_size,
                                       self_broker=BrokerAddress(config.broker_id, host, addresses[0].port),
                                       settings=settings)
                    engine = Engine(directory=directory, admin=admin, waiters=waiters, metrics=wiring.metrics)
                    for log in log_manager.logs():
                        directory.adopt(log)
                    handler = RequestHandler(engine=engine, clock_ms=clock_ms, rng=rng, run_blocking=run_blocking,
                                             refused_types=wiring.refuse_requests)
                    kafka = None
                    if kafka_acceptor is not None:
                        kafka = await open_kafka_service(
                            engine=engine, config=config, clock_ms=clock_ms, run_blocking=run_blocking,
                            listener=BrokerAddress(config.broker_id, host, kafka_addresses[0].port),
                            zookeeper=None if zookeeper is None else zookeeper.coordinator,
                            open_stream=wiring.open_stream, broker_settings=broker_settings)
                        wiring.metrics.watch_groups(kafka.groups)
                    replicas = None
                    if zookeeper is not None:
                        assert replication_view is not None
                        replicas = await start_replication(
                            nursery=services, broker_id=config.broker_id, zookeeper=zookeeper, engine=engine,
                            view=replication_view,
                            log_manager=log_manager, flusher=flusher, waiters=waiters,
                            run_blocking=run_blocking, open_stream=open_to_broker,
                            kafka_port=kafka_addresses[0].port if kafka_addresses else None,
                            on_role=None if kafka is None else kafka.on_role, broker_settings=broker_settings)
                        wiring.metrics.watch_replication(replicas)
                        await services.start(watch_topic_configs, zookeeper, topic_overrides)
                    serve_07 = functools.partial(_connection_07, handler, config.max_socket_request_bytes)
                    processors += [await server.start(Processor(i, serve_07, port_secure).run)
                                   for i in range(config.num_threads)]
                    listener_processors = {LISTENER_07: list(processors)}
                    if kafka is not None:
                        listener_processors[LISTENER_KAFKA] = [
                            await server.start(Processor(config.num_threads + i, kafka.connection, kafka_secure).run)
                            for i in range(config.num_threads)]
                        processors += listener_processors[LISTENER_KAFKA]
                    broker = Broker(config, addresses, log_manager, flusher, retention, handler, engine, processors,
                                    wiring.lifecycle, metrics=wiring.metrics, metrics_address=metrics_address,
                                    cleaner=cleaner, kafka_addresses=kafka_addresses, kafka=kafka,
                                    listener_processors=listener_processors, zookeeper=zookeeper, replicas=replicas)
                    wiring.metrics.watch_connections(processors)
                    if kafka is not None:
                        assert kafka_acceptor is not None
                        await kafka.start(services)
                        kafka_acceptor.start_accepting(listener_processors[LISTENER_KAFKA])
                    acceptor.start_accepting(listener_processors[LISTENER_07])
                    front.start_soon(_stop_front_on_shutdown, broker, front.cancel_scope)
                    # DEBUG: `trikafka serve` announces it (its ready line); INFO here printed it twice.
                    logger.debug("serving on %s:%d", broker.host, broker.port)
                    broker.start_serving()
                    task_status.started(broker)
                # Acceptor stopped.  Drain: long polls answer now, connections finish.
                waiters.close()
                for processor in processors:
                    processor.drain()
                shutdown.begin_grace_period(config.graceful_shutdown_timeout_s)
        cleaner.stop()  # a pass in a worker thread stops at its next segment
        services.cancel_scope.cancel()


def _apply_log_settings(log_manager: LogManager, cleaner: CleanerService, topic_overrides: TopicOverrides,
                        config: BrokerConfig) -> None:
    """Dynamic broker settings changed (§20.4): the logs' configs, the topics' overrides on them (after:
    ``reconfigure`` drops them), the cleaner's policies.  Retention, rolls and flushes read their log's
    config at their next look."""
    log_manager.reconfigure(config.log_config(), config.topic_log_configs())
    topic_overrides.rebase(config)
    cleaner.reconfigure(config)


def _secure(tls: TlsContexts, config: BrokerConfig, protocol: str) -> Secure | None:
    """A listener's handshake under ``protocol`` (§18.1), or None for a plaintext one."""
    if not SecurityProtocol.parse(protocol).tls:
        return None
    assert tls.server is not None, "TlsContexts.load makes the server context for every TLS listener"
    return TlsAcceptance(tls.server, config.ssl_handshake_timeout_s).secure


def _connection_07(handler: RequestHandler, max_request_bytes: int, stream: trio.abc.Stream,
                   peer: str) -> ServedConnection07:
    return ServedConnection07(stream, handler, max_request_bytes=max_request_bytes, peer=peer)


async def _stop_front_on_shutdown(broker: Broker, front_scope: trio.CancelScope) -> None:
    await broker.wait_shutdown_requested()
    if broker.replicas is not None:  # still serving while leadership moves away (§12.7)
        await broker.replicas.controlled_shutdown(CONTROLLED_SHUTDOWN_TIMEOUT_S)
    logger.info("shutting down: no longer accepting connections")
    front_scope.cancel()


async def _watch_signals(shutdown: ShutdownRequest, *,
                         task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    with trio.open_signal_receiver(*SHUTDOWN_SIGNALS) as signals:
        task_status.started()
        async for signum in signals:
            logger.info("received %s", signal.Signals(signum).name)
            shutdown.request()
