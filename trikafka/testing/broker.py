"""The real broker in-process, reached over in-memory streams.

``open_broker()`` runs ``trikafka.broker.server.serve`` on a
``FakeFileSystem`` with its blocking calls inline, so nothing leaves the Trio
loop: under ``trio.testing.MockClock(autojump_threshold=0)`` time moves only
when every task waits on a timer.  ``open_cluster(n)`` runs ``n`` of them
registered in one ``FakeZooKeeper``, the way 0.7 brokers register, so a
``Producer`` or ``GroupConsumer`` with ZooKeeper discovery finds them::

    async with open_broker(num_partitions=2) as broker:
        async with await broker.connect() as conn:
            await conn.produce_acked("events", 0, [b"hello"])

Clients reach the brokers through ``open_stream(host, port)`` (give it to
``trikafka.client.connect``) or ``connector`` (a ``Producer``'s
``connector=``).  ``kill``/``revive`` cut one broker off the in-memory network
and bring it back, as a network partition would.

A cluster's brokers also serve the Apache Kafka protocol (``kafka_port``,
docs/protocol.md §16.1) over the same network: ``cluster.kafka_client()`` is a
``trikafka.client.kafka.KafkaClient`` bootstrapped from ``cluster.kafka_bootstrap``
whose connections are in-memory streams, for the Kafka producer, consumers
and admin::

    async with open_cluster(3) as cluster, cluster.kafka_client() as client:
        await KafkaAdmin(client).create_topics([NewTopic("events", 2, 3)])
"""

from __future__ import annotations

import contextlib
import functools
import random
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Callable, Iterable

import trio
import trio.testing

from trikafka.broker import BrokerConfig
from trikafka.broker.server import Broker, inline_blocking, serve
from trikafka.util.errors import leaf_exceptions
from trikafka.client import Connection
from trikafka.client.kafka import KafkaClient
from trikafka.wire import Request, RequestType

from .fake_zookeeper_client import FakeZooKeeperClient
from .fake_listeners import FakeListeners
from .fake_zookeeper import FakeZooKeeper
from .fakefs import FakeFileSystem
from .network import InMemoryNetwork, kafka_address

__all__ = ["EXTENSION_REQUESTS", "BrokerStartError", "IN_PROCESS_HOST", "InProcessBroker",
           "InProcessCluster", "in_process_config", "open_broker", "open_cluster", "start_in_memory"]

IN_PROCESS_HOST = "127.0.0.1"
# What a plain 0.7 broker closes the connection on: every request type trikafka added.
EXTENSION_REQUESTS: tuple[RequestType, ...] = tuple(t for t in RequestType if t.is_extension)


async def start_in_memory(nursery: trio.Nursery, config: BrokerConfig, fs: Any, **serve_kwargs: Any) -> Broker:
    """Start a broker on ``fs`` (a FakeFileSystem) in ``nursery``, its blocking calls inline.

    ``serve_kwargs`` go to ``serve`` (``clock_ms`` defaults to a clock stuck at 0).
    """
    serve_kwargs.setdefault("run_blocking", inline_blocking)
    serve_kwargs.setdefault("clock_ms", lambda: 0)
    return await nursery.start(lambda **kw: serve(config, fs=fs, **serve_kwargs, **kw))


def in_process_config(broker_id: int = 0, **settings: Any) -> BrokerConfig:
    """A broker config for in-process use: loopback, a free port, data under /data, one processor,
    and every append flushed at once (``log_flush_interval=1``), so what a test produces is
    visible to its consumers without waiting out 0.7's flush interval (override it to test that)."""
    base: dict[str, Any] = dict(broker_id=broker_id, host=IN_PROCESS_HOST, port=0, log_dir="/data",
                                num_threads=1, graceful_shutdown_timeout_s=5.0, log_flush_interval=1)
    base.update(settings)
    return BrokerConfig(**base)


