"""format.record_groups: any batch read a bounded group of records at a time, with exactly decode_records'
results and errors; only one record over --max-record-bytes is refused, before it is read."""

from __future__ import annotations

import random
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kltool.errors import CorruptDataError
from kltool.format import build_batch, decode_records, parse_header, record_groups
from kltool.format import compression as comp
from kltool.format.batch import V2_OVERHEAD, batch_crc, v2_record_groups
from kltool.format.compression import NONE, ZSTD, BytesSource, TooLarge, ZstdFrames, set_limit


def _records(rng: random.Random, n: int, big: int = 3000):
    return [(i * rng.choice((1, 1, 2)), 1_700_000_000_000 + rng.randrange(-5, 50),
             None if rng.random() < 0.1 else rng.randbytes(rng.randrange(0, 20)),
             None if rng.random() < 0.05 else rng.randbytes(rng.randrange(0, big)),
             [("h", rng.randbytes(3)), ("n", None)] if rng.random() < 0.2 else [])
            for i in range(n)]


def _flat(groups):
    out = []
    for g in groups:
        out.extend(g)
    return out


def _outcome(fn):
    try:
        return _flat(fn())
    except CorruptDataError as e:
        return (type(e).__name__, e.message, e.position)


@pytest.fixture
def limit():
    """set_limit for one test, restored after it."""
    old = comp.MAX_DECOMPRESSED
    yield set_limit
    set_limit(old)


@pytest.mark.parametrize("codec", range(5))
@pytest.mark.parametrize("group_bytes", [1, 700, 64 << 10])
def test_groups_are_the_batch_records(codec, group_bytes):
    rng = random.Random(codec * 100 + group_bytes)
    b = build_batch(_records(rng, 400), base_offset=1000, compression=codec, base_sequence=7)
    h = parse_header(b)
    ref = list(decode_records(h, b))
    for src in (b, BytesSource(b)):  # held bytes, or a reader (a batch the walker did not hold)
        got = list(v2_record_groups(h, src, group_bytes=group_bytes, group_records=33, whole=False))
        assert _flat(got) == ref
        assert all(len(g) <= 33 for g in got) and len(got) >= 400 // 33
    assert _flat(record_groups(h, b)) == ref and len(list(record_groups(h, b))) == 1  # a usual batch: one group


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32), codec=st.integers(0, 4), cut=st.integers(0, 400), flip=st.integers(0, 4000),
       delta=st.integers(-3, 3))
def test_damaged_records_same_errors_as_the_whole_batch_decoder(seed, codec, cut, flip, delta):
    """Records damaged under a valid CRC (a byte changed, the count off, the payload cut): the streamed
    groups raise exactly decode_records' error (message and position), after the same records."""
    rng = random.Random(seed)
    recs = _records(rng, rng.randrange(1, 40), big=200)
    b = bytearray(build_batch(recs, base_offset=5, compression=NONE))
    body = bytearray(b[V2_OVERHEAD:])
    if body:
        body[flip % len(body)] ^= 1 << (seed % 8)
    body = body[:max(0, len(body) - cut % 7)] if cut % 3 == 0 else body
    if codec:
        body = bytearray(comp.compress(codec, bytes(body)))
    b = b[:V2_OVERHEAD] + body
    struct.pack_into(">i", b, 8, len(b) - 12)
    struct.pack_into(">h", b, 21, codec)
    struct.pack_into(">i", b, 57, max(0, len(recs) + delta))
    struct.pack_into(">I", b, 17, batch_crc(b, 0, len(b)))
    b = bytes(b)
    h = parse_header(b)
    ref = _outcome(lambda: [decode_records(h, b)])
    for gb in (1, 64):
        got = _outcome(lambda gb=gb: v2_record_groups(h, b, group_bytes=gb, group_records=3, whole=False))
        assert got == ref


@pytest.mark.parametrize("codec", range(5))
def test_a_batch_over_the_limit_is_read_a_record_over_it_is_not(codec, limit):
    """--max-record-bytes limits one record: 40 records of 100 KiB (4 MB) are read under a 200 KiB limit; a
    300 KiB record among them is TooLarge naming its offset and declared size, after the records before it."""
    limit(200 << 10)
    rng = random.Random(codec)
    recs = [(i, 1_700_000_000_000 + i, b"k%d" % i, rng.randbytes(100 << 10), []) for i in range(40)]
    b = build_batch(recs, base_offset=50, compression=codec)
    h = parse_header(b)
    got = list(record_groups(h, b))
    assert [r.value for r in _flat(got)] == [r[3] for r in recs]
    recs[7] = (7, recs[7][1], b"k7", rng.randbytes(300 << 10), [])
    b = build_batch(recs, base_offset=50, compression=codec)
    h = parse_header(b)
    seen = []
    with pytest.raises(TooLarge) as e:
        for g in record_groups(h, b):
            seen.extend(g)
    assert [r.offset for r in seen] == list(range(50, 57))
    assert e.value.offset == 57 and e.value.size == (300 << 10) + 10 and e.value.position == 0  # (its length field)
    assert "record at offset 57 declares 307210 bytes, more than --max-record-bytes (204800)" in e.value.message


def test_zstd_frame_structure():
    """ZstdFrames follows frames (and skippable frames) fed in any pieces; a frame cut anywhere is incomplete."""
    import zstandard

    data = random.Random(3).randbytes(200_000) + bytes(500_000)
    frame = zstandard.ZstdCompressor(write_checksum=True).compress(data)
    skip = struct.pack("<II", 0x184D2A53, 5) + b"12345"
    stream = frame + skip + zstandard.ZstdCompressor().compress(b"x" * 1000)
    for step in (1, 7, 4096, len(stream)):
        f = ZstdFrames()
        for i in range(0, len(stream), step):
            f.feed(stream[i:i + step])
        assert f.complete() and f.frames == 3
    for cut in list(range(1, 20)) + [len(frame) // 2, len(frame) - 4, len(frame) - 1]:
        f = ZstdFrames()
        f.feed(frame[:cut])
        assert not f.complete()
        with pytest.raises(CorruptDataError):
            comp.decompress(ZSTD, frame[:cut])
    assert comp.decompress(ZSTD, stream) == data + b"x" * 1000
