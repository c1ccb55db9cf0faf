"""Intact batches out of order across a partition's files (check/reorder.py, change/split.py:plan_reorder).

Three shapes the split and the batch walk used to cut intact batches from:

1. segment contents swapped between two files (v2-txn-0 cut in two, each part written under the other's name:
   6 records lost at the cut after the third batch) or two runs of batches swapped inside one file
   (v2-compacted-0 as C,D,A,B: 2 batches lost);
2. segment 0 = [A], segment 20 = [C, B, D]: B lies between A and C, alone between neighbours in order; it was
   taken for a damaged offset field and the walk cut C and B;
3. the opposite: the last batch of a segment that is not the last, whose offset field (not covered by the CRC)
   is damaged so that it reads below the batch before it: the split kept it at the offsets the field says (its
   records served at the wrong offsets); as Kafka has it (the broker never serves a batch there) the field is
   the damage, and the walk restores it from its neighbours (the batch before it and the next segment's name).

Repair reorders whole runs: every intact batch is kept, each segment named after its first batch, offsets
strictly increasing across segments (Kafka's own reader reads the files in name order), the indexes rebuilt,
the dry run plans what the repair does, and restore brings back the old bytes."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from kltool.format import names as fn
from kltool.storage.change.repair import repair
from kltool.storage.change.restore import restore
from kltool.storage.check.segment_name import SplitRule
from kltool.storage.logdir import open_path

from .conftest import FIXTURES, run_kltool
from .test_misnamed_segments import _errors
from .test_segment_split import _kill_and_rerun, _tree, dry_run_then_repair
from .test_uncovered_fields import _batches, _logs, _offsets

TXN = FIXTURES / "java-oracle" / "v2-txn-0" / fn.segment_file(0, "log")
CMP = FIXTURES / "java-oracle" / "v2-compacted-0" / fn.segment_file(0, "log")


def _pieces(log: Path) -> list[tuple[int, int, bytes]]:
    data = log.read_bytes()
    return [(h.base_offset, h.last_offset, data[h.position:h.end]) for h in _batches(log)]


def _layout(tmp_path: Path, segs: dict[int, list[bytes]]) -> Path:
    part = tmp_path / "logs" / "t-0"
    part.mkdir(parents=True)
    for base, bs in segs.items():
        (part / fn.segment_file(base, "log")).write_bytes(b"".join(bs))
    return part


def _at(batch: bytes, offset: int) -> bytes:
    """A v2 batch with its baseOffset field (not covered by the CRC) set to ``offset``."""
    b = bytearray(batch)
    struct.pack_into(">q", b, 0, offset)
    return bytes(b)


def _in_order(part: Path, kafka_oracle) -> list[tuple[int, int]]:
    """Kafka's own reader over the segment files in name order: every file fully valid, each named after its
    first batch's base offset, offsets strictly increasing across files. Returns the batches' offsets."""
    logs = _logs(part)
    code, rows = kafka_oracle(logs)
    assert code == 0, rows
    sums = [r for r in rows if r["type"] == "summary"]
    assert all(r["validBytes"] == r["fileSize"] and r["error"] is None for r in sums), sums
    out, prev = [], -1
    for log in logs:
        batches = [r for r in rows if r["type"] == "batch" and r["file"] == log.name]
        assert batches[0]["baseOffset"] == int(log.name.split(".")[0]), (log.name, batches[0])
        for r in batches:
            assert r["isValid"] and r["baseOffset"] > prev, (log.name, r, prev)
            prev = r["lastOffset"]
            out.append((r["baseOffset"], r["lastOffset"]))
    return out


def _repaired_in_order(tmp_path: Path, part: Path, kafka_oracle) -> tuple[list[tuple[int, int]], list[int], bytes]:
    """Dry run, repair (nothing lost, the dry run's actions the repair's), clean after, one repair enough,
    Kafka's reader reads the log in order, restore gives back the damaged bytes; returns the offsets kept, the
    segments' names and their bytes (in name order) as the repair left them."""
    damaged = _tree(part)
    dry, wet, out = dry_run_then_repair(part, tmp_path / "bk")
    assert dry == wet
    summary = [o for o in map(json.loads, out.out.splitlines()) if o.get("type") == "summary"]
    assert summary[-1]["records_lost"] == 0, out.out
    assert not [a for a in wet if a[0] in ("truncate", "excise")], wet
    assert not _errors(part), wet
    assert run_kltool("verify", part).code == 0
    assert repair(open_path(part), dry_run=True).plan.actions == []
    assert not [p for p in part.iterdir() if p.name.endswith((".cleaned", ".swap"))]
    for log in _logs(part):
        assert log.with_suffix(".index").exists() and log.with_suffix(".timeindex").exists()
    kept = _in_order(part, kafka_oracle)
    names = [int(p.name.split(".")[0]) for p in _logs(part)]
    data = b"".join(p.read_bytes() for p in _logs(part))
    (manifest,) = (tmp_path / "bk").rglob("manifest.json")
    restore(manifest)
    assert _tree(part) == damaged
    return kept, names, data


