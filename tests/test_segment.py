"""storage/segment.py: one segment, as Kafka's LogSegment reads it: offset lookups through its .index
(translateOffset), its next offset, its last batch, and the largest timestamp retention goes by."""

from __future__ import annotations

import os
import shutil
import struct

from kltool.format.records import BatchHeader
from kltool.storage.index_builder import IndexBuilder
from kltool.storage.segment import Segment, first_batch

from .conftest import ORACLE


def _seg(tmp_path, *, index: bool = True, active: bool = False) -> tuple[Segment, list[BatchHeader]]:
    d = tmp_path / "p-0"
    shutil.copytree(ORACLE / "v2-multi-segment-0", d)
    seg = Segment(d, 400, active=active)
    hs = list(seg.batches())
    if index:
        b = IndexBuilder(400, 256)
        for h in hs:
            b.on_batch(h.position, h.size, h.last_offset, h.max_timestamp)
        b.finish()
        seg.index_path.write_bytes(b.offset_index_bytes())
        seg.timeindex_path.write_bytes(b.time_index_bytes())
    return seg, hs


def test_next_offset_last_and_first_batch(tmp_path):
    seg, hs = _seg(tmp_path)
    assert seg.next_offset() == hs[-1].last_offset + 1 == 800
    assert seg.last_batch().position == hs[-1].position
    assert first_batch(seg).base_offset == 400


def test_position_for_offset_uses_the_index_and_distrusts_a_bad_entry(tmp_path):
    seg, hs = _seg(tmp_path)
    entries = seg.offset_index()
    assert entries and all(any(h.position == pos for h in hs) for _o, pos in entries)
    off, pos = entries[-1]
    assert seg.position_for_offset(off + 1) == pos
    assert seg.position_for_offset(399) == 0  # below the base offset: from the start
    data = bytearray(seg.index_path.read_bytes())
    struct.pack_into(">ii", data, len(data) - 8, off - 400, pos + 3)  # points inside a batch
    seg.index_path.write_bytes(bytes(data))
    fresh = Segment(seg.directory, 400)
    assert fresh.position_for_offset(off + 1) == 0  # not a batch there: scan from the start


def test_largest_timestamp_from_a_closed_segment_s_time_index(tmp_path):
    seg, hs = _seg(tmp_path)
    assert seg.max_timestamp_so_far == max(h.max_timestamp for h in hs)
    assert seg.max_timestamp_source == "timeindex"


def test_largest_timestamp_without_an_index_scans_the_batches_then_the_mtime(tmp_path):
    seg, hs = _seg(tmp_path, index=False)
    assert (seg.max_timestamp_so_far, seg.max_timestamp_source) == (max(h.max_timestamp for h in hs), "batches")
    empty = Segment(seg.directory, 5000)
    empty.log_path.write_bytes(b"")
    os.utime(empty.log_path, (1000, 1000))
    assert (empty.max_timestamp_so_far, empty.max_timestamp_source) == (-1, "none")
    assert empty.largest_timestamp == 1_000_000
