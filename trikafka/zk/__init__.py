"""ZooKeeper for trikafka: one async client interface, two implementations.

* :class:`KazooZooKeeperClient`: the real one, kazoo bridged into Trio.
* ``trikafka.testing.FakeZooKeeperClient`` on a ``FakeZooKeeper``: in-process and deterministic.
* :mod:`trikafka.zk.paths`: the Kafka 0.7 registry layout (§8.1).
* :class:`BrokerRegistration`: §8.2, kept alive across session expiry.
* :mod:`trikafka.zk.server`: a private ZooKeeper server for tests and development.

Each name below is imported from its module on first use, so that importing
one module of this package (``trikafka.zk.paths`` from a Spark planner, say)
does not import kazoo and Trio as well.
"""

from __future__ import annotations

from trikafka.util.lazy import lazy_exports

_EXPORTS = {  # module -> the names this package re-exports from it
    ".connect": ("ConnectString", "parse_connect_string"),
    ".client": ("BaseZooKeeperClient", "ZooKeeperClient"),
    ".errors": ("BadVersionError", "ConnectionLossError", "ZooKeeperClientClosedError", "ZooKeeperClientError",
               "DuplicateBrokerIdError", "InvalidPathError", "NoChildrenForEphemeralsError", "NodeExistsError",
               "NoNodeError", "NotEmptyError", "SessionExpiredError"),
    ".kazoo_bridge": ("KazooZooKeeperClient",),
    ".ops": ("CheckOp", "CreateOp", "DeleteOp", "Op", "OpResult", "SessionState", "SetOp", "Stat"),
    ".registry": ("BrokerRegistration",),
    ".registry_values": ("BrokerInfo", "parse_broker_registration", "parse_partition_count"),
    ".server": ("ZooKeeperEndpoint", "ZooKeeperProcess", "run_zookeeper"),
    ".watches": ("ChildrenWatch", "DataWatch"),
}
__all__, __getattr__ = lazy_exports(__name__, _EXPORTS)
