"""PartitionWriter / Appender: the broker's roll rules (§7), index writing (§5.4-5.5), producer
snapshots (§6), and resuming existing segments."""

from __future__ import annotations

import pytest

from kltool.errors import UnsafeOperation, UsageError
from kltool.format.batch import build_v2_batch
from kltool.format.snapshot import parse_snapshot
from kltool.storage.index_builder import rebuild_indexes
from kltool.storage.partition import Partition
from kltool.storage.topic_config import TopicConfig
from kltool.storage.write.appender import Appender, AppendOptions
from kltool.storage.write.create import create_topic
from kltool.storage.write.writer import PartitionWriter
from tests.test_append import check_indexes, kp_read

TS0 = 1700000000000


def new_topic(tmp_path, partitions=1, **config) -> tuple:
    ld = tmp_path / "logs"
    create_topic(ld, "t", partitions, config={k.replace("_", "."): str(v) for k, v in config.items()})
    return ld, ld / "t-0"


def append(ld, records, **opts):
    """records: (key, value, timestamp) tuples, all to partition 0."""
    with Appender(ld, "t", AppendOptions(**opts)) as a:
        for k, v, ts in records:
            a.add(k, v, (), ts, 0)
        return a.commit()


def segments(part):
    return Partition(part).segments


# ------------------------------------------------------------------------------------------- roll rules


def test_roll_at_segment_bytes_exactly_like_should_roll(tmp_path):
    ld, part = new_topic(tmp_path, segment_bytes=3000)
    recs = [(b"k", b"v" * (50 + (i * 37) % 400), TS0 + i) for i in range(200)]
    r = append(ld, recs, batch_records=1)
    segs = segments(part)
    assert len(segs) > 5 and r.segments_rolled == len(segs) - 1
    for a, b in zip(segs, segs[1:], strict=False):
        assert a.size <= 3000
        first = next(iter(b.batches()))
        assert a.size > 3000 - first.size  # LogSegment.shouldRoll: size > segment.bytes - messagesSize
        assert b.base_offset == first.base_offset  # named by its base offset (the LEO at the roll)
    assert [(o, k, v) for o, _t, k, v, _h in sum((kp_read(s.log_path) for s in segs), [])] == \
        [(i, k, v) for i, (k, v, _t) in enumerate(recs)]
    check_indexes(part)


def test_roll_when_segment_ms_passed(tmp_path):
    ld, part = new_topic(tmp_path, segment_ms=1000)
    ts = [TS0, TS0 + 500, TS0 + 1000, TS0 + 1001, TS0 + 1500, TS0 + 2001, TS0 + 2002]
    append(ld, [(None, b"x", t) for t in ts], batch_records=1)
    # waited = maxTimestamp(append) - maxTimestamp(first batch of the segment) > segment.ms
    assert [[h.max_timestamp for h in s.batches()] for s in segments(part)] == \
        [[TS0, TS0 + 500, TS0 + 1000], [TS0 + 1001, TS0 + 1500, TS0 + 2001], [TS0 + 2002]]


def test_roll_when_time_index_full(tmp_path):
    # segment.index.bytes 36: time index maxEntries 3, full at 2 (last slot kept for the close entry)
    ld, part = new_topic(tmp_path, segment_index_bytes=36, index_interval_bytes=0)
    append(ld, [(None, b"x" * 10, TS0 + i) for i in range(9)], batch_records=1)
    segs = segments(part)
    assert [len(list(s.batches())) for s in segs] == [3, 3, 3]
    assert [len(s.offset_index()) for s in segs] == [2, 2, 2]
    assert [len(s.time_index()) for s in segs] == [2, 2, 2]
    check_indexes(part)


def test_roll_when_offset_index_full(tmp_path):
    # constant timestamps keep the time index at one entry; the offset index (4 entries) fills first
    ld, part = new_topic(tmp_path, segment_index_bytes=36, index_interval_bytes=0)
    append(ld, [(None, b"x" * 10, TS0) for _ in range(12)], batch_records=1)
    segs = segments(part)
    assert [len(list(s.batches())) for s in segs] == [5, 5, 2]
    assert [len(s.offset_index()) for s in segs] == [4, 4, 1]
    assert (segs[0].index_path.stat().st_size, segs[0].timeindex_path.stat().st_size) == (32, 12)


def test_roll_when_relative_offset_would_overflow(tmp_path):
    ld, part = new_topic(tmp_path)
    base = 2**31 - 5  # a gap (like compaction leaves) puts offsets near the relative-offset limit
    batch = build_v2_batch([(i, TS0, b"k", b"v", ()) for i in range(3)], base_offset=base, partition_leader_epoch=0)
    (part / "00000000000000000000.log").write_bytes(batch)
    r = append(ld, [(None, b"x", TS0) for _ in range(5)])
    segs = segments(part)
    assert [s.base_offset for s in segs] == [0, base + 3]
    assert r.partitions[0].stats.rolled == [base + 3]
    assert segs[1].log_path.name == f"{base + 3:020d}.log"
    assert [o for o, *_ in kp_read(segs[1].log_path)] == list(range(base + 3, base + 8))


