"""The one broker address syntax: ``[ID:]HOST:PORT[,[ID:]HOST:PORT...]``.

Shared by the CLI (``--broker``/``--brokers``), the producer's ``brokers``
setting and the Spark source's ``brokers`` option, so a list written for one
works in the others.  An entry without an id gets its position in the list
(0, 1, ...), which is what a one-broker ``HOST:PORT`` means to 0.7's
``broker.list`` (``0:HOST:PORT``).
"""

from __future__ import annotations

from trikafka.wire import BrokerAddress

ADDRESS_SYNTAX = "[ID:]HOST:PORT[,...]"


def parse_broker_addresses(text: str, *, default_port: int | None = None) -> tuple[BrokerAddress, ...]:
    """Parse ``[ID:]HOST:PORT[,...]`` into broker addresses, in the order given.

    ``default_port`` (if given) lets an entry be a bare ``HOST`` or ``:PORT``
    (host then 127.0.0.1).  Raises ``ValueError`` naming the bad entry for a
    malformed entry, a port outside 1..65535, a repeated id or an empty list.
    """
    addresses: list[BrokerAddress] = []
    for index, raw in enumerate(e for e in text.split(",") if e.strip()):
        entry = raw.strip()
        fields = entry.split(":")
        try:
            if len(fields) == 3:
                broker_id, host, port = int(fields[0]), fields[1], int(fields[2])
            elif len(fields) == 2:
                broker_id, host, port = index, fields[0] or "127.0.0.1", int(fields[1])
            elif len(fields) == 1 and default_port is not None:
                broker_id, host, port = index, fields[0], default_port
            else:
                raise ValueError
        except ValueError:
            raise ValueError(f"broker {entry!r} is not {ADDRESS_SYNTAX}") from None
        if not host or any(c.isspace() for c in host):
            raise ValueError(f"broker {entry!r} has no host ({ADDRESS_SYNTAX})")
        if not 0 < port < 65536:
            raise ValueError(f"broker {entry!r}: port {port} is not in 1..65535")
        if broker_id < 0:
            raise ValueError(f"broker {entry!r}: id {broker_id} is negative")
        if any(a.broker_id == broker_id for a in addresses):
            raise ValueError(f"broker id {broker_id} is listed twice in {text!r}")
        addresses.append(BrokerAddress(broker_id, host, port))
    if not addresses:
        raise ValueError(f"no broker in {text!r} ({ADDRESS_SYNTAX})")
    return tuple(addresses)


def format_broker_addresses(addresses) -> str:
    """The inverse of :func:`parse_broker_addresses`: ``ID:HOST:PORT,...``."""
    return ",".join(f"{a.broker_id}:{a.host}:{a.port}" for a in addresses)


__all__ = ["ADDRESS_SYNTAX", "format_broker_addresses", "parse_broker_addresses"]
