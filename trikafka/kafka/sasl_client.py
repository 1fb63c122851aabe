"""The client side of the Kafka listener's SASL mechanisms (docs/protocol.md §18.2), sans I/O.

``sasl_client(login)`` gives a ``SaslClient`` for a ``SaslLogin``: ``first()``
is its first token, ``step`` takes each server token and gives the next, None
once the exchange is complete.  trikafka's Kafka client and a broker calling
another broker (§18.5) both drive it; each sends the tokens in
SaslAuthenticate requests.  SCRAM's primitives are ``sasl``'s, shared with the
server side.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass, field
from typing import Protocol

from .sasl import (MIN_ITERATIONS, SaslFailed, SaslMechanism, b64, encode_sasl_name, new_nonce, salted_password,
                   scram_attributes, scram_b64decode, scram_hash, scram_hmac, scram_keys, scram_text)

@dataclass(frozen=True)
class SaslLogin:
    """Who a connection authenticates as on a SASL listener (§18.2)."""

    mechanism: SaslMechanism
    username: str
    password: str = field(repr=False)


class SaslClient(Protocol):
    """A client's side of one exchange: send ``first()``, then ``step`` each server answer until it gives None."""

    mechanism: SaslMechanism

    def first(self) -> bytes:
        """The first client token."""

    def step(self, server_token: bytes) -> bytes | None:
        """The next client token after the server's ``server_token``; None: the exchange is complete.
        Raises ``SaslFailed`` when the server's token does not hold (SCRAM: PBKDF2 work, off an event loop)."""


def plain_token(user: str, password: str) -> bytes:
    """PLAIN's one client token (no authzid)."""
    return b"\x00" + user.encode() + b"\x00" + password.encode()


class PlainClient:
    """The client side of PLAIN: one token; the server's empty answer completes the exchange."""

    def __init__(self, user: str, password: str):
        self.mechanism = SaslMechanism.PLAIN
        self._token = plain_token(user, password)

    def first(self) -> bytes:
        return self._token

    def step(self, server_token: bytes) -> bytes | None:
        return None


class ScramClient:
    """The client side of one SCRAM exchange: ``first()``, ``final(server_first)``, ``verify(server_final)``
    (``step`` calls the last two in turn).

    Raises ``SaslFailed`` when the server's messages do not hold (a nonce not
    extending ours, iterations below the minimum, a server signature that does
    not verify).
    """

    def __init__(self, mechanism: SaslMechanism, user: str, password: str, *, hash_name: str | None = None,
                 client_nonce: str | None = None):
        self.mechanism = mechanism
        self._hash = hash_name or scram_hash(mechanism)
        self._password = password
        self._bare = f"n={encode_sasl_name(user)},r={client_nonce or new_nonce()}"
        self._client_nonce = self._bare.rpartition(",r=")[2]
        self._server_signature = b""
        self._finals_sent = False

    def first(self) -> bytes:
        return f"n,,{self._bare}".encode()

    def step(self, server_token: bytes) -> bytes | None:
        if not self._finals_sent:
            self._finals_sent = True
            return self.final(server_token)
        self.verify(server_token)
        return None

    def final(self, server_first: bytes) -> bytes:
        message = scram_text(server_first, "server-first message")
        attributes = dict(scram_attributes(message, "server-first message"))
        try:
            nonce, salt_text, iterations = attributes["r"], attributes["s"], int(attributes["i"])
        except (KeyError, ValueError):
            raise SaslFailed("malformed SCRAM server-first message") from None
        if not nonce.startswith(self._client_nonce) or len(nonce) == len(self._client_nonce):
            raise SaslFailed("SCRAM server nonce does not extend the client's")
        if iterations < MIN_ITERATIONS and self._hash != "sha1":
            raise SaslFailed(f"SCRAM iterations {iterations} below {MIN_ITERATIONS}")
        salted = salted_password(self._hash, self._password, scram_b64decode(salt_text, "salt"), iterations)
        client_key, stored_key, server_key = scram_keys(self._hash, salted)
        without_proof = f"c={b64(b'n,,')},r={nonce}"
        auth_message = f"{self._bare},{message},{without_proof}".encode()
        signature = scram_hmac(self._hash, stored_key, auth_message)
        self._server_signature = scram_hmac(self._hash, server_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        return f"{without_proof},p={b64(proof)}".encode()

    def verify(self, server_final: bytes) -> None:
        message = scram_text(server_final, "server-final message")
        attributes = dict(scram_attributes(message, "server-final message"))
        if "e" in attributes:
            raise SaslFailed(f"SCRAM server error: {attributes['e']}")
        if not hmac.compare_digest(scram_b64decode(attributes.get("v", ""), "server signature"), self._server_signature):
            raise SaslFailed("SCRAM server signature does not verify")


def sasl_client(login: SaslLogin) -> SaslClient:
    """A fresh client side of ``login``'s mechanism."""
    if login.mechanism is SaslMechanism.PLAIN:
        return PlainClient(login.username, login.password)
    return ScramClient(login.mechanism, login.username, login.password)
