"""Message sets for the log state machines: valid ones as 0.7-era producers send them, and corruptions."""

from __future__ import annotations

import random

from hypothesis import strategies as st

from trikafka.wire.compression import Codec, compress
from trikafka.wire.message import encode_entry
from trikafka.wire.messageset import build_message_set

BIG_PAYLOAD_BYTES = 100_000
MAX_MESSAGE_BYTES = 150_000

# Mostly small payloads; now and then an empty one or a 100 KB one.
payload_sizes = st.integers(0, 199).map(lambda i: BIG_PAYLOAD_BYTES if i == 199 else i % 60)


@st.composite
def message_sets(draw: st.DrawFn) -> bytes:
    """A valid message set as some 0.7-era producer would send it."""
    sizes = draw(st.lists(payload_sizes, min_size=0, max_size=6))
    seed = draw(st.integers(0, 255))
    rng = random.Random(seed)
    payloads = [rng.randbytes(n) if n < 1000 else bytes([seed]) * n for n in sizes]
    kind = draw(st.sampled_from(["magic0", "magic1", "magic1", "gzip", "snappy"]))
    if kind == "magic0":
        return build_message_set(payloads, magic=0)
    if kind == "magic1":
        return build_message_set(payloads, magic=1)
    return build_message_set(payloads, codec=Codec.GZIP if kind == "gzip" else Codec.SNAPPY)


def corrupt(data: bytes, how: str, cut: int) -> bytes:
    """An invalid variant of a non-empty valid set."""
    if how == "crc":  # flip the last payload byte of the first entry (or its CRC when the payload is empty)
        n = int.from_bytes(data[:4], "big", signed=True)
        buf = bytearray(data)
        buf[3 + n] ^= 0x01
        return bytes(buf)
    if how == "magic":
        return data[:4] + b"\x07" + data[5:]
    if how == "torn_first":
        n = int.from_bytes(data[:4], "big", signed=True)
        return data[: 1 + cut % (3 + n)]
    if how == "negative_length":
        return data + b"\xff\xff\xff\xf0" + b"x" * 20
    assert how == "too_large"
    return data + build_message_set([b"\x00" * (MAX_MESSAGE_BYTES + 1)])


def wrapper(inner: bytes, codec: int = Codec.GZIP) -> bytes:
    """A wrapper entry around arbitrary inner bytes (valid outer CRC)."""
    return encode_entry(compress(Codec(codec), inner), magic=1, codec=codec)


def corrupt_crc(entry: bytes) -> bytes:
    """``entry`` with one bit of its payload (or CRC, for a tiny entry) flipped."""
    b = bytearray(entry)
    b[-1 if len(entry) > 10 else 8] ^= 0x01
    return bytes(b)
