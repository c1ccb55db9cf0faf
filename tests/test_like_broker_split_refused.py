"""``verify --repair --like-broker`` on a segment whose last batch overflows (Kafka 4.4 splits it,
``LocalLog.splitOverflowedSegment``) while another segment is named inside the offsets the split covers
(issue 23 leftover 3).

What Kafka 4.4 does (``LocalLog.splitOverflowedSegment`` and ``replaceSegments``, then ``LogLoader`` loads the
directory again): the new segments are renamed into place over any file of the same name (a segment named like
a new one is replaced: its records are lost), the other segments stay where they are, between the new ones.
But a split interrupted after its ``.swap`` renames is completed at the next start by deleting every segment
named inside the offsets the ``.swap`` files cover, the other segment too. kltool does not risk that: it
refuses the partition with one clear ``split_refused`` error naming the new segments, the segment inside and
what the broker does to it, and changes nothing; it used to leave the segment unsplit, say index_not_rebuilt
and truncate the other segment's batches as out of order. The default salvage mode repairs it."""

from __future__ import annotations

import struct

import pytest

from kltool.format import build_batch
from kltool.format import names as fn

from .conftest import ORACLE

HI = 5 + (1 << 39)


def write_overflow_and_other(part, other: int) -> None:
    """Into the partition directory PART: v2-none-0 (offsets 0..6) whose last batch's offset field reads
    5 + 2^39 (the segment's last batch overflows), and a one-record segment named ``other`` (key b"other").
    (The broker's side of this case, tests/broker/test_broker_split_refused.py, writes the same.)"""
    data = bytearray((ORACLE / "v2-none-0" / "00000000000000000000.log").read_bytes())
    assert struct.unpack_from(">q", data, 186)[0] == 5
    struct.pack_into(">q", data, 186, HI)
    (part / fn.segment_file(0, "log")).write_bytes(data)
    (part / fn.segment_file(other, "log")).write_bytes(
        build_batch([(0, 1_700_000_000_000, b"other", b"other-value", [])], base_offset=other, magic=2))


def _partition(tmp_path, other: int):
    """write_overflow_and_other in a new log dir's orders-0: (partition dir, {file name: bytes})."""
    part = tmp_path / "kafka-logs" / "orders-0"
    part.mkdir(parents=True)
    write_overflow_and_other(part, other)
    return part, {p.name: p.read_bytes() for p in part.iterdir()}


@pytest.mark.parametrize("other,fate", [(100, "it stays between the new segments"),
                                        (HI, f"{fn.segment_file(HI, 'log')} is replaced by the new segment")])
def test_like_broker_refuses_a_split_over_another_segments_name(kl, tmp_path, other, fate):
    part, files = _partition(tmp_path, other)
    for _ in range(2):  # (a second run says the same: nothing was half done)
        r = kl("--json", "verify", "--repair", "--like-broker", str(tmp_path / "kafka-logs"))
        assert r.code == 1, r
        rows = r.json()
        assert [x for x in rows if x["type"] == "action"] == [], rows
        errors = [x for x in rows if x.get("severity") == "error"]
        assert [x["kind"] for x in errors] == ["split_refused"], rows
        msg = errors[0]["message"]
        assert f"into {fn.segment_file(0, 'log')}, {fn.segment_file(HI, 'log')}" in msg, msg
        assert f"where {fn.segment_file(other, 'log')} is named too" in msg and fate in msg, msg
        assert "verify --repair" in msg, msg  # the way out
        assert {p.name: p.read_bytes() for p in part.iterdir()} == files


def test_salvage_repairs_it(kl, tmp_path):
    part, _files = _partition(tmp_path, 100)
    r = kl("--json", "verify", "--repair", "--backup-dir", str(tmp_path / "bk"), str(tmp_path / "kafka-logs"))
    assert r.code == 0, r
    records = [x for x in kl("--json", "dump", "--records", str(part)).json() if x["type"] == "record"]
    assert [x["offset"] for x in records] == [*range(7), 100]
    assert kl("verify", str(tmp_path / "kafka-logs")).code == 0


def test_with_no_other_segment_inside_it_is_split_as_before(kl, tmp_path):
    part, _files = _partition(tmp_path, HI + 10)
    r = kl("--json", "verify", "--repair", "--like-broker", "--backup-dir", str(tmp_path / "bk"),
           str(tmp_path / "kafka-logs"))
    assert r.code == 0, r
    assert not [x for x in r.json() if x.get("kind") == "split_refused"]
    assert sorted(p.name for p in part.glob("*.log")) == [fn.segment_file(b, "log") for b in (0, HI, HI + 10)]
