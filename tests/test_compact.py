"""kltool compact: the log cleaner's rules, one at a time, on partitions built with kltool's writer."""

from __future__ import annotations

import json
import struct

import pytest

from kltool.format.batch import DELETE_HORIZON_BIT
from kltool.format.compression import GZIP, LZ4, ZSTD
from kltool.storage.change import compact as cp
from kltool.storage.change.cleaner import OffsetMap, group_segments
from kltool.storage.logdir import open_paths

from .compact_data import DAY, T0, Log, read_batches, read_records, table
from .conftest import run_kltool

SMALL = {"segment.bytes": "1200"}


def compact(root, now=T0 + 1000, **kw):
    """One pass through the library (the CLI's path), applied the broker's way."""
    policy = cp.Policy(now=now, **kw)
    plan = cp.plan_compaction(open_paths([str(root)]), policy, dry_run=False)
    cp.apply_compaction(plan, backup=False)
    return plan


def versions_log(tmp_path, keys=5, n=60, config=SMALL):
    log = Log(tmp_path / "ld", config)
    for i in range(n):
        log.data([(b"k%d" % (i % keys), b"v%d" % i)])
    return log


def cleaned_then_dirty(tmp_path):
    """versions_log, compacted once, then 40 more records (the dirty range of a second pass): (log, root)."""
    log = versions_log(tmp_path)
    root = log.close()
    compact(root)
    log.reopen()
    for i in range(40):
        log.data([(b"k%d" % (i % 5), b"again%d" % i)])
    log.close()
    return log, root


def segment_bases(part):
    return sorted(int(p.name.split(".")[0]) for p in part.glob("*.log"))


# ------------------------------------------------------------------------------------------------ the range


def test_latest_version_per_key_in_the_cleaned_range_active_segment_untouched(tmp_path):
    log = versions_log(tmp_path)
    root = log.close()
    before = read_records(log.dir)
    active = segment_bases(log.dir)[-1]
    plan = compact(root)
    pc = plan.partitions[0]
    assert pc.first_dirty_offset == 0 and pc.end_offset == active == pc.first_uncleanable_offset
    assert pc.uncleanable_by == ["active segment"]
    after = read_records(log.dir)
    cleaned = [r for r in after if r[0] < active]
    latest = {}
    for off, k, _v, _h in before:
        if off < active:
            latest[k] = off
    assert [r[0] for r in cleaned] == sorted(latest.values())
    assert [r for r in after if r[0] >= active] == [r for r in before if r[0] >= active]
    assert (root / "cleaner-offset-checkpoint").read_text().splitlines() == ["0", "1", f"t 0 {active}"]
    assert run_kltool("verify", root).code == 0


def test_second_pass_starts_at_the_checkpoint_and_nothing_dirty_changes_nothing(tmp_path):
    root = versions_log(tmp_path).close()
    compact(root)
    files = {p.name: p.read_bytes() for p in (root / "t-0").iterdir()}
    plan = compact(root)
    pc = plan.partitions[0]
    assert pc.skipped and pc.notes[0].kind == "nothing_dirty" and not plan.actions
    assert {p.name: p.read_bytes() for p in (root / "t-0").iterdir()} == files


def _with_open_transaction(root, after: int):
    """A log dir: 10 batches, one transactional batch never ended (its offset returned), ``after`` more."""
    log = Log(root, SMALL)
    for i in range(10):
        log.data([(b"k", b"v%d" % i)])
    first_open = log.data([(b"k", b"open")], pid=7, txn=True)
    for i in range(after):
        log.data([(b"k", b"w%d" % i)])
    return log.close(), first_open