@pytest.mark.parametrize("k", range(1, 8))
def test_segment_contents_swapped_between_files_keep_every_batch(tmp_path, k, kafka_oracle):
    """v2-txn-0 (transactions, markers, an ABORT) cut after batch ``k``: the file named 0 holds the second part,
    the file named after the second part's first offset holds the first. Was: the first part cut (6 records at
    k=3); now the two parts go back under their own names, byte for byte."""
    bs = _pieces(TXN)
    part = _layout(tmp_path, {0: [b for _a, _b, b in bs[k:]], bs[k][0]: [b for _a, _b, b in bs[:k]]})
    kept, names, data = _repaired_in_order(tmp_path, part, kafka_oracle)
    assert kept == [(a, b) for a, b, _d in bs]
    assert names == [0, bs[k][0]]
    assert data == TXN.read_bytes()


def _cmp() -> dict[str, bytes]:
    bs = _pieces(CMP)
    assert [(a, b) for a, b, _d in bs] == [(0, 5), (10, 14), (20, 24), (30, 37)]
    return {k: d for k, (_a, _b, d) in zip("ABCD", bs, strict=True)}


ALL = [(0, 5), (10, 14), (20, 24), (30, 37)]

LAYOUTS = {  # segment name -> batches (v2-compacted-0: A=0..5, B=10..14, C=20..24, D=30..37)
    "runs-swapped-in-one-file": ({0: "CDAB"}, [0, 20]),  # was: A and B cut (2 batches, 4 records)
    "files-swapped": ({0: "CD", 20: "AB"}, [0, 20]),  # was: A and B cut
    "lone-between-in-order-neighbours": ({0: "A", 20: "CBD"}, [0, 10, 20]),  # was: C and B cut
    "all-reversed-in-segment-0": ({0: "DCBA"}, [0, 10, 20, 30]),
    "two-swapped-in-segment-0": ({0: "BACD"}, [0, 10]),
}


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_runs_out_of_order_are_reordered_not_cut(tmp_path, name, kafka_oracle):
    segs, names = LAYOUTS[name]
    b = _cmp()
    part = _layout(tmp_path, {base: [b[x] for x in xs] for base, xs in segs.items()})
    found = _errors(part)
    said = [f for f in found if f.kind == "segment_split"]
    assert said and all("reorders whole runs, every intact batch kept" in f.message for f in said), found
    assert not [f for f in found if "cutting those out of place" in f.message], found
    kept, got, _data = _repaired_in_order(tmp_path, part, kafka_oracle)
    assert kept == ALL
    assert got == names


def test_the_plan_says_why_and_the_old_files_are_in_the_backup(tmp_path):
    b = _cmp()
    part = _layout(tmp_path, {0: [b["C"], b["D"]], 20: [b["A"], b["B"]]})
    before = _tree(part)
    result = repair(open_path(part), backup_dir=tmp_path / "bk")
    creates = [a for a in result.plan.actions if a.op == "create" and a.file.name.endswith(".log.cleaned")]
    assert [(a.first_offset, a.last_offset, a.source.name) for a in creates] == \
        [(0, 14, fn.segment_file(20, "log")), (20, 37, fn.segment_file(0, "log"))]
    assert all("out of order across its files" in a.reason for a in creates)
    doc = json.loads(result.manifests[0].read_text())
    olds = {Path(e["file"]).name: e for e in doc["actions"] if e["op"] == "quarantine" and e["file"].endswith(".log")}
    assert set(olds) == set(before)
    for name, e in olds.items():
        assert (result.manifests[0].parent / e["backup"]).read_bytes() == before[name]


