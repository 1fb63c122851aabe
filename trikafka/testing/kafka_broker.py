"""A real trikafka broker serving the Apache Kafka protocol, for other people's tests (docs/protocol.md §16).

Apps written with confluent-kafka, aiokafka or kafka-python need a broker on a
real socket.  ``kafka_broker()`` runs trikafka's broker in a background thread
(its own Trio loop, a real log directory, loopback ports picked by the kernel)
and yields its bootstrap address, ``"127.0.0.1:PORT"``::

    from trikafka.testing import kafka_broker

    with kafka_broker() as bootstrap:
        producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})

The pytest fixture ``trikafka_kafka_bootstrap`` (``trikafka.testing.pytest_plugin``)
does the same per test.  Leaving the block shuts the broker down gracefully
and removes its directory (unless ``log_dir`` was given).
"""

from __future__ import annotations

import contextlib
import functools
import shutil
import tempfile
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator

import trio

from trikafka.broker.config import BrokerConfig

if TYPE_CHECKING:
    from .certificates import CertificateFiles

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0
LOOPBACK = "127.0.0.1"


@dataclass
class RunningKafkaBroker:
    """A broker started by ``kafka_broker``: its addresses and how to reach its loop."""

    bootstrap: str
    kafka_port: int
    port: int  # the 0.7 listener's
    log_dir: str
    broker: Any  # Any: trikafka.broker.server.Broker, imported lazily with the broker
    trio_token: trio.lowlevel.TrioToken | None = None  # the broker's loop, for trio.from_thread calls


def kafka_broker_config(log_dir: str, **settings: Any) -> BrokerConfig:
    """The config ``kafka_broker`` runs: standalone, loopback, free ports, every append visible at once,
    and a group's first rebalance without Kafka's initial delay (docs/protocol.md §17.4)."""
    base: dict[str, Any] = dict(host=LOOPBACK, port=0, kafka_port=0, log_dir=log_dir, num_threads=1,
                                graceful_shutdown_timeout_s=5.0, enable_zookeeper=False,
                                group_initial_rebalance_delay_ms=0)
    base.update(settings)
    return BrokerConfig(**base)


@contextlib.contextmanager
def running_kafka_broker(log_dir: str | None = None, **settings: Any) -> Iterator[RunningKafkaBroker]:
    """Like ``kafka_broker``, yielding the ``RunningKafkaBroker`` (ports, directory, the broker)."""
    from trikafka.broker.server import serve

    own_dir = log_dir is None
    directory = tempfile.mkdtemp(prefix="trikafka-") if log_dir is None else log_dir
    config = kafka_broker_config(directory, **settings)
    started = threading.Event()
    box: dict[str, Any] = {}

    async def main() -> None:
        box["token"] = trio.lowlevel.current_trio_token()
        async with trio.open_nursery() as nursery:
            box["broker"] = await nursery.start(functools.partial(serve, config))
            started.set()

    def run() -> None:
        try:
            trio.run(main)
        except BaseException as exc:  # reported to the caller, which is waiting on `started`
            box["error"] = exc
        finally:
            started.set()

    thread = threading.Thread(target=run, name="trikafka-kafka-broker", daemon=True)
    thread.start()
    try:
        if not started.wait(START_TIMEOUT_S) or "broker" not in box:
            raise RuntimeError(f"trikafka broker did not start: {box.get('error', 'timed out')!r}")
        broker = box["broker"]
        yield RunningKafkaBroker(f"{LOOPBACK}:{broker.kafka_port}", broker.kafka_port, broker.port, directory,
                                 broker, box["token"])
    finally:
        if "broker" in box and thread.is_alive():
            trio.from_thread.run_sync(box["broker"].shutdown, trio_token=box["token"])
        thread.join(STOP_TIMEOUT_S)
        if own_dir:
            shutil.rmtree(directory, ignore_errors=True)
    if "error" in box and not isinstance(box["error"], trio.Cancelled):
        raise RuntimeError(f"trikafka broker failed: {box['error']!r}")


@contextlib.contextmanager
def running_tls_kafka_broker(log_dir: str | None = None, *, mutual: bool = False,
                             **settings: Any) -> Iterator[tuple[RunningKafkaBroker, CertificateFiles]]:
    """Like ``running_kafka_broker``, its Kafka listener speaking ``SSL`` (docs/protocol.md §18.1) with
    fresh test certificates (``trikafka.testing.certificates``, needs ``trustme``); yields the broker and
    the certificate files (``ca_path`` for the clients; ``client(name)`` with ``mutual``, which requires
    client certificates)."""
    from .certificates import make_certificates

    with tempfile.TemporaryDirectory(prefix="trikafka-certificates-") as directory:
        files = make_certificates(directory)
        with running_kafka_broker(log_dir, kafka_security_protocol="SSL", **files.broker_settings(mutual=mutual),
                                  **settings) as running:
            yield running, files


@contextlib.contextmanager
def kafka_broker(log_dir: str | None = None, **settings: Any) -> Iterator[str]:
    """Run a broker for a test; yields its Kafka bootstrap address (``"127.0.0.1:PORT"``).

    ``settings`` are ``BrokerConfig`` fields (``num_partitions=3``,
    ``auto_create_topics_enable=False``, ...).
    """
    with running_kafka_broker(log_dir, **settings) as running:
        yield running.bootstrap


@contextlib.contextmanager
def running_kafka_group_broker(log_dir: str | None = None, **settings: Any) -> Iterator[RunningKafkaBroker]:
    """``running_kafka_broker`` under the name consumer-group tests use (§17.8): every broker of this
    module already starts a group's first rebalance at once (``kafka_broker_config``)."""
    with running_kafka_broker(log_dir, **settings) as running:
        yield running


@contextlib.contextmanager
def kafka_group_broker(log_dir: str | None = None, **settings: Any) -> Iterator[str]:
    """Like ``kafka_broker``, for consumer-group tests; yields the bootstrap address."""
    with running_kafka_group_broker(log_dir, **settings) as running:
        yield running.bootstrap