def test_min_compaction_lag_and_open_transaction_bound_the_range(tmp_path):
    log = Log(tmp_path / "ld", SMALL)
    for i in range(60):
        log.data([(b"k%d" % (i % 3), b"v%d" % i)], ts=T0 + i * 1000)
    root = log.close()
    bases = segment_bases(log.dir)
    # every segment's largest timestamp is newer than now - lag, except those before the second one
    seg1_end = bases[1] - 1
    now = T0 + seg1_end * 1000 + 1000  # segment 0 is exactly old enough, segment 1 is not
    plan = cp.plan_compaction(open_paths([str(root)]), cp.Policy(now=now, config={"min.compaction.lag.ms": "1000"}))
    pc = plan.partitions[0]
    assert pc.first_uncleanable_offset == bases[1] and pc.uncleanable_by == ["min.compaction.lag.ms"]

    root2, first_open = _with_open_transaction(tmp_path / "ld2", 30)
    pc2 = cp.plan_compaction(open_paths([str(root2)]), cp.Policy(now=T0)).partitions[0]
    assert pc2.last_stable_offset == first_open == pc2.first_uncleanable_offset
    assert pc2.uncleanable_by == ["last stable offset"]


def test_an_open_transaction_before_the_last_two_segments_bounds_the_range_without_a_snapshot(tmp_path):
    # No producer snapshot: the broker replays the whole log from its start (UnifiedLog.rebuildProducerState)
    # and finds the transaction open at offset 10; kltool replayed only the last two segments, took the LSO
    # for the log end (71) and would have cleaned past the open transaction. After a clean shutdown with no
    # snapshot file at all the broker reads nothing and starts empty: then neither bounds the range by it.
    root, first_open = _with_open_transaction(tmp_path / "ld", 60)
    assert segment_bases(root / "t-0")[-2] > first_open  # (before the last two segments)
    for snap in (root / "t-0").glob("*.snapshot"):
        snap.unlink()
    pc = cp.plan_compaction(open_paths([str(root)]), cp.Policy(now=T0)).partitions[0]
    assert pc.last_stable_offset == first_open == pc.first_uncleanable_offset
    (root / ".kafka_cleanshutdown").write_text('{"version":0,"brokerEpoch":1}')
    pc = cp.plan_compaction(open_paths([str(root)]), cp.Policy(now=T0)).partitions[0]
    assert pc.last_stable_offset == 71


# --------------------------------------------------------------------------------------------- the map


def test_offset_map_capacity_is_kafkas():
    m = OffsetMap(2 << 20)
    assert m.slots == (2 << 20) // 24 and m.capacity == int(m.slots * 0.9)


def test_full_map_ends_the_pass_and_the_next_goes_on(tmp_path):
    log = Log(tmp_path / "ld", SMALL)
    for i in range(80):
        log.data([(b"key-%03d" % i, b"v")])  # 80 distinct keys
    for i in range(20):
        log.data([(b"x", b"%d" % i)])
    root = log.close()
    buf = 24 * 34  # 34 slots, 30 keys
    plan = compact(root, dedupe_buffer_size=buf)
    pc = plan.partitions[0]
    assert pc.map_full and pc.map_entries == 30
    assert pc.end_offset == 30  # one record per batch: the map ends after the 30th key
    assert (root / "cleaner-offset-checkpoint").read_text().splitlines()[-1] == "t 0 30"
    pc2 = compact(root, dedupe_buffer_size=buf).partitions[0]
    assert pc2.first_dirty_offset == 30 and pc2.end_offset == 60
    assert sorted(k for _o, k, _v, _h in read_records(log.dir)) == sorted(
        [b"key-%03d" % i for i in range(80)] + [b"x"] * 20)


def test_records_past_the_maps_end_are_kept_even_when_the_map_holds_a_later_offset(tmp_path):
    log = Log(tmp_path / "ld", SMALL)
    for i in range(28):
        log.data([(b"key-%02d" % i, b"v")])
    log.data([(b"x", b"1"), (b"x", b"2"), (b"y", b"3"), (b"z", b"4")])  # the map (30 keys) fills at z
    for i in range(40):
        log.data([(b"w", b"%d" % i)])
    log.close()
    pc = compact(log.root, dedupe_buffer_size=24 * 34).partitions[0]
    assert pc.map_full and pc.end_offset == 28
    # x@28 is below the map's x@29 but above its last offset (27): kept, as Kafka keeps it
    assert [r[:3] for r in read_records(log.dir) if 28 <= r[0] <= 31] == [(28, b"x", b"1"), (29, b"x", b"2"),
                                                                           (30, b"y", b"3"), (31, b"z", b"4")]


