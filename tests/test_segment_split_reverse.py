"""Intact batches written in reverse order with a single batch below the segment's base (the split work's
leftover): a segment named 30 holding batch 30..37 and then batch 20..24, both CRC-valid. The split's rule took
one batch alone below the base as a damaged offset field, so repair's batch walk cut both (30..37 as an offset
field its neighbours contradict, 20..24 as below the base), whether or not the segment was the partition's
last. A lone batch below the base is a damaged field only when its neighbours read in order without it; at the
end of the file (after a batch above it) or followed by a lower batch it is content, and repair splits the
segment the broker's way, keeping every intact batch whose offsets no other segment holds (an exact copy
elsewhere stays there, this one in the backup); but not at the end of a segment that is not the last, where the
next segment's name says where it belongs (the walk restores its field). When its offsets are held by another segment with other
bytes, the batch walk still decides, and verify says why the segment is not split."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from kltool.format import names as fn
from kltool.storage.change.repair import repair
from kltool.storage.change.restore import restore
from kltool.storage.logdir import open_path

from .conftest import FIXTURES, run_kltool
from .test_misnamed_segments import _errors
from .test_segment_split import _tree, dry_run_then_repair
from .test_uncovered_fields import _batches, _offsets

SRC = FIXTURES / "java-oracle" / "v2-compacted-0"


def _fixture_batches() -> dict[str, bytes]:
    """The fixture's four batches as A=0..5, B=10..14, C=20..24, D=30..37 (their bytes, unchanged)."""
    log = SRC / fn.segment_file(0, "log")
    data = log.read_bytes()
    hs = _batches(log)
    assert [(h.base_offset, h.last_offset) for h in hs] == [(0, 5), (10, 14), (20, 24), (30, 37)]
    return {k: data[h.position:h.end] for k, h in zip("ABCD", hs, strict=True)}


def _layout(tmp_path: Path, segs: dict[int, str], extra: dict[str, bytes] | None = None) -> Path:
    """A partition whose segment ``base`` holds the batches named by ``segs[base]``, in that order."""
    part = tmp_path / "logs" / "t-0"
    part.mkdir(parents=True)
    b = {**_fixture_batches(), **(extra or {})}
    for base, names in segs.items():
        (part / fn.segment_file(base, "log")).write_bytes(b"".join(b[n] for n in names))
    return part


ALL = {(0, 5), (10, 14), (20, 24), (30, 37)}

LAYOUTS = {
    "last-segment": {0: "AB", 30: "DC"},  # the reported case
    "only-segment": {30: "DC"},
    "all-reversed": {30: "DCBA"},
    "last-two-reversed": {0: "A", 30: "DCB"},
    "copy-elsewhere": {0: "ABC", 30: "DC"},  # 20..24 also in segment 0, the same bytes: that copy stays
}


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_batches_in_reverse_order_are_split_and_kept(tmp_path, name):
    segs = LAYOUTS[name]
    part = _layout(tmp_path, segs)
    before = _tree(part)
    want = {o for o in ALL if any(o in {(h.base_offset, h.last_offset) for h in _batches(part / p)} for p in before)}
    found = _errors(part)
    (split,) = [f for f in found if f.kind == "segment_split"]
    assert not [f for f in found if f.kind in ("offset_order", "offset_field")], found
    result = repair(open_path(part), backup_dir=tmp_path / "bk")
    plan = [a.describe() for a in result.plan.actions]
    assert [a.op for a in result.plan.actions if a.op in ("truncate", "excise")] == [], plan
    assert _offsets(part) == want, plan
    # verify named the new segments the plan made; each is named after its first batch
    created = [a for a in result.plan.actions if a.op == "create" and a.file.name.endswith(".log.cleaned")]
    assert created and split.message.count(" -> ") == len(created), split.message
    for a in created:
        assert f"{a.first_offset}..{a.last_offset} " in split.message, split.message
    for p in part.glob("*.log"):
        assert min(h.base_offset for h in _batches(p)) == int(p.name.split(".")[0])
    assert not _errors(part), plan
    assert run_kltool("verify", part).code == 0
    # the old file is in the backup as it was (a copy held elsewhere too is named there), restore gives it back
    doc = json.loads(result.manifests[0].read_text())
    (q,) = [a for a in result.plan.actions if a.op == "quarantine" and a.file.suffix == ".log"]
    assert ("held twice" in q.reason) == (name == "copy-elsewhere"), q.reason
    (e,) = [e for e in doc["actions"] if e["op"] == "quarantine" and e["file"].endswith(".log")]
    assert (result.manifests[0].parent / e["backup"]).read_bytes() == before[Path(e["file"]).name]
    restore(result.manifests[0])
    assert _tree(part) == before


