"""The broker's index-writing rules (reference §5.5, §5.3, §8.2) in kltool.storage.index_builder."""

from __future__ import annotations

from pathlib import Path

import pytest

from kltool.errors import CorruptDataError, UnsafeOperation
from kltool.format import build_batch, decode_records, parse_header
from kltool.format.batch import build_end_txn_marker, build_v2_batch
from kltool.format.index import (
    check_offset_index,
    check_time_index,
    offset_index_entries,
    parse_txn_index,
    time_index_entries,
)
from kltool.storage.index_builder import (
    IndexBuilder,
    TxnIndexBuilder,
    check_offset_index_invariant,
    rebuild_indexes,
)

REAL = Path(__file__).resolve().parent.parent / "fixtures/real/william0423-indexed-zk/__consumer_offsets-28"


# ------------------------------------------------------------------------------------------------ helpers


def v2(base_offset, timestamps, value_size=10, **kw):
    """A v2 batch with one record per timestamp (offset deltas 0..n-1)."""
    recs = [(i, ts, None, b"x" * value_size, ()) for i, ts in enumerate(timestamps)]
    return build_v2_batch(recs, base_offset=base_offset, **kw)


def batch_of_1000_bytes(base_offset, ts):
    b = v2(base_offset, [ts], value_size=930)
    assert len(b) == 1000
    return b


def headers_of(log: bytes):
    """Kafka's FileLogInputStream walk: batches at successive positions while more than 17 bytes remain."""
    out = []
    pos = 0
    while pos + 17 < len(log):
        h = parse_header(log, pos)
        assert h.crc_valid
        out.append(h)
        pos += h.size
    return out


def segment(batches):
    log = b"".join(batches)
    return log, headers_of(log)


# ------------------------------------------------------------------------------------ the recovery rule


def test_worked_example_1000_byte_batches():
    """§5.5: 1000-byte batches, interval 4096 → entries at positions 5000, 10000, 15000, ..."""
    log, hs = segment(batch_of_1000_bytes(i, 1000 + i) for i in range(20))
    b = IndexBuilder(0)
    idx, tix = b.rebuild(hs)
    assert b.offset_entries == [(5, 5000), (10, 10000), (15, 15000)]
    # time entries: the running max at each offset entry, then the final entry (roll/close/recovery end)
    assert b.time_entries == [(1005, 5), (1010, 10), (1015, 15), (1019, 19)]
    assert offset_index_entries(idx, 0) == b.offset_entries
    assert time_index_entries(tix, 0) == b.time_entries
    assert len(idx) == 3 * 8 and len(tix) == 4 * 12  # trimmed
    assert check_offset_index(idx, 0) == [] and check_time_index(tix, 0) == []
    assert check_offset_index_invariant(b.offset_entries, hs) == []


def test_entry_only_when_strictly_greater_than_interval():
    # 4096 past the anchor is not enough; 4097 is. Interval 0 indexes every batch but the first.
    b = IndexBuilder(0, index_interval_bytes=1000)
    assert b.on_batch(0, 1000, 0, 1) is None  # the batch at position 0 never gets an entry
    assert b.on_batch(1000, 1000, 1, 2) is None  # 1000 - 0 is not > 1000
    assert b.on_batch(2000, 1000, 2, 3) == (2, 2000)
    log, hs = segment(batch_of_1000_bytes(i, 5) for i in range(4))
    b0 = IndexBuilder(0, index_interval_bytes=0)
    b0.rebuild(hs)
    assert b0.offset_entries == [(1, 1000), (2, 2000), (3, 3000)]
    # equal timestamps: maybeAppend writes only a greater timestamp, so one time entry
    assert b0.time_entries == [(5, 0)]


def test_non_monotonic_timestamps_index_the_running_max():
    ts = [100, 300, 200, 250, 50, 400, 100]
    log, hs = segment(batch_of_1000_bytes(i, t) for i, t in enumerate(ts))
    b = IndexBuilder(0, index_interval_bytes=999)  # an entry for every batch after the first
    b.rebuild(hs)
    assert b.offset_entries == [(i, i * 1000) for i in range(1, 7)]
    # running max (300 @1) repeats at batches 2..4 and is written once; 400 @5 then final no-op
    assert b.time_entries == [(300, 1), (400, 5)]
    assert b.finish() is None  # idempotent


