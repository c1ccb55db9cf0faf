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
