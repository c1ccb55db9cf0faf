"""kltool.format.index: .index / .timeindex / .txnindex codecs, lookups and sanity checks."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kltool.format import index as ix

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
REAL = FIXTURES / "real"
CO28 = REAL / "william0423-indexed-zk" / "__consumer_offsets-28"

INT32 = st.integers(0, 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)


def _batches(log: bytes) -> list[tuple[int, int, int]]:
    """(position, last offset, max timestamp) of every v2 batch, from the headers alone."""
    out, pos = [], 0
    while pos + 61 <= len(log):
        base, length = struct.unpack_from(">qi", log, pos)
        assert log[pos + 16] == 2
        (lod,) = struct.unpack_from(">i", log, pos + 23)
        (max_ts,) = struct.unpack_from(">q", log, pos + 35)
        out.append((pos, base + lod, max_ts))
        pos += 12 + length
    assert pos == len(log)
    return out


# ------------------------------------------------------------------------------------------- real files


@pytest.fixture(scope="module")
def real():
    return {
        "index": (CO28 / "00000000000000000000.index").read_bytes(),
        "timeindex": (CO28 / "00000000000000000000.timeindex").read_bytes(),
        "batches": _batches((CO28 / "00000000000000000000.log").read_bytes()),
    }


def test_real_offset_index_entries(real):
    data = real["index"]
    entries = ix.offset_index_entries(data, 0)
    assert len(data) == 2032 and len(entries) == 254 == ix.entry_count(data, ix.OFFSET_ENTRY)
    assert entries[:3] == [(31, 4221), (63, 8381), (95, 12541)]
    assert entries[-1] == (8179, 1063461)
    assert ix.parse_offset_index(data, 0) == entries
    assert ix.offset_index_zero_tail(data) == 0
    assert ix.trailing_bytes(data, ix.OFFSET_ENTRY) == 0
    assert ix.check_offset_index(data, 0) == []
    assert ix.encode_offset_index(entries, 0) == data


def test_real_offset_index_matches_log(real):
    """Kafka's invariant (leader, per-batch): every entry points at a batch start whose last offset it names."""
    by_pos = {p: last for p, last, _ in real["batches"]}
    entries = ix.offset_index_entries(real["index"], 0)
    assert all(by_pos.get(pos) == off for off, pos in entries)
    assert all(a[0] < b[0] and a[1] < b[1] for a, b in zip(entries, entries[1:], strict=False))


def test_real_time_index_matches_log(real):
    data = real["timeindex"]
    entries = ix.time_index_entries(data, 0)
    assert len(entries) == 258 and len(data) == 258 * 12
    assert entries[0] == (1534299420753, 31) and entries[-1] == (1534312623113, 8201)
    assert ix.parse_time_index(data, 0) == entries
    assert ix.time_index_zero_tail(data) == 0
    assert ix.check_time_index(data, 0) == []
    assert ix.encode_time_index(entries, 0) == data
    by_last = {last: ts for _, last, ts in real["batches"]}
    for ts, off in entries:  # entry = (running max timestamp, last offset of the batch holding it)
        assert by_last[off] == ts
    assert all(a[0] < b[0] and a[1] <= b[1] for a, b in zip(entries, entries[1:], strict=False))


def test_real_lookups(real):
    entries = ix.offset_index_entries(real["index"], 0)
    assert ix.lookup_offset(entries, 0, 0) == (0, 0)
    assert ix.lookup_offset(entries, 30, 0) == (0, 0)
    assert ix.lookup_offset(entries, 31, 0) == (31, 4221)
    assert ix.lookup_offset(entries, 62, 0) == (31, 4221)
    assert ix.lookup_offset(entries, 63, 0) == (63, 8381)
    assert ix.lookup_offset(entries, 10**12, 0) == (8179, 1063461)
    for target in range(0, 8300, 7):
        expect = max((e for e in entries if e[0] <= target), default=(0, 0))
        assert ix.lookup_offset(entries, target, 0) == expect

    times = ix.time_index_entries(real["timeindex"], 0)
    assert ix.lookup_time(times, 0, 0) == (-1, 0)
    assert ix.lookup_time(times, 1534299420752, 0) == (-1, 0)
    assert ix.lookup_time(times, 1534299420753, 0) == (1534299420753, 31)
    assert ix.lookup_time(times, 2**62, 0) == (1534312623113, 8201)
    for ts, _ in times[::9]:
        for probe in (ts - 1, ts, ts + 1):
            expect = max((e for e in times if e[0] <= probe), default=(-1, 0))
            assert ix.lookup_time(times, probe, 0) == expect