def test_max_timestamp_offset_is_the_batch_last_offset():
    # a 3-record batch whose max timestamp is in its first record: the time index points at the
    # shallow (last) offset of the batch, not the record's own offset
    log, hs = segment([v2(0, [10]), v2(1, [900, 20, 30], value_size=5000), v2(4, [40])])
    b = IndexBuilder(0, index_interval_bytes=0)
    b.rebuild(hs)
    assert b.offset_entries == [(3, hs[1].position), (4, hs[2].position)]
    assert b.time_entries == [(900, 3)]


def test_offset_gaps_and_base_offset():
    # base offset 1000, gaps between batches (compaction): relative offsets are stored
    log, hs = segment([batch_of_1000_bytes(1000, 1), batch_of_1000_bytes(1010, 2), batch_of_1000_bytes(1500, 3)])
    idx, tix = rebuild_indexes(1000, hs, index_interval_bytes=500)
    assert offset_index_entries(idx, 1000) == [(1010, 1000), (1500, 2000)]
    assert idx[:8] == (10).to_bytes(4, "big") + (1000).to_bytes(4, "big")
    assert time_index_entries(tix, 1000) == [(2, 1010), (3, 1500)]


def test_legacy_v0_segments_get_an_empty_time_index():
    batches = [build_batch([(0, -1, b"k", b"v" * 900, ())], base_offset=i, magic=0) for i in range(12)]
    log, hs = segment(batches)
    assert {h.magic for h in hs} == {0} and {h.max_timestamp for h in hs} == {-1}
    b = IndexBuilder(0)
    idx, tix = b.rebuild(hs)
    assert tix == b""
    assert b.offset_entries  # the offset index is still built
    assert check_offset_index_invariant(b.offset_entries, hs) == []


def test_legacy_v1_compressed_wrappers():
    from kltool.format.compression import GZIP

    batches = [build_batch([(j, 100 * i + j, None, bytes(2000), ()) for j in range(3)], base_offset=3 * i,
                           magic=1, compression=GZIP) for i in range(30)]
    log, hs = segment(batches)
    b = IndexBuilder(0, index_interval_bytes=100)
    b.rebuild(hs)
    # a wrapper's offset is its last inner offset: every entry offset is 3i+2
    assert all(off % 3 == 2 for off, _ in b.offset_entries)
    assert b.time_entries[-1] == (100 * 29 + 2, 89)
    assert check_offset_index_invariant(b.offset_entries, hs) == []


def test_empty_segment():
    b = IndexBuilder(42)
    assert b.rebuild([]) == (b"", b"")


# -------------------------------------------------------------------------------------- the append path


def test_append_path_one_batch_per_append_matches_recovery():
    log, hs = segment(batch_of_1000_bytes(i, 1000 + i) for i in range(20))
    a = IndexBuilder(0)
    for h in hs:
        a.on_append(h.position, h.size, h.last_offset, h.max_timestamp, h.last_offset)
    a.finish()
    r = IndexBuilder(0)
    r.rebuild(hs)
    assert a.offset_entries == r.offset_entries == [(5, 5000), (10, 10000), (15, 15000)]
    assert a.time_entries == r.time_entries


def test_append_path_multi_batch_append_uses_last_offset_of_whole_append():
    """A follower appends several batches at once: entry = (last offset of the append, its start)."""
    batches = [batch_of_1000_bytes(i, 1000 + i) for i in range(12)]
    log, hs = segment(batches)
    a = IndexBuilder(0)
    # appends of 3 batches (3000 bytes each): starts 0, 3000, 6000, 9000
    for k in range(0, 12, 3):
        group = hs[k:k + 3]
        size = sum(h.size for h in group)
        a.on_append(group[0].position, size, group[-1].last_offset, max(h.max_timestamp for h in group),
                    group[-1].last_offset)
    # bytesSinceLastIndexEntry before each append: 0, 3000, 6000 (> 4096 → entry), 3000
    assert a.offset_entries == [(8, 6000)]
    assert a.time_entries == [(1008, 8)]
    # the recovery rule indexes batch by batch instead
    r = IndexBuilder(0)
    r.rebuild(hs)
    assert r.offset_entries == [(5, 5000), (10, 10000)]
    # both satisfy the verification invariant, neither equals the other
    assert check_offset_index_invariant(a.offset_entries, hs) == []
    assert check_offset_index_invariant(r.offset_entries, hs) == []


