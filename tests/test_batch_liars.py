"""A CRC-valid batch whose offset fields lie (the adversary campaign, seed 303: lastOffsetDelta set larger and the
CRC recomputed, so that the batch claims the offsets of the intact batches after it).

Kafka's recovery (``LogSegment.recover``) checks only ``ensureValid`` (size, CRC) and the offset's range against the
segment's base; the consistency of a batch's offset range with its record count and with its neighbours is checked
only on a client's append (``LogValidator``: "Inconsistent batch offset range [b, l] and count of records c").
So the broker serves such a log: a fetch at an offset the liar claims finds the liar
(``FileRecords.searchForOffsetWithSize``: the first batch whose lastOffset is at or past it) and a consumer moves
on to the liar's next offset, past the intact batches it swallowed. verify reports the liar (one finding, at the
liar), repair cuts it (backed up) and keeps the batches after it, which agree with each other; the CRC covers the
lying field, so nothing proves another value of it (no mend: mend.py restores only bytes no CRC covers).

The header rule that needs no neighbour: a v2 batch cannot hold more records than the offsets it spans
(``recordsCount > lastOffsetDelta + 1``): its lastOffsetDelta is too small (records past its last offset, which
the broker gives out again after it) or its recordsCount too large (Kafka's reader: "premature EOF").
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from kltool.format import build_batch
from kltool.format.batch import batch_crc
from kltool.storage.check import batch_rules as rules

from .conftest import run_kltool

TS = 1_700_000_000_000


def _batch(base: int, n: int) -> bytes:
    return build_batch([(i, TS + base + i, f"k{base + i}".encode(), b"v" * 30, []) for i in range(n)],
                       base_offset=base)


def _set(b: bytes, at: int, value: int) -> bytes:
    """``b`` with the int32 at ``at`` set to ``value`` and its CRC recomputed (the lie is CRC-valid)."""
    x = bytearray(b)
    struct.pack_into(">i", x, at, value)
    struct.pack_into(">I", x, 17, batch_crc(x, 0, len(x)))
    return bytes(x)


LOD_AT, COUNT_AT = 23, 57
SPANS = [(0, 5), (5, 5), (10, 2), (12, 3)]  # (base, records): offsets 0..14, as v2-idempotent-0 holds them


def _part(tmp_path: Path, liar: int, at: int, value: int) -> tuple[Path, list[bytes], list[int]]:
    """A partition of one segment with the batches of SPANS, batch ``liar``'s int32 at ``at`` set to ``value``
    (CRC recomputed); (the partition dir, the batches, their positions)."""
    part = tmp_path / "kafka-logs" / "t-0"
    part.mkdir(parents=True)
    batches = [_batch(b, n) for b, n in SPANS]
    batches[liar] = _set(batches[liar], at, value)
    pos, p = [], 0
    for b in batches:
        pos.append(p)
        p += len(b)
    (part / "00000000000000000000.log").write_bytes(b"".join(batches))
    return part, batches, pos


def _tree(d: Path) -> dict:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def _errors(part: Path) -> list[dict]:
    r = run_kltool("--json", "verify", part)
    return [x for x in r.json() if x["type"] == "finding" and x["severity"] == "error"]


def _actions(r) -> list[tuple]:
    return [(a["op"], Path(a["file"]).name, a.get("reason")) for a in r.json() if a["type"] == "action"]


def _repair(part: Path, backup: Path) -> list[dict]:
    """dry run (nothing changed) = real run; after it verify finds no error; the backup restores byte for byte;
    returns the records kltool reads from the repaired partition (repaired again afterwards)."""
    before = _tree(part)
    dry = run_kltool("--json", "verify", "--repair", "--dry-run", part)
    assert dry.code == 1, dry
    assert _tree(part) == before
    wet = run_kltool("--json", "verify", "--repair", "--backup-dir", backup, part)
    assert wet.code == 0, wet
    assert _actions(dry) == _actions(wet)
    assert _errors(part) == []
    again = run_kltool("verify", "--repair", "--dry-run", part)
    assert again.code == 0, again
    records = [x for x in run_kltool("--json", "dump", "--records", part).json() if x["type"] == "record"]
    repaired = _tree(part)
    (manifest,) = backup.rglob("manifest.json")
    assert run_kltool("restore", manifest).code == 0
    assert _tree(part) == before
    # (put the repair back for the caller's oracle check)
    for name, data in repaired.items():
        (part / name).write_bytes(data)
    return records


def _oracle_offsets(kafka_oracle, part: Path) -> list[tuple[int, int]]:
    code, rows = kafka_oracle(sorted(part.glob("*.log")), records=True)
    assert code == 0, rows
    return [(r["baseOffset"], r["lastOffset"]) for r in rows if r["type"] == "batch"]


# -- lastOffsetDelta too large: the liar claims the offsets of the intact batches after it --------------------

@pytest.mark.parametrize("liar,lod", [(0, 4 + (1 << 14)), (0, 10), (1, 4 + (1 << 26)), (1, 5), (2, 2)],
                         ids=["first-far", "first-over-two", "middle-far", "middle-by-one", "third-by-one"])
def test_a_last_offset_delta_past_the_next_batches_is_the_liar(tmp_path, kafka_oracle, liar, lod):
    part, batches, pos = _part(tmp_path, liar, LOD_AT, lod)
    base, n = SPANS[liar]
    errors = _errors(part)
    assert [(e["kind"], e["position"]) for e in errors] == [("invalid_batch", pos[liar])], errors
    assert f"lastOffsetDelta {lod}" in errors[0]["message"]
    records = _repair(part, tmp_path / "bk")
    want = [o for b, k in SPANS for o in range(b, b + k) if b != base]
    assert [r["offset"] for r in records] == want
    assert _oracle_offsets(kafka_oracle, part) == [(b, b + k - 1) for b, k in SPANS if b != base]


def test_verify_names_the_same_rule_and_message_the_repair_cuts_by(tmp_path):
    part, batches, pos = _part(tmp_path, 0, LOD_AT, 4 + (1 << 14))
    (e,) = _errors(part)
    wet = run_kltool("--json", "verify", "--repair", "--dry-run", part)
    (cut,) = [c for a in wet.json() if a["type"] == "action" for c in a.get("ranges") or []]
    assert (cut["start"], cut["end"], cut["kind"], cut["reason"]) == (0, len(batches[0]), e["kind"], e["message"])


def test_a_last_segment_batch_past_the_next_segments_name_is_the_liar(tmp_path):
    part = tmp_path / "kafka-logs" / "t-0"
    part.mkdir(parents=True)
    first = _batch(0, 5) + _set(_batch(5, 5), LOD_AT, 4 + (1 << 14))
    (part / "00000000000000000000.log").write_bytes(first)
    (part / "00000000000000000010.log").write_bytes(_batch(10, 2) + _batch(12, 3))
    errors = _errors(part)
    assert [(e["kind"], Path(e["file"]).name, e["position"]) for e in errors] == [
        ("invalid_batch", "00000000000000000000.log", len(_batch(0, 5)))], errors
    records = _repair(part, tmp_path / "bk")
    assert [r["offset"] for r in records] == [*range(5), *range(10, 15)]


def test_a_compacted_batch_before_a_moved_offset_field_is_not_the_liar(tmp_path):
    """A compacted batch keeps its last offset past its records (the cleaner's overrideLastOffset): 5..9 holding
    5 and 6. The batch after it (truly 10..11) has its offset field (not covered by the CRC) moved into that
    range, to 8: the neighbours fix it at 10 (the gap up to 12 fits it exactly), the compacted batch stays."""
    part = tmp_path / "kafka-logs" / "t-0"
    part.mkdir(parents=True)
    compacted = build_batch([(0, TS, b"a", b"v", []), (1, TS, b"b", b"v", [])], base_offset=5)
    compacted = _set(compacted, LOD_AT, 4)
    moved = bytearray(_batch(10, 2))
    struct.pack_into(">q", moved, 0, 8)
    (part / "00000000000000000000.log").write_bytes(_batch(0, 5) + compacted + bytes(moved) + _batch(12, 3))
    errors = _errors(part)
    assert [e["kind"] for e in errors] == ["offset_field"], errors
    records = _repair(part, tmp_path / "bk")
    assert [r["offset"] for r in records] == [0, 1, 2, 3, 4, 5, 6, 10, 11, 12, 13, 14]


# -- recordsCount past the offsets the batch spans ---------------------------------------------------------

@pytest.mark.parametrize("at,value", [(LOD_AT, 2), (LOD_AT, 0), (COUNT_AT, 6), (COUNT_AT, 1_000_000),
                                      (COUNT_AT, 2**31 - 1)],
                         ids=["lod-short", "lod-zero", "count-plus-one", "count-million", "count-max"])
def test_more_records_than_offsets_breaks_a_header_rule(tmp_path, kafka_oracle, at, value):
    part, batches, pos = _part(tmp_path, 1, at, value)
    errors = _errors(part)
    assert [(e["kind"], e["position"]) for e in errors] == [("invalid_batch", pos[1])], errors
    assert errors[0]["message"] == rules.COUNT_PAST_RANGE.text(
        base=5, last=5 + (value if at == LOD_AT else 4), count=value if at == COUNT_AT else 5)
    records = _repair(part, tmp_path / "bk")
    assert [r["offset"] for r in records] == [*range(5), *range(10, 15)]
    assert _oracle_offsets(kafka_oracle, part) == [(0, 4), (10, 11), (12, 14)]


def test_fewer_records_than_offsets_is_no_fault(tmp_path):
    """recordsCount below lastOffsetDelta + 1 is what compaction leaves (a retained batch keeps its offsets)."""
    part = tmp_path / "kafka-logs" / "t-0"
    part.mkdir(parents=True)
    compacted = _set(build_batch([(0, TS, b"a", b"v", []), (3, TS, b"b", b"v", [])], base_offset=5), LOD_AT, 4)
    (part / "00000000000000000000.log").write_bytes(_batch(0, 5) + compacted + _batch(10, 2))
    assert _errors(part) == []
    dry = run_kltool("--json", "verify", "--repair", "--dry-run", part)
    assert [a for a in dry.json() if a["type"] == "action" and a["op"] not in ("rebuild_index",)] == []


# -- baseOffset lying (not covered by the CRC): restored by its neighbours, as before --------------------------

def test_a_base_offset_past_the_next_batches_is_restored(tmp_path):
    part = tmp_path / "kafka-logs" / "t-0"
    part.mkdir(parents=True)
    b = bytearray(_batch(5, 5))
    struct.pack_into(">q", b, 0, 5 + (1 << 14))
    (part / "00000000000000000000.log").write_bytes(_batch(0, 5) + bytes(b) + _batch(10, 2) + _batch(12, 3))
    errors = _errors(part)
    assert [e["kind"] for e in errors] == ["offset_field"], errors
    records = _repair(part, tmp_path / "bk")
    assert [r["offset"] for r in records] == list(range(15))


def test_the_campaign_case_v2_idempotent_keeps_the_three_batches_after_the_liar(tmp_path):
    """seed 303 run 10: v2-idempotent-0 with bit 6 of byte 25 (lastOffsetDelta 4 -> 16388) flipped, CRC
    recomputed: the repair cut the three intact batches after it (offsets 5..14) and kept the liar."""
    from .conftest import ORACLE

    part = tmp_path / "kafka-logs" / "v2-idempotent-0"
    part.mkdir(parents=True)
    data = bytearray((ORACLE / "v2-idempotent-0" / "00000000000000000000.log").read_bytes())
    end = struct.unpack_from(">i", data, 8)[0] + 12
    data[25] ^= 1 << 6
    struct.pack_into(">I", data, 17, batch_crc(data, 0, end))
    (part / "00000000000000000000.log").write_bytes(data)
    dry = run_kltool("--json", "verify", "--repair", "--dry-run", part)
    cuts = [(c["start"], c["end"]) for a in dry.json() if a["type"] == "action" for c in a.get("ranges") or []]
    assert cuts == [(0, end)], json.dumps(dry.json())
    records = _repair(part, tmp_path / "bk")
    assert [r["offset"] for r in records] == list(range(5, 15))


@pytest.mark.parametrize("at,value,in_run", [(COUNT_AT, 6, False), (LOD_AT, 3, False), (COUNT_AT, 5, True),
                                             (COUNT_AT, 4, True)])
def test_the_c_walker_takes_a_batch_into_a_run_only_when_no_rule_fires(tmp_path, at, value, in_run):
    from kltool.format import speedups
    from kltool.storage.scan import BatchRun, walk

    if speedups.C is None:
        pytest.fail("the C accelerator is not built (pip install -e .)")
    part, batches, pos = _part(tmp_path, 1, at, value)
    log = part / "00000000000000000000.log"
    runs = [x for x in walk(log, runs=True, base_offset=0) if type(x) is BatchRun]
    assert any(r.position <= pos[1] < r.end for r in runs) == in_run


# -- a compressed v0/v1 wrapper whose offset (its last inner offset, not covered by the CRC) lies --------------

@pytest.mark.parametrize("src", ["v1-gzip-0", "v0-gzip-0"])
@pytest.mark.parametrize("lie", [4100, 9, 1 << 40])
def test_a_wrapper_offset_past_the_next_wrapper_is_the_one_cut(tmp_path, kafka_oracle, src, lie):
    """Two gzip wrappers, offsets 0..4 (wrapper offset 4) and 5..8 (v0: 5..7); the first's offset field says ``lie``.
    The repair kept the liar and cut the intact wrapper after it (its offset 8 'did not follow' the lie) while
    verify blamed the liar: now both name the liar (its true offsets are inside the compressed value, which the
    neighbours do not fix: cut, backed up) and the intact wrapper keeps its records at 5..8."""
    from .conftest import ORACLE

    part = tmp_path / "kafka-logs" / "t-0"
    part.mkdir(parents=True)
    data = bytearray((ORACLE / src / "00000000000000000000.log").read_bytes())
    assert struct.unpack_from(">q", data, 0)[0] == 4
    first = struct.unpack_from(">i", data, 8)[0] + 12
    struct.pack_into(">q", data, 0, lie)
    (part / "00000000000000000000.log").write_bytes(data)
    errors = _errors(part)
    assert [(e["kind"], e["position"]) for e in errors] == [("offset_field", 0)], errors
    dry = run_kltool("--json", "verify", "--repair", "--dry-run", part)
    cuts = [(c["start"], c["end"], c["kind"]) for a in dry.json() if a["type"] == "action"
            for c in a.get("ranges") or []]
    assert cuts == [(0, first, "offset_field")], dry
    second = [r["offset"] for r in run_kltool("--json", "dump", "--records", ORACLE / src).json()
              if r["type"] == "record" and r["offset"] > 4]
    records = _repair(part, tmp_path / "bk")
    assert [r["offset"] for r in records] == second
    assert _oracle_offsets(kafka_oracle, part)[-1][1] == second[-1]


# -- recordsCount below the records the batch holds (CRC-valid): report only, repair keeps it --------------------

@pytest.mark.parametrize("lod", [None, 2], ids=["count-low", "count-and-lod-low"])
def test_a_records_count_lying_low_is_reported_by_deep_and_kept_by_repair(tmp_path, kafka_oracle, lod):
    """Kafka's recovery keeps the batch (LogSegment.recover runs ensureValid: size and CRC, no records parsed);
    its consumers fail at it ("records still remaining"). Repair keeps it as the broker does: verify --deep says
    so in its one line, with the command that cuts it; plain verify and the repair plan see nothing to cut."""
    from kltool.storage.check.verify import kept_note

    part, batches, pos = _part(tmp_path, 1, COUNT_AT, 3)
    last = 9
    if lod is not None:
        log = part / "00000000000000000000.log"
        x = bytearray(log.read_bytes())
        x[pos[1]:pos[2]] = _set(bytes(x[pos[1]:pos[2]]), LOD_AT, lod)
        log.write_bytes(bytes(x))
        last = 5 + lod
    assert _errors(part) == []
    deep = [x for x in run_kltool("--json", "verify", "--deep", part).json()
            if x["type"] == "finding" and x["severity"] == "error"]
    assert [(e["kind"], e["offset"]) for e in deep] == [("record_corrupt", 5)], deep
    assert deep[0]["message"].endswith(kept_note(last + 1)), deep
    before = (part / "00000000000000000000.log").read_bytes()
    r = run_kltool("--json", "verify", "--repair", "--backup-dir", tmp_path / "bk", part)
    assert r.code == 0, r
    assert [a for a in _actions(r) if a[0] in ("truncate", "excise", "fix_field")] == []
    assert (part / "00000000000000000000.log").read_bytes() == before
    # Kafka's reader: every batch passes ensureValid (recovery's check: size and CRC), the liar's records fail
    _code, rows = kafka_oracle(sorted(part.glob("*.log")))
    got = [(x["baseOffset"], x["lastOffset"], x["isValid"], "records still remaining" in x.get("recordsError", ""))
           for x in rows if x["type"] == "batch"]
    assert got == [(0, 4, True, False), (5, last, True, True), (10, 11, True, False), (12, 14, True, False)], rows
    # the command the finding names moves the log start offset past it
    assert run_kltool("retention", "--before-offset", str(last + 1), "--backup-dir", tmp_path / "bk2", part).code == 0
    r = run_kltool("--json", "offsets", "--earliest", part)
    assert [x["log_start_offset"] for x in r.json() if "log_start_offset" in x] == [last + 1], r


# -- two overlapping batches, either one's offset field could be the damaged one ---------------------------------

def _overlap_part(tmp_path: Path, d_records: int) -> Path:
    """0..4, C 20..24 (2 records, compacted) whose baseOffset bit 3 flipped (20 -> 28: 28..32), D 30..(30 + n - 1)
    (``d_records`` records, lastOffsetDelta 7 when n is 2: the v2-compacted-0 shape) at the end of the log."""
    part = tmp_path / "kafka-logs" / "t-0"
    part.mkdir(parents=True)
    c = _set(build_batch([(0, TS, b"a", b"v", []), (4, TS, b"b", b"v", [])], base_offset=20), LOD_AT, 4)
    c = bytearray(c)
    c[7] ^= 8
    d = _batch(30, d_records)
    (part / "00000000000000000000.log").write_bytes(_batch(0, 5) + bytes(c) + d)
    return part


def _bit59_part(tmp_path: Path, tail: bytes = b"") -> Path:
    """v2-compacted-0 with batch C's baseOffset 20 -> 28 (bit 59 of the field: one flipped bit), so that C (28..32)
    overlaps D (30..37, as many records) at the end of the log; ``tail``: batches written after D."""
    part = tmp_path / "kafka-logs" / "t-0"
    part.mkdir(parents=True)
    src = Path(__file__).resolve().parent.parent / "fixtures" / "java-oracle" / "v2-compacted-0"
    b = bytearray((src / "00000000000000000000.log").read_bytes())
    b[154 + 7] ^= 8
    (part / "00000000000000000000.log").write_bytes(bytes(b) + tail)
    return part


def _verify_and_repair(part: Path) -> tuple[list[tuple], list[tuple]]:
    """(verify's errors, repair's cuts), each as (kind, position, message or reason)."""
    found = [(e["kind"], e["position"], e["message"]) for e in _errors(part)]
    dry = run_kltool("--json", "verify", "--repair", "--dry-run", part)
    cuts = [(r["kind"], r["start"], r["reason"]) for a in dry.json() if a["type"] == "action"
            for r in a.get("ranges", [])]
    return found, cuts


def test_verify_blames_the_batch_repair_cuts_on_the_bit59_overlap(tmp_path):
    # One rule (rules.overlap_blame): repair keeps C and cuts D on the tie; verify names D, with the same reason
    # (it used to blame C: offset_field at byte 154, the batch repair keeps)
    found, cuts = _verify_and_repair(_bit59_part(tmp_path))
    assert [(k, p) for k, p, _ in found] == [("offset_order", 237)], found
    assert found == cuts, (found, cuts)
    assert found[0][2].endswith(rules.either_note(154, 28, 32)), found


@pytest.mark.parametrize(("after", "blamed"), [
    (38, 154),  # E 38..40 right after D: no one-bit change of D's field fits it between C and E, so C is the one
    (70, 237),  # E at 70: D's fits at 62 alone, as C's does (either): C kept, D's field restored to 62
    (200, 237),  # E at 200: D's fits at 62, 94 or 158: C kept, D cut by its offset field
])
def test_verify_and_repair_agree_on_the_bit59_overlap_with_a_batch_after_it(tmp_path, after, blamed):
    part = _bit59_part(tmp_path, _batch(after, 3))
    found, cuts = _verify_and_repair(part)
    assert [(k, p) for k, p, _ in found] == [("offset_field", blamed)], found
    dry = run_kltool("--json", "verify", "--repair", "--dry-run", part).json()
    fixed = sorted({a["position"] for a in dry if a["type"] == "action" and a["op"] == "fix_field"})
    if after == 70:
        assert cuts == [] and fixed and all(blamed <= x < blamed + 8 for x in fixed), dry
    else:
        assert [(k, p) for k, p, _ in cuts] == [("offset_field", blamed)], cuts
    if after == 200:
        assert cuts[0][2].endswith(rules.either_note(154, 28, 32)), cuts


@pytest.mark.parametrize("d_records", [1, 2, 3])
def test_verify_and_repair_blame_the_same_batch_of_an_overlap(tmp_path, d_records):
    # C 28..32 (2 records) over D 30..: D with more records stays (C is cut), fewer or as many is cut (C kept)
    part = _overlap_part(tmp_path, d_records)
    c_at = len(_batch(0, 5))
    d_at = c_at + len(build_batch([(0, TS, b"a", b"v", []), (4, TS, b"b", b"v", [])], base_offset=20))
    found, cuts = _verify_and_repair(part)
    assert [p for _, p, _ in found] == [p for _, p, _ in cuts] == [c_at if d_records > 2 else d_at], (found, cuts)


def test_an_ambiguous_overlap_cuts_the_batch_with_fewer_records(tmp_path):
    part = _overlap_part(tmp_path, 3)
    records = _repair(part, tmp_path / "bk")
    assert [r["offset"] for r in records] == [0, 1, 2, 3, 4, 30, 31, 32]


def test_an_ambiguous_overlap_with_as_many_records_says_so_and_backs_up_the_cut(tmp_path):
    part = tmp_path / "kafka-logs" / "t-0"
    part.parent.mkdir(parents=True)
    src = Path(__file__).resolve().parent.parent / "fixtures" / "java-oracle" / "v2-compacted-0"
    part.mkdir()
    b = bytearray((src / "00000000000000000000.log").read_bytes())
    b[154 + 7] ^= 8  # batch C's baseOffset 20 -> 28 (bit 59 of the field): 28..32 over D's 30..37
    (part / "00000000000000000000.log").write_bytes(bytes(b))
    dry = run_kltool("--json", "verify", "--repair", "--dry-run", part)
    cuts = [a for a in dry.json() if a["type"] == "action" and a["op"] in ("truncate", "excise")]
    assert len(cuts) == 1 and "ambiguous: the batch before it (at byte 154, offsets 28..32)" in cuts[0]["reason"], cuts
    records = _repair(part, tmp_path / "bk")  # (the backup restores the cut batch byte for byte)
    assert len(records) == 5
