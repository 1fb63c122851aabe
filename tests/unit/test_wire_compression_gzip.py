"""gzip wrappers as docs/protocol.md §3.3 describes them: RFC 1952, mtime 0, a full window."""

import gzip
import random

from trikafka.wire.compression import Codec, compress, decompress


def test_a_gzip_wrapper_has_mtime_zero():
    data = compress(Codec.GZIP, b"payload")
    assert data[:2] == b"\x1f\x8b" and data[4:8] == b"\x00\x00\x00\x00"  # MTIME, RFC 1952 section 2.3


def test_a_match_across_the_whole_32_kib_window_decompresses():
    block = random.Random(5).randbytes(30_000)  # incompressible: its repeat can only match 30 000 bytes back
    payload = block + block
    assert decompress(Codec.GZIP, gzip.compress(payload, mtime=0)) == payload