@pytest.mark.parametrize("path", sorted(REAL.rglob("*.index")) + sorted(REAL.rglob("*.timeindex")),
                         ids=lambda p: str(p.relative_to(REAL)))
def test_every_real_index_is_sane(path):
    data = path.read_bytes()
    base = int(path.name.split(".")[0])
    if path.suffix == ".index":
        assert ix.check_offset_index(data, base, path=str(path)) == []
        entries = ix.offset_index_entries(data, base)
    else:
        assert ix.check_time_index(data, base, path=str(path)) == []
        entries = ix.time_index_entries(data, base)
    assert all(a < b for a, b in zip(entries, entries[1:], strict=False))


# -------------------------------------------------------------------------------------- offset index


def test_offset_entry_bytes_from_reference():
    # base 100, entry (offset 103, position 4150) -> 00000003 00001036
    assert ix.encode_offset_entry(3, 4150) == bytes.fromhex("0000000300001036")
    assert ix.encode_offset_index([(103, 4150)], 100) == bytes.fromhex("0000000300001036")
    assert ix.parse_offset_index(bytes.fromhex("0000000300001036"), 100) == [(103, 4150)]


def test_offset_index_zero_tail():
    entries = [(100, 0), (105, 4200), (130, 9000)]
    data = ix.encode_offset_index(entries, 100) + bytes(8 * 50)
    assert ix.offset_index_entries(data, 100) == entries  # entry 0 may have relative offset 0
    assert ix.offset_index_zero_tail(data) == 50
    full = ix.parse_offset_index(data, 100)
    assert len(full) == 53 and full[3:] == [(100, 0)] * 50
    assert ix.offset_index_entries(data, 100, stop_at_zero_tail=False) == full
    assert ix.check_offset_index(data, 100) == []  # Kafka's check passes on an untrimmed file
    # a freshly preallocated index (all zero) has one "entry" at the base offset, then the tail
    blank = bytes(8 * 10)
    assert ix.offset_index_entries(blank, 7) == [(7, 0)]
    assert ix.offset_index_zero_tail(blank) == 9
    assert ix.offset_index_entries(b"", 7) == [] and ix.offset_index_zero_tail(b"") == 0


def test_offset_index_accepts_memoryview_and_bytearray():
    data = ix.encode_offset_index([(5, 0), (9, 100)], 0)
    assert ix.offset_index_entries(memoryview(data), 0) == [(5, 0), (9, 100)]
    assert ix.offset_index_entries(bytearray(data), 0) == [(5, 0), (9, 100)]
    assert ix.offset_index_entries(memoryview(data + b"xyz")[:16], 0) == [(5, 0), (9, 100)]


def test_offset_index_sanity_messages():
    data = ix.encode_offset_index([(10, 0), (20, 50)], 10) + b"\x01\x02\x03"
    assert ix.trailing_bytes(data, ix.OFFSET_ENTRY) == 3
    assert ix.offset_index_entries(data, 10) == [(10, 0), (20, 50)]
    assert ix.check_offset_index(data, 10, path="/d/t-0/00000000000000000010.index") == [
        "Index file /d/t-0/00000000000000000010.index is corrupt, found 19 bytes which is neither "
        "positive nor a multiple of 8"]
    negative = struct.pack(">ii", 5, 0) + struct.pack(">ii", -3, 10)
    assert ix.check_offset_index(negative, 10, path="x.index") == [
        "Corrupt index found, index file x.index has non-zero size but the last offset is 7 which is "
        "less than the base offset 10"]
    assert ix.check_offset_index(b"", 10) == []


