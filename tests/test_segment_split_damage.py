"""A segment that needs a split and holds damage too (issue 23 leftover 2): the split carries every batch the
batch walk would keep or mend (a magic byte or a length field the CRC does not cover, restored in place: the
copies carry the mended bytes) and cuts only the damaged ranges, which stay in the backup with the old file.
It used to be left to the batch walk, which cut every intact batch below the base as out of order. verify says
what the repair does (one ``segment_split`` finding naming the new segments and the damage cut or mended), the
second verify is clean, and ``restore`` gives the damaged files back byte for byte."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from kltool.format import names as fn
from kltool.storage.change.repair import repair
from kltool.storage.change.restore import restore
from kltool.storage.logdir import open_path

from .conftest import run_kltool
from .test_misnamed_segments import SOURCES, _errors, _segments
from .test_segment_split import _overflowed, _tree, dry_run_then_repair
from .test_uncovered_fields import _batches, _offsets

CASES = [SOURCES[0], SOURCES[1], SOURCES[2]]  # v2-multi-segment-0, v1, v0: enough batches for three runs


def _damage(log: Path, h, how: str) -> None:
    """Damage batch ``h`` of ``log``: zero it, flip a payload byte (its CRC fails), set its magic byte to 3
    (v2's CRC does not cover it; v0/v1's does, and is tried), or add 5 to its length field (no CRC covers it)."""
    b = bytearray(log.read_bytes())
    if how == "zero":
        b[h.position:h.end] = bytes(h.size)
    elif how == "payload":
        b[h.end - 2] ^= 0x40
    elif how == "magic":
        b[h.position + 16] = 3
    elif how == "length":
        struct.pack_into(">i", b, h.position + 8, h.size - 12 + 5)
    log.write_bytes(bytes(b))


@pytest.mark.parametrize("how", ["zero", "payload", "magic", "length"])
@pytest.mark.parametrize("src,parts", CASES)
def test_a_damaged_segment_that_needs_a_split_keeps_every_intact_batch(tmp_path, src, parts, how):
    part = _segments(tmp_path, src, parts)
    _o, before, name = _overflowed(part, 3)
    log = part / fn.segment_file(name, "log")
    hs = _batches(log)
    assert len(hs) >= 6
    victim = hs[-2]  # in the last run of the file, below the base; not the first of its run
    assert victim.base_offset < name
    _damage(log, victim, how)
    mended = how in ("magic", "length")
    lost = set() if mended else {(victim.base_offset, victim.last_offset)}
    damaged = _tree(part)
    found = _errors(part)
    (split,) = [f for f in found if f.kind == "segment_split"]
    assert ("damaged range(s) cut" in split.message) == (not mended), split.message
    assert ("mended" in split.message) == mended, split.message
    assert not [f for f in found if f.kind in ("offset_order", "offset_field")], found
    result = repair(open_path(part), backup_dir=tmp_path / "bk")
    plan = [a.describe() for a in result.plan.actions]
    assert [a.op for a in result.plan.actions if a.op in ("truncate", "excise")] == [], plan
    assert _offsets(part) == before - lost, plan
    # verify named the new segments the plan made
    created = [a for a in result.plan.actions if a.op == "create" and a.file.name.endswith(".log.cleaned")]
    for a in created:
        assert f"{a.first_offset}..{a.last_offset} " in split.message and \
            f"-> {a.file.name[:-len('.cleaned')]}" in split.message, split.message
    assert split.message.count(" -> ") == len(created), split.message
    assert [a.op for a in result.plan.actions if a.op in ("fix_magic", "fix_field")] == [], plan  # (not in place)
    fixed = [a for a in created if a.fixes]
    assert len(fixed) == mended and all("restored in the copy" in a.reason for a in fixed), plan
    (q,) = [a for a in result.plan.actions if a.op == "quarantine" and a.file.suffix == ".log"]
    assert ("damaged range(s) cut" in q.reason) == (not mended), q.reason
    assert not _errors(part), plan
    assert run_kltool("verify", part).code == 0
    # the old file is in the backup as it was, restore gives the damage back
    doc = json.loads(result.manifests[0].read_text())
    (e,) = [e for e in doc["actions"] if e["op"] == "quarantine" and e["file"].endswith(".log")]
    assert (result.manifests[0].parent / e["backup"]).read_bytes() == damaged[log.name]
    restore(result.manifests[0])
    assert _tree(part) == damaged


@pytest.mark.parametrize("src,parts", [SOURCES[0]])
def test_the_dry_run_prints_the_plan_the_repair_applies(tmp_path, src, parts):
    part = _segments(tmp_path, src, parts)
    _o, _before, name = _overflowed(part, 3)
    log = part / fn.segment_file(name, "log")
    hs = _batches(log)
    _damage(log, hs[-2], "magic")
    _damage(log, hs[1], "payload")
    dry, wet, _r = dry_run_then_repair(part, tmp_path / "bk")
    assert dry == wet
    assert any("restored in the copy" in (r or "") for _op, _f, r in wet)
    assert run_kltool("verify", part).code == 0


def _mended_and_cut(part: Path) -> set:
    """Three runs in one file (_overflowed), one batch below the base with its magic byte hit (mended in the
    copy), another with its payload hit (cut). Returns the offsets of the mended batch."""
    _o, _before, name = _overflowed(part, 3)
    log = part / fn.segment_file(name, "log")
    hs = _batches(log)
    _damage(log, hs[-2], "magic")
    _damage(log, hs[len(hs) // 2], "payload")
    return {(hs[-2].base_offset, hs[-2].last_offset)}


def test_kill_at_a_few_steps_of_a_split_with_damage(tmp_path):
    from .test_segment_split import _kill_and_rerun

    _kill_and_rerun(tmp_path, *SOURCES[0], _mended_and_cut, lambda n: [1, n // 3, n // 2, n - 1, n])


@pytest.mark.slow
@pytest.mark.parametrize("src,parts", [SOURCES[0], SOURCES[1]])
def test_kill_at_every_step_of_a_split_with_damage(tmp_path, src, parts):
    from .test_segment_split import _kill_and_rerun

    _kill_and_rerun(tmp_path, src, parts, _mended_and_cut, lambda n: range(1, n + 1))
