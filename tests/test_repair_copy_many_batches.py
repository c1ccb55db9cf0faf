"""A copied segment file of many batches (adversary campaign seed 1010 run 51: a 3.7 MB __cluster_metadata
segment, 36k batches, copied to ``7.log``): the split's rule looked up the other copy of each batch by a walk
over the other file's batches, quadratic in the batches: 59 s of CPU to plan, a 90 s timeout on a loaded
machine. The lookup is one dict per file now; the plan of 30,000 batches takes a few seconds (the bound
below is generous: the old rule took about a minute here)."""

from __future__ import annotations

import shutil
import time

from kltool.format import build_batch
from kltool.format import names as fn
from kltool.storage.change.repair import repair
from kltool.storage.logdir import open_path


def test_a_copied_segment_of_many_batches_is_planned_in_linear_time(tmp_path):
    part = tmp_path / "logs" / "t-0"
    part.mkdir(parents=True)
    n = 30_000
    data = b"".join(build_batch([(0, 1_700_000_000_000 + i, b"k", b"v", [])], base_offset=i) for i in range(n))
    (part / fn.segment_file(0, "log")).write_bytes(data)
    shutil.copyfile(part / fn.segment_file(0, "log"), part / fn.segment_file(7, "log"))
    t0 = time.process_time()
    result = repair(open_path(part), dry_run=True)
    secs = time.process_time() - t0
    (q,) = [a for a in result.plan.actions if a.op == "quarantine" and a.file.suffix == ".log"]
    assert q.file.name == fn.segment_file(7, "log") and "held twice" in q.reason
    assert not [a for a in result.plan.actions if a.op in ("truncate", "excise")]
    assert secs < 6, secs  # (about 0.6 s here now; the old rule: 19 s)
