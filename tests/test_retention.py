"""kltool retention: the segments Kafka's rules pick (reference §9), the checkpoints, dry runs, backups,
the broker lock, warnings, and runs killed at every step."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kltool.format.checkpoints import (
    encode_offset_checkpoint,
    parse_leader_epoch_checkpoint,
    parse_offset_checkpoint,
)
from kltool.format.snapshot import encode_snapshot
from kltool.storage.change.retention import truncate_epochs_from_start
from kltool.storage.partition import Partition
from kltool.storage.topic_config import save_topic_entry

from .conftest import run_kltool
from .test_retention_build import T0, H, build_partition, set_mtime

DAY = 24 * H
# Kafka's default retention.ms (7 days): retention applies only limits given or stored, so the tests that
# pinned the default give it
WEEK = ("--retention-ms", "604800000")


# ------------------------------------------------------------------------------------------------ helpers


def state(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (but the broker's .lock) with its content."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != ".lock"}


def logs(pdir: Path) -> list[int]:
    return sorted(int(p.name.split(".")[0]) for p in pdir.glob("*.log"))


def lso_checkpoint(ld: Path) -> dict:
    return parse_offset_checkpoint((ld / "log-start-offset-checkpoint").read_text())


def epochs(pdir: Path) -> list[tuple[int, int]]:
    return parse_leader_epoch_checkpoint((pdir / "leader-epoch-checkpoint").read_text())


def verify_errors(kl, ld: Path) -> int:
    r = kl("--json", "verify", ld)
    return r.json()[-1]["errors"]


def retention(kl, ld, *args):
    return kl("--json", "retention", ld, *args)


def findings(r, kind=None):
    return [d for d in r.json() if d["type"] == "finding" and (kind is None or d["kind"] == kind)]


def deleted_segments(r) -> list[tuple[str, int, str]]:
    return [(d["topic"], d["base_offset"], d["reason"]) for d in r.json()
            if d["type"] == "action" and d["op"] == "delete" and d.get("kind") == "segment"]


@pytest.fixture
def four(tmp_path):
    """Segments 0 (records at T0, T0+1h), 2 (T0+2h), 3 (T0+3h) and the active 4 (T0+4h); log end 5."""
    ld = tmp_path / "ld"
    build_partition(ld, "t", [[[T0, T0 + H]], [[T0 + 2 * H]], [[T0 + 3 * H]], [[T0 + 4 * H]]])
    return ld


# ----------------------------------------------------------------------------------------- time retention


def test_time_retention_deletes_exactly_the_old_prefix(kl, four):
    ld, pdir = four, four / "t-0"
    before = state(ld)
    now = T0 + 5 * H
    r = retention(kl, ld, "--retention-hours", "2.5", "--now", now, "--dry-run")
    assert r.code == 1, r
    assert state(ld) == before  # a dry run changes nothing
    # now - largest: 4h, 3h, 2h, 1h; retention 2.5h → segments 0 and 2 go
    assert deleted_segments(r) == [("t", 0, "retention_ms"), ("t", 2, "retention_ms")]
    seg0 = next(d for d in r.json() if d.get("base_offset") == 0 and d["op"] == "delete")
    assert seg0 | {"file": None} == {
        "type": "action", "op": "delete", "file": None, "topic": "t", "partition": 0, "kind": "segment",
        "reason": "retention_ms", "base_offset": 0, "first_offset": 0, "last_offset": 1, "first_timestamp": T0,
        "largest_timestamp": T0 + H, "timestamp_source": "timeindex", "records": 2,
        "bytes": (pdir / "00000000000000000000.log").stat().st_size,
        "reclaimed_bytes": sum(p.stat().st_size for p in pdir.glob("00000000000000000000.*")), "applied": False}
    summary = r.json()[-1]
    assert summary["segments_deleted"] == 2 and summary["records_deleted"] == 3 and summary["dry_run"]

    r = retention(kl, ld, "--retention-hours", "2.5", "--now", now)
    assert r.code == 0, r
    assert all(d["applied"] for d in r.json() if d["type"] == "action")
    assert logs(pdir) == [3, 4]
    assert not list(pdir.glob("*.deleted")) and not list(pdir.glob("00000000000000000000.*"))
    # the log start offset is the first segment's base: like Kafka 4.4's checkpointLogStartOffsetsInDir, no entry
    assert lso_checkpoint(ld) == {}
    assert Partition(pdir).log_start_offset() == 3
    assert epochs(pdir) == [(0, 3)]
    assert verify_errors(kl, ld) == 0
    r = retention(kl, ld, "--retention-hours", "2.5", "--now", now, "--dry-run")
    assert r.code == 0 and deleted_segments(r) == []  # converged


def test_non_monotonic_timestamps_block_deletion(kl, tmp_path):
    ld = tmp_path / "ld"
    build_partition(ld, "t", [[[T0]], [[T0 + 4 * H]], [[T0 + H]], [[T0 + 2 * H]], [[T0 + 4 * H]]])
    r = retention(kl, ld, "--retention-hours", "2.5", "--now", T0 + 5 * H, "--dry-run")
    # segment 1's largest timestamp (4h) is within retention: the scan stops there although 2 and 3 are older
    assert deleted_segments(r) == [("t", 0, "retention_ms")]
    (w,) = findings(r, "retention_blocked")
    assert w["file"].endswith("00000000000000000001.log") and "2 later segment(s)" in w["message"]


def test_future_and_zero_timestamps_are_reported(kl, tmp_path):
    ld = tmp_path / "ld"
    build_partition(ld, "t", [[[0, 0]], [[T0 + 10 * DAY]], [[T0]]])
    r = retention(kl, ld, *WEEK, "--now", T0, "--dry-run")
    assert deleted_segments(r) == [("t", 0, "retention_ms")]  # timestamp 0 is 53 years old
    assert [w["file"][-24:] for w in findings(r, "zero_timestamp")] == ["00000000000000000000.log"]
    assert [w["file"][-24:] for w in findings(r, "future_timestamp")] == ["00000000000000000002.log"]


def test_untrimmed_time_index_the_broker_would_read_as_zero(kl, tmp_path):
    ld = tmp_path / "ld"
    pdir = build_partition(ld, "t", [[[T0 + H]], [[T0 + 2 * H]]])
    ti = pdir / "00000000000000000000.timeindex"
    ti.write_bytes(ti.read_bytes() + bytes(12 * 100))  # copied from a running broker: preallocated zeros
    r = retention(kl, ld, *WEEK, "--now", T0 + 3 * H, "--dry-run")
    assert r.code == 0 and deleted_segments(r) == []  # kltool reads the real largest timestamp
    (w,) = findings(r, "broker_timestamp_differs")
    assert "zero-filled" in w["message"] and "delete it at once" in w["message"]


def test_no_timestamps_falls_back_to_mtime_with_a_warning(kl, tmp_path):
    ld = tmp_path / "ld"
    pdir = build_partition(ld, "t", [[2], [2], [1]], magic=0)
    set_mtime(pdir / "00000000000000000000.log", T0)
    set_mtime(pdir / "00000000000000000002.log", T0 + 6 * DAY)
    set_mtime(pdir / "00000000000000000004.log", T0 + 6 * DAY)
    r = retention(kl, ld, *WEEK, "--now", T0 + 8 * DAY, "--dry-run")
    assert deleted_segments(r) == [("t", 0, "retention_ms")]
    assert len(findings(r, "no_timestamp")) == 3
    seg = next(d for d in r.json() if d.get("kind") == "segment")
    assert seg["timestamp_source"] == "mtime" and seg["largest_timestamp"] == T0


# ----------------------------------------------------------------------------------------- size retention


@pytest.mark.parametrize("limit,expected", [
    ("2.5", [0]),         # diff 1.5 S: one segment (1.5 - 1 >= 0), the next would leave less than the limit
    ("2", [0, 1]),        # diff 2 S: exactly two
    ("1", [0, 1, 2]),
    ("4", []),            # size == limit: diff 0, no segment fits
    ("4.01", []),         # size < limit: nothing to do
])
def test_size_retention(kl, tmp_path, limit, expected):
    ld = tmp_path / "ld"
    pdir = build_partition(ld, "t", [[[T0]]] * 4)  # four segments of one equal-sized batch
    size = (pdir / "00000000000000000000.log").stat().st_size
    assert {p.stat().st_size for p in pdir.glob("*.log")} == {size}
    r = retention(kl, ld, "--retention-bytes", str(int(float(limit) * size)), "--now", T0 + H, "--dry-run")
    assert [b for _t, b, reason in deleted_segments(r)] == expected
    assert all(reason == "retention_bytes" for *_x, reason in deleted_segments(r))
    assert r.code == (1 if expected else 0)


def test_size_and_time_together_size_first(kl, tmp_path):
    ld = tmp_path / "ld"
    pdir = build_partition(ld, "t", [[[T0]], [[T0]], [[T0 + 5 * DAY]], [[T0 + 5 * DAY]]])
    size = (pdir / "00000000000000000000.log").stat().st_size
    r = retention(kl, ld, "--retention-bytes", str(3 * size), *WEEK, "--now", T0 + 8 * DAY, "--dry-run")
    assert deleted_segments(r) == [("t", 0, "retention_bytes"), ("t", 1, "retention_ms")]


@pytest.mark.parametrize("backup", [True, False])
def test_a_last_segment_without_records_whose_name_the_roll_reuses(kl, tmp_path, backup):
    """Found by the adversary campaign (seed 101: a fetched segment 313 whose only batch is torn): every segment
    goes and the empty segment is rolled at the log end, which is the deleted segment's own base offset. The roll
    wrote the new empty 313.log over it (backing the old one up as a rewrite), then the removal of the deleted
    segment's files took the new .log away: without a backup the partition was left with no .log (the broker
    would start it over at its log start checkpoint); with one, the backup of that removal held the empty file,
    so restore refused (sha256 mismatch). Now the roll's rewrite is the removal: one empty segment 313, verify
    clean, restore gives back every byte."""
    ld = tmp_path / "ld"
    pdir = build_partition(ld, "t", [[[T0]]])
    seg = pdir / "00000000000000000000.log"
    log = pdir / "00000000000000000313.log"
    torn = seg.read_bytes()[:-5]
    seg.unlink()
    for p in pdir.glob("00000000000000000000.*"):
        p.unlink()
    log.write_bytes(torn)
    for p in pdir.glob("*.snapshot"):
        p.unlink()
    before = state(ld)
    args = ["--backup-dir", tmp_path / "bk"] if backup else ["--no-backup"]
    r = retention(kl, ld, "--retention-bytes", "0", *args)
    assert r.code == 0, r
    assert deleted_segments(r) == [("t", 313, "retention_bytes")]
    assert log.exists() and log.stat().st_size == 0
    assert logs(pdir) == [313]
    assert verify_errors(kl, ld) == 0
    if backup:
        rs = kl("restore", tmp_path / "bk")
        assert rs.code == 0, rs
        assert state(ld) == before


# ------------------------------------------------------------------ only the limits asked for, backed up


def test_only_the_limits_given_apply_and_the_plan_says_where_each_comes_from(kl, tmp_path):
    ld = tmp_path / "ld"
    pdir = build_partition(ld, "t", [[[T0]], [[T0]], [[T0 + 5 * DAY]], [[T0 + 5 * DAY]]])
    size = (pdir / "00000000000000000000.log").stat().st_size
    # a size limit alone: Kafka's 7-day default must not delete segment 1 for its age
    r = retention(kl, ld, "--retention-bytes", str(3 * size), "--now", T0 + 30 * DAY, "--dry-run")
    assert deleted_segments(r) == [("t", 0, "retention_bytes")]
    (pp,) = [d for d in r.json() if d["type"] == "partition_retention"]
    assert (pp["retention_ms"], pp["retention_ms_source"], pp["retention_bytes"], pp["retention_bytes_source"]) == \
        (None, None, 3 * size, "command_line")
    text = kl("retention", ld, "--retention-bytes", str(3 * size), "--now", T0 + 30 * DAY, "--dry-run")
    assert f"t: no retention.ms, retention.bytes {3 * size} (command line)" in text.out
    # a limit stored for the topic applies, and the plan says so
    save_topic_entry(ld, "t", config={"retention.ms": str(6 * DAY)})
    r = retention(kl, ld, "--now", T0 + 10 * DAY, "--dry-run")
    assert deleted_segments(r) == [("t", 0, "retention_ms"), ("t", 1, "retention_ms")]
    (pp,) = [d for d in r.json() if d["type"] == "partition_retention"]
    assert (pp["retention_ms"], pp["retention_ms_source"], pp["retention_bytes_source"]) == \
        (6 * DAY, "topic_config", None)
    assert "t: retention.ms 518400000 (kltool-topics.json), no retention.bytes" in \
        kl("retention", ld, "--now", T0 + 10 * DAY, "--dry-run").out


@pytest.mark.parametrize("dry_run", [True, False])
def test_no_limit_given_or_stored_is_refused(kl, tmp_path, dry_run):
    ld = tmp_path / "ld"
    build_partition(ld, "t", [[[T0]], [[T0]]])
    before = state(ld)
    r = kl("retention", ld, "--now", T0 + 30 * DAY, *(["--dry-run"] if dry_run else []))
    assert r.code == 2 and r.err.count("\n") == 1, r
    for option in ("--retention-ms", "--retention-bytes", "--before-offset", "--offset-json-file", "--config"):
        assert option in r.err
    assert state(ld) == before and not (tmp_path / "ld.kltool-backup").exists()
    import kltool

    with pytest.raises(kltool.UsageError, match="no retention limit"):
        kltool.Logs(ld).retention(now=T0 + 30 * DAY)


def test_a_topic_without_limits_is_left_alone_beside_one_with(kl, tmp_path):
    ld = tmp_path / "ld"
    build_partition(ld, "t", [[[T0]], [[T0]]])
    build_partition(ld, "u", [[[T0]], [[T0]]])
    save_topic_entry(ld, "u", config={"retention.ms": str(DAY)})
    r = retention(kl, ld, "--now", T0 + 30 * DAY, "--dry-run")
    assert deleted_segments(r) == [("u", 0, "retention_ms"), ("u", 1, "retention_ms")]
    (note,) = [d for d in r.json() if d.get("kind") == "no_limit"]
    assert "topic t" in note["message"] and "left alone" in note["message"]


def test_what_retention_deletes_is_backed_up_and_restore_names_it(kl, four, tmp_path):
    before = state(four)
    r = kl("retention", four, "--retention-hours", "2.5", "--now", T0 + 5 * H)
    assert r.code == 0, r
    (m,) = (tmp_path / "ld.kltool-backup").glob("*/manifest.json")  # beside the log dir, as repair's
    assert m.parent.name.startswith("retention-") and json.loads(m.read_text())["command"] == "retention"
    assert f"retention: backup manifest {m} (undo: kltool restore {m})" in r.out
    assert logs(four / "t-0") == [3, 4]
    cp = four / "log-start-offset-checkpoint"
    written = cp.read_bytes()
    cp.write_bytes(b"0\n1\nt 0 1\n")  # changed since: restore refuses, naming the retention (not a repair)
    rs = kl("restore", "--dry-run", m)
    assert rs.code == 3 and "changed since the retention" in rs.err and "repair" not in rs.err, rs
    cp.write_bytes(written)
    rs = kl("restore", m)
    assert rs.code == 0 and "repair" not in rs.out, rs
    assert state(four) == before


def test_no_backup_deletes_the_brokers_way(kl, four, tmp_path):
    assert kl("retention", four, "--retention-hours", "2.5", "--now", T0 + 5 * H, "--no-backup",
              "--backup-dir", tmp_path / "bk").code == 2
    r = kl("retention", four, "--retention-hours", "2.5", "--now", T0 + 5 * H, "--no-backup")
    assert r.code == 0, r
    assert logs(four / "t-0") == [3, 4] and not (tmp_path / "ld.kltool-backup").exists()


# ------------------------------------------------------------------------------- the active segment, roll


def test_all_segments_expire_roll_like_the_broker(kl, tmp_path):
    ld = tmp_path / "ld"
    pdir = build_partition(ld, "t", [[[T0]] * 3, [[T0 + H]] * 2])  # log end 5
    (pdir / "00000000000000000003.snapshot").write_bytes(encode_snapshot([]))
    (pdir / "00000000000000000005.snapshot").write_bytes(encode_snapshot([]))
    r = retention(kl, ld, *WEEK, "--now", T0 + 30 * DAY)
    assert r.code == 0, r
    roll = [d for d in r.json() if d["type"] == "action" and d["op"] == "roll"]
    assert [d["base_offset"] for d in roll] == [5]
    assert sorted(p.name for p in pdir.iterdir()) == [
        "00000000000000000005.index", "00000000000000000005.log", "00000000000000000005.snapshot",
        "00000000000000000005.timeindex", "leader-epoch-checkpoint"]
    assert (pdir / "00000000000000000005.log").stat().st_size == 0
    assert lso_checkpoint(ld) == {}  # the new segment's base is the log start offset: no entry, as the broker
    assert epochs(pdir) == [(0, 5)]
    assert verify_errors(kl, ld) == 0
    r = kl("--json", "offsets", ld, "--earliest", "--latest", "--count")
    assert r.json()[0] | {"type": None} == {"type": None, "topic": "t", "partition": 0, "log_start_offset": 5,
                                            "log_end_offset": 5, "records": 0, "control_records": 0, "batches": 0,
                                            "offset_span": 0}


def test_empty_active_segment_is_never_deleted_and_no_roll(kl, tmp_path):
    ld = tmp_path / "ld"
    pdir = build_partition(ld, "t", [[[T0]] * 2, []])
    r = retention(kl, ld, *WEEK, "--now", T0 + 30 * DAY)
    assert deleted_segments(r) == [("t", 0, "retention_ms")]
    assert not [d for d in r.json() if d.get("op") == "roll"]
    assert logs(pdir) == [2] and lso_checkpoint(ld) == {}  # 2 is the first segment's base: no entry


def test_high_watermark_keeps_what_is_above_it(kl, four):
    (four / "replication-offset-checkpoint").write_text(encode_offset_checkpoint({("t", 0): 3}))
    r = retention(kl, four, *WEEK, "--now", T0 + 30 * DAY, "--dry-run")
    # upper bounds 2, 3, 4, 5: only segments whose next base offset is <= the high watermark 3
    assert [b for _t, b, _r in deleted_segments(r)] == [0, 2]
    assert any(d["type"] == "note" and d["kind"] == "above_high_watermark" for d in r.json())


# --------------------------------------------------------------------------------- new log start offset


@pytest.fixture
def three(tmp_path):
    """Segments 0 (10 records), 10 (10) and 20 (5), one record per batch, timestamps T0 + offset seconds."""
    ld = tmp_path / "ld"
    build_partition(ld, "t", [[[T0 + 1000 * (s * 10 + i)] for i in range(10 if s < 2 else 5)] for s in range(3)])
    return ld


def test_before_offset_inside_a_segment_moves_the_start_without_cutting(kl, three):
    pdir = three / "t-0"
    size10 = (pdir / "00000000000000000010.log").stat().st_size
    r = retention(kl, three, "--before-offset", "15")
    assert r.code == 0, r
    assert deleted_segments(r) == [("t", 0, "log_start_offset")]  # only the delete-records rule (no time retention)
    assert logs(pdir) == [10, 20] and (pdir / "00000000000000000010.log").stat().st_size == size10
    assert lso_checkpoint(three) == {("t", 0): 15}
    assert epochs(pdir) == [(0, 15)]
    r = kl("--json", "offsets", three, "--earliest", "--count", "--time", "0")
    assert r.json()[0]["log_start_offset"] == 15 and r.json()[0]["records"] == 10 and r.json()[0]["offset"] == 15
    assert verify_errors(kl, three) == 0


def test_before_offset_at_a_segment_boundary_and_minus_one(kl, three):
    r = retention(kl, three, "--before-offset", "10", "--dry-run")
    assert deleted_segments(r) == [("t", 0, "log_start_offset")]
    r = retention(kl, three, "--before-offset", "-1")  # the high watermark (= log end 25): the last segment stays
    assert deleted_segments(r) == [("t", 0, "log_start_offset"), ("t", 10, "log_start_offset")]
    assert logs(three / "t-0") == [20] and lso_checkpoint(three) == {("t", 0): 25}
    assert verify_errors(kl, three) == 0


def test_before_offset_beyond_the_high_watermark_is_refused(kl, three):
    before = state(three)
    r = kl("retention", three, "--before-offset", "26")
    assert r.code == 2 and "high watermark 25" in r.err and len(r.err.strip().splitlines()) == 1
    assert state(three) == before


def test_before_time(kl, three):
    r = retention(kl, three, "--before-time", str(T0 + 12_500))
    assert deleted_segments(r) == [("t", 0, "log_start_offset")]
    assert lso_checkpoint(three) == {("t", 0): 13}  # the first record at or after the time


def test_before_offset_with_time_retention(kl, three):
    r = retention(kl, three, "--before-offset", "5", "--retention-ms", "10000", "--now", T0 + 30_000, "--dry-run")
    # the new start 5 frees nothing; time: segments 0 and 10 (largest T0+9s, T0+19s) are > 10 s old, 20 (T0+24s) not
    assert deleted_segments(r) == [("t", 0, "retention_ms"), ("t", 10, "retention_ms")]


# ------------------------------------------------------------------------------------------ topic config


def test_stored_topic_config_and_compacted_topics(kl, tmp_path):
    ld = tmp_path / "ld"
    for topic in ("keep", "short", "compacted", "both"):
        build_partition(ld, topic, [[[T0]], [[T0 + 2 * H]], [[T0 + 3 * H]]])
    save_topic_entry(ld, "short", config={"retention.ms": str(2 * H)})
    save_topic_entry(ld, "compacted", config={"cleanup.policy": "compact"})
    save_topic_entry(ld, "both", config={"cleanup.policy": "compact,delete", "retention.ms": str(2 * H)})
    r = retention(kl, ld, "--now", T0 + 4 * H + 1, "--dry-run")
    # retention 2h: now - largest = 4h, 2h+1ms, 1h+1ms → two segments; "keep" has the 7-day default
    assert sorted((t, b) for t, b, _r in deleted_segments(r)) == [("both", 0), ("both", 1), ("short", 0), ("short", 1)]
    notes = [d for d in r.json() if d["type"] == "note" and d["kind"] == "compacted"]
    assert len(notes) == 1 and "topic compacted (1 partitions)" in notes[0]["message"]
    # the command line overrides the stored setting
    r = retention(kl, ld, "--now", T0 + 4 * H + 1, "--retention-ms", str(3 * H), "--dry-run")
    assert sorted((t, b) for t, b, _r in deleted_segments(r)) == [("both", 0), ("keep", 0), ("short", 0)]


def test_internal_topics_are_compacted_by_default(kl, copy_fixture):
    ld = copy_fixture("real/william0423-indexed-zk")
    r = retention(kl, ld, *WEEK, "--now", "2030-01-01", "--dry-run")
    assert [t for t, _b, _r in deleted_segments(r)] == ["debug_topic"]
    assert any(d["type"] == "note" and "__consumer_offsets (50 partitions)" in d["message"] for d in r.json())


# ----------------------------------------------------------------------------------------- what bites people


def test_log_start_offset_beyond_the_log_end_is_reported_and_left_alone(kl, four):
    (four / "log-start-offset-checkpoint").write_text(encode_offset_checkpoint({("t", 0): 100}))
    r = retention(kl, four, *WEEK, "--now", T0 + 30 * DAY, "--dry-run")
    assert r.code == 0 and deleted_segments(r) == []
    (w,) = findings(r, "start_beyond_end")
    assert "deletes every segment" in w["message"] and w["offset"] == 100


def test_leftovers_are_finished(kl, four):
    pdir = four / "t-0"
    (pdir / "00000000000000000000.log").rename(pdir / "00000000000000000000.log.deleted")  # a half-done deletion
    (pdir / "00000000000000000002.snapshot.deleted").write_bytes(b"x")
    r = retention(kl, four, *WEEK, "--now", T0 + 5 * H, "--dry-run")
    assert r.code == 1
    left = sorted(Path(d["file"]).name for d in r.json() if d.get("kind") == "leftover")
    assert left == ["00000000000000000000.index", "00000000000000000000.log.deleted",
                    "00000000000000000000.timeindex", "00000000000000000002.snapshot.deleted"]
    r = retention(kl, four, *WEEK, "--now", T0 + 5 * H)
    assert sorted(p.name for p in pdir.iterdir() if p.name.startswith("00000000000000000000")) == []
    assert not list(pdir.glob("*.deleted"))
    assert verify_errors(kl, four) == 0


def test_real_broker_log_dirs(kl, copy_fixture):
    for name in ("real/connect-spooldir-2019-zk", "real/kafka2.7.1-compacted-zk", "sample-logdir"):
        ld = copy_fixture(name)
        assert retention(kl, ld, *WEEK, "--now", "2030-01-01").code == 0
        assert verify_errors(kl, ld) == 0
        r = retention(kl, ld, *WEEK, "--now", "2030-01-01", "--dry-run")
        assert r.code == 0 and r.json()[-1]["actions"] == 0


# ------------------------------------------------------------------------------------ lock, backups, CLI


def test_refuses_while_a_broker_holds_the_lock(kl, four, tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys, time\n"
        f"fd = os.open({str(four / '.lock')!r}, os.O_RDWR | os.O_CREAT)\n"
        "fcntl.lockf(fd, fcntl.LOCK_EX)\nprint('locked', flush=True)\ntime.sleep(60)\n")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        before = state(four)
        r = kl("retention", four, *WEEK, "--now", T0 + 30 * DAY)
        assert r.code == 3 and "broker" in r.err, r
        assert state(four) == before
        r = kl("retention", four, *WEEK, "--now", T0 + 30 * DAY, "--dry-run")
        assert r.code == 1 and "a broker or another kltool holds" in r.err
    finally:
        holder.kill()
        holder.wait()


def test_backup_dir_and_restore(kl, four, tmp_path):
    from kltool.storage.change.restore import restore

    before = state(four)
    backup = tmp_path / "backup"
    r = retention(kl, four, *WEEK, "--now", T0 + 30 * DAY, "--backup-dir", backup)
    assert r.code == 0, r
    assert logs(four / "t-0") == [5] and verify_errors(kl, four) == 0
    (manifest,) = backup.glob("*/manifest.json")
    doc = json.loads(manifest.read_text())
    assert doc["command"] == "retention" and doc["status"] == "complete"
    moved = sorted(Path(e["file"]).name for e in doc["actions"] if e["op"] == "quarantine")
    assert moved == sorted(Path(p).name for p in before if p.startswith("t-0/0"))  # every segment file
    restore(manifest)
    assert state(four) == before  # every file back, checkpoints as they were, the rolled segment gone


def test_backup_dir_inside_the_log_dir_is_refused(kl, four):
    r = kl("retention", four, *WEEK, "--now", T0 + 30 * DAY, "--backup-dir", four / "bk")
    assert r.code == 2 and "inside the log dir" in r.err


def test_text_output(kl, four):
    r = kl("retention", four, "--retention-hours", "2.5", "--now", T0 + 5 * H, "--dry-run")
    assert r.code == 1
    assert "00000000000000000000.log" in r.out and "retention_ms" in r.out
    assert "t-0: log start 0 -> 3 (log end 5), 2 segments" in r.out
    assert r.out.splitlines()[-1].startswith("retention (dry run): 2 segments")


@pytest.mark.parametrize("args", [("--retention-ms", "1", "--retention-hours", "1"), ("--retention-bytes", "ten"),
                                  ("--before-offset", "1", "--before-time", "0"), ("--now", "soon"),
                                  ("--before-offset", "-5")])
def test_usage_errors(kl, four, args):
    r = kl("retention", four, *args)
    assert r.code == 2 and r.err.startswith("kltool: error:") and len(r.err.strip().splitlines()) == 1, r


def test_truncate_epochs_from_start():
    e = [(0, 0), (2, 1500), (5, 98231)]
    assert truncate_epochs_from_start(e, 0) == [(0, 0), (2, 1500), (5, 98231)]
    assert truncate_epochs_from_start(e, 1500) == [(2, 1500), (5, 98231)]
    assert truncate_epochs_from_start(e, 2000) == [(2, 2000), (5, 98231)]
    assert truncate_epochs_from_start(e, 100000) == [(5, 100000)]
    assert truncate_epochs_from_start([], 10) == []


# ------------------------------------------------------------------------------------------- kill tests

_FS_OPS = ("rename", "replace", "unlink", "fsync", "mkdir", "ftruncate")


def _run_killed_at(n: int, args) -> int:
    """Run kltool in a forked child that dies (os._exit, like SIGKILL: no cleanup) just before its n-th
    file-system step; returns the child's exit status (99 = killed)."""
    pid = os.fork()
    if pid == 0:  # the child
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            count = [0]

            def wrap(real):
                def op(*a, **k):
                    count[0] += 1
                    if count[0] == n:
                        os._exit(99)
                    return real(*a, **k)
                return op

            for name in _FS_OPS:
                setattr(os, name, wrap(getattr(os, name)))
            code = run_kltool(*args).code
        except BaseException:
            code = 98
        os._exit(code)
    _pid, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _kill_scenario(root: Path, *, small: bool = False) -> Path:
    ld = root / "ld"
    build_partition(ld, "a", [[[T0]] * 3, [[T0 + H]] * 2])  # all expire: roll at 5
    pdir = build_partition(ld, "b", [[[T0]] * 2, [[T0 + H]], [[T0 + 20 * DAY]] * 2])  # 0 and 2 go
    for off in (2, 3, 5):
        (pdir / f"{off:020d}.snapshot").write_bytes(encode_snapshot([]))
    (pdir / "00000000000000000001.snapshot.deleted").write_bytes(b"leftover")
    if not small:
        build_partition(ld, "c", [[[T0 + i] for i in range(8)], [[T0 + 20 * DAY]]])
    return ld