# -- 3. a damaged offset field on the last batch of a segment that is not the last ------------------------------

def _last_field(tmp_path: Path, field: int, first: dict | None = None) -> Path:
    """Segment 0 = [A] (or ``first``), segment 20 = [C, X], segment 30 = [D]: X is a batch truly at 25..29 (B's
    bytes, 5 offsets, filling C..D), its baseOffset field damaged to read ``field``."""
    b = _cmp()
    x = _at(b["B"], 25)
    return _layout(tmp_path, {**(first or {0: [b["A"]]}), 20: [b["C"], _at(x, field)], 30: [b["D"]]})


@pytest.mark.parametrize("field,first", [
    (9, None),  # 25 with bit 4 flipped: below C, in the hole 6..19 (the split kept it at 9..13)
    (15, "AB"),  # below C, exactly the hole 15..19 between B and C (the split kept it at 15..19)
    (57, None),  # 25 with bit 5 flipped: past the next segment's name
    (40, None),  # past the next segment's name, after D
])
def test_a_damaged_last_offset_field_is_never_served_at_the_fields_offsets(tmp_path, field, first):
    b = _cmp()
    part = _last_field(tmp_path, field, {0: [b[x] for x in first]} if first else None)
    before = _tree(part)
    if field < 20:  # the split no longer takes it (verify says so too: no segment_split)
        rule = SplitRule([(int(p.name.split(".")[0]), p) for p in _logs(part)])
        assert rule.plan(1) is None
        assert not [f for f in _errors(part) if f.kind == "segment_split"]
    result = repair(open_path(part), backup_dir=tmp_path / "bk")
    plan = [a.describe() for a in result.plan.actions]
    got = _offsets(part)
    assert (field, field + 4) not in got, plan
    assert got == {(0, 5), (20, 24), (25, 29), (30, 37)} | ({(10, 14)} if first else set()), plan
    assert (part / fn.segment_file(20, "log")).read_bytes() == b["C"] + _at(b["B"], 25)
    assert [a.op for a in result.plan.actions if a.op in ("truncate", "excise", "create")] == [], plan
    assert not _errors(part), plan
    restore(result.manifests[0])
    assert _tree(part) == before


def test_a_burst_over_two_batches_that_jumped_ahead_is_not_reordered(tmp_path):
    """Two neighbouring batches whose baseOffset fields read far ahead (the same high bit hit in both) are a run
    in order by themselves, but the batches around them read in order without them and their offsets fit
    between those: fields that jumped, not content (the walk restores them; reordering would serve them at
    2^56 and up)."""
    bs = _pieces(TXN)
    data = [d for _a, _b, d in bs]
    data[1] = _at(data[1], bs[1][0] | 1 << 56)
    data[2] = _at(data[2], bs[2][0] | 1 << 56)
    part = _layout(tmp_path, {0: data})
    result = repair(open_path(part), backup_dir=tmp_path / "bk")
    assert not [a for a in result.plan.actions if a.op == "create"]
    assert max(b for _a, b in _offsets(part)) < 1 << 32


# -- kill -9 at the reorder's steps: the rerun completes or undoes it, as the broker's loader does ------------------

def _swap_middle(part: Path) -> None:
    """The contents of the partition's second and third segments swapped between their names."""
    a, b = _logs(part)[1], _logs(part)[2]
    da, db = a.read_bytes(), b.read_bytes()
    a.write_bytes(db)
    b.write_bytes(da)


def test_kill_at_a_few_steps_of_a_reorder(tmp_path):
    _kill_and_rerun(tmp_path, "java-oracle/v2-multi-segment-0", 0, _swap_middle, lambda n: [1, n // 3, n // 2, n - 1, n])


@pytest.mark.slow
@pytest.mark.parametrize("src,parts", [("java-oracle/v2-multi-segment-0", 0), ("v1", 3)])
def test_kill_at_every_step_of_a_reorder(tmp_path, src, parts):
    _kill_and_rerun(tmp_path, src, parts, _swap_middle, lambda n: range(1, n + 1))
