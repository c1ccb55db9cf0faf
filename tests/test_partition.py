"""Discovery of a partition directory's files (kltool.storage.discovery): one rule for the local disk and
pyarrow's filesystems, used by Partition and by the object-store listing the Spark planner reads."""

from __future__ import annotations

import pytest

from kltool.errors import CorruptDataError
from kltool.format import names as fn
from kltool.storage.discovery import classify_dir, list_dir
from kltool.storage.partition import Partition

from .conftest import ORACLE

NAMES = [fn.segment_file(0, "log"), fn.segment_file(0, "index"), fn.segment_file(0, "timeindex"),
         fn.segment_file(50, "log"), fn.segment_file(50, "txnindex"), fn.segment_file(70, "index"),
         fn.segment_file(50, "snapshot"), fn.segment_file(20, "log", "deleted"), fn.segment_file(30, "index", "swap"),
         "00000000000000000100-AAAAAAAAAAAAAAAAAAAAAA.log", "leader-epoch-checkpoint", "partition.metadata",
         "00000000000000000010-0000000001.checkpoint", "x.tmp", "notes.txt"]


def make_dir(tmp_path):
    d = tmp_path / "orders-3"
    d.mkdir()
    for n in NAMES:
        (d / n).write_bytes(b"")
    (d / "sub").mkdir()
    return d


def test_a_directory_is_sorted_into_the_files_of_a_partition(tmp_path):
    found = classify_dir(list_dir(str(make_dir(tmp_path))))
    assert sorted(found.logs) == [0, 50]
    assert [(o, k) for o, k, _e in found.indexes] == [(0, "index"), (0, "timeindex"), (50, "txnindex"), (70, "index")]
    assert [o for o, _e in found.snapshots] == [50]
    assert sorted(e.name for e in found.stale) == [fn.segment_file(20, "log", "deleted"),
                                                     fn.segment_file(30, "index", "swap")]
    assert list(found.tiered) == [(100, "log")]
    assert sorted(found.segment_logs()) == [0, 50, 100]  # a tiered copy counts as a segment where there is no own name
    assert [e.name for e in found.kraft_snapshots] == ["00000000000000000010-0000000001.checkpoint"]
    assert [e.name for e in found.temp] == ["x.tmp"]
    assert sorted(e.name for e in found.other) == ["notes.txt", "sub"]
    assert found.index(0, "timeindex").name == fn.segment_file(0, "timeindex")
    assert found.index(50, "index") is None


def test_the_same_listing_through_pyarrows_local_filesystem(tmp_path):
    pafs = pytest.importorskip("pyarrow.fs")
    d = make_dir(tmp_path)
    local = classify_dir(list_dir(str(d)))
    arrow = classify_dir(list_dir(str(d), pafs.LocalFileSystem()))
    for name in ("logs", "indexes", "snapshots", "stale", "tiered", "kraft_snapshots", "temp", "other"):
        def names(v):
            v = v.values() if isinstance(v, dict) else v
            return sorted(x.name if hasattr(x, "name") else x[-1].name for x in v)
        assert names(getattr(local, name)) == names(getattr(arrow, name)), name
    assert all(e.size == 0 for e in arrow.logs.values())


def test_partition_uses_the_listing(tmp_path):
    p = Partition(make_dir(tmp_path))
    assert p.base_offsets == [0, 50]
    assert p.segments[-1].active and not p.segments[0].active
    assert [x.name for x in p.orphan_indexes] == [fn.segment_file(70, "index")]
    assert [o for o, _x in p.snapshots] == [50]
    assert len(p.stale_files) == 2 and [x.name for x in p.temp_files] == ["x.tmp"]
    # tiered copies are not a local partition's segments
    assert sorted(x.name for x in p.other_files) == ["00000000000000000100-AAAAAAAAAAAAAAAAAAAAAA.log", "notes.txt", "sub"]


def test_two_log_names_for_one_offset_are_an_error_naming_the_file(tmp_path):
    d = tmp_path / "t-0"
    d.mkdir()
    (d / fn.segment_file(5, "log")).write_bytes(b"")
    (d / "5.log").write_bytes(b"")
    with pytest.raises(CorruptDataError, match="two log files for base offset 5") as e:
        _ = Partition(d).segments
    assert "t-0" in str(e.value)


def test_a_real_partition_directory():
    p = Partition(ORACLE / "v2-multi-segment-0")
    assert len(p.segments) > 1 and p.base_offsets == sorted(p.base_offsets)