# ------------------------------------------------------------------------------------------------ indexes


def test_indexes_equal_kafkas_rebuild_within_one_run(tmp_path):
    ld, part = new_topic(tmp_path, segment_bytes=20000, index_interval_bytes=700)
    recs = [(f"k{i}".encode(), b"v" * ((i * 53) % 300), TS0 + (i * 7919) % 5000) for i in range(1500)]
    append(ld, recs, batch_bytes=600, compression="lz4")
    segs = segments(part)
    assert len(segs) >= 3
    for s in segs:
        want_index, want_time = rebuild_indexes(s.base_offset, s.batches(), index_interval_bytes=700)
        assert s.index_path.read_bytes() == want_index
        assert s.timeindex_path.read_bytes() == want_time
        assert len(want_index) > 0


def test_resume_an_untrimmed_index_after_a_broker_crash(tmp_path):
    ld, part = new_topic(tmp_path, index_interval_bytes=200)
    append(ld, [(b"k", b"v" * 100, TS0 + i) for i in range(50)], batch_records=1)
    seg = segments(part)[0]
    index, tindex = seg.index_path.read_bytes(), seg.timeindex_path.read_bytes()
    seg.index_path.write_bytes(index + bytes(8 * 100))  # preallocated, zero-filled, never trimmed
    seg.timeindex_path.write_bytes(tindex + bytes(12 * 100))
    append(ld, [(b"k", b"v" * 100, TS0 + 50 + i) for i in range(50)], batch_records=1)
    seg = segments(part)[0]
    assert seg.index_path.read_bytes().startswith(index)
    assert seg.index_path.stat().st_size % 8 == 0 and bytes(8) not in seg.index_path.read_bytes()[8:]
    check_indexes(part)


def test_inconsistent_index_is_rebuilt_by_the_recovery_rule(tmp_path):
    ld, part = new_topic(tmp_path, index_interval_bytes=200)
    append(ld, [(b"k", b"v" * 100, TS0 + i) for i in range(30)], batch_records=1)
    seg = segments(part)[0]
    seg.index_path.write_bytes(b"\x00\x00\x00\x05\x00\x00\x00\x07")  # points into the middle of a batch
    append(ld, [(b"k", b"v" * 100, TS0 + 30 + i) for i in range(30)], batch_records=1)
    check_indexes(part)


def test_v0_data_has_an_empty_time_index(tmp_path):
    ld, part = new_topic(tmp_path, index_interval_bytes=100)
    append(ld, [(b"k", b"v" * 100, TS0 + i) for i in range(30)], magic=0)
    seg = segments(part)[0]
    assert seg.timeindex_path.read_bytes() == b"" and len(seg.offset_index()) > 0
    check_indexes(part)


# ------------------------------------------------------------------------------------ snapshots, epochs


def test_producer_snapshot_at_each_roll_named_by_the_new_base_offset(tmp_path):
    ld, part = new_topic(tmp_path, segment_bytes=1500)
    r = append(ld, [(b"k", b"v" * 100, TS0 + i) for i in range(40)], batch_records=2, producer_id=11)
    rolled = r.partitions[0].stats.rolled
    assert len(rolled) >= 3
    snaps = {int(p.name.split(".")[0]): p for p in part.glob("*.snapshot")}
    assert sorted(snaps) == sorted([*rolled, 40])  # one per roll, and the close snapshot at the LEO
    for base in rolled:
        (entry,) = parse_snapshot(snaps[base].read_bytes(), strict=True).entries
        assert entry.producer_id == 11 and entry.last_offset == base - 1 and entry.last_sequence == base - 1
        assert entry.offset_delta == 1 and entry.current_txn_first_offset == -1


def test_empty_partition_dir_starts_at_the_log_start_offset(tmp_path):
    ld, part = new_topic(tmp_path)
    for f in part.glob("00000000000000000000.*"):
        f.unlink()
    (ld / "log-start-offset-checkpoint").write_text("0\n1\nt 0 100\n")
    append(ld, [(None, b"x", TS0)] * 3)
    assert [s.base_offset for s in segments(part)] == [100]
    assert [o for o, *_ in kp_read(part / f"{100:020d}.log")] == [100, 101, 102]
    assert (part / "leader-epoch-checkpoint").read_text() == "0\n1\n0 100\n"


