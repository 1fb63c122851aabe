"""Coordination for trikafka: one async ZooKeeper interface, two implementations.

* :class:`KazooCoordinator`: the real one, kazoo bridged into Trio.
* ``trikafka.testing.FakeCoordinator`` on a ``FakeZooKeeper``: in-process and deterministic.
* :mod:`trikafka.zk.paths`: the Kafka 0.7 registry layout (§11.1).
* :class:`BrokerRegistration`: §11.2-11.3, kept alive across session expiry.
* :mod:`trikafka.zk.server`: a private ZooKeeper server for tests and development.
"""

from .connect import ConnectString, parse_connect_string
from .coordinator import BaseCoordinator, Coordinator
from .errors import (
    BadVersionError,
    ConnectionLossError,
    CoordinatorClosedError,
    CoordinatorError,
    DuplicateBrokerIdError,
    InvalidPathError,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    SessionExpiredError,
)
from .kazoo_bridge import KazooCoordinator
from .ops import CheckOp, CreateOp, DeleteOp, Op, OpResult, SessionState, SetOp, Stat
from .registry import BrokerInfo, BrokerRegistration, parse_broker_registration, parse_partition_count
from .server import ZooKeeperEndpoint, ZooKeeperProcess, run_zookeeper
from .watches import ChildrenWatch, DataWatch

__all__ = [
    "BadVersionError", "BaseCoordinator", "BrokerInfo", "BrokerRegistration", "CheckOp",
    "ChildrenWatch", "ConnectString", "ConnectionLossError", "Coordinator",
    "CoordinatorClosedError", "CoordinatorError", "CreateOp", "DataWatch", "DeleteOp",
    "DuplicateBrokerIdError", "InvalidPathError",
    "KazooCoordinator", "NoChildrenForEphemeralsError", "NoNodeError", "NodeExistsError",
    "NotEmptyError", "Op", "OpResult", "SessionExpiredError", "SessionState", "SetOp", "Stat",
    "ZooKeeperEndpoint", "ZooKeeperProcess", "parse_broker_registration",
    "parse_connect_string", "parse_partition_count", "run_zookeeper",
]
