"""The sans-I/O SASL mechanisms (docs/protocol.md §18.2): RFC test vectors, round trips, hostile tokens."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trikafka.kafka.sasl import (MIN_ITERATIONS, PlainServer, SaslFailed, SaslMechanism, ScramCredential,
                                 ScramServer, check_user_name, salted_password, sasl_server, scram_credential)
from trikafka.kafka.sasl_client import SaslLogin, ScramClient, plain_token, sasl_client

SHA256 = SaslMechanism.SCRAM_SHA_256
SHA512 = SaslMechanism.SCRAM_SHA_512


def _store(**passwords: str) -> dict[tuple[str, SaslMechanism], ScramCredential]:
    return {(user, m): scram_credential(m, password) for user, password in passwords.items()
            for m in (SHA256, SHA512)}


def _vector_lookup(hash_name: str, salt_b64: str):
    """The credential of RFC 5802/7677's user "user" with password "pencil"."""
    from trikafka.kafka.sasl import scram_keys  # the one derivation of the keys, shared with the server

    salt = base64.b64decode(salt_b64)
    _client, stored, server = scram_keys(hash_name, salted_password(hash_name, "pencil", salt, 4096))
    credential = ScramCredential(salt, 4096, stored, server)
    return lambda user, mechanism: credential if user == "user" else None


@pytest.mark.parametrize("hash_name, salt, cnonce, snonce, proof, signature", [
    ("sha1", "QSXCR+Q6sek8bf92", "fyko+d2lbbFgONRv9qkxdawL", "3rfcNHYJY1ZVvWVs7j",
     "v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=", "rmF9pqV8S7suAoZWja4dJRkFsKQ="),  # RFC 5802 §5
    ("sha256", "W22ZaJ0SNY7soEsUEjb6gQ==", "rOprNGfwEbeRWgbNEkqO", "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
     "dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=", "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="),  # RFC 7677 §3
])
def test_rfc_vectors(hash_name, salt, cnonce, snonce, proof, signature):
    server = ScramServer(SHA256, _vector_lookup(hash_name, salt), hash_name=hash_name, server_nonce=snonce)
    first = server.step(f"n,,n=user,r={cnonce}".encode())
    assert first == f"r={cnonce}{snonce},s={salt},i=4096".encode()
    final = server.step(f"c=biws,r={cnonce}{snonce},p={proof}".encode())
    assert final == f"v={signature}".encode()
    assert server.user == "user"
    client = ScramClient(SHA256, "user", "pencil", hash_name=hash_name, client_nonce=cnonce)
    assert client.first() == f"n,,n=user,r={cnonce}".encode()
    assert client.final(first) == f"c=biws,r={cnonce}{snonce},p={proof}".encode()
    client.verify(final)


@given(user=st.text(st.characters(blacklist_categories=("Cc", "Cs")), min_size=1, max_size=20),
       password=st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=20),
       mechanism=st.sampled_from([SHA256, SHA512]))
def test_scram_round_trip(user, password, mechanism):
    credentials = {(user, mechanism): scram_credential(mechanism, password)}
    server = ScramServer(mechanism, lambda u, m: credentials.get((u, m)))
    client = ScramClient(mechanism, user, password)
    client.verify(server.step(client.final(server.step(client.first()))))
    assert server.user == user


def test_plain_checks_the_scram_record():
    credentials = _store(alice="secret")
    server = PlainServer(lambda u, m: credentials.get((u, m)))
    assert server.step(plain_token("alice", "secret")) == b""
    assert server.user == "alice"
    with pytest.raises(SaslFailed, match="invalid credentials"):
        PlainServer(lambda u, m: credentials.get((u, m))).step(plain_token("alice", "wrong"))
    with pytest.raises(SaslFailed, match="invalid credentials"):
        PlainServer(lambda u, m: credentials.get((u, m))).step(plain_token("bob", "secret"))



@pytest.mark.parametrize("mechanism", list(SaslMechanism))
def test_sasl_client_steps_each_mechanism_to_completion(mechanism):
    credentials = _store(alice="secret")
    server = sasl_server(mechanism, lambda u, m: credentials.get((u, m)))
    exchange = sasl_client(SaslLogin(mechanism, "alice", "secret"))
    token: bytes | None = exchange.first()
    tokens = 0
    while token is not None:
        token = exchange.step(server.step(token))
        tokens += 1
    assert server.user == "alice"
    assert tokens == (1 if mechanism is SaslMechanism.PLAIN else 2)


def test_sasl_client_refuses_a_server_final_that_does_not_verify():
    credentials = _store(alice="secret")
    server = sasl_server(SHA512, lambda u, m: credentials.get((u, m)))
    exchange = sasl_client(SaslLogin(SHA512, "alice", "secret"))
    exchange.step(server.step(exchange.first()))
    with pytest.raises(SaslFailed, match="signature"):
        exchange.step(b"v=" + base64.b64encode(b"x" * 64))