def test_kafka_reload_largest_timestamp_after_truncation_entry_count():
    """LogSegmentTest.testReloadLargestTimestampAndNextOffsetAfterTruncation: 30 one-record appends with
    interval 2·batchSize−1 → numMessages/2 − 1 = 14 time-index entries (before close)."""
    batches = [v2(40 + i, [40 + i], value_size=5) for i in range(30)]
    size = len(batches[0])
    assert all(len(b) == size for b in batches)
    log, hs = segment(batches)
    a = IndexBuilder(40, index_interval_bytes=2 * size - 1)
    for h in hs:
        a.on_append(h.position, h.size, h.last_offset, h.max_timestamp, h.last_offset)
    assert len(a.time_entries) == 14
    assert len(a.offset_entries) == 14


def test_restart_re_anchors_the_append_path():
    log, hs = segment(batch_of_1000_bytes(i, 1000 + i) for i in range(20))
    a = IndexBuilder(0)
    for h in hs:
        if h.base_offset == 7:  # broker restart (clean shutdown: close entry, then counter = 0)
            a.finish()
            a.restart()
        a.on_append(h.position, h.size, h.last_offset, h.max_timestamp, h.last_offset)
    a.finish()
    assert a.offset_entries == [(5, 5000), (12, 12000), (17, 17000)]
    assert a.time_entries == [(1005, 5), (1006, 6), (1012, 12), (1017, 17), (1019, 19)]


def test_resume_existing_segment():
    log, hs = segment(batch_of_1000_bytes(i, 1000 + i) for i in range(10))
    r = IndexBuilder(0)
    r.rebuild(hs)
    a = IndexBuilder.resume(0, r.offset_entries, r.time_entries, len(log))
    assert (a.max_timestamp, a.offset_of_max_timestamp) == (1009, 9)
    pos = len(log)
    for k in range(6):
        a.on_append(pos, 1000, 10 + k, 2000 + k, 10 + k)
        pos += 1000
    # re-anchored at 10000: next entry once 10000 + 4097 is passed, i.e. at 15000
    assert a.offset_entries == [(5, 5000), (15, 15000)]


def test_append_requires_contiguous_positions():
    a = IndexBuilder(0)
    a.on_append(0, 100, 0, 1, 0)
    with pytest.raises(ValueError):
        a.on_append(50, 100, 1, 1, 1)
    assert a.on_append(100, 0, 5, 1, 5) is None  # empty appends are ignored


# --------------------------------------------------------------------------------------- limits & errors


def test_is_full_and_full_errors():
    # max_index_bytes 24 → 3 offset entries, 2 time entries (the last kept for the close entry)
    b = IndexBuilder(0, index_interval_bytes=0, max_index_bytes=24)
    assert (b.max_offset_entries, b.max_time_entries) == (3, 2)
    b.on_batch(0, 100, 0, 10)
    assert not b.is_full()
    b.on_batch(100, 100, 1, 11)  # offset entry 1, time entry 1 → time index full (1 >= 2 - 1)
    assert b.is_full()
    with pytest.raises(UnsafeOperation, match="full time index"):
        b.on_batch(200, 100, 2, 12)
    assert b.finish() in (None, (12, 2))  # skipFullCheck: the close entry still fits

    # a 1-entry time index is always full (maxEntries - 1 = 0), as in Kafka
    b = IndexBuilder(0, index_interval_bytes=0, max_index_bytes=20)
    b.on_batch(0, 100, 0, -1)
    with pytest.raises(UnsafeOperation, match="full time index"):
        b.on_batch(100, 100, 1, -1)

    # v0 data never fills the time index; the offset index (36 // 8 = 4 entries) fills first
    b = IndexBuilder(0, index_interval_bytes=0, max_index_bytes=36)
    for i in range(5):
        b.on_batch(i * 100, 100, i, -1)
    assert b.is_full() and b.time_entries == []
    with pytest.raises(UnsafeOperation, match=r"Attempt to append to a full index \(size = 4\)"):
        b.on_batch(500, 100, 5, -1)


def test_default_capacity():
    b = IndexBuilder(0)
    assert b.max_offset_entries == 1310720 and b.max_time_entries == 873813


def test_relative_offset_overflow():
    b = IndexBuilder(100)
    with pytest.raises(UnsafeOperation, match="offset overflow"):
        b.on_batch(0, 100, 99, 1)
    with pytest.raises(UnsafeOperation, match="offset overflow"):
        b.on_append(0, 100, 100 + 2**31, 1, 100)
    assert b.can_append_offset(100 + 2**31 - 1) and not b.can_append_offset(100 + 2**31)


