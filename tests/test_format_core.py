"""Property tests for the pure format core: varints, codecs, v2 batches and v0/v1 messages."""

from __future__ import annotations

import gzip
import struct

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from kltool.errors import CorruptDataError
from kltool.format import build_batch, decode_records, parse_header
from kltool.format.batch import build_end_txn_marker, decode_control
from kltool.format.compression import GZIP, LZ4, NONE, SNAPPY, XERIAL_MAGIC, ZSTD, compress, decompress, xxh32
from kltool.format.varint import encode_varint, encode_varlong, read_varint, read_varlong

from .conftest import ORACLE

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)


@given(INT32)
def test_varint_round_trip(n):
    b = encode_varint(n)
    assert len(b) <= 5
    assert read_varint(b, 0) == (n, len(b))


@given(INT64)
def test_varlong_round_trip(n):
    b = encode_varlong(n)
    assert len(b) <= 10
    assert read_varlong(b, 0) == (n, len(b))


def test_varint_known_bytes():
    # protobuf zig-zag: -1 -> 01, 1 -> 02, 63 -> 7e, -64 -> 7f, 64 -> 8001
    assert encode_varint(-1) == b"\x01"
    assert encode_varint(1) == b"\x02"
    assert encode_varint(64) == b"\x80\x01"
    assert encode_varint(-(2**31)) == b"\xff\xff\xff\xff\x0f"


def test_varint_too_long_is_corrupt():
    with pytest.raises(CorruptDataError, match="too long"):
        read_varint(b"\xff\xff\xff\xff\xff\x01", 0)
    with pytest.raises(CorruptDataError):
        read_varint(b"\x80", 0)


@given(st.binary(max_size=3000), st.sampled_from([(GZIP, 2), (SNAPPY, 2), (LZ4, 2), (ZSTD, 2), (GZIP, 0),
                                                  (SNAPPY, 1), (LZ4, 0), (LZ4, 1)]))
@settings(max_examples=200)
def test_codec_round_trip(data, codec_magic):
    codec, magic = codec_magic
    assert decompress(codec, compress(codec, data, magic=magic), magic) == data


@given(st.binary(max_size=200), st.sampled_from([GZIP, SNAPPY, LZ4, ZSTD]))
@settings(max_examples=300)
def test_decompress_garbage_raises_only_corrupt(data, codec):
    try:
        decompress(codec, data)
    except CorruptDataError:
        pass


def test_xxh32_vectors():
    # Reference values of xxHash32 with seed 0.
    assert xxh32(b"") == 0x02CC5D05
    assert xxh32(b"a") == 0x550D7456
    assert xxh32(b"abc") == 0x32D153FF
    assert xxh32(b"Nobody inspects the spammish repetition") == 0xE2293B2F


def test_lz4_header_as_kafka_writes_it():
    assert compress(LZ4, b"x")[:7].hex() == "04224d18604082"
    # magic 0: KAFKA-3160's wrong header checksum, and it still decodes
    frame = compress(LZ4, b"hello" * 100, magic=0)
    assert frame[6] == 0x1A
    assert decompress(LZ4, frame, magic=0) == b"hello" * 100


def test_snappy_xerial_and_raw():
    data = b"abc" * 50000
    framed = compress(SNAPPY, data)
    assert framed.startswith(XERIAL_MAGIC) and struct.unpack(">ii", framed[8:16]) == (1, 1)
    assert decompress(SNAPPY, framed) == data
    import cramjam

    raw = bytes(cramjam.snappy.compress_raw(data))
    assert decompress(SNAPPY, raw) == data  # plain snappy, like SnappyInputStream


def test_zstd_frame_without_content_size_and_gzip_members():
    data = b"kafka" * 1000
    c = zstandard.ZstdCompressor(write_content_size=False).compress(data)
    assert decompress(ZSTD, c) == data
    assert decompress(GZIP, gzip.compress(b"a") + gzip.compress(b"b")) == b"ab"


headers = st.lists(st.tuples(st.text(max_size=10), st.one_of(st.none(), st.binary(max_size=20))), max_size=3)
record = st.tuples(st.one_of(st.none(), st.binary(max_size=50)), st.one_of(st.none(), st.binary(max_size=300)),
                   headers, st.integers(0, 10**6))


@pytest.mark.slow
@given(st.lists(record, min_size=1, max_size=30), st.sampled_from([NONE, GZIP, SNAPPY, LZ4, ZSTD]),
       st.integers(0, 2**40), st.booleans())
@settings(max_examples=150, deadline=None)
def test_v2_batch_round_trip(recs, codec, base_offset, lat):
    rows = [(i, 1_700_000_000_000 + dt, k, v, [(hk, hv) for hk, hv in hs]) for i, (k, v, hs, dt) in enumerate(recs)]
    b = build_batch(rows, base_offset=base_offset, compression=codec,
                    log_append_time=1_800_000_000_000 if lat else None, producer_id=7, producer_epoch=1,
                    base_sequence=2**31 - 3)
    h = parse_header(b)
    assert h.crc_valid and h.size == len(b) and h.count == len(rows)
    got = list(decode_records(h, b))
    assert [r.offset for r in got] == [base_offset + i for i in range(len(rows))]
    assert [r.key for r in got] == [k for _i, _t, k, _v, _h in rows]
    assert [r.value for r in got] == [v for _i, _t, _k, v, _h in rows]
    assert [[(k.decode(), v) for k, v in r.headers] for r in got] == [hs for *_x, hs in rows]
    if lat:
        assert all(r.timestamp == 1_800_000_000_000 for r in got)
    else:
        assert [r.timestamp for r in got] == [t for _i, t, *_ in rows]
    # sequences wrap past 2^31-1 to 0, like DefaultRecordBatch.incrementSequence
    assert got[0].sequence == 2**31 - 3
    if len(got) > 3:
        assert got[3].sequence == 0


