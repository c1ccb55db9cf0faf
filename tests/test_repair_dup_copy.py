"""A copied segment file (adversary campaign ``dup_seg``: a ``.log`` copied under another segment's name) beside
other damage: repair sets the copy aside ("every batch in it is held by another segment too") and must then
keep the other copy of every one of its batches in the log. It used to lose one (adversary campaign seed 505):

1. the copy named just above the original (``0.log`` copied to ``7.log``, the original's last intact batch
   6..8): the batch walk bounded segment 0 by the name ``7`` of the copy the split was removing, took batch
   6..8 for a damaged offset field running past the next segment and cut it, while the split quarantined the
   copy's 6..8 as "held by segment 0 too" (run 1);
2. the original with two batches swapped (b1, b0, b2, ...) and the copy (in order) named 2^31: the copy made
   the partition one the reordering did not take, the split quarantined the copy as held twice, and the batch
   walk cut b1 from the original as a damaged offset field (run 11).

Now a batch held twice goes into the backup only when the other copy stays in the log: a file the plan
removes bounds no segment, and a copied file is set aside before the rest of the partition is reordered. Every
intact batch is kept, verify finds no error, a second repair plans nothing, restore gives back every byte."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

from kltool.format import names as fn
from kltool.format.records import BatchHeader
from kltool.storage.change.repair import repair
from kltool.storage.change.restore import restore
from kltool.storage.logdir import open_path
from kltool.storage.scan import walk

from .conftest import ORACLE
from .test_misnamed_segments import _errors
from .test_segment_split import _tree


def _intact(part: Path) -> set[bytes]:
    """The CRC-covered bytes of every CRC-valid v2 batch in the partition's ``.log`` files (the offset field,
    which the CRC does not cover, left out: a batch is the same batch wherever its field puts it)."""
    out = set()
    for log in sorted(part.glob("*.log")):
        data = log.read_bytes()
        for h in walk(log):
            if isinstance(h, BatchHeader) and h.crc_valid:
                out.add(data[h.position + 12:h.end])
    return out


def _copy(tmp_path: Path, src: str) -> Path:
    part = tmp_path / "logs" / src
    shutil.copytree(ORACLE / src, part)
    for p in list(part.iterdir()):
        p.chmod(0o644)
        if not fn.classify(p)[0]:
            p.unlink()  # (expected.jsonl, README: not Kafka's)
    return part


def _repaired(tmp_path: Path, part: Path):
    damaged = _tree(part)
    before = _intact(part)
    result = repair(open_path(part), backup_dir=tmp_path / "bk")
    lost = before - _intact(part)
    assert not lost, [a.reason for a in result.plan.actions]
    assert not _errors(part), [a.reason for a in result.plan.actions]
    again = repair(open_path(part), dry_run=True)
    assert again.plan.actions == [], [(a.op, a.file.name, a.reason) for a in again.plan.actions]
    return damaged, result


def test_a_copy_named_inside_the_original_does_not_bound_it(tmp_path):
    part = _copy(tmp_path, "damaged-v2-torn-payload-0")  # batches 0..2, 3..5, 6..8, then a torn batch
    shutil.copyfile(part / fn.segment_file(0, "log"), part / fn.segment_file(7, "log"))
    damaged, result = _repaired(tmp_path, part)
    q = [a for a in result.plan.actions if a.op == "quarantine" and a.file.name == fn.segment_file(7, "log")]
    assert len(q) == 1 and "held twice" in q[0].reason, q
    (cut,) = [a for a in result.plan.actions if a.op in ("truncate", "excise")]
    assert (cut.op, cut.start) == ("truncate", 657), cut  # only the torn batch (in the backup)
    assert [p.name for p in sorted(part.glob("*.log"))] == [fn.segment_file(0, "log")]
    restore(result.manifests[0])
    assert _tree(part) == damaged


def test_a_copy_in_order_beside_the_original_with_runs_swapped(tmp_path):
    part = _copy(tmp_path, "v2-mixed-codecs-0")
    log = part / fn.segment_file(0, "log")
    data = log.read_bytes()
    hs = [h for h in walk(log) if isinstance(h, BatchHeader)]
    assert len(hs) >= 3 and all(h.crc_valid for h in hs)
    shutil.copyfile(log, part / fn.segment_file(2**31, "log"))  # the copy, in order, named 2^31
    a, b = hs[0], hs[1]
    log.write_bytes(data[b.position:b.end] + data[a.position:a.end] + data[b.end:])  # b1, b0, b2, ...
    assert struct.unpack_from(">q", log.read_bytes(), 0)[0] == b.base_offset
    # verify says what repair will do (one rule, check/reorder.layout_without_copies): the copy goes into the
    # backup, the original is reordered; not "an offset field its neighbours contradict" at byte 0 (a cut)
    found = {(f.kind, Path(f.file).name): f.message for f in _errors(part)}
    assert set(found) == {("segment_split", fn.segment_file(0, "log")),
                          ("segment_split", fn.segment_file(2**31, "log"))}, found
    assert "out of order across its files" in found[("segment_split", fn.segment_file(0, "log"))]
    assert found[("segment_split", fn.segment_file(2**31, "log"))].startswith("a copy: ")
    damaged, result = _repaired(tmp_path, part)
    q = [a for a in result.plan.actions if a.op == "quarantine" and a.file.name == fn.segment_file(2**31, "log")]
    assert len(q) == 1, [(a.op, a.file.name) for a in result.plan.actions]
    assert found[("segment_split", fn.segment_file(2**31, "log"))].startswith(q[0].reason)
    assert not [a for a in result.plan.actions if a.op in ("truncate", "excise")]
    restore(result.manifests[0])
    assert _tree(part) == damaged