def test_keyless_records_are_dropped(tmp_path):
    log = Log(tmp_path / "ld", SMALL)
    for i in range(40):
        log.data([(None if i % 2 else b"k%d" % i, b"v%d" % i)])
    root = log.close()
    active = segment_bases(log.dir)[-1]
    pc = compact(root).partitions[0]
    assert pc.stats.keyless == active // 2
    assert all(k is not None for off, k, _v, _h in read_records(log.dir) if off < active)


def test_offset_map_too_small_is_bad_usage(tmp_path):
    root = versions_log(tmp_path).close()
    r = run_kltool("compact", root, "--dedupe-buffer-size", "24")
    assert r.code == 2 and "too small" in r.err


# ---------------------------------------------------------------------------------------------- tombstones


def _tombstone_batches(part):
    return [(h, recs) for h, recs in read_batches(part) if any(r.value is None for r in recs)]


def test_tombstone_gets_a_horizon_then_goes_after_it(tmp_path):
    log = Log(tmp_path / "ld", {**SMALL, "delete.retention.ms": str(DAY)})
    for i in range(10):
        log.data([(b"a", b"v%d" % i), (b"b", b"w%d" % i)])
    tomb = log.data([(b"a", None)])
    for i in range(40):
        log.data([(b"c%d" % (i % 4), b"x")])
    log.close()
    root = log.root
    now1 = T0 + 5000
    plan = compact(root, now=now1)
    assert plan.partitions[0].stats.horizon_set == now1 + DAY
    ((h, recs),) = _tombstone_batches(log.dir)
    assert h.base_offset == tomb and h.has_delete_horizon and h.attributes & DELETE_HORIZON_BIT
    assert h.first_timestamp == now1 + DAY  # the base timestamp field holds deleteHorizonMs
    assert recs[0].timestamp == T0 + tomb  # the record keeps its own timestamp (a negative delta)
    # a second pass before the horizon (new dirty data first) keeps it, copied as it is
    log.reopen()
    for i in range(30):
        log.data([(b"d%d" % (i % 4), b"y")])
    log.close()
    raw = h.data
    plan2 = compact(root, now=now1 + DAY - 1)
    ((h2, _),) = _tombstone_batches(log.dir)
    assert h2.data == raw and plan2.partitions[0].stats.tombstones_kept == 1
    assert plan2.partitions[0].stats.tombstones_until == now1 + DAY
    # after the horizon the next pass removes it
    log.reopen()
    for i in range(30):
        log.data([(b"e%d" % (i % 4), b"z")])
    log.close()
    plan3 = compact(root, now=now1 + DAY)
    assert _tombstone_batches(log.dir) == [] and plan3.partitions[0].stats.tombstones_removed == 1
    assert b"a" not in table(log.dir) and table(log.dir)[b"b"] == b"w9"


def test_superseded_tombstone_goes_at_once(tmp_path):
    log = Log(tmp_path / "ld", SMALL)
    log.data([(b"a", b"1")])
    log.data([(b"a", None)])
    log.data([(b"a", b"2")])
    for i in range(40):
        log.data([(b"z%d" % (i % 3), b"x")])
    root = log.close()
    compact(root)
    assert [r for r in read_records(log.dir) if r[1] == b"a"] == [(2, b"a", b"2", [])]


def test_legacy_tombstones_follow_segment_mtime(tmp_path):
    from kltool.format.legacy import build_legacy_batch

    root = tmp_path / "ld"
    log = Log(root, {**SMALL, "delete.retention.ms": "1000"})
    for i in range(30):
        rec = [(0, T0 + i, b"k%d" % (i % 3), None if i == 1 else b"v%d" % i)]
        log.w.append(build_legacy_batch(rec, base_offset=i, magic=1))
        log.next += 1
    log.close()
    bases = segment_bases(log.dir)
    compact(root)  # first pass: no clean segment before the dirty offset: horizon 0, every delete is kept
    # (k1's tombstone at offset 1 is superseded anyway); a v1 tombstone at the log's head:
    assert all(r[2] is not None for r in read_records(log.dir) if r[0] < bases[-1])


