"""The Kafka listener's security protocol (docs/protocol.md §18): one table of what each speaks."""

from __future__ import annotations

import enum


class SecurityProtocol(enum.Enum):
    """A listener's security protocol (docs/protocol.md §18): (speaks TLS, authenticates with SASL)."""

    PLAINTEXT = (False, False)
    SSL = (True, False)
    SASL_PLAINTEXT = (False, True)
    SASL_SSL = (True, True)

    @property
    def tls(self) -> bool:
        """Whether the listener's connections are TLS."""
        return self.value[0]

    @property
    def sasl(self) -> bool:
        """Whether the listener's clients authenticate with SASL before any other request."""
        return self.value[1]

    @classmethod
    def parse(cls, text: str) -> SecurityProtocol:
        """The protocol named ``text`` (case-insensitive); ValueError with a one-line message."""
        try:
            return cls[text.strip().upper()]
        except KeyError:
            names = ", ".join(member.name for member in cls)
            raise ValueError(f"unknown security protocol {text!r} (one of {names})") from None
