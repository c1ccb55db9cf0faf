"""kltool offsets and kltool.storage.offsets: every lookup equals a brute-force scan of every record."""

from __future__ import annotations

import builtins
import os
from pathlib import Path

import pytest

from kltool.errors import CorruptDataError
from kltool.format import decode_records
from kltool.format.checkpoints import encode_offset_checkpoint
from kltool.storage import offsets as offs
from kltool.storage import open_path
from kltool.storage.segment import Segment

from .conftest import FIXTURES
from .test_retention_build import T0, build_partition, set_mtime

# ------------------------------------------------------------------------------------------ brute force


def all_records(p, start_offset=None):
    """(offset, timestamp) of every record of every valid batch at or above the log start offset, in
    file order (control records included: the broker's timestamp search sees them too)."""
    lso = p.log_start_offset() if start_offset is None else start_offset
    out = []
    for seg in p.segments:
        for h in seg.batches(with_data=True):
            if not h.crc_valid:
                continue
            try:
                cols = decode_records(h, h.data)
            except CorruptDataError:
                continue
            out += [(o, t, h.is_control) for o, t in zip(cols.offsets, cols.timestamps, strict=True) if o >= lso]
    return out


def brute_time(recs, target):
    return next(((o, t) for o, t, _c in recs if t >= target), None)


def brute_max(recs):
    best = max((t for _o, t, _c in recs), default=-1)
    if best < 0:
        return None
    return next((o, t) for o, t, _c in recs if t == best)