# ---------------------------------------------------------------------------------------------- transactions


def _txn_log(tmp_path):
    log = Log(tmp_path / "ld", {**SMALL, "delete.retention.ms": "1000"})
    log.data([(b"a", b"aborted-1")], pid=1, txn=True)
    log.data([(b"b", b"committed-1")], pid=2, txn=True)
    log.data([(b"a", b"aborted-2")], pid=1, txn=True)
    abort = log.marker(1, commit=False)
    commit = log.marker(2, commit=True)
    log.data([(b"c", b"later")], pid=1, txn=True)  # producer 1's last data: in a later committed transaction
    log.marker(1, commit=True)
    for i in range(40):
        log.data([(b"z%d" % (i % 3), b"x")])
    log.close()
    return log, abort, commit


def test_aborted_data_goes_markers_stay_while_their_data_was_seen(tmp_path):
    log, abort, commit = _txn_log(tmp_path)
    pc = compact(log.root).partitions[0]
    recs = read_records(log.dir, controls=True)
    assert not any(r[1] == b"a" for r in recs)
    assert (abort, "marker", "ABORT") in recs and (commit, "marker", "COMMIT") in recs
    assert pc.stats.aborted_records == 2
    first = segment_bases(log.dir)[0]
    txn = (log.dir / f"{first:020d}.txnindex").read_bytes()
    assert len(txn) == 34 and struct.unpack_from(">qqqq", txn, 2)[0:3] == (1, 0, abort)
    # the next pass sees no data of the aborted transaction: its marker is kept with a delete horizon; the
    # committed one's data batch stays (producer 2's last batch, an empty header once its records go), so its
    # COMMIT marker stays as it is ...
    log.reopen()
    for i in range(30):
        log.data([(b"y%d" % (i % 3), b"x")])
    log.close()
    now = T0 + 10_000
    compact(log.root, now=now)
    markers = [(h, recs) for h, recs in read_batches(log.dir) if h.is_control and h.base_offset in (abort, commit)]
    assert [h.delete_horizon_ms for h, _ in markers] == [now + 1000, None]
    assert not list(log.dir.glob("*.txnindex"))  # the ABORT no longer goes back into the index
    # ... and the ABORT is removed once its horizon has passed
    log.reopen()
    for i in range(30):
        log.data([(b"x%d" % (i % 3), b"x")])
    log.close()
    compact(log.root, now=now + 1000)
    offs = {h.base_offset for h, _ in read_batches(log.dir)}
    assert abort not in offs and commit in offs


def test_producers_last_batch_is_kept_as_an_empty_header(tmp_path):
    log = Log(tmp_path / "ld", SMALL)
    first = log.data([(b"k", b"old"), (b"j", b"old")], pid=42, epoch=3, leader_epoch=5)
    for i in range(40):
        log.data([(b"k" if i % 2 else b"j", b"new%d" % i)])
    log.close()
    compact(log.root)
    (h, recs), = [(h, r) for h, r in read_batches(log.dir) if h.producer_id == 42]
    assert recs == [] and h.count == 0 and h.size == 61 and h.base_offset == first and h.last_offset == first + 1
    assert (h.producer_epoch, h.base_sequence, h.partition_leader_epoch) == (3, 0, 5)
    assert h.crc_valid


def test_the_rounds_last_batch_stays_as_an_empty_header(tmp_path):
    log = Log(tmp_path / "ld", SMALL)
    for i in range(30):
        log.data([(b"k%d" % (i % 3), b"v")])
    last = log.data([(None, b"x" * 1150)])  # keyless, alone in its segment (segment.bytes 1200)
    log.data([(b"k0", b"w")])  # the active segment
    log.close()
    pc = compact(log.root).partitions[0]
    assert pc.first_uncleanable_offset == last + 1 == segment_bases(log.dir)[-1]
    (h, recs), = [(h, r) for h, r in read_batches(log.dir) if h.base_offset == last]
    assert recs == [] and h.count == 0 and pc.stats.batches_emptied == 1 and pc.stats.keyless == 1


