"""The broker's ZooKeeper side (spec §8.2, §9.6).

:func:`run_broker_zookeeper` is one service of the broker's nursery tree::

    run_broker_zookeeper
    ├── private ZooKeeper server   only without zk.connect: a child JVM whose data
    │                              lives next to the log dir, killed with the broker
    ├── BrokerRegistration.run     /brokers/ids/<id> and every topic on disk, again
    │                              after each session expiry; deregisters on the way out
    └── topic registrar            "topic created" events of the LogManager ->
                                   /brokers/topics/<topic>/<id>

It reports a :class:`BrokerZooKeeper` once the id and every topic already on
disk are registered.  Failures at startup are loud and explain themselves:
:class:`~trikafka.zk.errors.DuplicateBrokerIdError` (the id is taken) and
:class:`ZooKeeperSetupError` (no private server possible, or no ensemble).
"""

from __future__ import annotations

import functools
import logging
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import trio

from trikafka.util.errors import leaf_exceptions
from trikafka.log.manager import LogManager
from trikafka.zk import paths
from trikafka.zk.client import ZooKeeperClient
from trikafka.zk.errors import ZooKeeperClientError, DuplicateBrokerIdError, NoNodeError
from trikafka.zk.kazoo_bridge import KazooZooKeeperClient, TrioBridge
from trikafka.zk.registry import BrokerRegistration
from trikafka.zk.registry_values import parse_broker_registration
from trikafka.zk.replication_store import replicated_topics
from trikafka.zk.server import ZooKeeperEndpoint, run_zookeeper
from trikafka.zk.server_setup import ZooKeeperNotFoundError, ZooKeeperStartError, free_port, port_is_free

from .config import BrokerConfig, published_host

logger = logging.getLogger(__name__)

# The private server is for development and one-machine clusters: a 200 ms tick
# lets sessions range from 0.4 s to 60 s, so the broker's 6 s default is honoured.
PRIVATE_TICK_TIME_MS = 200
PRIVATE_MAX_SESSION_TIMEOUT_MS = 60_000
PRIVATE_READY_TIMEOUT_S = 60.0
PRIVATE_DIR_SUFFIX = "-zookeeper"
# A broker restarted on its private server may find its previous session's
# /brokers/ids node: that session expires one session timeout after the server
# reloaded it, so wait that long (plus slack) before calling the id a duplicate.
LEFTOVER_WAIT_SLACK_S = 3.0


class ZooKeeperSetupError(RuntimeError):
    """The broker cannot reach or start ZooKeeper; the message says what to do."""


@dataclass
class BrokerZooKeeper:
    """What :func:`run_broker_zookeeper` reports once the broker is registered."""

    connect_string: str  # what clients use: host:port[,host:port][/chroot]
    coordinator: ZooKeeperClient
    registration: BrokerRegistration
    private_server: ZooKeeperEndpoint | None = None
    topics_registered: int = field(default=0)  # topics registered after startup
    # Replicated topics (docs/protocol.md §12.2) get no 0.7 /brokers/topics znodes.
    replicated: set[str] = field(default_factory=set)

    @property
    def private(self) -> bool:
        return self.private_server is not None


def private_zookeeper_dir(config: BrokerConfig) -> Path:
    """``<log_dir>-zookeeper`` unless configured: next to the logs, never inside
    them (the log dir holds partition directories only), one per broker."""
    if config.private_zookeeper_dir:
        return Path(config.private_zookeeper_dir)
    log_dir = Path(os.path.abspath(config.log_dir))
    return log_dir.with_name(log_dir.name + PRIVATE_DIR_SUFFIX)


async def start_private_zookeeper(config: BrokerConfig, nursery: trio.Nursery,
                                  stopper: PrivateServerStopper | None = None) -> ZooKeeperEndpoint:
    """Launch the private server in ``nursery``.  With ``stopper`` it is shielded
    from the nursery's cancellation and killed only by ``stopper.stop()``;
    without, it is killed when the nursery is cancelled.

    Uses ``private_zookeeper_port`` (default 2181, ZooKeeper's own) and falls
    back to a free port when that one is taken.

    Raises:
        ZooKeeperSetupError: no java, no ZooKeeper jars, or the server would not start.
    """
    data_dir = private_zookeeper_dir(config)
    port = config.private_zookeeper_port
    if port and not port_is_free(port):
        fallback = free_port()
        logger.warning("port %d is taken: the private ZooKeeper uses %d instead", port, fallback)
        port = fallback
    try:
        await trio.to_thread.run_sync(functools.partial(data_dir.mkdir, parents=True, exist_ok=True))
        try:
            endpoint = await nursery.start(_run_private_server, data_dir, port, stopper)
        except ZooKeeperStartError:
            if not port:
                raise
            # Most likely someone bound the port between our check and the JVM's bind.
            logger.warning("the private ZooKeeper failed on port %d; retrying on a free port", port)
            endpoint = await nursery.start(_run_private_server, data_dir, 0, stopper)
    except (ZooKeeperNotFoundError, ZooKeeperStartError, OSError) as exc:
        raise ZooKeeperSetupError(
            f"cannot start the private ZooKeeper in {data_dir}: {exc}\n"
            "Run with --standalone (no ZooKeeper), or --zookeeper HOST:PORT[/CHROOT] to join a "
            "running ensemble, or install Java and ZooKeeper (apt-get install zookeeper).") from exc
    logger.info("private ZooKeeper on %s (pid %d, data in %s, ready in %.2f s)",
                endpoint.connect_string, endpoint.pid, endpoint.data_dir, endpoint.startup_s)
    return endpoint