def test_writer_dry_run_and_library_errors(tmp_path):
    ld, part = new_topic(tmp_path, segment_bytes=1000)
    w = PartitionWriter(part, config=TopicConfig({"segment.bytes": "1000"}), dry_run=True)
    data = b"".join(build_v2_batch([(0, TS0, None, b"x" * 300, ())], base_offset=i) for i in range(5))
    w.append(data)
    st = w.close()
    assert st.batches == 5 and st.rolled == [2, 4] and (st.first_offset, st.last_offset) == (0, 4)
    assert (part / "00000000000000000000.log").stat().st_size == 0 and not list(part.glob("*.snapshot"))
    with pytest.raises(UsageError, match="leader epoch 1 is below"):
        (part / "leader-epoch-checkpoint").write_text("0\n1\n3 0\n")
        PartitionWriter(part, leader_epoch=1)
    (part / "00000000000000000000.log.swap").write_bytes(b"")
    with pytest.raises(UnsafeOperation, match="unfinished"):
        PartitionWriter(part)


def test_appender_library_round_trip(tmp_path):
    ld, part = new_topic(tmp_path, partitions=2)
    with Appender(ld, "t", AppendOptions(compression="snappy")) as a:
        for i in range(100):
            a.add(f"key{i}".encode(), f"value{i}".encode(), [("h", b"1")], TS0 + i)
        assert a.pending_records == 100
        r = a.commit()
    assert r.records == 100 and {p.partition for p in r.partitions} == {0, 1}
    got = sorted(rec[2:4] for p in (0, 1) for rec in kp_read(ld / f"t-{p}" / "00000000000000000000.log"))
    assert got == sorted((f"key{i}".encode(), f"value{i}".encode()) for i in range(100))
    # an Appender closed without commit writes nothing
    before = {p: (ld / f"t-{p}" / "00000000000000000000.log").read_bytes() for p in (0, 1)}
    with Appender(ld, "t") as a:
        a.add(b"k", b"v")
    assert {p: (ld / f"t-{p}" / "00000000000000000000.log").read_bytes() for p in (0, 1)} == before


def test_append_to_a_broker_written_partition(kl, copy_fixture):
    """A real broker's log dir (Kafka 2.x, clean shutdown): offsets, the time index and the leader epoch
    go on where the broker left them; old and new batches read back through kafka-python."""
    ld = copy_fixture("real/william0423-indexed-zk")
    part = ld / "debug_topic-0"
    seg = part / "00000000000000000000"
    old_time_index = seg.with_suffix(".timeindex").read_bytes()
    old_records = kp_read(seg.with_suffix(".log"))
    ts = 1534300904976 + 1000  # a second after the broker's last batch: no time-based roll
    with Appender(ld, "debug_topic", AppendOptions(compression="gzip")) as a:
        for i in range(5):
            a.add(b"k%d" % i, b"v%d" % i, (), ts + i, 0)
        r = a.commit()
    assert r.segments_rolled == 0 and (r.partitions[0].stats.first_offset, r.partitions[0].stats.last_offset) == (40, 44)
    assert seg.with_suffix(".timeindex").read_bytes().startswith(old_time_index)
    recs = kp_read(seg.with_suffix(".log"))
    assert recs[:40] == old_records and [o for o, *_ in recs[40:]] == [40, 41, 42, 43, 44]
    assert sorted(p.name for p in part.glob("*.snapshot")) == ["00000000000000000045.snapshot"]
    check_indexes(part)
    v = kl("verify", "--deep", ld, "--topic", "debug_topic")
    assert v.code == 0 and "0 errors, 0 warnings" in v.out, v


def test_leader_epoch_continues_from_a_broker_written_partition(copy_fixture):
    ld = copy_fixture("real/biggerbrain-gzip-headers")
    part = ld / "lsx1-0"
    checkpoint = (part / "leader-epoch-checkpoint").read_text()
    with Appender(ld, "lsx1") as a:
        a.add(None, b"x", (), None, 0)
        a.commit()
    assert (part / "leader-epoch-checkpoint").read_text() == checkpoint  # epoch 7 since offset 14
    last = list(Partition(part).segments[-1].batches())[-1]
    assert last.partition_leader_epoch == 7 and last.base_offset == 14


def test_time_index_that_does_not_match_is_rebuilt(tmp_path):
    ld, part = new_topic(tmp_path, index_interval_bytes=200)
    append(ld, [(b"k", b"v" * 100, TS0 + i) for i in range(30)], batch_records=1)
    seg = segments(part)[0]
    seg.timeindex_path.write_bytes(seg.timeindex_path.read_bytes()[:-12] + b"\x00" * 8 + b"\x00\x00\x00\x03")
    append(ld, [(b"k", b"v" * 100, TS0 + 30 + i) for i in range(30)], batch_records=1)
    check_indexes(part)