@pytest.mark.parametrize("codec", [0, GZIP, LZ4, ZSTD])
def test_rewritten_batches_keep_their_header_fields(tmp_path, codec):
    log = Log(tmp_path / "ld", SMALL)
    log.data([(b"a", b"1"), (b"b", b"1"), (b"c", b"1")], pid=9, epoch=2, compression=codec, leader_epoch=4,
             headers=[("h", b"x")])
    log.data([(b"x", b"y")], pid=9, epoch=2, log_append_time=T0 + 77, leader_epoch=4)
    log.data([(b"b", b"2")])
    for i in range(40):
        log.data([(b"z%d" % (i % 3), b"x")])
    log.close()
    before = {h.base_offset: h for h, _ in read_batches(log.dir)}
    compact(log.root)
    after = {h.base_offset: (h, r) for h, r in read_batches(log.dir)}
    h, recs = after[0]
    o = before[0]
    for f in ("last_offset", "compression", "timestamp_type", "producer_id", "producer_epoch", "base_sequence",
              "partition_leader_epoch", "is_transactional", "is_control", "first_timestamp"):
        assert getattr(h, f) == getattr(o, f), f
    assert [(r.offset, r.key, r.value, r.headers) for r in recs] == [(0, b"a", b"1", [(b"h", b"x")]),
                                                                    (2, b"c", b"1", [(b"h", b"x")])]
    assert h.max_timestamp == T0 + 2 and h.crc_valid


def test_batches_that_lose_nothing_are_copied_byte_for_byte(tmp_path):
    log = Log(tmp_path / "ld", SMALL)
    for i in range(40):
        log.data([(b"k%d" % i, b"v"), (b"j%d" % i, b"w")], compression=LZ4)
    log.close()
    before = {h.base_offset: h.data for h, _ in read_batches(log.dir)}
    plan = compact(log.root)
    after = {h.base_offset: h.data for h, _ in read_batches(log.dir)}
    assert after == before and plan.partitions[0].stats.batches_rewritten == 0


# ------------------------------------------------------------------------------------------------- groups


def test_group_segments_by_size_index_size_and_offset_span():
    class S:
        def __init__(self, b):
            self.base_offset = b

    segs = [S(0), S(10), S(20), S(2**31 + 5), S(2**31 + 6)]
    sizes = [(400, 8, 12), (400, 8, 12), (400, 8, 12), (0, 0, 0), (10, 8, 12)]
    # log bytes; an empty segment joins whatever its span; the span of the next one is too large
    assert group_segments(segs, sizes, 1000, 100, 2**31 + 50) == [[0, 1], [2, 3], [4]]
    assert group_segments(segs[:3], sizes[:3], 10**6, 24, 30) == [[0, 1], [2]]  # time index 12+12 <= 24
    assert group_segments(segs[:3], [(1, 9, 0)] * 3, 10**6, 18, 30) == [[0, 1], [2]]  # offset index 9+9 <= 18
    assert group_segments(segs[:3], sizes[:3], 10**6, 10**6, 30) == [[0, 1, 2]]


def test_groups_become_one_segment_named_after_the_first(tmp_path):
    small = versions_log(tmp_path / "a", keys=3, n=80)
    assert len(compact(small.close(), config={"segment.bytes": "1200"}).partitions[0].groups) > 1
    log = versions_log(tmp_path / "b", keys=3, n=80)
    root = log.close()
    bases = segment_bases(log.dir)
    groups = compact(root, config={"segment.bytes": "100000"}).partitions[0].groups
    assert len(groups) == 1 and groups[0].base_offset == 0 and len(groups[0].sources) == len(bases) - 1
    assert segment_bases(log.dir) == [0, bases[-1]]
    assert not [p for p in log.dir.iterdir() if p.name.endswith((".cleaned", ".swap", ".deleted"))]


# ---------------------------------------------------------------------------------------------- the command


