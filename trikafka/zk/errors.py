"""Coordination errors, independent of the client library underneath.

Every coordinator implementation (kazoo bridge, in-process fake) raises these
and nothing else, so callers never import kazoo to handle a ZooKeeper outcome.
"""

from __future__ import annotations


class CoordinatorError(Exception):
    """Base class of every error raised by a coordinator.

    ``op_index`` is set when the error comes from one operation of a
    :meth:`~trikafka.zk.coordinator.Coordinator.multi` transaction: it is the
    index of the operation that failed (nothing of the transaction was applied).
    """

    op_index: int | None = None


class NoNodeError(CoordinatorError):
    """The znode (or, for a create, its parent) does not exist."""


class NodeExistsError(CoordinatorError):
    """A create found the znode already present."""


class BadVersionError(CoordinatorError):
    """A conditional set/delete/check named a version the znode does not have."""


class NotEmptyError(CoordinatorError):
    """A non-recursive delete hit a znode that still has children."""


class NoChildrenForEphemeralsError(CoordinatorError):
    """Ephemeral znodes cannot have children."""


class ConnectionLossError(CoordinatorError):
    """The connection dropped while the operation was in flight.

    The operation may or may not have been applied; retry it in a way that is
    safe either way (for example "create expecting conflict").
    """


class SessionExpiredError(CoordinatorError):
    """The session expired: its ephemerals and watches are gone.

    The coordinator reconnects with a new session by itself; owners re-create
    their ephemerals when ``session_generation`` advances.
    """


class CoordinatorClosedError(CoordinatorError):
    """The coordinator was closed (or never opened)."""


class RegistryValueError(ValueError):
    """A registry value or node name cannot be parsed or must not be written."""


class InvalidPathError(CoordinatorError, RegistryValueError):
    """A path or path component breaks ZooKeeper's or the registry's rules."""


class DuplicateBrokerIdError(CoordinatorError):
    """``/brokers/ids/<id>`` is held by someone else (§8.2): fatal at startup.

    Either another live broker uses the id, or this broker's previous process
    registered it and that session has not expired yet.
    """
