"""A burst of offset fields that jumped together at the end of a v2 segment: the segment's last batches, each
CRC-valid, agreeing with each other, all more than 2^31-1 past the segment's name (a bit flipped high in each
baseOffset, which the CRC does not cover). No neighbour puts them back, so salvage keeps them where the broker's
recovery keeps them: its overflow split gives them a segment of their own (LocalLog.splitOverflowedSegment).
Before, repair left the segment's indexes unrebuilt ("not repairable", exit 0) and verify still failed after it."""

from __future__ import annotations

import shutil

import pytest

from .conftest import ORACLE, run_kltool
from .test_segment_split import _tree, dry_run_then_repair
from .test_uncovered_fields import _batches, _logs, _offsets

SRC = ORACLE / "v2-multi-segment-0"


@pytest.mark.parametrize("burst", [2, 3])
def test_a_burst_of_offsets_past_the_last_segment_is_split_off_as_the_broker_does(tmp_path, burst):
    part = tmp_path / "logs" / SRC.name
    shutil.copytree(SRC, part)
    for f in part.glob("expected*"):
        f.unlink()
    assert run_kltool("rebuild-index", part).code == 0  # indexes that point at the batches the bits move
    log = _logs(part)[-1]
    hs = _batches(log)
    b = bytearray(log.read_bytes())
    for h in hs[-burst:]:  # bit 56 of each baseOffset
        b[h.position] ^= 0x01
    log.write_bytes(bytes(b))
    before = _offsets(part)  # (base, last) of every batch
    first = hs[-burst].base_offset
    jumped = {(a, z) for a, z in before if a >= (1 << 56)}
    v = run_kltool("verify", part)
    assert len(jumped) == burst and "offset_overflow" in v.out and v.code == 1, v.out
    original = _tree(part)

    dry, wet, _ = dry_run_then_repair(part, tmp_path / "bk")
    assert [a for a in dry if a not in wet] == [] and [a for a in wet if a not in dry] == []
    assert any(op == "rename" and name.startswith(f"{(1 << 56) + first:020d}.log") for op, name, _ in wet), wet
    assert _offsets(part) == before  # every batch kept, the burst where its fields (and the broker) put it
    v = run_kltool("verify", part)
    assert v.code == 0 and "offset_overflow" not in v.out and "missing_index" not in v.out, v.out
    assert run_kltool("verify", "--repair", "--dry-run", part).code == 0  # nothing left to do
    assert run_kltool("restore", tmp_path / "bk").code == 0
    assert _tree(part) == original