class InProcessBroker:
    """One running broker (``.broker``, the real ``Broker``) and how to reach it."""

    def __init__(self, broker: Broker, fs: FakeFileSystem, network: InMemoryNetwork,
                 address: tuple[str, int]) -> None:
        self.broker = broker
        self.fs = fs
        self.network = network
        self.address = address  # on the in-memory network (its listener is real unless loopback=False)

    @property
    def host(self) -> str:
        return self.address[0]

    @property
    def port(self) -> int:
        return self.address[1]

    def stored(self, topic: str, partition: int) -> bytes:
        """Every byte of the log of ``topic``-``partition`` on the fake disk, segments in order
        (flushed or not); b"" if the broker never created it."""
        directory = f"{self.broker.config.log_dir}/{topic}-{partition}"
        if not self.fs.exists(directory):
            return b""
        names = sorted(n for n in self.fs.listdir(directory) if n.endswith(".kafka"))
        return b"".join(self.fs.read_file(f"{directory}/{name}") for name in names)

    @property
    def kafka_address(self) -> tuple[str, int] | None:
        """Its Kafka listener on the in-memory network, as Metadata names it (None: it serves none)."""
        return kafka_address(self.broker)

    @property
    def addresses(self) -> list[tuple[str, int]]:
        """Every address of this broker on the in-memory network: the 0.7 listener's, then the Kafka one's."""
        kafka = self.kafka_address
        return [self.address] if kafka is None else [self.address, kafka]

    @property
    def connector(self) -> Callable[..., Any]:
        return self.network.connector

    @property
    def requests(self) -> list[Request]:
        """Every 0.7 request clients sent this broker over the in-memory network, decoded, in order."""
        return self.network.requests[self.address]

    def connect_kwargs(self) -> dict[str, Any]:
        return self.network.connect_kwargs()

    async def open_stream(self, host: str | None = None, port: int | None = None) -> trio.abc.Stream:
        """An in-memory stream to this broker (``host``/``port`` accepted for ``connect``'s seam)."""
        return await self.network.open_stream(self.host, self.port)

    async def connect(self, **kwargs: Any) -> Connection:
        """A client ``Connection`` to this broker; ``kwargs`` go to ``trikafka.client.connect``."""
        return await self.network.connector(self.host, self.port, **kwargs)


@asynccontextmanager
async def open_broker(*, fs: FakeFileSystem | None = None, clock_ms: Callable[[], int] | None = None,
                      config: BrokerConfig | None = None, network: InMemoryNetwork | None = None,
                      coordinator: Any = None, refuse_requests: Iterable[RequestType] = (),
                      address: tuple[str, int] | None = None, **settings: Any) -> AsyncIterator[InProcessBroker]:
    """Run the real broker in-process until the block ends (then a graceful shutdown).

    ``fs`` defaults to a fresh ``FakeFileSystem(seed=0)``; ``clock_ms`` (the
    wall clock retention and OFFSETS see) to the Trio clock in ms; ``settings``
    are ``BrokerConfig`` fields (``num_partitions=2``, ...) over
    ``in_process_config()``, or give a whole ``config``.  ``refuse_requests``
    lists request types the broker closes the connection on, as a plain 0.7
    broker does for every extension (``EXTENSION_REQUESTS``: to test a
    client's fallback).  ``address`` names the broker on the in-memory
    ``network`` (say ``("b0", 9092)``); by default it is where it listens.
    """
    fs = fs if fs is not None else FakeFileSystem(seed=0)
    config = config if config is not None else in_process_config(**settings)
    clock_ms = clock_ms if clock_ms is not None else (lambda: int(trio.current_time() * 1000))
    network = network if network is not None else InMemoryNetwork()
    extra: dict[str, Any] = {"refuse_requests": tuple(refuse_requests), "open_stream": network.open_stream}
    if coordinator is not None:
        extra["coordinator"] = coordinator
    async with trio.open_nursery() as nursery:
        broker = await start_in_memory(nursery, config, fs, clock_ms=clock_ms, **extra)
        reachable_at = network.add(broker, address)
        try:
            yield InProcessBroker(broker, fs, network, reachable_at)
        finally:
            broker.shutdown()


class BrokerStartError(RuntimeError):
    """An in-process broker failed before it served (its cause is the broker's own exception)."""