@pytest.mark.parametrize("args", [(-1, 0), (2**31, 0), (0, -1), (0, 2**31)])
def test_offset_entry_range(args):
    with pytest.raises(ValueError):
        ix.encode_offset_entry(*args)


def test_offset_index_encode_rejects_offset_below_base():
    with pytest.raises(ValueError):
        ix.encode_offset_index([(99, 0)], 100)


# ---------------------------------------------------------------------------------------- time index


def test_time_index_zero_tail_and_sanity():
    entries = [(1000, 100), (2000, 104), (2500, 104 + 2**31 - 1 - 104)]
    data = ix.encode_time_index(entries, 100) + bytes(12 * 20)
    assert ix.time_index_entries(data, 100) == entries
    assert ix.time_index_zero_tail(data) == 20
    assert len(ix.parse_time_index(data, 100)) == 23
    # Kafka's TimeIndex.sanityCheck reads the last (zero) entry: an untrimmed time index fails it
    assert ix.check_time_index(data, 100, path="/p") == [
        "Corrupt time index found, time index file (/p) has non-zero size but the last timestamp is 0 "
        "which is less than the first timestamp 1000"]
    assert ix.check_time_index(ix.encode_time_index(entries, 100), 100) == []


def test_time_index_zero_tail_needs_both_fields_zero():
    # (ts 5, rel 0) after entry 0 is not a zero tail; the first aligned all-zero entry is
    data = b"".join(ix.encode_time_entry(ts, rel) for ts, rel in [(1, 0), (5, 0), (7, 1), (0, 0), (9, 2)])
    assert ix.time_index_entries(data, 0) == [(1, 0), (5, 0), (7, 1)]
    assert ix.time_index_zero_tail(data) == 2
    # a run of zero bytes straddling an entry boundary is not a zero entry
    straddle = b"".join(ix.encode_time_entry(ts, rel) for ts, rel in [(1, 0), (1 << 56, 0), (0, 1)])
    assert ix.time_index_entries(straddle, 0) == [(1, 0), (1 << 56, 0), (0, 1)]
    assert ix.time_index_zero_tail(straddle) == 0
    assert ix.time_index_entries(bytes(12), 3) == [(0, 3)]
    assert ix.time_index_entries(bytes(36), 3) == [(0, 3)] and ix.time_index_zero_tail(bytes(36)) == 2


def test_time_index_sanity_messages():
    data = ix.encode_time_entry(50, 0) + ix.encode_time_entry(40, 1) + b"\x00"
    assert ix.check_time_index(data, 0, path="/t") == [
        "Corrupt time index found, time index file (/t) has non-zero size but the last timestamp is 40 "
        "which is less than the first timestamp 50",
        "Time index file /t is corrupt, found 25 bytes which is neither positive nor a multiple of 12"]
    neg = struct.pack(">qi", 10, -1)
    assert ix.check_time_index(neg, 100, path="/t") == [
        "Corrupt time index found, time index file (/t) has non-zero size but the last offset is 99 "
        "which is less than the first offset 100"]


# ----------------------------------------------------------------------------------------- txn index


def test_txn_index_round_trip_and_partial_tail():
    txns = [ix.AbortedTxn(0, 1000, 5, 9, 10), ix.AbortedTxn(0, 1001, 3, 20, 3)]
    data = ix.encode_txn_index(txns)
    assert len(data) == 68
    assert data[:2] == b"\x00\x00" and struct.unpack_from(">q", data, 2) == (1000,)
    assert ix.parse_txn_index(data) == txns
    torn = data + data[:20]
    assert ix.parse_txn_index(torn) == txns
    assert ix.trailing_bytes(torn, ix.TXN_ENTRY) == 20
    assert ix.encode_aborted_txn(1000, 5, 9, 10) == data[:34]
    assert str(txns[0]) == ("AbortedTxn(version=0, producerId=1000, firstOffset=5, lastOffset=9, "
                            "lastStableOffset=10)")