def test_refuses_a_topic_not_compacted_unless_forced(tmp_path):
    log = Log(tmp_path / "ld", {**SMALL, "cleanup.policy": "delete"})
    for i in range(40):
        log.data([(b"k", b"v%d" % i)])
    root = log.close()
    r = run_kltool("compact", root)
    assert r.code == 3 and "cleanup.policy=delete" in r.err and "--force" in r.err
    assert run_kltool("compact", root, "--force", "--no-backup").code == 0
    assert len(read_records(log.dir)) < 40


def test_damaged_segment_is_refused_and_nothing_changes(tmp_path):
    root = versions_log(tmp_path).close()
    seg = root / "t-0" / f"{0:020d}.log"
    data = bytearray(seg.read_bytes())
    data[200] ^= 0xFF
    seg.write_bytes(bytes(data))
    files = sorted(p.name for p in (root / "t-0").iterdir())
    r = run_kltool("compact", root)
    assert r.code == 2 and "verify --repair" in r.err and str(seg) in r.err and "Traceback" not in r.err
    assert sorted(p.name for p in (root / "t-0").iterdir()) == files
    assert not (root / "cleaner-offset-checkpoint").exists()


def test_damage_below_the_dirty_range_is_refused_and_no_cleaned_file_stays(tmp_path):
    log, root = cleaned_then_dirty(tmp_path)
    # a segment cleaned by the first pass: read again by the second, after its map
    seg = next(p for p in sorted(log.dir.glob("*.log")) if p.stat().st_size > 100)
    data = bytearray(seg.read_bytes())
    data[100] ^= 0xFF
    seg.write_bytes(bytes(data))
    files = sorted(p.name for p in log.dir.iterdir())
    r = run_kltool("compact", root)
    assert r.code == 2 and "verify --repair" in r.err and str(seg) in r.err
    assert sorted(p.name for p in log.dir.iterdir()) == files


def test_a_stale_offset_index_does_not_stop_the_map(tmp_path):
    log, root = cleaned_then_dirty(tmp_path)
    bases = segment_bases(log.dir)
    first_dirty = int((root / "cleaner-offset-checkpoint").read_text().split()[-1])
    dirty = max(b for b in bases if b <= first_dirty)
    idx = log.dir / f"{dirty:020d}.index"
    idx.write_bytes(struct.pack(">ii", first_dirty - dirty, 7))  # an entry pointing inside a batch
    assert compact(root).partitions[0].groups


def test_unfinished_swap_is_refused(tmp_path):
    root = versions_log(tmp_path).close()
    (root / "t-0" / f"{0:020d}.log.cleaned").write_bytes(b"")
    r = run_kltool("compact", root)
    assert r.code == 3 and "verify --repair" in r.err


def test_dry_run_changes_nothing_and_its_json_plan_is_stable(tmp_path):
    root = versions_log(tmp_path).close()
    files = {p.name: p.read_bytes() for p in (root / "t-0").iterdir()}
    a = run_kltool("compact", "--json", root, "--dry-run", "--now", str(T0))
    b = run_kltool("compact", "--json", root, "--dry-run", "--now", str(T0))
    assert a.code == b.code == 1
    strip = [{k: v for k, v in x.items() if k != "seconds"} for x in a.json()]
    assert strip == [{k: v for k, v in x.items() if k != "seconds"} for x in b.json()]
    assert {p.name: p.read_bytes() for p in (root / "t-0").iterdir()} == files
    kinds = [x["type"] for x in a.json()]
    assert kinds[0] == "partition_compaction" and kinds[-1] == "summary" and "action" in kinds
    pc = a.json()[0]
    assert pc["settings"]["cleanup.policy"] == {"value": "compact", "source": "kltool-topics.json"}
    assert pc["settings"]["delete.retention.ms"] == {"value": "86400000", "source": "Kafka default"}
    assert pc["records_kept"] + pc["records_removed"] == pc["records_read"]


def test_config_option_overrides_and_the_plan_says_so(tmp_path):
    root = versions_log(tmp_path).close()
    r = run_kltool("compact", "--json", root, "--dry-run", "--config", "delete.retention.ms=5")
    assert r.json()[0]["settings"]["delete.retention.ms"] == {"value": "5", "source": "--config"}
    bad = run_kltool("compact", root, "--config", "delete.retention.ms=-4")
    assert bad.code == 2 and "delete.retention.ms" in bad.err


