"""The Kafka listener's security protocol (docs/protocol.md §18): one table of what each speaks."""

from __future__ import annotations

import enum


class SecurityProtocol(enum.Enum):
    """Kafka's ``security.protocol`` values; ``tls``: the listener speaks TLS (§18.1), ``sasl``: every
    connection authenticates with SASL first (§18.2)."""

    tls: bool
    sasl: bool

    def __new__(cls, name: str, tls: bool, sasl: bool) -> SecurityProtocol:
        member = object.__new__(cls)
        member._value_ = name
        member.tls = tls
        member.sasl = sasl
        return member

    # name = (Kafka's spelling, tls, sasl)
    PLAINTEXT = ("PLAINTEXT", False, False)
    SSL = ("SSL", True, False)
    SASL_PLAINTEXT = ("SASL_PLAINTEXT", False, True)
    SASL_SSL = ("SASL_SSL", True, True)

    @classmethod
    def parse(cls, text: str) -> SecurityProtocol:
        """The protocol named ``text`` (case-insensitive); ValueError with a one-line message."""
        for member in cls:
            if member.value == text.strip().upper():
                return member
        raise ValueError(f"unknown security protocol {text!r} (one of {', '.join(m.value for m in cls)})")
