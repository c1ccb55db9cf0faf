"""Runs of intact batches out of order in a segment that also holds damage (adversary campaign seed 909 run 10:
damaged-v2-torn-payload-0, a torn batch at the end, with its first two batches swapped). The reordering
refused any damaged segment, and the batch walk cut the batch out of order as a damaged offset field (1 intact
batch lost). The reordering now takes a segment whose damage is only cut (no byte the copies would have to
mend): the new segments hold every intact batch, the damaged bytes stay in the backup with the old file, named
in the plan; verify then finds no error, a second repair plans nothing, restore gives back every byte."""

from __future__ import annotations

import shutil

from kltool.format import names as fn
from kltool.format.records import BatchHeader
from kltool.storage.change.repair import repair
from kltool.storage.change.restore import restore
from kltool.storage.logdir import open_path
from kltool.storage.scan import walk

from .conftest import ORACLE
from .test_misnamed_segments import _errors
from .test_repair_dup_copy import _intact
from .test_segment_split import _tree


def test_runs_out_of_order_beside_a_torn_tail_are_reordered(tmp_path):
    part = tmp_path / "logs" / "damaged-v2-torn-payload-0"
    part.mkdir(parents=True)
    log = part / fn.segment_file(0, "log")
    shutil.copyfile(ORACLE / "damaged-v2-torn-payload-0" / fn.segment_file(0, "log"), log)
    data = log.read_bytes()
    a, b = [h for h in walk(log) if isinstance(h, BatchHeader) and h.crc_valid][:2]
    log.write_bytes(data[b.position:b.end] + data[a.position:a.end] + data[b.end:])
    before = _intact(part)
    damaged = _tree(part)
    result = repair(open_path(part), backup_dir=tmp_path / "bk")
    assert _intact(part) == before, [a.reason for a in result.plan.actions]
    (q,) = [x for x in result.plan.actions if x.op == "quarantine" and x.file.name == log.name]
    assert "torn_tail" in q.reason, q.reason
    assert not _errors(part)
    assert repair(open_path(part), dry_run=True).plan.actions == []
    restore(result.manifests[0])
    assert _tree(part) == damaged


def test_runs_out_of_order_beside_a_damaged_length_field_are_reordered_and_mended(tmp_path):
    """The same with a batch whose length field (not covered by the CRC) is damaged (seed 909 run 4): the
    batch walk mends it; the reordering carries it, its copy holding the restored bytes."""
    part = tmp_path / "logs" / "v2-mixed-codecs-0"
    part.mkdir(parents=True)
    log = part / fn.segment_file(0, "log")
    shutil.copyfile(ORACLE / "v2-mixed-codecs-0" / fn.segment_file(0, "log"), log)
    data = bytearray(log.read_bytes())
    hs = [h for h in walk(log) if isinstance(h, BatchHeader) and h.crc_valid]
    assert len(hs) >= 3
    a, b, c = hs[:3]
    data[c.position + 8:c.position + 12] = (0x7FFFFFFF).to_bytes(4, "big")  # the length field of a later batch
    data[a.position:b.end] = data[b.position:b.end] + data[a.position:a.end]
    log.write_bytes(bytes(data))
    before = _intact(part)
    damaged = _tree(part)
    result = repair(open_path(part), backup_dir=tmp_path / "bk")
    lost = before - _intact(part)
    assert len(lost) <= 1  # (the mended batch's bytes differ only in its length field, which _intact covers)
    assert len([h for p in sorted(part.glob("*.log")) for h in walk(p) if isinstance(h, BatchHeader)
                and h.crc_valid]) == len(hs), [x.reason for x in result.plan.actions]
    assert not [x for x in result.plan.actions if x.op in ("truncate", "excise")]
    assert not _errors(part)
    assert repair(open_path(part), dry_run=True).plan.actions == []
    restore(result.manifests[0])
    assert _tree(part) == damaged