class InProcessCluster:
    """``n`` in-process brokers registered in one ``FakeZooKeeper`` (``.zookeeper``)."""

    def __init__(self, zookeeper: FakeZooKeeper, network: InMemoryNetwork, nursery: trio.Nursery,
                 seed: int, clock_ms: Callable[[], int] | None, settings: dict[str, Any]) -> None:
        self.zookeeper = zookeeper
        self.network = network
        self.brokers: list[InProcessBroker] = []
        self._nursery = nursery
        self._seed = seed
        self._clock_ms = clock_ms
        self._settings = settings
        self._member_settings: list[dict[str, Any]] = []
        self._stopped: list[trio.Event] = []  # set once broker i's serve() returned
        self._scopes: list[trio.CancelScope] = []  # broker i's run, cancelled by crash(i)
        self._coordinators: dict[int, FakeZooKeeperClient] = {}  # broker i's ZooKeeper client
        self.survive_failures = False  # see open_cluster
        self.failures: dict[int, Exception] = {}  # broker i's last failure, when survived

    async def add(self, *, address: tuple[str, int] | None = None, **settings: Any) -> InProcessBroker:
        """Start one more broker (the next broker id), with ``settings`` over the cluster's."""
        broker_id = len(self.brokers)
        merged = {**self._settings, **settings}
        self._member_settings.append(merged)
        self._stopped.append(trio.Event())
        self._scopes.append(trio.CancelScope())
        member = await self._nursery.start(functools.partial(
            _run_member, self, broker_id, FakeFileSystem(seed=self._seed + broker_id), self._clock_ms,
            merged, address))
        self.brokers.append(member)
        return member

    async def stop(self, index: int) -> None:
        """Shut broker ``index`` down gracefully and wait until it stopped (its ZooKeeper session closed)."""
        self.brokers[index].broker.shutdown()
        await self._stopped[index].wait()

    async def wait_stopped(self, index: int) -> None:
        """Until broker ``index`` stopped (its run returned: a stop, a crash or a failure)."""
        await self._stopped[index].wait()

    async def crash(self, index: int, rng: random.Random | None = None, *, power_cut: bool = True) -> None:
        """Kill broker ``index``: its tasks stop where they are (no controlled shutdown,
        no flush, no goodbye to ZooKeeper, whose session expires later).  With
        ``power_cut`` its machine goes down too: the fake disk crashes
        (``FakeFileSystem.crash``: unflushed writes lost or torn, drawn from ``rng``)
        and reboots (a new boot id); without, it is a SIGKILL and the page cache
        keeps every write.  ``restart(index)`` brings it back."""
        fs = self.brokers[index].fs
        # The cancelled tasks' clean-up must not do what a killed process never would: no
        # writes (a flush, the clean-shutdown marker), no goodbye to ZooKeeper.
        fs.freeze()
        self._coordinators[index].crash()
        self._scopes[index].cancel()
        await self._stopped[index].wait()
        if power_cut:
            fs.crash(rng=rng)
        else:
            fs.thaw()

    async def restart(self, index: int) -> InProcessBroker:
        """Stop broker ``index`` (if running) and start it again: same id, same fake disk, same ports
        (so its registration left over from a crash is recognised as its own and waited out)."""
        if not self._stopped[index].is_set():
            await self.stop(index)
        self._stopped[index] = trio.Event()
        self._scopes[index] = trio.CancelScope()
        previous = self.brokers[index].broker
        settings = {**self._member_settings[index], "port": previous.port}
        if previous.kafka_port is not None:  # where clients' cached metadata says it is
            settings["kafka_port"] = previous.kafka_port
        try:
            member = await self._nursery.start(functools.partial(
                _run_member, self, index, self.brokers[index].fs, self._clock_ms, settings, None))
        except Exception as exc:
            causes = ", ".join(map(repr, leaf_exceptions(exc)))
            raise BrokerStartError(f"broker {index} did not start again on port {settings['port']}: {causes}") from exc
        self.brokers[index] = member
        return member

    @property
    def connector(self) -> Callable[..., Any]:
        return self.network.connector

    async def open_stream(self, host: str, port: int) -> trio.abc.Stream:
        return await self.network.open_stream(host, port)

    def coordinator(self, **kwargs: Any) -> FakeZooKeeperClient:
        """A ZooKeeper client of this cluster's server (``async with cluster.coordinator() as zk``)."""
        return FakeZooKeeperClient(self.zookeeper, **kwargs)

    @property
    def kafka_bootstrap(self) -> str:
        """``HOST:PORT,...``: every broker's Kafka listener on the in-memory network (``kafka_client``
        reaches them; a client that opens TCP reaches them only with ``loopback``, the default)."""
        addresses = [member.kafka_address for member in self.brokers]
        if None in addresses:
            raise ValueError("the cluster's brokers serve no Kafka listener (kafka_port=None)")
        return ",".join(f"{host}:{port}" for host, port in filter(None, addresses))

    def kafka_client(self, **kwargs: Any) -> KafkaClient:
        """A Kafka-protocol client of this cluster over the in-memory network (``async with`` it);
        ``kwargs`` go to ``KafkaClient`` (``client_id``, ``request_timeout_s``, ...)."""
        return KafkaClient(self.kafka_bootstrap, open_stream=self.network.open_stream, **kwargs)

    async def kill(self, index: int) -> None:
        """Cut broker ``index`` off the network, both listeners (see ``InMemoryNetwork.kill``)."""
        for address in self.brokers[index].addresses:
            await self.network.kill(*address)

    def revive(self, index: int) -> None:
        for address in self.brokers[index].addresses:
            self.network.revive(*address)