class PrivateServerStopper:
    """Keeps the private server alive through the broker's cancellation until
    :meth:`stop`: each launch runs in a shielded scope registered here."""

    def __init__(self) -> None:
        self._scopes: list[trio.CancelScope] = []
        self._stopped = False

    def new_scope(self) -> trio.CancelScope:
        scope = trio.CancelScope(shield=True)
        if self._stopped:
            scope.cancel()
        self._scopes.append(scope)
        return scope

    def stop(self) -> None:
        self._stopped = True
        for scope in self._scopes:
            scope.cancel()


async def _run_private_server(data_dir: Path, port: int, stopper: PrivateServerStopper | None, *,
                              task_status: trio.TaskStatus[ZooKeeperEndpoint] = trio.TASK_STATUS_IGNORED) -> None:
    started = False

    def report(endpoint: ZooKeeperEndpoint) -> None:
        nonlocal started
        started = True
        task_status.started(endpoint)

    with stopper.new_scope() if stopper is not None else trio.CancelScope():
        try:
            await run_zookeeper(data_dir, port, task_status=_Reporter(report), tick_time_ms=PRIVATE_TICK_TIME_MS,
                                max_session_timeout_ms=PRIVATE_MAX_SESSION_TIMEOUT_MS,
                                ready_timeout_s=PRIVATE_READY_TIMEOUT_S)
        except ZooKeeperStartError as exc:
            if not started:
                raise  # start_private_zookeeper explains it
            # Registrations and offsets are gone with it: the broker must not go on silently.
            raise ZooKeeperSetupError(f"the private ZooKeeper stopped unexpectedly: {exc}") from exc


class _Reporter:
    """A task_status stand-in that forwards ``started`` to a callback."""

    def __init__(self, callback) -> None:
        self._callback = callback

    def started(self, value=None) -> None:
        self._callback(value)


def topics_on_disk(log_manager: LogManager, skip: set[str] | frozenset[str] = frozenset()) -> dict[str, int]:
    """Every topic with a log directory and its advertised partition count (§8.2), but ``skip``."""
    return {topic: log_manager.partitions_for(topic) for topic in sorted(log_manager.topics()) if topic not in skip}