def test_backup_and_restore_put_the_old_segments_back(tmp_path):
    root = versions_log(tmp_path).close()
    files = {p.name: p.read_bytes() for p in (root / "t-0").iterdir()}
    r = run_kltool("compact", root)
    assert r.code == 0 and "kltool restore" in r.out
    assert {p.name: p.read_bytes() for p in (root / "t-0").iterdir()} != files
    assert run_kltool("restore", str(root) + ".kltool-backup").code == 0
    # every old file is back as it was, and the new segment's files (created by the run) are gone
    assert {p.name: p.read_bytes() for p in (root / "t-0").iterdir()} == files
    assert not (root / "cleaner-offset-checkpoint").exists()
    (run,) = (root.parent / (root.name + ".kltool-backup")).iterdir()
    assert run.name.startswith("compact-")
    assert run_kltool("verify", root).code == 0


def test_restore_round_trips_a_compaction_byte_for_byte(tmp_path):
    """The whole log dir (every partition's files, the checkpoints) as it was, after several groups."""
    root = versions_log(tmp_path).close()

    def tree():
        return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}

    before = tree()
    r = run_kltool("compact", "--json", root, "--config", "segment.bytes=600")
    assert r.code == 0
    assert any(d.get("op") == "create" and d["file"].endswith(".log.cleaned") for d in r.json())
    assert tree() != before
    back = run_kltool("restore", str(root) + ".kltool-backup")
    assert back.code == 0 and "created by the compaction" in back.out
    assert tree() == before


def test_restore_keeps_a_created_file_that_changed_since(tmp_path):
    root = versions_log(tmp_path).close()
    assert run_kltool("compact", root).code == 0
    seg = sorted((root / "t-0").glob("*.log"))[0]
    with open(seg, "ab") as f:
        f.write(b"x")
    back = run_kltool("restore", str(root) + ".kltool-backup")
    assert back.code != 0 and "changed since the compaction" in back.err


def test_lock_held_by_a_live_process_is_refused(tmp_path):
    import subprocess
    import sys

    root = versions_log(tmp_path).close()
    (root / ".lock").touch()
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl,os,sys,time; fd=os.open(sys.argv[1], os.O_RDWR); "
                               "fcntl.lockf(fd, fcntl.LOCK_EX); print('x', flush=True); time.sleep(30)",
                               str(root / ".lock")], stdout=subprocess.PIPE)
    try:
        holder.stdout.readline()
        r = run_kltool("compact", root)
        assert r.code == 3
        dry = run_kltool("compact", root, "--dry-run")
        assert dry.code == 1 and "planning only" in dry.err
    finally:
        holder.kill()
        holder.wait()


def test_help_has_examples():
    r = run_kltool("compact", "--help")
    assert r.code == 0 and "Examples:" in r.out and "--dry-run" in r.out and "kltool restore" in r.out


def test_json_summary_counts(tmp_path):
    root = versions_log(tmp_path).close()
    r = run_kltool("compact", "--json", root, "--no-backup")
    s = r.json()[-1]
    assert s["type"] == "summary" and s["partitions_cleaned"] == 1 and s["applied"] == s["actions"] > 0
    assert json.dumps(s)


def test_a_topic_not_compacted_is_refused_once_not_per_partition():
    import re

    from .conftest import FIXTURES

    r = run_kltool("compact", FIXTURES / "real" / "connect-spooldir-2019-zk", "--dry-run")
    topics = re.findall(r"connect-spooldir-2019-zk/(\S+)-\d+: .*never compacts", r.err)
    assert len(topics) == len(set(topics)) > 1
    assert "topic _confluent-metrics (12 partitions): cleanup.policy=delete" in r.err