@asynccontextmanager
async def open_cluster(n: int, *, zookeeper: FakeZooKeeper | None = None, seed: int = 0,
                       clock_ms: Callable[[], int] | None = None, survive_failures: bool = False,
                       loopback: bool = True, **settings: Any) -> AsyncIterator[InProcessCluster]:
    """Run brokers 0..n-1 in-process, each on its own ``FakeFileSystem`` and registered in ZooKeeper.

    ``settings`` are ``BrokerConfig`` fields shared by every broker;
    ``cluster.add(...)`` starts more.  A broker that fails (an fsync error halts
    it) fails the block, unless ``survive_failures``: then it just stops, as its
    process would exit (``cluster.failures[i]`` says why; ``restart(i)``).
    A broker that fails before it serves raises from ``add``/``restart``
    either way (``BrokerStartError`` from ``restart``, naming the cause).
    Every broker serves the Kafka protocol too (``kafka_port`` defaults to 0,
    a free port; ``kafka_port=None`` turns it off): ``cluster.kafka_client()``.
    With ``loopback=False`` the brokers bind no real port: the block's Trio
    run gets a ``FakeListeners`` socket factory (every socket it creates is a
    fake), and the in-memory network is the only way to reach them.
    """
    settings.setdefault("enable_zookeeper", True)
    settings.setdefault("kafka_port", 0)
    with contextlib.ExitStack() as sockets:
        if not loopback:
            sockets.enter_context(FakeListeners().installed())
        async with _open_cluster(n, zookeeper, seed, clock_ms, survive_failures, settings) as cluster:
            yield cluster


@asynccontextmanager
async def _open_cluster(n: int, zookeeper: FakeZooKeeper | None, seed: int, clock_ms: Callable[[], int] | None,
                        survive_failures: bool, settings: dict[str, Any]) -> AsyncIterator[InProcessCluster]:
    async with trio.open_nursery() as nursery:
        cluster = InProcessCluster(zookeeper if zookeeper is not None else FakeZooKeeper(), InMemoryNetwork(),
                                   nursery, seed, clock_ms, settings)
        cluster.survive_failures = survive_failures
        try:
            for _ in range(n):
                await cluster.add()
            yield cluster
        finally:
            for member in cluster.brokers:
                member.broker.shutdown()  # idempotent for a stopped one


async def _run_member(cluster: InProcessCluster, broker_id: int, fs: FakeFileSystem,
                      clock_ms: Callable[[], int] | None, settings: dict[str, Any],
                      address: tuple[str, int] | None, *, task_status: trio.TaskStatus[InProcessBroker] = trio.TASK_STATUS_IGNORED) -> None:
    zk = cluster._coordinators[broker_id] = cluster.coordinator()
    await zk.start()
    scope = cluster._scopes[broker_id]
    serving = False
    try:
        with scope:
            async with open_broker(fs=fs, clock_ms=clock_ms, network=cluster.network, coordinator=zk,
                                   address=address, broker_id=broker_id, **settings) as member:
                task_status.started(member)
                serving = True
                await member.broker.wait_shutdown_requested()
    except Exception as exc:
        if not scope.cancel_called:  # (a killed broker's clean-up fails on its frozen disk: that is the point)
            cluster.failures[broker_id] = exc
            # A failure to start is raised either way: it reaches the caller of add or restart
            # (nursery.start re-raises it), which otherwise would learn only that no broker came up.
            if not cluster.survive_failures or not serving:
                raise
    finally:
        if scope.cancel_called:
            zk.crash()  # no goodbye: the session outlives the process by its timeout
        else:
            with trio.CancelScope(shield=True):
                await zk.aclose()
        cluster._stopped[broker_id].set()