def _exchange_until_final(credentials, user="alice", password="secret", mechanism=SHA512):
    server = ScramServer(mechanism, lambda u, m: credentials.get((u, m)))
    client = ScramClient(mechanism, user, password)
    return server, client, client.final(server.step(client.first()))


def test_wrong_password_and_unknown_user_fail_alike():
    credentials = _store(alice="secret")
    server, _client, final = _exchange_until_final(credentials, password="wrong")
    with pytest.raises(SaslFailed) as wrong:
        server.step(final)
    server = ScramServer(SHA512, lambda u, m: credentials.get((u, m)))
    with pytest.raises(SaslFailed) as unknown:
        server.step(ScramClient(SHA512, "mallory", "secret").first())
    assert str(wrong.value) == str(unknown.value)
    assert "invalid credentials" in str(wrong.value)
    assert server.user is None


def test_replayed_client_final_from_another_exchange_fails():
    credentials = _store(alice="secret")
    first_server, _client, final = _exchange_until_final(credentials)
    first_server.step(final)
    replaying = ScramServer(SHA512, lambda u, m: credentials.get((u, m)))
    replaying.step(ScramClient(SHA512, "alice", "whatever").first())
    with pytest.raises(SaslFailed, match="nonce"):
        replaying.step(final)
    assert replaying.user is None


@pytest.mark.parametrize("token", [
    b"", b"\xff\xfe", b"garbage", b"n,,", b"n,,n=alice", b"n,,r=abc,n=alice", b"x,,n=alice,r=abc",
    b"p=tls-unique,,n=alice,r=abc", b"n,,n=alice,r=abc,t=tokenauth", b"n,,n=al=ice,r=abc", b"n,,n=,r=abc",
    b"n,a=bob,n=alice,r=abc",
])
def test_hostile_client_first(token):
    credentials = _store(alice="secret")
    server = ScramServer(SHA512, lambda u, m: credentials.get((u, m)))
    with pytest.raises(SaslFailed):
        server.step(token)
    with pytest.raises(SaslFailed):  # a failed exchange stays failed
        server.step(ScramClient(SHA512, "alice", "secret").first())


@pytest.mark.parametrize("mangle", [
    lambda final: final[: len(final) // 2],  # truncated
    lambda final: final.replace(b"c=biws", b"c=eSws"),  # channel binding flag other than the header's
    lambda final: final.replace(b",p=", b",p=!!"),  # proof not base64
    lambda final: final.rpartition(b",p=")[0] + b",p=" + base64.b64encode(b"\x00" * 64),  # wrong proof
    lambda final: final.rpartition(b",p=")[0] + b",p=" + base64.b64encode(b"\x00" * 3),  # short proof
    lambda final: b"garbage",
])
def test_hostile_client_final(mangle):
    credentials = _store(alice="secret")
    server, _client, final = _exchange_until_final(credentials)
    with pytest.raises(SaslFailed):
        server.step(mangle(final))
    assert server.user is None


def test_no_step_after_success():
    credentials = _store(alice="secret")
    server, _client, final = _exchange_until_final(credentials)
    server.step(final)
    with pytest.raises(SaslFailed):
        server.step(final)


@pytest.mark.parametrize("token", [b"", b"alice", b"\x00alice", b"\x00alice\x00", b"bob\x00alice\x00secret",
                                   b"\x00\xff\x00x", b"\x00a\x00b\x00c"])
def test_hostile_plain(token):
    credentials = _store(alice="secret")
    with pytest.raises(SaslFailed):
        sasl_server(SaslMechanism.PLAIN, lambda u, m: credentials.get((u, m))).step(token)


def test_client_refuses_a_server_that_does_not_hold():
    client = ScramClient(SHA512, "alice", "secret", client_nonce="abc")
    with pytest.raises(SaslFailed, match="nonce"):
        client.final(b"r=xyz123,s=AAAA,i=4096")
    with pytest.raises(SaslFailed, match="iterations"):
        client.final(b"r=abc123,s=AAAA,i=1")
    credentials = _store(alice="secret")
    server, client, final = _exchange_until_final(credentials)
    server.step(final)
    with pytest.raises(SaslFailed, match="signature"):
        client.verify(b"v=" + base64.b64encode(b"\x00" * 64))


def test_credentials_and_names():
    assert scram_credential(SHA256, "p").iterations == MIN_ITERATIONS
    with pytest.raises(ValueError):
        scram_credential(SHA256, "p", iterations=10)
    with pytest.raises(ValueError):
        scram_credential(SaslMechanism.PLAIN, "p")
    assert SaslMechanism.parse("SCRAM-SHA-512") is SHA512
    with pytest.raises(ValueError, match="GSSAPI"):
        SaslMechanism.parse("GSSAPI")
    assert check_user_name("alice") == "alice"
    for bad in ("", "a,b", "a=b", "a/b", "a\nb", "x" * 256):
        with pytest.raises(ValueError):
            check_user_name(bad)