def targets_for(recs, limit=40):
    ts = sorted({t for _o, t, _c in recs if t >= 0})
    if len(ts) > limit:
        ts = [ts[i * len(ts) // limit] for i in range(limit)] + [ts[-1]]
    out = {0, 1}
    for t in ts:
        out |= {t - 1, t, t + 1}
    if ts:
        out.add(ts[-1] + 1000)
    return sorted(out)


def fixture_partitions():
    ps = []
    for group in ("java-oracle", "real"):
        for d in sorted((FIXTURES / group).iterdir()):
            if d.is_dir():
                ps += [p for p in open_path(d).partitions if any(s.size for s in p.segments)]
    ps += [p for p in open_path(FIXTURES / "sample-logdir").partitions if any(s.size for s in p.segments)]
    return ps


FIXTURE_PARTITIONS = fixture_partitions()
IDS = [str(p.path.relative_to(FIXTURES)) for p in FIXTURE_PARTITIONS]


def check_partition(p):
    recs = all_records(p)
    for target in targets_for(recs):
        got = offs.offset_for_time(p, target)
        want = brute_time(recs, target)
        assert (None if got is None else (got.offset, got.timestamp)) == want, (p.path, target)
    got = offs.max_timestamp(p)
    assert (None if got is None else (got.offset, got.timestamp)) == brute_max(recs), p.path
    rc = offs.count_records(p)
    assert rc.records == sum(1 for _o, _t, c in recs if not c), p.path
    assert rc.stats.control_records == sum(1 for _o, _t, c in recs if c), p.path
    return recs


# ------------------------------------------------------------------------------------------- fixtures


def test_fixture_corpus_is_broad():
    assert len(FIXTURE_PARTITIONS) >= 40
    groups = {i.split("/")[1] for i in IDS if i.startswith("real/")}
    assert {"william0423-indexed-zk", "kafka2.7.1-compacted-zk", "connect-spooldir-2019-zk"} <= groups


@pytest.mark.parametrize("p", FIXTURE_PARTITIONS, ids=IDS)
def test_lookups_equal_brute_force_on_every_fixture(p):
    check_partition(p)


def test_real_broker_indexes_are_used(monkeypatch):
    """william0423's __consumer_offsets-28 has broker-written .index/.timeindex: the answer comes from a scan
    that starts at the index position, not at byte 0."""
    p = open_path(FIXTURES / "real/william0423-indexed-zk/__consumer_offsets-28").partitions[0]
    recs = all_records(p)
    o, t, _c = recs[6000]
    starts = []
    real_walk = Segment.walk
    monkeypatch.setattr(Segment, "walk", lambda self, **kw: (starts.append(kw.get("start", 0)), real_walk(self, **kw))[1])
    got = offs.offset_for_time(p, t)
    assert (got.offset, got.timestamp) == brute_time(recs, t)
    assert starts and starts[0] > 500_000  # seeked through the indexes


# ------------------------------------------------------------------------------------ built log dirs


def test_non_monotonic_timestamps_within_and_across_segments(tmp_path):
    segs = [
        [[T0 + 50, T0 + 10, T0 + 30], [T0 + 5]],           # max 50, out of order inside a batch
        [[T0 + 40, T0 + 90], [T0 + 20]],                   # max 90
        [[T0 + 60], [T0 + 70, T0 + 65], [T0 + 100]],       # max 100
        [[T0 + 1, T0 + 2]],                                # active, all older than before
    ]
    build_partition(tmp_path / "ld", "t", segs)
    p = open_path(tmp_path / "ld").partitions[0]
    recs = check_partition(p)
    assert brute_time(recs, T0 + 45) == (0, T0 + 50)
    assert (offs.offset_for_time(p, T0 + 55).offset, offs.offset_for_time(p, T0 + 95).offset) == (5, 10)
    assert offs.offset_for_time(p, T0 + 101) is None


def test_many_batches_with_sparse_indexes_and_non_monotonic_times(tmp_path):
    import random

    rnd = random.Random(7)
    # rising with jitter: the running maximum grows (so the time index has entries), but many records
    # are older than records before them
    segs = [[[T0 + 100 * (s * 120 + b) + rnd.randrange(-800, 800) for _ in range(rnd.randrange(1, 5))]
             for b in range(120)] for s in range(4)]
    build_partition(tmp_path / "ld", "t", segs, value_size=300)
    p = open_path(tmp_path / "ld").partitions[0]
    assert any(len(s.time_index()) > 5 for s in p.segments)
    check_partition(p)


@pytest.mark.parametrize("magic", [1, 2])
def test_log_append_time(tmp_path, magic):
    # LogAppendTime: every record's timestamp is its batch's append time, whatever the producer sent
    build_partition(tmp_path / "ld", "t", [[[1, 2, 3]] * 4, [[4, 5]] * 3], magic=magic,
                    log_append_time=lambda off: T0 + 1000 * off)
    p = open_path(tmp_path / "ld").partitions[0]
    recs = check_partition(p)
    assert {t for _o, t, _c in recs} == {T0 + 1000 * o for o in (0, 3, 6, 9, 12, 14, 16)}  # batch base offsets
    got = offs.offset_for_time(p, T0 + 3001)
    assert (got.offset, got.timestamp) == (6, T0 + 6000)


def test_v0_records_have_no_timestamp(tmp_path):
    build_partition(tmp_path / "ld", "t", [[3, 2], [1]], magic=0)
    p = open_path(tmp_path / "ld").partitions[0]
    assert offs.offset_for_time(p, 0) is None
    assert offs.max_timestamp(p) is None
    assert offs.count_records(p).records == 6


def test_log_start_offset_inside_a_segment(tmp_path):
    build_partition(tmp_path / "ld", "t", [[[T0 + i] for i in range(10)], [[T0 + 10 + i] for i in range(5)]])
    (tmp_path / "ld/log-start-offset-checkpoint").write_text(encode_offset_checkpoint({("t", 0): 4}))
    p = open_path(tmp_path / "ld").partitions[0]
    assert p.log_start_offset() == 4
    assert offs.offset_for_time(p, 0).offset == 4  # never below the log start offset
    assert offs.earliest(p).offset == 4 and offs.latest(p).offset == 15
    assert offs.count_records(p).records == 11
    check_partition(p)


def test_count_is_not_end_minus_start_after_compaction(tmp_path):
    # offsets 0, 2, 4, ... (a cleaner leaves gaps): 12 records in an offset span of 23
    pdir = tmp_path / "ld" / "t-0"
    pdir.mkdir(parents=True)
    from .test_retention_build import batch, write_segment

    write_segment(pdir, 0, [batch(o, [T0 + o, T0 + o + 1, T0 + o + 2], offset_step=2) for o in (0, 6, 12, 18)])
    p = open_path(tmp_path / "ld").partitions[0]
    rc = offs.count_records(p)
    assert (rc.records, rc.offset_span) == (12, 23)
    check_partition(p)


def test_untrimmed_time_index_of_a_closed_segment(tmp_path):
    """A .timeindex copied from a running broker ends in zeros: the last real entry (and the batches
    after it) count, not the zero entry the broker would read."""
    pdir = build_partition(tmp_path / "ld", "t", [[[T0 + 5]] * 3, [[T0 + 9]]])
    ti = pdir / "00000000000000000000.timeindex"
    ti.write_bytes(ti.read_bytes() + bytes(12 * 1000))
    p = open_path(tmp_path / "ld").partitions[0]
    tail = p.segments[0].time_index_tail()
    assert tail.raw == (0, 0) and tail.last == (T0 + 5, 0) and tail.untrimmed
    assert p.segments[0].max_timestamp_so_far == T0 + 5
    check_partition(p)


def test_segment_without_time_index_is_scanned_not_dated_by_mtime(tmp_path):
    pdir = build_partition(tmp_path / "ld", "t", [[[T0 + 5]] * 3, [[T0 + 9]]], indexes=False)
    set_mtime(pdir / "00000000000000000000.log", T0 + 10**9)
    p = open_path(tmp_path / "ld").partitions[0]
    seg = p.segments[0]
    assert (seg.max_timestamp_so_far, seg.max_timestamp_source) == (T0 + 5, "batches")
    assert seg.largest_timestamp == T0 + 5  # records first, the mtime only without any
    check_partition(p)


def test_a_lookup_reads_only_a_few_files(tmp_path, monkeypatch):
    n = 300
    build_partition(tmp_path / "ld", "t", [[[T0 + 10 * (s * 20 + b)] for b in range(20)] for s in range(n)])
    p = open_path(tmp_path / "ld").partitions[0]
    assert len(p.segments) == n  # the directory listing is done before counting
    opened: list[str] = []
    real_open, real_os_open = builtins.open, os.open
    monkeypatch.setattr(builtins, "open", lambda f, *a, **k: (opened.append(str(f)), real_open(f, *a, **k))[1])
    monkeypatch.setattr(os, "open", lambda f, *a, **k: (opened.append(str(f)), real_os_open(f, *a, **k))[1])
    target = T0 + 10 * (150 * 20 + 7)
    got = offs.offset_for_time(p, target)
    assert (got.offset, got.timestamp) == (150 * 20 + 7, target)
    logs = {Path(f).name for f in opened if f.endswith(".log")}
    indexes = {Path(f).name for f in opened if f.endswith(".index")}
    tails = {Path(f).name for f in opened if f.endswith(".timeindex")}
    # the first lookup reads the 12-byte tail of each segment up to the target, and checks that entry
    # against the batch it names (a damaged .timeindex must not hide a segment): the last entry of the
    # .index and a batch or two of the .log of each
    upto = {f"{s * 20:020d}" for s in range(151)}
    assert {n.split(".")[0] for n in logs} == upto and {n.split(".")[0] for n in indexes} <= upto
    assert len(tails) == 151
    # later lookups on the same partition use the largest timestamps read before (the broker keeps them in
    # memory): the target segment's .timeindex, .index and .log only
    opened.clear()
    target = T0 + 10 * (120 * 20 + 3)
    got = offs.offset_for_time(p, target)
    monkeypatch.undo()
    assert (got.offset, got.timestamp) == (120 * 20 + 3, target)
    seen = {Path(f).name for f in opened}
    assert f"{120 * 20:020d}.log" in seen and seen <= {f"{120 * 20:020d}.{x}" for x in ("log", "index", "timeindex")}
    p.refresh()  # forgets them with the segment objects
    assert offs.offset_for_time(p, target).offset == 120 * 20 + 3


# ------------------------------------------------------------------------------------------------- CLI


def test_cli_json(kl):
    ld = FIXTURES / "real/william0423-indexed-zk"
    r = kl("--json", "offsets", ld, "--topic", "debug_topic", "--time", "2018-08-15T02:30:00Z", "--earliest",
           "--latest", "--count", "--max-timestamp")
    assert r.code == 0, r
    d, s = r.json()
    assert d == {"type": "offsets", "topic": "debug_topic", "partition": 0, "log_start_offset": 0, "log_end_offset": 40,
                 "time": 1534300200000, "offset": 30, "timestamp": 1534300904967, "leader_epoch": 0,
                 "max_timestamp": 1534300904976, "max_timestamp_offset": 39, "records": 40, "control_records": 0,
                 "batches": 3, "offset_span": 40}
    assert s == {"type": "summary", "partitions": 1, "records": 40, "found": 1}


def test_cli_text_and_defaults(kl):
    ld = FIXTURES / "real/kafka2.7.1-compacted-zk"
    r = kl("offsets", ld, "--topic", "__consumer_offsets", "--partition", "28")
    assert r.code == 0, r
    assert "log start" in r.out and "log end" in r.out
    r = kl("offsets", ld, "--topic", "__consumer_offsets", "--partition", "28", "--count")
    assert "2 records" in r.out.splitlines()[-1]  # offset 0 was compacted away: 2 records, span 3


@pytest.mark.parametrize("special,field", [("-1", "log_end_offset"), ("-2", "log_start_offset"),
                                          ("-3", "max_timestamp_offset")])
def test_cli_special_times(kl, special, field):
    r = kl("--json", "offsets", FIXTURES / "real/william0423-indexed-zk/debug_topic-0", "--time", special)
    assert r.code == 0, r
    assert field in r.json()[0]


def test_cli_no_match_and_errors(kl):
    p = FIXTURES / "real/william0423-indexed-zk/debug_topic-0"
    r = kl("--json", "offsets", p, "--time", "2030-01-01")
    assert r.code == 0 and r.json()[0]["offset"] is None
    for args in (("--time", "yesterday"), ("--time", "-7")):
        r = kl("offsets", p, *args)
        assert r.code == 2 and r.err.startswith("kltool: error:") and len(r.err.strip().splitlines()) == 1, r
    r = kl("offsets", p.parent / "meta.properties")
    assert r.code == 2 and "not in a partition directory" in r.err


# ------------------------------------------------------------------------------ written by kltool append


def _jsonl(records) -> str:
    import json

    return "".join(json.dumps(r) + "\n" for r in records)


def test_append_log_append_time_topic(kl, tmp_path):
    ld = tmp_path / "ld"
    assert kl("create", ld, "lat", "-p", "1", "--config", "message.timestamp.type=LogAppendTime",
              "--config", "segment.bytes=1200").code == 0
    for k in range(6):  # six appends, each at its own broker time; the producers' timestamps are ignored
        recs = [{"key": f"k{k}{i}", "value": "x" * 40, "timestamp": T0 - 10**6 * i} for i in range(5)]
        r = kl("append", ld, "lat", "-p", "0", "--batch-records", "2", "--append-time", T0 + 1000 * k,
               stdin=_jsonl(recs))
        assert r.code == 0, r
    p = open_path(ld).partitions[0]
    assert len(p.segments) > 2
    recs = check_partition(p)
    assert {t for _o, t, _c in recs} == {T0 + 1000 * k for k in range(6)}
    assert (offs.offset_for_time(p, T0 + 2500).offset, offs.max_timestamp(p).offset) == (15, 25)


def append_jittered(kl, ld, topic: str, *, records: int, jitter: int, seed: int, segment_bytes: int,
                    index_interval_bytes: int) -> list[int]:
    """Create ``topic`` (one partition) in ``ld`` and append ``records`` records, three a batch, whose create
    times step by a second from T0 give or take up to ``jitter`` ms (so neither monotonic within a
    segment nor across them); returns their timestamps."""
    import random

    rnd = random.Random(seed)
    assert kl("create", ld, topic, "-p", "1", "--config", f"segment.bytes={segment_bytes}",
              "--config", f"index.interval.bytes={index_interval_bytes}").code == 0
    recs = [{"key": f"k{i}", "value": "x" * 30, "timestamp": T0 + 1000 * i + rnd.randrange(-jitter, jitter)}
            for i in range(records)]
    assert kl("append", ld, topic, "-p", "0", "--batch-records", "3", stdin=_jsonl(recs)).code == 0
    return [r["timestamp"] for r in recs]


def test_append_non_monotonic_create_time(kl, tmp_path):
    ld = tmp_path / "ld"
    append_jittered(kl, ld, "nm", records=400, jitter=20_000, seed=3, segment_bytes=4000, index_interval_bytes=300)
    p = open_path(ld).partitions[0]
    assert len(p.segments) > 3 and any(len(s.time_index()) > 3 for s in p.segments)
    check_partition(p)


def test_all_zero_time_index_of_v0_data_means_no_timestamp(tmp_path):
    pdir = build_partition(tmp_path / "ld", "t", [[2], [1]], magic=0, indexes=False)
    (pdir / "00000000000000000000.timeindex").write_bytes(bytes(12 * 50))  # preallocated, never written
    p = open_path(tmp_path / "ld").partitions[0]
    seg = p.segments[0]
    assert (seg.max_timestamp_so_far, seg.max_timestamp_source) == (-1, "none")
    assert seg.largest_timestamp == int(seg.log_path.stat().st_mtime * 1000)  # Kafka's largestTimestamp


def test_a_segment_reads_its_largest_timestamp_once(tmp_path):
    """Like LogSegment.maxTimestampSoFar, kept per Segment object: every user (offsets, dump --from-time
    through read.segments_for_time, info, retention) asks the segment, and the files are read once."""
    from kltool.storage.read import segments_for_time

    pdir = build_partition(tmp_path / "ld", "t", [[[T0 + 5]] * 3, [[T0 + 9]]])
    p = open_path(tmp_path / "ld").partitions[0]
    first = p.segments[0]
    assert [s.active for s in p.segments] == [False, True]
    assert (first.max_timestamp_so_far, first.max_timestamp_source) == (T0 + 5, "timeindex")
    ti = pdir / "00000000000000000000.timeindex"
    ti.write_bytes(b"")  # the segment already knows its largest timestamp: not read again
    assert segments_for_time(p, T0 + 5)[0] is first
    assert offs.offset_for_time(p, T0 + 5).offset == 0
    p.refresh()  # new Segment objects read the files again: no index, so the batches
    assert (p.segments[0].max_timestamp_so_far, p.segments[0].max_timestamp_source) == (T0 + 5, "batches")


def test_the_active_segment_tops_up_its_time_index_with_a_scan(tmp_path):
    """The active segment's last time-index entry is only written on roll or close: the batches after
    the entry it has count too; a closed segment's index is trusted (the broker's view)."""
    from kltool.format.index import encode_time_index

    pdir = build_partition(tmp_path / "ld", "t", [[[T0 + 1], [T0 + 9]]])
    (pdir / "00000000000000000000.timeindex").write_bytes(encode_time_index([(T0 + 1, 0)], 0))
    p = open_path(tmp_path / "ld").partitions[0]
    seg = p.segments[0]
    assert seg.active
    assert (seg.max_timestamp_so_far, seg.max_timestamp_source) == (T0 + 9, "timeindex+batches")
    closed = Segment(seg.directory, 0, active=False)
    assert (closed.max_timestamp_so_far, closed.max_timestamp_source) == (T0 + 1, "timeindex")
    closed.active = True  # becoming active forgets the closed segment's answer
    assert closed.max_timestamp_so_far == T0 + 9