def test_dirty_ratio_is_reported_as_the_broker_computes_it(tmp_path):
    log = versions_log(tmp_path)
    root = log.close()
    pc = cp.plan_compaction(open_paths([str(root)]), cp.Policy(now=T0)).partitions[0]
    assert pc.dirty_ratio == 1.0 and pc.to_json()["broker_would_clean"] is True  # nothing clean yet
    compact(root)
    log.reopen()
    for i in range(20):
        log.data([(b"k%d" % (i % 5), b"w%d" % i)])
    log.close()
    segs = sorted((int(p.name.split(".")[0]), p.stat().st_size) for p in log.dir.glob("*.log"))
    first_dirty = int((root / "cleaner-offset-checkpoint").read_text().split()[-1])
    clean = sum(sz for b, sz in segs if b < first_dirty)
    dirty = sum(sz for b, sz in segs[:-1] if b >= max(b for b, _ in segs if b <= first_dirty))
    pc = cp.plan_compaction(open_paths([str(root)]), cp.Policy(now=T0, config={"min.cleanable.dirty.ratio": "0.99"}))
    p = pc.partitions[0]
    assert p.dirty_ratio == pytest.approx(dirty / (clean + dirty)) and 0 < p.dirty_ratio < 0.99
    assert p.to_json()["broker_would_clean"] is False and p.groups  # reported, not required to act


def test_the_new_index_is_written_as_kafka_4_4_appends_batch_by_batch(tmp_path):
    """Kafka 4.4's ``LogSegment.append`` indexes the appended batches one by one (tests/broker/
    test_broker_compact.py showed it; the per-append rule of earlier versions gave one entry per read buffer):
    from an empty segment that is recovery's rule, so the indexes equal a rebuild."""
    from kltool.format.index import parse_offset_index
    from kltool.storage.index_builder import IndexBuilder, rebuild_indexes

    log = versions_log(tmp_path, keys=40, n=200)
    root = log.close()
    bases = segment_bases(log.dir)
    compact(root, config={"segment.bytes": "100000", "index.interval.bytes": "100"})
    out = [h for h, _ in read_batches(log.dir) if h.base_offset < bases[-1]]
    index = parse_offset_index((log.dir / f"{0:020d}.index").read_bytes(), 0)
    # the sources are far below the read buffer: the per-append rule had one possible entry per source segment
    per_append = IndexBuilder(0, 100)
    for lo, hi in zip(bases, bases[1:], strict=False):
        chunk = [h for h in out if lo <= h.base_offset < hi]
        if chunk:
            per_append.on_append(chunk[0].position, sum(h.size for h in chunk), max(h.last_offset for h in chunk),
                                 max(h.max_timestamp for h in chunk),
                                 max(chunk, key=lambda h: (h.max_timestamp, -h.position)).last_offset)
    assert index != per_append.offset_entries and len(index) > len(bases)
    rebuilt = rebuild_indexes(0, out, index_interval_bytes=100)
    assert rebuilt == ((log.dir / f"{0:020d}.index").read_bytes(), (log.dir / f"{0:020d}.timeindex").read_bytes())
    assert run_kltool("verify", root).code == 0


def test_library_compact_plans_then_applies_and_restores(tmp_path):
    import kltool

    root = versions_log(tmp_path).close()
    files = {p.name: p.read_bytes() for p in (root / "t-0").iterdir()}
    logs = kltool.Logs(root)
    plan = logs.compact(now=T0 + 1000)
    assert plan.dry_run and plan.has_work and not plan.manifests
    assert {p.name: p.read_bytes() for p in (root / "t-0").iterdir()} == files  # a plan writes nothing
    seen = []
    plan = logs.compact(now=T0 + 1000, config={"delete.retention.ms": 0}, dry_run=False, on_action=seen.append)
    assert plan.partitions[0].settings["delete.retention.ms"] == {"value": "0", "source": "--config"}
    assert len(plan.manifests) == 1 and seen and all(a.applied for a in plan.actions)
    assert len(logs.partition("t", 0).segments) < len(files) // 3
    logs.restore(*plan.manifests, dry_run=False)
    assert {p.name: p.read_bytes() for p in (root / "t-0").iterdir()} == files
    assert kltool.compact(root, now=T0 + 1000).has_work