async def run_broker_zookeeper(
    config: BrokerConfig,
    log_manager: LogManager,
    port: int,
    *,
    coordinator: ZooKeeperClient | None = None,
    task_status: trio.TaskStatus[BrokerZooKeeper] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Register the broker listening on ``port`` and keep it registered until cancelled.

    ``coordinator`` (tests) replaces the connection to ``config.zk_connect`` or
    to the private server; it is not closed here.  On cancellation the
    registration is removed (bounded), the session closed and the private
    server, if any, killed.

    Raises:
        DuplicateBrokerIdError: another live session holds ``/brokers/ids/<id>``.
        ZooKeeperSetupError: no ZooKeeper to talk to.
    """
    try:
        await _run(config, log_manager, port, coordinator, task_status)
    except BaseExceptionGroup as group:
        # Nurseries wrap; a startup failure is one error and reads better unwrapped.
        leaves = leaf_exceptions(group)
        if len(leaves) == 1 and isinstance(leaves[0], (ZooKeeperClientError, ZooKeeperSetupError)):
            raise leaves[0] from None
        raise


async def _run(config: BrokerConfig, log_manager: LogManager, port: int, coordinator: ZooKeeperClient | None,
               task_status: trio.TaskStatus[BrokerZooKeeper]) -> None:
    if coordinator is not None:
        connect_string = str(getattr(coordinator, "connect", "(in-process)"))
        await _serve_registration(config, log_manager, port, coordinator, connect_string, None, task_status)
        return
    # The private server must outlive the deregistration that runs (shielded)
    # while this task is being cancelled: it gets a shielded scope of its own,
    # stopped last.
    stopper = PrivateServerStopper()
    async with trio.open_nursery() as nursery:
        try:
            private: ZooKeeperEndpoint | None = None
            if config.zk_connect:
                connect_string = config.zk_connect
            else:
                private = await start_private_zookeeper(config, nursery, stopper)
                connect_string = private.connect_string
            await _connect_and_register(config, log_manager, port, connect_string, private, task_status)
        finally:
            stopper.stop()  # the private server goes with the broker


async def _connect_and_register(config: BrokerConfig, log_manager: LogManager, port: int, connect_string: str,
                                private: ZooKeeperEndpoint | None,
                                task_status: trio.TaskStatus[BrokerZooKeeper]) -> None:
    session_timeout_s = config.zk_sessiontimeout_ms / 1000
    connect_timeout_s = (config.zk_connectiontimeout_ms or config.zk_sessiontimeout_ms) / 1000
    zk = KazooZooKeeperClient(connect_string, session_timeout_s=session_timeout_s,
                              connect_timeout_s=max(connect_timeout_s, 1.0))
    try:
        await zk.start()
    except ZooKeeperClientError as exc:
        raise ZooKeeperSetupError(
            f"{exc} (is the ensemble running? "
            "--standalone runs without ZooKeeper)") from exc
    try:
        await _serve_registration(config, log_manager, port, zk, connect_string, private, task_status)
    finally:
        with trio.CancelScope(shield=True):
            await zk.aclose()  # closes the session: the server drops what is left of ours


async def _serve_registration(config: BrokerConfig, log_manager: LogManager, port: int, zk: ZooKeeperClient,
                              connect_string: str, private: ZooKeeperEndpoint | None,
                              task_status: trio.TaskStatus[BrokerZooKeeper]) -> None:
    registration = BrokerRegistration(zk, config.broker_id, await published_host(config), port)
    state = BrokerZooKeeper(connect_string, zk, registration, private)
    # Topics created from now on queue up here; anything already on disk is in
    # the initial registration (a topic in both is registered twice: harmless).
    send_topics, receive_topics = trio.open_memory_channel[str](math.inf)
    bridge = TrioBridge(trio.lowlevel.current_trio_token())

    def on_topic_created(topic: str) -> None:  # any thread; never raises
        bridge.call_soon(_offer, send_topics, topic)

    log_manager.add_topic_listener(on_topic_created)
    state.replicated.update(await replicated_topics(zk))
    try:
        async with trio.open_nursery() as nursery:
            await _start_registration(config, registration, log_manager, zk, private, nursery, state.replicated)
            # DEBUG: `trikafka serve` announces the registration itself at INFO; one line is enough.
            logger.debug("registered broker %d as %r in ZooKeeper %s (%d topics)", config.broker_id,
                        (registration.value or b"").decode(), connect_string, len(registration.topics))
            nursery.start_soon(_register_new_topics, state, log_manager, receive_topics)
            task_status.started(state)
    finally:
        send_topics.close()  # later "topic created" events are dropped


def _offer(send_channel: trio.MemorySendChannel[str], topic: str) -> None:
    try:
        send_channel.send_nowait(topic)
    except (trio.ClosedResourceError, trio.BrokenResourceError, trio.WouldBlock):
        pass  # the registrar is gone: the broker is shutting down


async def _start_registration(config: BrokerConfig, registration: BrokerRegistration, log_manager: LogManager,
                              zk: ZooKeeperClient, private: ZooKeeperEndpoint | None, nursery: trio.Nursery,
                              replicated: set[str]) -> None:
    try:
        await nursery.start(registration.run, topics_on_disk(log_manager, replicated))
        return
    except DuplicateBrokerIdError as exc:
        # On the private server the holder is most likely this broker's previous
        # run; elsewhere it is when the holder names our own host and port (we
        # hold that port now, so no other live broker can be serving there).
        if private is None and not await _held_by_our_previous_run(zk, registration):
            raise DuplicateBrokerIdError(f"{exc}; it names another broker, so this one will not start") from None
    wait_s = config.zk_sessiontimeout_ms / 1000 + LEFTOVER_WAIT_SLACK_S
    logger.warning("broker id %d is still registered by this broker's previous session; "
                   "waiting up to %.0f s for it to expire", config.broker_id, wait_s)
    with trio.move_on_after(wait_s):
        async for value in zk.watch_data(paths.broker_id(config.broker_id)):
            if value is None:
                break
    await nursery.start(registration.run, topics_on_disk(log_manager, replicated))


async def _held_by_our_previous_run(zk: ZooKeeperClient, registration: BrokerRegistration) -> bool:
    """True when ``/brokers/ids/<id>`` names this broker's own host and port."""
    try:
        data, _stat = await zk.get(paths.broker_id(registration.broker_id))
        holder = parse_broker_registration(data)
    except NoNodeError:
        return True  # it went away meanwhile: waiting ends at once, then we register
    except (ZooKeeperClientError, ValueError):
        return False  # not a value we can judge: refuse rather than wait on a stranger
    return holder.host == registration.host and holder.port == registration.port


async def _register_new_topics(state: BrokerZooKeeper, log_manager: LogManager,
                               topics: trio.MemoryReceiveChannel[str]) -> None:
    """§8.2: a topic created later is registered asynchronously; a conflict is
    logged and ignored.  Kept going across outages (requests wait for the reconnect)."""
    async for topic in topics:
        if topic in state.replicated:
            continue
        try:
            await state.registration.register_topic(topic, log_manager.partitions_for(topic))
            state.topics_registered += 1
        except ZooKeeperClientError as exc:
            logger.error("could not register topic %r in ZooKeeper: %s", topic, exc)