@pytest.mark.slow
@pytest.mark.parametrize("backup", [False, True], ids=["broker-way", "backup-dir"])
def test_killed_at_every_step_verifies_and_converges(kl, tmp_path, backup, monkeypatch):
    import shutil

    # fsync still counts as a kill point in the child, but need not reach the disk in a test
    monkeypatch.setattr(os, "fsync", lambda fd: None)

    now = str(T0 + 10 * DAY)
    orig = _kill_scenario(tmp_path / "orig", small=backup)  # a backup doubles the steps: one topic less
    ref = tmp_path / "ref" / "ld"
    shutil.copytree(orig, ref)
    extra = ("--backup-dir", tmp_path / "ref-backup") if backup else ("--no-backup",)
    r = kl("retention", ref, *WEEK, "--now", now, *extra)
    assert r.code == 0, r
    want = state(ref)
    assert verify_errors(kl, ref) == 0
    assert "00000000000000000005.log" in str(list(want)) and not any(k.endswith(".deleted") for k in want)
    kills = 0
    for n in range(1, 500):
        work = tmp_path / f"run{n}" / "ld"
        shutil.copytree(orig, work)
        args = ["retention", work, *WEEK, "--now", now]
        args += ["--backup-dir", tmp_path / f"run{n}" / "backup"] if backup else ["--no-backup"]
        code = _run_killed_at(n, args)
        if code == 0:
            break  # the run got through: every step has been a kill point
        assert code == 99, f"run killed at step {n} exited {code}"
        kills += 1
        assert verify_errors(kl, work) == 0, f"killed at step {n}: the log dir does not verify"
        r = kl("retention", *args[1:])
        assert r.code == 0, (n, r)
        assert state(work) == want, f"killed at step {n}: a re-run did not converge"
        if backup and n % 3 == 0:  # the re-run's manifest follows the interrupted one: restore undoes both
            from kltool.storage.change.restore import restore

            manifests = sorted((tmp_path / f"run{n}" / "backup").glob("*/manifest.json"),
                               key=lambda m: json.loads(m.read_text())["created"])
            restore(manifests[-1])
            assert state(work) == state(orig), f"killed at step {n}: restore did not bring everything back"
        shutil.rmtree(work.parent)
    assert kills >= 15
    print(f"{kills} kill points")


