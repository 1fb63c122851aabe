"""Coordination errors, independent of the client library underneath.

Every ZooKeeper client implementation (kazoo bridge, in-process fake) raises these
and nothing else, so callers never import kazoo to handle a ZooKeeper outcome.
"""

from __future__ import annotations


class ZooKeeperClientError(Exception):
    """Base class of every error raised by a coordinator.

    ``op_index`` is set when the error comes from one operation of a
    :meth:`~trikafka.zk.client.Coordinator.multi` transaction: it is the
    index of the operation that failed (nothing of the transaction was applied).
    """

    op_index: int | None = None


class NoNodeError(ZooKeeperClientError):
    """The znode (or, for a create, its parent) does not exist."""


class NodeExistsError(ZooKeeperClientError):
    """A create found the znode already present."""


class BadVersionError(ZooKeeperClientError):
    """A conditional set/delete/check named a version the znode does not have."""


class NotEmptyError(ZooKeeperClientError):
    """A non-recursive delete hit a znode that still has children."""


class NoChildrenForEphemeralsError(ZooKeeperClientError):
    """Ephemeral znodes cannot have children."""


class ConnectionLossError(ZooKeeperClientError):
    """The connection dropped while the operation was in flight.

    The operation may or may not have been applied; retry it in a way that is
    safe either way (for example "create expecting conflict").
    """


class SessionExpiredError(ZooKeeperClientError):
    """The session expired: its ephemerals and watches are gone.

    The coordinator reconnects with a new session by itself; owners re-create
    their ephemerals when ``session_generation`` advances.
    """


class ZooKeeperClientClosedError(ZooKeeperClientError):
    """The coordinator was closed (or never opened)."""


class RegistryValueError(ValueError):
    """A registry value or node name cannot be parsed or must not be written."""


class InvalidPathError(ZooKeeperClientError, RegistryValueError):
    """A path or path component breaks ZooKeeper's or the registry's rules."""


class DuplicateBrokerIdError(ZooKeeperClientError):
    """``/brokers/ids/<id>`` is held by someone else (§8.2): fatal at startup.

    Either another live broker uses the id, or this broker's previous process
    registered it and that session has not expired yet.
    """