def test_non_increasing_offsets_are_corrupt():
    b = IndexBuilder(0, index_interval_bytes=0)
    b.on_batch(0, 100, 5, 1)
    b.on_batch(100, 100, 9, 2)
    with pytest.raises(CorruptDataError, match="no larger than the last offset appended"):
        b.on_batch(200, 100, 9, 3)


def test_invariant_checker_catches_bad_indexes():
    log, hs = segment(batch_of_1000_bytes(i, i) for i in range(10))
    assert check_offset_index_invariant([(5, 5000)], hs) == []
    assert check_offset_index_invariant([(5, 5001)], hs)  # not a batch start
    assert check_offset_index_invariant([(4, 5000)], hs)  # batch there ends at 5
    assert check_offset_index_invariant([(7, 5000)], hs) == []  # larger offset (follower append): fine
    assert check_offset_index_invariant([(5, 5000), (5, 6000)], hs)  # offsets must increase
    assert check_offset_index_invariant([(6, 6000), (5, 5000)], hs)  # positions must increase


# ---------------------------------------------------------------------------------- the real broker index


def _real_segment():
    base = REAL / "00000000000000000000"
    log = (base.with_suffix(".log")).read_bytes()
    return (log, headers_of(log), offset_index_entries(base.with_suffix(".index").read_bytes(), 0),
            time_index_entries(base.with_suffix(".timeindex").read_bytes(), 0))


@pytest.mark.skipif(not REAL.exists(), reason="real fixture missing")
def test_real_broker_index_vs_rebuild():
    """__consumer_offsets-28 of a real (ZooKeeper-mode) broker: 8202 one-record batches, 1066451 bytes,
    a trimmed .index of 254 entries and .timeindex of 258 entries (clean shutdown).

    Findings:
    * The per-batch recovery rule (what Kafka does when it rebuilds) gives 256 offset entries; the first
      4 equal the broker's, then they differ (rebuild (159, 20861) vs broker (174, 22811)). So a rebuilt
      index is NOT byte-equal to the broker-written one.
    * Both satisfy the §5.5 verification invariant.
    * The broker's files are reproduced EXACTLY by the append path (one batch per append, as a leader
      writes __consumer_offsets commits) with a clean restart — close entry + counter reset — before the
      batches at offsets 142, 1693 and 1715, which are the producer snapshots the broker left
      (00000000000000000142.snapshot, ...1693, ...1715; 8202 = the final shutdown). Each restart adds
      one time-index entry (the close entry), hence 254 + 4 = 258 time entries.
    """
    log, hs, idx, tix = _real_segment()
    assert (len(hs), sum(h.size for h in hs), len(idx), len(tix)) == (8202, len(log), 254, 258)
    assert hs[-1].last_offset == 8201

    # the broker's index obeys the invariant
    assert check_offset_index_invariant(idx, hs) == []

    # Kafka's rebuild rule: close, but not equal
    r = IndexBuilder(0)
    r.rebuild(hs)
    assert check_offset_index_invariant(r.offset_entries, hs) == []
    assert len(r.offset_entries) == 256
    assert r.offset_entries[:4] == idx[:4]
    assert r.offset_entries[4] == (159, 20861) and idx[4] == (174, 22811)
    assert r.offset_entries != idx
    assert r.time_entries[-1] == tix[-1] == (1534312623113, 8201)  # same final (close) entry
    assert all(ts1 < ts2 for (ts1, _), (ts2, _) in zip(r.time_entries, r.time_entries[1:], strict=False))

    # the append path with the broker's restarts reproduces both files exactly
    snapshot_offsets = sorted(int(p.stem) for p in REAL.glob("*.snapshot"))
    assert snapshot_offsets == [142, 1693, 1715, 8202]
    restarts = set(snapshot_offsets[:-1])
    a = IndexBuilder(0)
    for h in hs:
        if h.base_offset in restarts:
            a.finish()
            a.restart()
        a.on_append(h.position, h.size, h.last_offset, h.max_timestamp, h.last_offset)
    a.finish()
    assert a.offset_entries == idx
    assert a.time_entries == tix
    base = REAL / "00000000000000000000"
    assert a.offset_index_bytes() == base.with_suffix(".index").read_bytes()
    assert a.time_index_bytes() == base.with_suffix(".timeindex").read_bytes()


# ---------------------------------------------------------------------------------------------- txn index


def control_type_of(batch_bytes):
    h = parse_header(batch_bytes, 0)
    cols = decode_records(h, batch_bytes)
    return cols.controls[0]["type"] if len(cols) else None