def test_unfinished_compaction_swap_is_left_for_repair(kl, four):
    (four / "t-0" / "00000000000000000000.log.swap").write_bytes(b"")
    r = retention(kl, four, *WEEK, "--now", T0 + 30 * DAY, "--dry-run")
    assert r.code == 0 and deleted_segments(r) == []
    (w,) = findings(r, "stale_file")
    assert "verify --repair" in w["message"]


def test_log_start_checkpoint_entry_only_above_the_first_base_like_the_broker(kl, tmp_path):
    """Kafka 4.4's LogManager.checkpointLogStartOffsetsInDir writes an entry only for a log start offset above
    the first segment's base offset: DeleteRecords inside a segment leaves one; time retention that then
    deletes up to a segment boundary equal to the log start offset drops it (tests/broker/test_broker_cleans.py
    compares with the broker)."""
    ld = tmp_path / "ld"
    pdir = build_partition(ld, "t", [[[T0]] * 3, [[T0 + DAY]] * 3, []])
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"partitions": [{"topic": "t", "partition": 0, "offset": 2}], "version": 1}))
    r = kl("retention", ld, "--offset-json-file", spec)
    assert r.code == 0, r
    assert logs(pdir) == [0, 3, 6] and lso_checkpoint(ld) == {("t", 0): 2}
    r = retention(kl, ld, *WEEK, "--now", T0 + 8 * DAY)
    assert r.code == 0, r
    assert logs(pdir) == [3, 6] and lso_checkpoint(ld) == {}
    assert Partition(pdir).log_start_offset() == 3
