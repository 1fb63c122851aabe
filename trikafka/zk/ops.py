"""The coordination API's values: session states, ``Stat``, the multi operations and their checks."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Callable, TypeVar, Union


from .paths import validate_path


class SessionState(enum.Enum):
    """Client view of the ZooKeeper session (see module docstring)."""

    CONNECTED = "connected"
    SUSPENDED = "suspended"
    LOST = "lost"


@dataclass(frozen=True, slots=True)
class Stat:
    """A znode's metadata (ZooKeeper's Stat), with units in the names."""

    czxid: int
    mzxid: int
    pzxid: int
    ctime_ms: int
    mtime_ms: int
    version: int
    cversion: int
    ephemeral_owner: int  # session id of the owner; 0 for persistent nodes
    data_length: int
    num_children: int

    @property
    def is_ephemeral(self) -> bool:
        return self.ephemeral_owner != 0


# -- multi-op transaction operations -----------------------------------------


@dataclass(frozen=True, slots=True)
class CheckOp:
    """Assert ``path`` exists with ``version`` (-1: any version)."""

    path: str
    version: int = -1


@dataclass(frozen=True, slots=True)
class CreateOp:
    """Create ``path`` (its parent must exist, or be created earlier in the same multi)."""

    path: str
    value: bytes = b""
    ephemeral: bool = False
    sequential: bool = False


@dataclass(frozen=True, slots=True)
class SetOp:
    """Set ``path``'s data if its version is ``version`` (-1: any)."""

    path: str
    value: bytes
    version: int = -1


@dataclass(frozen=True, slots=True)
class DeleteOp:
    """Delete childless ``path`` if its version is ``version`` (-1: any)."""

    path: str
    version: int = -1


Op = Union[CheckOp, CreateOp, SetOp, DeleteOp]
# multi() results, one per op: CreateOp -> created path, SetOp -> Stat, others -> None.
OpResult = Union[str, Stat, None]

T = TypeVar("T")
WatchCallback = Callable[[], None]


def _check_bytes(value: object) -> None:
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise TypeError(f"znode data must be bytes, got {type(value).__name__}")


def _validate_op(op: Op) -> None:
    if isinstance(op, CreateOp):
        validate_path(op.path, allow_trailing_slash=op.sequential)
        _check_bytes(op.value)
    elif isinstance(op, SetOp):
        validate_path(op.path)
        _check_bytes(op.value)
    elif isinstance(op, (CheckOp, DeleteOp)):
        validate_path(op.path)
    else:
        raise TypeError(f"not a multi operation: {op!r}")
