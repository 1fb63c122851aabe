"""Listening sockets that bind no real port, for brokers reached only over an in-memory network.

A broker's acceptor always opens TCP listeners (``trio.open_tcp_listeners``).
In-process brokers are reached through ``InMemoryNetwork`` instead, so the
listeners only have to exist: ``FakeListeners`` is a Trio socket factory whose
sockets bind a port in a table of its own (port 0 takes the next free one,
from ``FIRST_PORT`` up, so the ports a run sees are a function of the run),
listen, and never accept.  Installed for a block with ``installed()``, it
replaces every socket the Trio run creates, so nothing in the block reaches
the machine's network: a restarted broker gets its old port back even if
another process took that port on the real loopback meanwhile.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket as stdlib_socket
from typing import Iterator

import trio

FIRST_PORT = 30000


class FakeListeners(trio.abc.SocketFactory):
    """Hands out ``_ListeningSocket``s whose ports live in ``self.bound`` (address -> socket)."""

    def __init__(self) -> None:
        self.bound: dict[tuple[str, int], _ListeningSocket] = {}
        self._next_port = FIRST_PORT

    def socket(self, family: int = stdlib_socket.AF_INET, type: int = stdlib_socket.SOCK_STREAM,
               proto: int = 0) -> trio.socket.SocketType:
        """A socket of ``family``/``type`` that can only bind and listen (the factory's one job)."""
        return _ListeningSocket(self, family, type, proto)

    def bind(self, sock: "_ListeningSocket", host: str, port: int) -> tuple[str, int]:
        """Reserve ``(host, port)`` for ``sock`` (port 0: the next free one); EADDRINUSE if taken."""
        if port == 0:
            while (host, self._next_port) in self.bound:
                self._next_port += 1
            port = self._next_port
            self._next_port += 1
        if (host, port) in self.bound:
            raise OSError(errno.EADDRINUSE, os.strerror(errno.EADDRINUSE))
        self.bound[(host, port)] = sock
        return host, port

    def release(self, address: tuple[str, int]) -> None:
        """Free ``address`` (its socket closed)."""
        self.bound.pop(address, None)

    @contextlib.contextmanager
    def installed(self) -> Iterator["FakeListeners"]:
        """Make this the current Trio run's socket factory inside the block (call from within the run)."""
        previous = trio.socket.set_custom_socket_factory(self)
        try:
            yield self
        finally:
            trio.socket.set_custom_socket_factory(previous)


class _ListeningSocket(trio.socket.SocketType):
    """A socket that binds in its ``FakeListeners``, listens, and waits forever in ``accept``."""

    def __init__(self, owner: FakeListeners, family: int, type_: int, proto: int) -> None:
        super().__init__()
        self._owner = owner
        self._family, self._type, self._proto = family, type_, proto
        self._address: tuple[str, int] | None = None
        self._listening = False
        self._closed = False

    @property
    def family(self) -> stdlib_socket.AddressFamily:
        return stdlib_socket.AddressFamily(self._family)

    @property
    def type(self) -> stdlib_socket.SocketKind:
        return stdlib_socket.SocketKind(self._type)

    @property
    def proto(self) -> int:
        return self._proto

    @property
    def did_shutdown_SHUT_WR(self) -> bool:
        return False

    def setsockopt(self, level: int, optname: int, value: object, optlen: int | None = None) -> None:
        """Options are accepted and ignored (there is no kernel socket to tune)."""

    def getsockopt(self, level: int, optname: int, buflen: int | None = None) -> int:  # type: ignore[override]
        if (level, optname) == (stdlib_socket.SOL_SOCKET, stdlib_socket.SO_ACCEPTCONN):
            return int(self._listening)
        return 0

    async def bind(self, address: object) -> None:
        await trio.lowlevel.checkpoint()
        if self._closed:
            raise OSError(errno.EBADF, os.strerror(errno.EBADF))
        if self._address is not None:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        if not isinstance(address, tuple) or len(address) < 2:
            raise OSError(errno.EAFNOSUPPORT, f"only (host, port) addresses bind here, not {address!r}")
        self._address = self._owner.bind(self, str(address[0]), int(address[1]))

    def listen(self, backlog: int = 0) -> None:
        if self._address is None:
            raise OSError(errno.EINVAL, "listen before bind")
        self._listening = True

    def getsockname(self) -> tuple[str, int]:
        return self._address if self._address is not None else ("0.0.0.0", 0)

    async def accept(self) -> tuple[trio.socket.SocketType, object]:
        """Never returns: connections arrive over the in-memory network, not here."""
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async def connect(self, address: object) -> None:
        raise OSError(errno.ENETUNREACH, f"no real network in this run (connect to {address!r})")

    def close(self) -> None:
        if not self._closed and self._address is not None:
            self._owner.release(self._address)
        self._closed = True

    def is_readable(self) -> bool:
        return False

    def fileno(self) -> int:
        return -1