# The last batch of a segment that is not the last, alone below the batch before it: no longer split (it was, at
# the offsets its field says). Its neighbours (the batch before it and the next segment's name, where the broker
# rolled the log on) fix its offsets, and Kafka never serves it where the field puts it (the broker does not
# start on it: tests/broker/test_broker_split.py), so the field is taken as the damage, as for a flipped bit
# (tests/test_segment_split_reorder.py): the batch walk restores it to 25..29, which it fills exactly.
MIDDLE = {0: "A", 20: "CB", 30: "D"}


def test_the_last_batch_of_a_middle_segment_below_the_one_before_it_is_a_damaged_field(tmp_path):
    part = _layout(tmp_path, MIDDLE)
    before = _tree(part)
    found = _errors(part)
    assert not [f for f in found if f.kind == "segment_split"], found
    result = repair(open_path(part), backup_dir=tmp_path / "bk")
    plan = [a.describe() for a in result.plan.actions]
    assert [a.op for a in result.plan.actions if a.op in ("truncate", "excise", "create")] == [], plan
    (fix,) = {a.reason for a in result.plan.actions if a.op == "fix_field"}
    assert "says 10; its neighbours fix it at 25: restored" in fix, fix
    assert _offsets(part) == {(0, 5), (20, 24), (25, 29), (30, 37)}, plan
    assert not _errors(part), plan
    restore(result.manifests[0])
    assert _tree(part) == before


@pytest.mark.parametrize("name", ["last-segment", "middle-segment"])
def test_the_dry_run_prints_what_the_repair_does(tmp_path, name):
    part = _layout(tmp_path, LAYOUTS.get(name, MIDDLE))
    dry, acts, wet = dry_run_then_repair(part, tmp_path / "bk")
    assert dry == acts
    summary = [o for o in map(json.loads, wet.out.splitlines()) if o.get("type") == "summary"]
    assert summary[0]["records_lost"] == 0, summary
    assert run_kltool("verify", part).code == 0


def test_offsets_another_segment_holds_with_other_bytes_are_left_to_the_walk_and_verify_says_why(tmp_path):
    """Segment 0 ends with another batch at 20..24 (batch B's bytes, its offset field set to 20: CRC-valid):
    the reversed 20..24 of segment 30 is not a copy of it. Repair cuts it as before (it stays in the backup),
    and verify says the segment is not split and why."""
    b20 = bytearray(_fixture_batches()["B"])
    struct.pack_into(">q", b20, 0, 20)
    part = _layout(tmp_path, {0: "ABX", 30: "DC"}, {"X": bytes(b20)})
    before = _tree(part)
    found = _errors(part)
    assert not [f for f in found if f.kind == "segment_split"], found
    (f,) = [f for f in found if f.kind == "offset_order"]
    assert "not split as the broker splits" in f.message and "held with other bytes by " \
        f"{fn.segment_file(0, 'log')}" in f.message, f.message
    result = repair(open_path(part), backup_dir=tmp_path / "bk")
    plan = [a.describe() for a in result.plan.actions]
    (cut,) = [a for a in result.plan.actions if a.op in ("truncate", "excise")]
    assert cut.file.name == fn.segment_file(30, "log"), plan
    assert _offsets(part) == ALL, plan  # (20..24 from segment 0, the other history)
    assert (part / fn.segment_file(30, "log")).read_bytes() == _fixture_batches()["D"]
    assert not _errors(part), plan
    restore(result.manifests[0])
    assert _tree(part) == before