def txn_batches_from_kafka_test():
    """LogSegmentTest.testRecoverTransactionIndex: segment base 100."""
    pid1, pid2 = 5, 10
    kw = dict(producer_epoch=0, base_sequence=100, partition_leader_epoch=15, is_transactional=True)
    raw = [
        v2(100, [-1, -1], producer_id=pid1, **kw),
        v2(102, [-1, -1], producer_id=pid2, **kw),
        v2(104, [-1, -1], partition_leader_epoch=15),
        build_end_txn_marker(offset=106, commit=False, producer_id=pid2, producer_epoch=0, coordinator_epoch=0,
                             timestamp=-1),
        build_end_txn_marker(offset=107, commit=True, producer_id=pid1, producer_epoch=0, coordinator_epoch=0,
                             timestamp=-1),
    ]
    return raw


def test_txn_index_kafka_recover_transaction_index():
    raw = txn_batches_from_kafka_test()
    log, hs = segment(raw)
    t = TxnIndexBuilder()
    for h, b in zip(hs, raw, strict=True):
        t.on_batch(h, control_type_of(b) if h.is_control else None)
    [aborted] = t.aborted
    assert (aborted.producer_id, aborted.first_offset, aborted.last_offset, aborted.last_stable_offset) == \
        (10, 102, 106, 100)
    assert parse_txn_index(t.txn_index_bytes()) == [aborted]
    assert t.open_txns == {}

    # "recover again, assuming the transaction from pid2 began on a previous segment"
    t = TxnIndexBuilder(open_txns={10: 75})
    for h, b in zip(hs, raw, strict=True):
        t.on_batch(h, control_type_of(b) if h.is_control else None)
    [aborted] = t.take()
    assert (aborted.producer_id, aborted.first_offset, aborted.last_offset, aborted.last_stable_offset) == \
        (10, 75, 106, 100)
    assert t.aborted == []


def test_txn_index_lso_without_other_open_txns_and_markers_without_data():
    kw = dict(producer_epoch=0, base_sequence=0, is_transactional=True)
    raw = [
        build_end_txn_marker(offset=0, commit=False, producer_id=1, producer_epoch=0, coordinator_epoch=0,
                             timestamp=1),  # no open txn: completes nothing
        v2(1, [1, 2], producer_id=1, **kw),
        v2(3, [3], producer_id=1, **kw),  # same open txn
        build_end_txn_marker(offset=4, commit=False, producer_id=1, producer_epoch=0, coordinator_epoch=0,
                             timestamp=5),
        v2(5, [6], producer_id=2, **kw),
        v2(6, [7], producer_id=1, **kw),
        build_end_txn_marker(offset=7, commit=False, producer_id=1, producer_epoch=0, coordinator_epoch=0,
                             timestamp=8),
    ]
    log, hs = segment(raw)
    t = TxnIndexBuilder()
    out = [t.on_batch(h, control_type_of(b) if h.is_control else None) for h, b in zip(hs, raw, strict=True)]
    assert out[0] is None
    assert (out[3].first_offset, out[3].last_offset, out[3].last_stable_offset) == (1, 4, 5)  # marker + 1
    assert (out[6].first_offset, out[6].last_offset, out[6].last_stable_offset) == (6, 7, 5)  # pid 2 still open
    assert t.open_txns == {2: 5}


def test_txn_index_ignores_non_producer_and_legacy_batches_and_empty_control():
    t = TxnIndexBuilder()
    h = parse_header(v2(0, [1]), 0)
    assert t.on_batch(h) is None
    h0 = parse_header(build_batch([(0, -1, None, b"v", ())], base_offset=1, magic=0), 0)
    assert t.on_batch(h0) is None
    t.on_batch(parse_header(v2(2, [1], producer_id=9, producer_epoch=0, is_transactional=True), 0))
    empty_ctrl = build_v2_batch([], base_offset=3, producer_id=9, producer_epoch=0, is_transactional=True,
                                is_control=True)
    assert t.on_batch(parse_header(empty_ctrl, 0), None) is None
    assert t.open_txns == {9: 2}  # still open


def test_txn_index_non_transactional_write_inside_txn_is_an_error():
    t = TxnIndexBuilder()
    t.on_batch(parse_header(v2(0, [1], producer_id=9, producer_epoch=0, is_transactional=True), 0))
    with pytest.raises(CorruptDataError, match="Expected transactional write"):
        t.on_batch(parse_header(v2(1, [1], producer_id=9, producer_epoch=0), 0))
