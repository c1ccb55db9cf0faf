"""A batch written twice, the second copy damaged (its CRC fails, its header as written: adversary campaign
``dup_batch`` + ``zero``, seed 808 run 34, v1-none-0). The batch walk took the damaged copy's header, which
starts inside the intact batch before it, as the witness that the intact batch's offset field is out of line
and cut the intact batch too (verify reported only the damaged copy). A damaged copy of the batch itself (the
same stored CRC and size) witnesses nothing against it: only the copy is cut."""

from __future__ import annotations

import shutil
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


def _intact(log: Path) -> list[bytes]:
    data = log.read_bytes()
    return [data[h.position + 12:h.end] for h in walk(log) if isinstance(h, BatchHeader) and h.crc_valid]


def test_a_damaged_copy_after_a_batch_does_not_cut_the_batch(tmp_path):
    part = tmp_path / "logs" / "v1-none-0"
    part.mkdir(parents=True)
    log = part / fn.segment_file(0, "log")
    shutil.copyfile(ORACLE / "v1-none-0" / fn.segment_file(0, "log"), log)
    data = bytearray(log.read_bytes())
    hs = [h for h in walk(log) if isinstance(h, BatchHeader)]
    assert len(hs) >= 3
    b = hs[1]
    copy = bytearray(data[b.position:b.end])
    copy[-4:] = bytes(4)  # its payload zeroed: the copy's CRC fails, its header as written
    data[b.end:b.end] = copy
    log.write_bytes(bytes(data))
    before = _intact(log)
    damaged = _tree(part)
    result = repair(open_path(part), backup_dir=tmp_path / "bk")
    cuts = [(c.start, c.end) for a in result.plan.actions if a.op in ("excise", "truncate") for c in a.ranges]
    assert cuts == [(b.end, b.end + b.size)], [a.reason for a in result.plan.actions]
    assert _intact(log) == before
    assert not _errors(part)
    assert repair(open_path(part), dry_run=True).plan.actions == []
    restore(result.manifests[0])
    assert _tree(part) == damaged
