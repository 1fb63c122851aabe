"""SASL mechanisms of the Kafka listener (docs/protocol.md §18.2), sans I/O.

* ``SaslMechanism``: the table of mechanisms (name, SCRAM hash or none);
* ``scram_credential``: the salted record the credential store keeps for one
  password (RFC 5802 §3: salt, iterations, StoredKey, ServerKey);
* the broker's side: ``sasl_server(mechanism, lookup)`` gives a
  ``SaslServer`` whose ``step`` takes each client token and answers the
  server's, until ``user`` names who authenticated, or raises ``SaslFailed``;
* a client's side: ``sasl_client`` (its own module, with the SCRAM
  primitives of this one).

SCRAM follows RFC 5802 with RFC 7677's hashes as Kafka profiles it (KIP-84):
GS2 header ``n,,`` or ``y,,`` (an authzid, if any, must be the user), no
channel binding, no extensions.  The primitives are the standard library's
(``hashlib.pbkdf2_hmac``, ``hmac``); the PBKDF2 of ``scram_credential`` and of
a PLAIN check is CPU work a broker runs off its event loop.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Callable, Protocol

MIN_ITERATIONS = 4096  # RFC 7677 §4's minimum, Kafka's default
SALT_BYTES = 32
_NONCE_BYTES = 24
MAX_USER_NAME_CHARS = 255
INVALID_CREDENTIALS = "Authentication failed during authentication due to invalid credentials with SASL mechanism {}"


class SaslMechanism(enum.Enum):
    """The mechanisms a SASL listener enables (§18.2), strongest first; ``hash_name`` is
    the SCRAM hash (``hashlib`` name), None for PLAIN."""

    hash_name: str | None

    def __new__(cls, name: str, hash_name: str | None) -> SaslMechanism:
        member = object.__new__(cls)
        member._value_ = name
        member.hash_name = hash_name
        return member

    SCRAM_SHA_512 = ("SCRAM-SHA-512", "sha512")
    SCRAM_SHA_256 = ("SCRAM-SHA-256", "sha256")
    PLAIN = ("PLAIN", None)

    @classmethod
    def parse(cls, text: str) -> SaslMechanism:
        """The mechanism named ``text`` (Kafka's spelling); ValueError naming the enabled ones."""
        for member in cls:
            if member.value == text:
                return member
        raise ValueError(f"unknown SASL mechanism {text!r} (one of {', '.join(enabled_mechanisms())})")


SCRAM_MECHANISMS = tuple(m for m in SaslMechanism if m.hash_name is not None)


def enabled_mechanisms() -> tuple[str, ...]:
    """The names a SaslHandshake answer lists (§18.2)."""
    return tuple(m.value for m in SaslMechanism)


class SaslFailed(Exception):
    """An authentication that failed; ``str()`` is the one-line ``error_message`` the client gets."""


@dataclass(frozen=True)
class ScramCredential:
    """What the store keeps of one password for one SCRAM mechanism (RFC 5802 §3)."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


# A user's stored credential for a SCRAM mechanism, None for an unknown user or a mechanism not stored.
CredentialLookup = Callable[[str, SaslMechanism], ScramCredential | None]


def salted_password(hash_name: str, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's SaltedPassword: PBKDF2-HMAC of the UTF-8 password (CPU work: not on an event loop)."""
    return hashlib.pbkdf2_hmac(hash_name, password.encode(), salt, iterations)


def scram_hmac(hash_name: str, key: bytes, message: bytes) -> bytes:
    """RFC 5802's HMAC(key, message) with the mechanism's hash."""
    return hmac.new(key, message, hash_name).digest()


def scram_keys(hash_name: str, salted: bytes) -> tuple[bytes, bytes, bytes]:
    """(ClientKey, StoredKey, ServerKey) of a SaltedPassword."""
    client_key = scram_hmac(hash_name, salted, b"Client Key")
    return client_key, hashlib.new(hash_name, client_key).digest(), scram_hmac(hash_name, salted, b"Server Key")


def scram_credential(mechanism: SaslMechanism, password: str, *, salt: bytes | None = None,
                     iterations: int = MIN_ITERATIONS) -> ScramCredential:
    """The stored record of ``password`` for a SCRAM ``mechanism`` (a fresh random salt unless given)."""
    hash_name = scram_hash(mechanism)
    if iterations < MIN_ITERATIONS:
        raise ValueError(f"iterations {iterations} below the minimum {MIN_ITERATIONS}")
    salt = secrets.token_bytes(SALT_BYTES) if salt is None else salt
    _client_key, stored_key, server_key = scram_keys(hash_name, salted_password(hash_name, password, salt, iterations))
    return ScramCredential(salt, iterations, stored_key, server_key)


def check_password(mechanism: SaslMechanism, credential: ScramCredential, password: str) -> bool:
    """Whether ``password`` derives ``credential``'s StoredKey (constant-time compare; PBKDF2 work)."""
    hash_name = scram_hash(mechanism)
    salted = salted_password(hash_name, password, credential.salt, credential.iterations)
    return hmac.compare_digest(scram_keys(hash_name, salted)[1], credential.stored_key)


def scram_hash(mechanism: SaslMechanism) -> str:
    """The hashlib name of a SCRAM ``mechanism``'s hash; ValueError for a mechanism that is not SCRAM."""
    if mechanism.hash_name is None:
        raise ValueError(f"{mechanism.value} is not a SCRAM mechanism")
    return mechanism.hash_name


def check_user_name(name: str) -> str:
    """``name`` if a store may hold it (§18.2: 1-255 characters, no ``,`` ``=`` ``/`` or control); else ValueError."""
    if not 1 <= len(name) <= MAX_USER_NAME_CHARS:
        raise ValueError(f"a user name has 1 to {MAX_USER_NAME_CHARS} characters, got {len(name)}")
    bad = [c for c in name if c in ",=/" or not c.isprintable()]
    if bad:
        raise ValueError(f"user name {name!r} holds {bad[0]!r}: no ',', '=', '/' or control characters")
    return name


# ----------------------------------------------------------------- SCRAM messages


def scram_attributes(message: str, what: str) -> list[tuple[str, str]]:
    """``a=value`` parts of a SCRAM message, in order; SaslFailed when one is not of that form."""
    parts = []
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=" or not part[0].isalpha():
            raise SaslFailed(f"malformed SCRAM {what}: {part[:32]!r} is not an attribute")
        parts.append((part[0], part[2:]))
    return parts


def _decode_sasl_name(text: str) -> str:
    """RFC 5802's saslname: ``=2C`` is ``,``, ``=3D`` is ``=``, any other ``=`` is malformed."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "=":
            escape = text[i:i + 3]
            if escape not in ("=2C", "=3D"):
                raise SaslFailed("malformed SCRAM user name: a '=' that is not =2C or =3D")
            out.append("," if escape == "=2C" else "=")
            i += 3
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def encode_sasl_name(name: str) -> str:
    """RFC 5802's saslname of ``name``: ``=`` as ``=3D``, ``,`` as ``=2C``."""
    return name.replace("=", "=3D").replace(",", "=2C")


def scram_text(token: bytes, what: str) -> str:
    """A SCRAM token as text; SaslFailed naming ``what`` when it is not UTF-8."""
    try:
        return token.decode("utf-8")
    except UnicodeDecodeError:
        raise SaslFailed(f"malformed SCRAM {what}: not UTF-8") from None


def scram_b64decode(text: str, what: str) -> bytes:
    """Strict base64 of a SCRAM attribute; SaslFailed naming ``what`` when it is not base64."""
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise SaslFailed(f"malformed SCRAM {what}: not base64") from None


def b64(data: bytes) -> str:
    """``data`` as base64 text (SCRAM attributes, the credential store's records)."""
    return base64.b64encode(data).decode("ascii")


def new_nonce() -> str:
    """A fresh random SCRAM nonce."""
    return secrets.token_urlsafe(_NONCE_BYTES)  # printable, no ','


class SaslServer(Protocol):
    """One connection's authentication: ``step`` each client token; ``user`` is set once it succeeded."""

    mechanism: SaslMechanism
    user: str | None

    def step(self, token: bytes) -> bytes:
        """The server's answer to ``token``; raises ``SaslFailed`` (the exchange is then over)."""


class ScramServer:
    """The server side of one SCRAM exchange (RFC 5802 §5): client-first, then client-final.

    ``hash_name`` is the SCRAM hash (``sha256``, ``sha512``; ``sha1`` only
    for RFC 5802's own test vector); ``server_nonce`` is fixed only by tests.
    A failed step leaves the exchange failed: any later step fails too.
    """

    def __init__(self, mechanism: SaslMechanism, lookup: CredentialLookup, *, hash_name: str | None = None,
                 server_nonce: str | None = None):
        self.mechanism = mechanism
        self.user: str | None = None
        self._hash = hash_name or scram_hash(mechanism)
        self._lookup = lookup
        self._server_nonce = server_nonce or new_nonce()
        self._state = "first"
        self._candidate = ""
        self._credential: ScramCredential | None = None
        self._gs2_header = ""
        self._nonce = ""
        self._auth_prefix = ""  # client-first-bare "," server-first

    def step(self, token: bytes) -> bytes:
        state, self._state = self._state, "failed"  # an exception below leaves the exchange failed
        if state == "first":
            answer = self._client_first(scram_text(token, "client-first message"))
            self._state = "final"
            return answer
        if state == "final":
            answer = self._client_final(scram_text(token, "client-final message"))
            self._state = "done"
            return answer
        raise SaslFailed(f"SCRAM exchange already {'complete' if state == 'done' else 'failed'}")

    def _failed_credentials(self) -> SaslFailed:
        return SaslFailed(INVALID_CREDENTIALS.format(self.mechanism.value))

    def _client_first(self, message: str) -> bytes:
        flag, sep, rest = message.partition(",")
        authzid, sep2, bare = rest.partition(",")
        if not sep or not sep2:
            raise SaslFailed("malformed SCRAM client-first message: no GS2 header")
        if flag.startswith("p="):
            raise SaslFailed("SCRAM channel binding is not supported")
        if flag not in ("n", "y"):
            raise SaslFailed(f"malformed SCRAM client-first message: GS2 flag {flag[:8]!r}")
        if authzid and not authzid.startswith("a="):
            raise SaslFailed("malformed SCRAM client-first message: bad authzid")
        attributes = scram_attributes(bare, "client-first message")
        if [name for name, _ in attributes[:2]] != ["n", "r"]:
            raise SaslFailed("malformed SCRAM client-first message: expected n= then r=")
        if len(attributes) > 2:
            raise SaslFailed("SCRAM extensions are not supported")
        user = _decode_sasl_name(attributes[0][1])
        client_nonce = attributes[1][1]
        if not user or not client_nonce:
            raise SaslFailed("malformed SCRAM client-first message: empty user or nonce")
        if authzid and _decode_sasl_name(authzid[2:]) != user:
            raise SaslFailed("SCRAM authorization id differs from the user")
        credential = self._lookup(user, self.mechanism)
        if credential is None:
            raise self._failed_credentials()
        self._candidate, self._credential = user, credential
        self._gs2_header = f"{flag},{authzid},"
        self._nonce = client_nonce + self._server_nonce
        server_first = f"r={self._nonce},s={b64(credential.salt)},i={credential.iterations}"
        self._auth_prefix = f"{bare},{server_first}"
        return server_first.encode()

    def _nonce_matches(self, nonce: str) -> bool:
        """The client-final nonce is the combined nonce, or (librdkafka before 1.x's fix, as Debian's
        kcat sends it) the client nonce followed by the combined nonce (§18.2)."""
        client_nonce = self._nonce[:len(self._nonce) - len(self._server_nonce)]
        return any(hmac.compare_digest(nonce.encode(), accepted.encode())
                   for accepted in (self._nonce, client_nonce + self._nonce))

    def _client_final(self, message: str) -> bytes:
        without_proof, sep, proof_text = message.rpartition(",p=")
        if not sep:
            raise SaslFailed("malformed SCRAM client-final message: no proof")
        attributes = scram_attributes(without_proof, "client-final message")
        if [name for name, _ in attributes] != ["c", "r"]:
            raise SaslFailed("malformed SCRAM client-final message: expected c=, r=, p=")
        if scram_b64decode(attributes[0][1], "channel binding") != self._gs2_header.encode():
            raise SaslFailed("SCRAM channel binding differs from the client-first message's GS2 header")
        if not self._nonce_matches(attributes[1][1]):
            raise SaslFailed("SCRAM nonce is not this exchange's")
        proof = scram_b64decode(proof_text, "proof")
        credential = self._credential
        assert credential is not None  # set by the client-first step
        auth_message = f"{self._auth_prefix},{without_proof}".encode()
        signature = scram_hmac(self._hash, credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise self._failed_credentials()
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(hashlib.new(self._hash, client_key).digest(), credential.stored_key):
            raise self._failed_credentials()
        self.user = self._candidate
        return f"v={b64(scram_hmac(self._hash, credential.server_key, auth_message))}".encode()


class PlainServer:
    """The server side of PLAIN (RFC 4616): one token ``authzid NUL authcid NUL password``, checked
    against the user's stored SCRAM record (§18.2; PBKDF2 work: call ``step`` off the event loop)."""

    def __init__(self, lookup: CredentialLookup):
        self.mechanism = SaslMechanism.PLAIN
        self.user: str | None = None
        self._lookup = lookup
        self._used = False

    def step(self, token: bytes) -> bytes:
        if self._used:
            raise SaslFailed("PLAIN exchange already over")
        self._used = True
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise SaslFailed("malformed PLAIN message: expected authzid NUL user NUL password")
        try:
            authzid, user, password = (part.decode("utf-8") for part in parts)
        except UnicodeDecodeError:
            raise SaslFailed("malformed PLAIN message: not UTF-8") from None
        if not user or not password:
            raise SaslFailed("malformed PLAIN message: empty user or password")
        if authzid and authzid != user:
            raise SaslFailed("PLAIN authorization id differs from the user")
        for mechanism in SCRAM_MECHANISMS:
            credential = self._lookup(user, mechanism)
            if credential is not None:
                if check_password(mechanism, credential, password):
                    self.user = user
                    return b""
                break
        raise SaslFailed(INVALID_CREDENTIALS.format(self.mechanism.value))


def sasl_server(mechanism: SaslMechanism, lookup: CredentialLookup) -> SaslServer:
    """A fresh server side of ``mechanism`` reading credentials through ``lookup``."""
    if mechanism is SaslMechanism.PLAIN:
        return PlainServer(lookup)
    return ScramServer(mechanism, lookup)