def test_txn_index_version_reads_first_byte_only():
    base = ix.encode_aborted_txn(1, 2, 3, 4)
    assert ix.parse_txn_index(b"\x00\x07" + base[2:])[0].version == 0  # second byte ignored, like Kafka
    v1 = b"\x01\x00" + base[2:]
    assert ix.parse_txn_index(v1)[0].version == 1
    assert ix.check_txn_index(v1, 0, path="/x.txnindex") == [
        "Unexpected aborted transaction version 1 in transaction index /x.txnindex, current version is 0"]
    assert ix.parse_txn_index(b"\xff\x00" + base[2:])[0].version == -1


def test_txn_index_sanity():
    data = ix.encode_txn_index([ix.AbortedTxn(0, 7, 90, 99, 100), ix.AbortedTxn(0, 7, 101, 120, 121)])
    assert ix.check_txn_index(data, 100, path="/p") == [
        "Last offset of aborted transaction AbortedTxn(version=0, producerId=7, firstOffset=90, lastOffset=99, "
        "lastStableOffset=100) in index /p is less than start offset 100"]
    assert ix.check_txn_index(data, 99) == []


# ---------------------------------------------------------------------------------------- properties


@given(st.integers(0, 2**40), st.lists(st.tuples(INT32, INT32), max_size=60))
def test_offset_index_round_trip(base, rel_entries):
    entries = [(base + r, p) for r, p in rel_entries]
    data = ix.encode_offset_index(entries, base)
    assert len(data) == 8 * len(entries)
    assert ix.parse_offset_index(data, base) == entries
    stop = next((i for i, (r, _) in enumerate(rel_entries) if i > 0 and r == 0), len(entries))
    assert ix.offset_index_entries(data, base) == entries[:stop]
    assert ix.offset_index_zero_tail(data) == len(entries) - stop


@given(st.integers(0, 2**40), st.lists(st.tuples(INT64, INT32), max_size=60))
def test_time_index_round_trip(base, rel_entries):
    entries = [(ts, base + r) for ts, r in rel_entries]
    data = ix.encode_time_index(entries, base)
    assert ix.parse_time_index(data, base) == entries
    stop = next((i for i, e in enumerate(rel_entries) if i > 0 and e == (0, 0)), len(entries))
    assert ix.time_index_entries(data, base) == entries[:stop]
    assert ix.time_index_zero_tail(data) == len(entries) - stop


@given(st.lists(st.builds(ix.AbortedTxn, st.just(0), INT64, INT64, INT64, INT64), max_size=20))
def test_txn_index_round_trip(txns):
    assert ix.parse_txn_index(ix.encode_txn_index(txns)) == txns


@given(st.binary(max_size=400), st.integers(0, 2**62))
def test_parsers_and_checks_never_raise(data, base):
    for entry_size in (ix.OFFSET_ENTRY, ix.TIME_ENTRY, ix.TXN_ENTRY):
        assert 0 <= ix.trailing_bytes(data, entry_size) < entry_size
    assert len(ix.parse_offset_index(data, base)) == len(data) // 8
    assert len(ix.offset_index_entries(data, base)) + ix.offset_index_zero_tail(data) == len(data) // 8
    assert len(ix.parse_time_index(data, base)) == len(data) // 12
    assert len(ix.time_index_entries(data, base)) + ix.time_index_zero_tail(data) == len(data) // 12
    assert len(ix.parse_txn_index(data)) == len(data) // 34
    for check in (ix.check_offset_index, ix.check_time_index, ix.check_txn_index):
        assert all(isinstance(p, str) for p in check(data, base))


@given(st.lists(INT32, unique=True, max_size=40).map(sorted), st.integers(-5, 2**31 + 5))
def test_lookup_offset_is_largest_lower_bound(rels, target):
    entries = [(100 + r, i * 10) for i, r in enumerate(rels)]
    expect = max((e for e in entries if e[0] <= 100 + target), default=(100, 0))
    assert ix.lookup_offset(entries, 100 + target, 100) == expect


@given(st.lists(INT64, unique=True, max_size=40).map(sorted), INT64)
def test_lookup_time_is_largest_lower_bound(stamps, probe):
    entries = [(ts, 7 + i) for i, ts in enumerate(stamps)]
    expect = max((e for e in entries if e[0] <= probe), default=(-1, 7))
    assert ix.lookup_time(entries, probe, 7) == expect
