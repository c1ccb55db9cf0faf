"""Retention on log dirs written by ``kltool create --config`` and ``kltool append``: known timestamps and
sizes, the segments Kafka's rules pick, the checkpoint, verify after, and appending after a roll."""

from __future__ import annotations

import json

from kltool.format.checkpoints import parse_offset_checkpoint

from .test_retention import DAY, WEEK, deleted_segments, findings, logs, state, verify_errors

T0 = 1_700_000_000_000
MIN = 60_000
BATCH = 121  # one record (key "k00", 50-byte value) per batch: 121 bytes with its 12-byte log overhead


def jsonl(records) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def make(kl, ld, *config, records=20, partitions=2, step=10 * MIN, ts=None):
    """Topic ``ev`` with five 121-byte batches a segment (segment.bytes = 5 x 121): records 0..19 at
    T0 + i x ``step`` (or ``ts(i)``) in partition 0, so segments 0, 5, 10 and the active 15; partition 1
    stays empty."""
    r = kl("create", ld, "ev", "--partitions", partitions, "--config", f"segment.bytes={5 * BATCH}", *config)
    assert r.code == 0, r
    recs = [{"key": f"k{i:02d}", "value": "v" * 50, "timestamp": T0 + i * step if ts is None else ts(i)}
            for i in range(records)]
    r = kl("append", ld, "ev", "--partition", "0", "--batch-records", "1", stdin=jsonl(recs))
    assert r.code == 0, r
    pdir = ld / "ev-0"
    assert logs(pdir) == [0, 5, 10, 15]
    assert {p.stat().st_size for p in pdir.glob("*.log")} == {5 * BATCH}
    return pdir


def test_time_retention_from_the_stored_topic_config(kl, tmp_path):
    ld = tmp_path / "ld"
    pdir = make(kl, ld, "--config", f"retention.ms={100 * MIN}")
    before = state(ld)
    now = T0 + 200 * MIN
    r = kl("--json", "retention", ld, "--now", now, "--dry-run")
    # largest timestamps 40, 90, 140, 190 min → now - largest 160, 110, 60, 10 min; retention 100 min
    assert r.code == 1 and deleted_segments(r) == [("ev", 0, "retention_ms"), ("ev", 5, "retention_ms")]
    part = next(d for d in r.json() if d["type"] == "partition_retention")
    assert part["retention_ms"] == 100 * MIN and part["new_log_start_offset"] == 10
    assert part["segment_bytes"] == 10 * BATCH
    assert state(ld) == before

    r = kl("retention", ld, "--now", now)
    assert r.code == 0, r
    assert logs(pdir) == [10, 15]
    assert parse_offset_checkpoint((ld / "log-start-offset-checkpoint").read_text()) == {("ev", 0): 10}
    assert sorted(p.name for p in pdir.glob("*.snapshot")) == [f"{o:020d}.snapshot" for o in (10, 15, 20)]
    assert verify_errors(kl, ld) == 0
    off = kl("--json", "offsets", ld, "--partition", "0", "--earliest", "--count", "--time", T0)
    d = off.json()[0]
    assert (d["log_start_offset"], d["records"], d["offset"]) == (10, 10, 10)
    assert kl("retention", ld, "--now", now, "--dry-run").code == 0  # nothing left to do


def test_size_retention(kl, tmp_path):
    ld = tmp_path / "ld"
    make(kl, ld)
    # 4 x 605 bytes; limit 2.5 segments: diff 1.5 segments → only the oldest goes
    r = kl("--json", "retention", ld, "--retention-bytes", int(12.5 * BATCH), "--now", T0 + DAY, "--dry-run")
    assert deleted_segments(r) == [("ev", 0, "retention_bytes")]


def test_everything_expires_then_appending_goes_on(kl, tmp_path):
    ld = tmp_path / "ld"
    pdir = make(kl, ld)
    r = kl("--json", "retention", ld, *WEEK, "--now", T0 + 30 * DAY)
    assert [b for _t, b, _r in deleted_segments(r)] == [0, 5, 10, 15]
    assert logs(pdir) == [20] and (pdir / f"{20:020d}.log").stat().st_size == 0
    r = kl("append", ld, "ev", "--partition", "0", "--key", "late", "--value", "x", "--timestamp", T0 + 30 * DAY)
    assert r.code == 0, r
    d = kl("--json", "offsets", ld, "--partition", "0", "--earliest", "--latest", "--count").json()[0]
    assert (d["log_start_offset"], d["log_end_offset"], d["records"]) == (20, 21, 1)
    assert verify_errors(kl, ld) == 0


def test_compacted_topic_left_alone(kl, tmp_path):
    ld = tmp_path / "ld"
    make(kl, ld, "--config", "cleanup.policy=compact")
    r = kl("--json", "retention", ld, *WEEK, "--now", T0 + 30 * DAY, "--dry-run")
    assert r.code == 0 and deleted_segments(r) == []
    assert any(d["type"] == "note" and "cleanup.policy=compact" in d["message"] for d in r.json())


def test_non_monotonic_timestamps_block_deletion(kl, tmp_path):
    ld = tmp_path / "ld"
    # segment 5 holds records dated 20 days later than those around it (a producer's clock ran ahead)
    make(kl, ld, ts=lambda i: T0 + 20 * DAY if 5 <= i < 10 else T0 + i)
    r = kl("--json", "retention", ld, *WEEK, "--now", T0 + 25 * DAY, "--dry-run")
    # 7-day default: segment 0 (25 days old) goes; segment 5 (5 days) must stay, and the scan stops there
    # although segments 10 and 15 are 25 days old too
    assert deleted_segments(r) == [("ev", 0, "retention_ms")]
    (w,) = findings(r, "retention_blocked")
    assert w["file"].endswith(f"{5:020d}.log") and "2 later segment(s)" in w["message"]


def test_future_timestamp_is_reported(kl, tmp_path):
    ld = tmp_path / "ld"
    make(kl, ld, ts=lambda i: T0 + 40 * DAY if i == 15 else T0 + i)  # first of its segment: no time roll
    r = kl("--json", "retention", ld, *WEEK, "--now", T0 + 20 * DAY, "--dry-run")
    assert [b for _t, b, _r in deleted_segments(r)] == [0, 5, 10]
    assert [w["file"][-24:] for w in findings(r, "future_timestamp")] == [f"{15:020d}.log"]
