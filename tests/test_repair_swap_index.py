"""An ``N.index.swap`` left by an interrupted swap (the broker renames it into place at start-up, and so does
repair) on a segment whose log repair cuts: the old offset index is moved aside before the cut by the name it
has by then, ``N.index``. The step used to name the ``.swap`` file the plan had already renamed: the repair
stopped half way with "no such file or directory" and its backup could not be restored (adversary campaign
seed 808 run 27, a leftover ``291.index.swap``)."""

from __future__ import annotations

import shutil

from kltool.format import names as fn
from kltool.storage.change.repair import repair
from kltool.storage.change.restore import restore
from kltool.storage.logdir import open_path

from .conftest import ORACLE
from .test_misnamed_segments import _errors
from .test_segment_split import _tree


def test_a_swapped_in_index_is_moved_aside_by_its_new_name(tmp_path):
    part = tmp_path / "logs" / "t-0"
    part.mkdir(parents=True)
    src = ORACLE / "v2-multi-segment-0"
    for base in (0, 400):
        shutil.copyfile(src / fn.segment_file(base, "log"), part / fn.segment_file(base, "log"))
    rebuilt = repair(open_path(part), backup_dir=tmp_path / "bk0")  # the indexes, as the broker writes them
    assert not _errors(part), [a.reason for a in rebuilt.plan.actions]
    index = part / fn.segment_file(0, "index")
    assert index.stat().st_size > 0
    swap = part / fn.segment_file(0, "index", "swap")
    index.rename(swap)  # an interrupted swap: only its .swap file left, with a partial entry (rebuilt)
    swap.write_bytes(swap.read_bytes() + b"\x00\x01")
    log = part / fn.segment_file(0, "log")
    with open(log, "ab") as f:
        f.write(b"\0\0\0\0\0\0\0\0\0\0\x08\x00" + b"\x17" * 40)  # a torn batch at the end: the log is cut
    damaged = _tree(part)
    result = repair(open_path(part), backup_dir=tmp_path / "bk")
    ops = [(a.op, a.file.name) for a in result.plan.actions]
    assert ("rename", fn.segment_file(0, "index", "swap")) in ops
    assert ("quarantine", fn.segment_file(0, "index")) in ops, ops
    assert ("truncate", fn.segment_file(0, "log")) in ops, ops
    assert not _errors(part)
    assert repair(open_path(part), dry_run=True).plan.actions == []
    restore(result.manifests[0])
    assert _tree(part) == damaged