@given(st.lists(record, min_size=1, max_size=10), st.sampled_from([NONE, GZIP, SNAPPY, LZ4]), st.sampled_from([0, 1]))
@settings(max_examples=100, deadline=None)
def test_legacy_round_trip(recs, codec, magic):
    rows = [(i, 1_700_000_000_000 + dt, k, v, ()) for i, (k, v, _hs, dt) in enumerate(recs)]
    raw = build_batch(rows, base_offset=1000, magic=magic, compression=codec)
    got = []
    pos = 0
    while pos < len(raw):
        h = parse_header(raw, pos)
        assert h.crc_valid
        got.extend(decode_records(h, raw[pos:pos + h.size]))
        pos += h.size
    assert [r.offset for r in got] == [1000 + i for i in range(len(rows))]
    assert [(r.key, r.value) for r in got] == [(k, v) for _i, _t, k, v, _ in rows]
    assert [r.timestamp for r in got] == ([-1] * len(rows) if magic == 0 else [t for _i, t, *_ in rows])


def test_end_txn_marker_is_78_bytes_and_decodes():
    b = build_end_txn_marker(offset=9, commit=False, producer_id=5, producer_epoch=2, coordinator_epoch=7,
                             timestamp=1)
    assert len(b) == 78
    h = parse_header(b)
    assert h.is_control and h.is_transactional and h.crc_valid
    (r,) = list(decode_records(h, b))
    assert r.control == {"type": "ABORT", "coordinator_epoch": 7}
    assert decode_control(b"\x00\x00\x00\x02", None) == {"type": "LEADER_CHANGE"}
    with pytest.raises(CorruptDataError):
        decode_control(b"\x00", None)


def test_appendix_a_example_bytes():
    rows = [(0, 1700000000000, b"k0", b"v0", [("h", b"x")]), (1, 1700000000005, None, b"v1", [])]
    b = build_batch(rows, base_offset=0)
    assert len(b) == 85
    assert b[17:21].hex() == "cbf41399"


def test_every_oracle_segment_reencodes_identically():
    """Re-building each uncompressed Kafka-written v2 batch from its decoded records gives the same bytes."""
    from kltool.storage.scan import walk

    checked = 0
    for log in sorted(ORACLE.glob("v2-*-0/*.log")):
        for h in walk(log, with_data=True):
            if h.magic != 2 or h.compression != NONE or h.count == 0 or h.is_control or h.has_delete_horizon:
                continue
            recs = list(decode_records(h))
            rows = [(r.offset - h.base_offset, r.timestamp, r.key, r.value, r.headers) for r in recs]
            if h.timestamp_type == "log_append" or h.last_offset - h.base_offset != len(rows) - 1:
                continue
            b = build_batch(rows, base_offset=h.base_offset, producer_id=h.producer_id,
                            producer_epoch=h.producer_epoch, base_sequence=h.base_sequence,
                            partition_leader_epoch=h.partition_leader_epoch, is_transactional=h.is_transactional)
            assert b == h.data, log
            checked += 1
    assert checked > 10


def _both_decoders(h, raw):
    from kltool.format import _speedups  # built by setup.py; a missing build fails here, loudly
    from kltool.format import batch as fb

    def run(use_c):
        saved = fb._c_decode_v2
        fb._c_decode_v2 = _speedups.decode_v2 if use_c else None
        try:
            cols = fb.decode_v2_records(h, raw)
            return ("ok", cols.offsets, cols.timestamps, cols.key_starts, cols.key_ends, cols.value_starts,
                    cols.value_ends, cols.headers, cols.sizes, cols.sequences)
        except CorruptDataError as e:
            return ("error", e.message, e.position)
        finally:
            fb._c_decode_v2 = saved

    return run(True), run(False)


@pytest.mark.slow
@given(st.lists(record, min_size=1, max_size=8), st.lists(st.tuples(st.integers(61, 2000), st.integers(1, 255)),
                                                          max_size=4))
@settings(max_examples=300, deadline=None)
def test_c_accelerator_equals_reference_decoder(recs, flips):
    """The optional C decoder gives exactly what the pure-Python reference gives, also on damage."""
    rows = [(i, 1_700_000_000_000 + dt, k, v, hs) for i, (k, v, hs, dt) in enumerate(recs)]
    raw = bytearray(build_batch(rows, base_offset=5))
    for at, x in flips:
        if at < len(raw):
            raw[at] ^= x
    h = parse_header(bytes(raw))
    c, py = _both_decoders(h, bytes(raw))
    assert c == py
