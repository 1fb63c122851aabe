"""ZooKeeper connect strings: ``host:port[,host:port...][/chroot]`` (spec §8.1)."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import InvalidPathError
from .paths import validate_path

DEFAULT_PORT = 2181


@dataclass(frozen=True, slots=True)
class ConnectString:
    """A parsed connect string.  ``chroot`` is ``""`` when there is none."""

    hosts: tuple[tuple[str, int], ...]
    chroot: str = ""

    @property
    def hosts_string(self) -> str:
        """The host list alone, as kazoo and ZooKeeper expect it."""
        return ",".join(_format_host(host, port) for host, port in self.hosts)

    def with_chroot(self, chroot: str) -> "ConnectString":
        """The same servers under another chroot (``""`` for none)."""
        if chroot:
            validate_path(chroot)
        return ConnectString(self.hosts, "" if chroot == "/" else chroot)

    def __str__(self) -> str:
        return self.hosts_string + self.chroot


def _format_host(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def parse_connect_string(text: str) -> ConnectString:
    """Parse and validate a connect string.

    A missing port means 2181.  IPv6 hosts are written ``[addr]:port``.

    Raises:
        InvalidPathError: empty host list, bad port, or an invalid chroot.
    """
    if not isinstance(text, str) or not text.strip():
        raise InvalidPathError(f"empty ZooKeeper connect string: {text!r}")
    text = text.strip()
    slash = text.find("/")
    host_part, chroot = (text, "") if slash < 0 else (text[:slash], text[slash:])
    if chroot:
        validate_path(chroot.rstrip("/") or "/")
        chroot = chroot.rstrip("/")
    hosts = tuple(_parse_host(item) for item in host_part.split(","))
    return ConnectString(hosts, chroot)


def _parse_host(item: str) -> tuple[str, int]:
    item = item.strip()
    if item.startswith("["):
        close = item.find("]")
        if close < 0:
            raise InvalidPathError(f"unterminated IPv6 host in connect string: {item!r}")
        host, rest = item[1:close], item[close + 1 :]
        port_text = rest[1:] if rest.startswith(":") else ("" if not rest else None)
    else:
        host, sep, port_text = item.partition(":")
        if not sep:
            port_text = ""
    if not host or port_text is None:
        raise InvalidPathError(f"bad host in connect string: {item!r}")
    if port_text == "":
        return host, DEFAULT_PORT
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise InvalidPathError(f"bad port in connect string: {item!r}")
    return host, int(port_text)
