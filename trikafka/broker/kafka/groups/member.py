"""One member of a group and the answers the group gives it (docs/protocol.md §17.4), sans I/O."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

Protocols = tuple[tuple[str, bytes], ...]  # (name, metadata), in the member's order of preference
NO_DEADLINE = -1  # a deadline (monotonic ms) that is not running


@dataclass(slots=True)
class Member:
    """A member as the coordinator knows it: who it is, what it supports, what it was assigned,
    and its session's deadline (monotonic ms)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    assignment: bytes = b""
    session_deadline_ms: int = NO_DEADLINE
    awaiting_join: bool = False  # its JoinGroup waits for the rebalance to complete
    awaiting_sync: bool = False  # its SyncGroup waits for the leader's assignment to be written

    def metadata_for(self, protocol: str | None) -> bytes:
        """The member's metadata for ``protocol`` (empty when it does not list it)."""
        return next((data for name, data in self.protocols if name == protocol), b"")

    def named(self, member_id: str) -> Member:
        """A copy of this member under ``member_id`` (a JoinGroup describes its member before the
        group decides which id it has)."""
        return dataclasses.replace(self, member_id=member_id)

    def touch(self, now_ms: int) -> None:
        """The member was heard from: its session runs again from now."""
        self.session_deadline_ms = now_ms + self.session_timeout_ms


@dataclass(frozen=True, slots=True)
class JoinAnswer:
    """A JoinGroup answer: the generation's facts, and (for the leader) every member's metadata."""

    error: ErrorCode
    member_id: str = ""
    generation: int = -1
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str = ""
    members: tuple[tuple[str, str | None, bytes], ...] = field(default=())  # (member id, instance id, metadata)


@dataclass(frozen=True, slots=True)
class SyncAnswer:
    """A SyncGroup answer: the member's assignment of the generation."""

    error: ErrorCode
    protocol_type: str | None = None
    protocol: str | None = None
    assignment: bytes = b""
