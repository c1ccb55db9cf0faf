"""A damage cut whose offsets are not in its bytes (a zero run) is bounded by the next batch the repair keeps
(``Ctx.close_pending``, the one rule the batch walk and the split share). A v0/v1 message's own offset bounds it
as a v2 batch's base offset does; the cut used to stay open ("offsets 4..? lost") after any v0/v1 message."""

from __future__ import annotations

from pathlib import Path

import pytest

from kltool.format import build_batch
from kltool.format import names as fn
from kltool.storage.change.repair import repair
from kltool.storage.logdir import open_path


def _zeroed(tmp_path: Path, magic: int, n: int, k: int) -> Path:
    """One segment of ``n`` one-message batches of format ``magic``, batch ``k`` zeroed."""
    part = tmp_path / "logs" / f"v{magic}-0"
    part.mkdir(parents=True)
    bs = [build_batch([(0, 1_700_000_000_000 + o, f"k{o}".encode(), b"v" * 30, [])], base_offset=o, magic=magic)
          for o in range(n)]
    bs[k] = b"\0" * len(bs[k])
    (part / fn.segment_file(0, "log")).write_bytes(b"".join(bs))
    return part


@pytest.mark.parametrize("magic", [0, 1, 2])
def test_a_zero_run_between_batches_names_only_its_own_offsets(tmp_path, magic):
    part = _zeroed(tmp_path, magic, 10, 4)
    result = repair(open_path(part), backup_dir=tmp_path / "bk", dry_run=True)
    (cut,) = [a for a in result.plan.actions if a.op in ("truncate", "excise")]
    assert [(c.first_offset, c.last_offset) for c in cut.ranges] == [(4, 4)], cut.describe()
    assert "offsets 4..4 lost" in cut.describe(), cut.describe()


@pytest.mark.parametrize("magic", [0, 1, 2])
def test_a_zero_run_at_the_tail_stays_open(tmp_path, magic):
    """Nothing after it: its offsets are not known (the log may have gone on)."""
    part = _zeroed(tmp_path, magic, 10, 9)
    result = repair(open_path(part), backup_dir=tmp_path / "bk", dry_run=True)
    (cut,) = [a for a in result.plan.actions if a.op in ("truncate", "excise")]
    assert cut.op == "truncate" and "offsets 9..? lost" in cut.describe(), cut.describe()
