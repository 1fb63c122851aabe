"""The audit envelope and audit events (docs/protocol.md §13.1-§13.2)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trikafka.wire import build_message_set, iter_messages
from trikafka.wire.audit import AuditEvent, decode_event, encode_event, window_start
from trikafka.wire.envelope import MARKER, Envelope, decode_envelope, encode_envelope, encode_header

names = st.text(max_size=40).filter(lambda s: len(s.encode()) <= 255)


@given(st.binary(max_size=200), st.integers(0, 2**62), st.integers(0, 2**62), names, names)
def test_round_trip(payload, created_ms, sequence, origin, producer_id):
    data = encode_envelope(payload, created_ms, sequence, origin, producer_id)
    assert data.startswith(MARKER)
    assert decode_envelope(data) == Envelope(created_ms, sequence, origin, producer_id, payload)


def test_layout_is_exact():
    data = encode_envelope(b"xy", 0x0102030405060708, 7, "h", "p1")
    body = struct.pack(">qq", 0x0102030405060708, 7) + b"\x00\x01h" + b"\x00\x02p1"
    import zlib
    assert data == b"\xa7TKE\x01" + struct.pack(">I", zlib.crc32(body)) + body + b"xy"


@given(st.binary(max_size=100))
def test_plain_payloads_are_not_envelopes(data):
    # Random bytes fail the marker or the CRC; decoding never raises.
    assert decode_envelope(data) is None or data.startswith(MARKER)


@pytest.mark.parametrize("damage", [
    lambda d: d[:4] + b"\x02" + d[5:],  # other version
    lambda d: d[:9] + bytes([d[9] ^ 1]) + d[10:],  # createdMs changed: CRC mismatch
    lambda d: d[:20],  # header cut short
    lambda d: b"\xa7TKF" + d[4:],  # another marker
])
def test_damaged_headers_read_as_plain(damage):
    data = encode_envelope(b"payload", 1, 2, "origin", "producer")
    assert decode_envelope(damage(data)) is None


def test_every_prefix_is_plain_or_exact():
    data = encode_envelope(b"", 1, 2, "origin", "producer")
    for cut in range(len(data)):
        assert decode_envelope(data[:cut]) is None


def test_names_are_bounded():
    with pytest.raises(ValueError, match="origin"):
        encode_header(0, 0, "x" * 256, "p")


def test_an_enveloped_message_is_an_ordinary_07_message():
    payload = encode_envelope(b"hello", 5, 0, "h", "p")
    [message] = iter_messages(build_message_set([payload]))
    assert message.payload == payload and decode_envelope(message.payload).payload == b"hello"


def test_event_round_trip_and_rejects():
    event = AuditEvent("producer", "events", 60_000, 60_000, "web-1", "web-1-1-abcd", 12)
    assert decode_event(encode_event(event)) == event
    assert decode_event(encode_event(event._replace(origin=None, producer_id=None))).origin is None
    for bad in (b"", b"not json", b"[]", b'{"v": 2}', encode_event(event._replace(count=-1)),
                encode_event(event._replace(window_ms=0)), b'{"v": 1, "tier": "producer"}', b"\xff"):
        assert decode_event(bad) is None


def test_window_start():
    assert window_start(0, 60_000) == 0
    assert window_start(119_999, 60_000) == 60_000
    assert window_start(120_000, 60_000) == 120_000
