"""Log dir discovery, partition kinds, segment lookups."""

from __future__ import annotations

import shutil

import pytest

from kltool.errors import UsageError
from kltool.storage import open_partition, open_path

from .conftest import ORACLE, REAL


def test_partition_kinds_and_unknown_dirs(kl, copy_fixture):
    ld = copy_fixture("sample-logdir")
    src = ld / "lsx1-0"
    shutil.copytree(src, ld / "lsx1-0.0123456789abcdef0123456789abcdef-delete")
    shutil.copytree(src, ld / "lsx1-1.0123456789abcdef0123456789abcdef-future")
    shutil.copytree(src, ld / "lsx1-2.0123456789abcdef0123456789abcdef-stray")
    (ld / "lost+found").mkdir()
    sel = open_path(ld)
    states = sorted(p.kind for p in sel.partitions if p.topic == "lsx1")
    assert states == ["delete", "future", "normal", "stray"]
    assert [d.name for d in sel.logdirs[0].unknown_dirs] == ["lost+found"]
    r = kl("--json", "verify", ld)
    assert r.code == 1
    assert any(f["kind"] == "unknown_dir" and f["file"].endswith("lost+found") for f in r.json()
               if f["type"] == "finding")
    info = [x for x in kl("--json", "info", ld).json() if x["type"] == "partition" and x["topic"] == "lsx1"]
    assert sorted(x["state"] for x in info) == ["delete", "future", "normal", "stray"]


def test_tree_of_log_dirs(tmp_path):
    shutil.copytree(REAL / "kafka2.7.1-compacted-zk", tmp_path / "backup" / "broker1" / "data")
    shutil.copytree(REAL / "biggerbrain-gzip-headers", tmp_path / "backup" / "broker2" / "data")
    sel = open_path(tmp_path / "backup")
    assert len(sel.logdirs) == 2
    assert any(p.topic == "lsx1" for p in sel.partitions)


def test_not_kafka_data(tmp_path):
    (tmp_path / "x").mkdir()
    with pytest.raises(UsageError):
        open_path(tmp_path / "x")


def test_segment_lookup_and_offsets():
    p = open_partition(ORACLE / "v2-multi-segment-0")
    assert p.base_offsets == [0, 400, 800]
    assert p.segment_for_offset(0).base_offset == 0
    assert p.segment_for_offset(399).base_offset == 0
    assert p.segment_for_offset(400).base_offset == 400
    assert p.segment_for_offset(10**9).base_offset == 800
    assert p.log_end_offset() == 1200
    assert p.log_start_offset() == 0


def test_log_start_offset_from_checkpoint():
    # kafka2.7.1's __consumer_offsets-28: first segment 0 holds only offset 1 (compaction)
    sel = open_path(REAL / "kafka2.7.1-compacted-zk")
    p = next(p for p in sel.partitions if p.topic == "__consumer_offsets" and p.partition == 28)
    assert p.log_start_offset() >= p.segments[0].base_offset
    assert p.log_end_offset() == 3


def test_library_api_reexports():
    import kltool

    sel = kltool.open_path(REAL / "william0423-indexed-zk")
    p = next(p for p in sel.partitions if p.partition == 28)
    seg = p.segments[0]
    assert seg.offset_index() and seg.time_index()
    ts = seg.time_index()[10][0]
    pos = seg.position_for_time(ts)
    h = next(seg.batches(start=pos))
    assert h.max_timestamp <= ts


def test_verify_beside_a_running_broker(kl, copy_fixture):
    """A torn or zero tail at the end of the active segment of a log dir a broker holds is a write in
    progress (or preallocation): a warning, not an error. Without the broker it is an error."""
    from .test_fs import hold_lock, stop

    ld = copy_fixture("sample-logdir")
    log = ld / "lsx1-0" / "00000000000000000000.log"
    with open(log, "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x0e\x00\x00\x00\x55")  # a batch header still being written
        f.write(bytes(1000))
    holder = hold_lock(ld / ".lock")
    try:
        r = kl("--json", "verify", ld)
    finally:
        stop(holder)
    kinds = {(f["kind"], f["severity"]) for f in r.json() if f["type"] == "finding"}
    assert ("broker_lock_held", "warning") in kinds
    assert r.code == 0, r
    assert any(k in kinds for k in (("torn_tail", "warning"), ("garbage", "warning"), ("zero_run", "warning")))
    r = kl("--json", "verify", ld)
    assert r.code == 1
