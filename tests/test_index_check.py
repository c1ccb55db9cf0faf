"""storage/check/index_check.py: the one judge of a segment's .index and .timeindex (verify and repair both
ask it): indexes the broker's recovery rule builds pass; entries that point between batches, past the last
batch or at the wrong timestamp do not; a run of the C walker is judged as its batches one by one."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest

from kltool.format import speedups
from kltool.format.records import BatchHeader
from kltool.storage.check.index_check import IndexChecker
from kltool.storage.index_builder import IndexBuilder
from kltool.storage.scan import BatchRun, walk

from .conftest import ORACLE


def _segment(tmp_path: Path) -> tuple[Path, list[BatchHeader]]:
    d = tmp_path / "p-0"
    shutil.copytree(ORACLE / "v2-multi-segment-0", d)
    log = d / "00000000000000000000.log"
    hs = [h for h in walk(log) if isinstance(h, BatchHeader)]
    b = IndexBuilder(0, 512)
    for h in hs:
        b.on_batch(h.position, h.size, h.last_offset, h.max_timestamp)
    b.finish()
    (d / "00000000000000000000.index").write_bytes(b.offset_index_bytes())
    (d / "00000000000000000000.timeindex").write_bytes(b.time_index_bytes())
    return log, hs


def _judge(log: Path, hs=None, runs: bool = False) -> list:
    ic = IndexChecker(0, log.with_suffix(".index"), log.with_suffix(".timeindex"), log_size=log.stat().st_size)
    if runs:
        for x in walk(log, runs=True, want_cols=True):
            ic.run(x) if type(x) is BatchRun else ic.batch(x)
    else:
        for h in hs:
            ic.batch(h)
    return [(f.kind, f.offset) for f in ic.finish()]


def test_indexes_built_by_the_recovery_rule_pass(tmp_path):
    log, hs = _segment(tmp_path)
    assert _judge(log, hs) == []


def test_an_entry_between_batches_and_one_past_the_end(tmp_path):
    log, hs = _segment(tmp_path)
    idx = log.with_suffix(".index")
    data = bytearray(idx.read_bytes())
    rel, pos = struct.unpack_from(">ii", data, 0)
    struct.pack_into(">ii", data, 0, rel, pos + 1)  # not the start of a batch
    idx.write_bytes(bytes(data) + struct.pack(">ii", hs[-1].last_offset + 5, log.stat().st_size + 100))
    found = _judge(log, hs)
    assert ("index_mismatch", rel) in found and ("index_mismatch", hs[-1].last_offset + 5) in found


def test_a_time_entry_naming_the_wrong_timestamp(tmp_path):
    log, hs = _segment(tmp_path)
    ti = log.with_suffix(".timeindex")
    data = bytearray(ti.read_bytes())
    ts, rel = struct.unpack_from(">qi", data, 0)
    struct.pack_into(">qi", data, 0, ts + 1, rel)
    ti.write_bytes(bytes(data))
    assert _judge(log, hs) == [("time_index_mismatch", rel)]
    ic = IndexChecker(0, log.with_suffix(".index"), ti, log_size=log.stat().st_size)
    assert ic.time_problems == [] and not ic.index_problems  # (a mismatch is found against the batches)


def test_missing_indexes_are_warnings_and_repair_reads_no_problem_from_them(tmp_path):
    log, _hs = _segment(tmp_path)
    log.with_suffix(".index").unlink()
    ic = IndexChecker(0, log.with_suffix(".index"), log.with_suffix(".timeindex"), log_size=log.stat().st_size)
    assert [(f.kind, f.severity) for f in ic.findings] == [("missing_index", "warning")]
    assert ic.index_missing and ic.index_problems == []


@pytest.mark.parametrize("damage", ["none", "between", "timestamp"])
def test_a_run_is_judged_as_its_batches(tmp_path, damage):
    if speedups.C is None:
        pytest.fail("the C accelerator is not built (pip install -e .)")
    log, hs = _segment(tmp_path)
    if damage == "between":
        idx = log.with_suffix(".index")
        data = bytearray(idx.read_bytes())
        rel, pos = struct.unpack_from(">ii", data, 8)
        struct.pack_into(">ii", data, 8, rel, pos - 1)
        idx.write_bytes(bytes(data))
    elif damage == "timestamp":
        ti = log.with_suffix(".timeindex")
        data = bytearray(ti.read_bytes())
        ts, rel = struct.unpack_from(">qi", data, 12)
        struct.pack_into(">qi", data, 12, ts + 1, rel)
        ti.write_bytes(bytes(data))
    assert any(type(x) is BatchRun for x in walk(log, runs=True))
    assert _judge(log, runs=True) == _judge(log, hs)
    assert bool(_judge(log, hs)) == (damage != "none")
