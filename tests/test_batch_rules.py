"""storage/check/batch_rules.py: the one home of the batch-level rules. verify reports from them, repair cuts on
them, and the C walker's fast path (walk_v2, through scan.walk(runs=True)) takes a batch into a run only when no
rule fires: the same damaged inputs run through all three here and their verdicts are compared."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from kltool.format import build_batch, speedups
from kltool.format.batch import batch_crc
from kltool.format.records import BatchHeader
from kltool.storage.change.repair import plan_repair
from kltool.storage.check import batch_rules as rules
from kltool.storage.check.verify import VerifyStats, verify_selection
from kltool.storage.logdir import open_path
from kltool.storage.scan import BatchRun, walk

TS = 1_700_000_000_000


def _batch(base: int, n: int = 3) -> bytes:
    return build_batch([(i, TS + i, f"k{base + i}".encode(), b"v" * 40, []) for i in range(n)], base_offset=base)


def _recrc(b: bytearray) -> None:
    size = struct.unpack_from(">i", b, 8)[0] + 12
    struct.pack_into(">I", b, 17, batch_crc(b, 0, size))


def _set(b: bytes, fmt: str, at: int, value: int, recrc: bool) -> bytes:
    x = bytearray(b)
    struct.pack_into(fmt, x, at, value)
    if recrc:
        _recrc(x)
    return bytes(x)


def _flip_payload(b: bytes) -> bytes:
    x = bytearray(b)
    x[-1] ^= 0x5A
    return bytes(x)


SEG_BASE = 100
# (name, the middle batch of three in a segment based at SEG_BASE: the first is 100..102, the last 110..112)
CASES = {
    "intact": lambda: _batch(105),
    "crc_mismatch": lambda: _flip_payload(_batch(105)),
    "not_following_equal": lambda: _batch(102),
    "not_following_below": lambda: _batch(90),
    "negative_base": lambda: _set(_batch(105), ">q", 0, -7, False),
    "negative_delta": lambda: _set(_batch(105), ">i", 23, -1, True),
    "negative_count": lambda: _set(_batch(105), ">i", 57, -2, True),
    "overflow": lambda: _batch(SEG_BASE + 2**31 + 5),
    "another_epoch": lambda: _set(_batch(105), ">i", 12, 9, False),  # not a rule: a run ends, the batch is fine
}
EXPECTED = {"intact": [], "another_epoch": [], "crc_mismatch": [rules.CRC_MISMATCH],
            "not_following_equal": [rules.NOT_FOLLOWING], "not_following_below": [rules.NOT_FOLLOWING],
            "negative_base": [rules.NOT_FOLLOWING], "negative_delta": [rules.NEGATIVE_DELTA],
            "negative_count": [rules.NEGATIVE_COUNT], "overflow": [rules.OFFSET_OVERFLOW]}
# the first batch below the segment's base (the rest follow it)
BELOW_BASE = [_batch(90), _batch(105), _batch(110)]


def _log(tmp_path: Path, middle: bytes | None, first: bytes | None = None, last: bool = True) -> tuple[Path, int]:
    d = tmp_path / "logs" / "t-0"
    d.mkdir(parents=True)
    first = _batch(SEG_BASE) if first is None else first
    log = d / f"{SEG_BASE:020d}.log"
    log.write_bytes(first + middle + (_batch(110) if last else b"") if middle is not None else first)
    return log, len(first)


def _rule_verdict(path: Path, position: int, prev_last: int | None) -> list[rules.Violation]:
    (h,) = [x for x in walk(path) if isinstance(x, BatchHeader) and x.position == position]
    if not h.crc_valid:
        return [rules.crc_violation(h, rules.computed_crc(path, h))]
    return rules.header_violations(h, prev_last, SEG_BASE)


def _in_a_run(path: Path, position: int) -> bool:
    return any(type(x) is BatchRun and x.position <= position < x.end
               for x in walk(path, runs=True, base_offset=SEG_BASE))


def test_every_rule_has_one_kind_one_severity_one_message():
    names = [r.name for r in rules.RULES]
    assert len(set(names)) == len(names)
    for r in rules.RULES:
        assert r.severity in ("error", "warning") and r.kind and r.message
    # Kafka splits an overflowed segment (LocalLog.splitOverflowedSegment): nothing to cut, a warning
    assert rules.OFFSET_OVERFLOW.severity == "warning" and not rules.OFFSET_OVERFLOW.cuts
    assert rules.CRC_MISMATCH.cuts and rules.NOT_FOLLOWING.cuts and rules.BELOW_BASE.cuts


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_c_walker_takes_a_batch_into_a_run_only_when_no_rule_fires(tmp_path, case):
    if speedups.C is None:
        pytest.fail("the C accelerator is not built (pip install -e .)")
    log, pos = _log(tmp_path, CASES[case]())
    verdict = _rule_verdict(log, pos, SEG_BASE + 2)
    assert _in_a_run(log, pos) == (not verdict), verdict
    assert [v.rule for v in verdict][:1] == EXPECTED[case]


def test_the_c_walker_and_the_rules_agree_below_the_segment_base(tmp_path):
    if speedups.C is None:
        pytest.fail("the C accelerator is not built (pip install -e .)")
    log, pos = _log(tmp_path, None, first=b"".join(BELOW_BASE))
    verdict = _rule_verdict(log, 0, None)
    assert [v.rule for v in verdict] == [rules.BELOW_BASE]
    assert not _in_a_run(log, 0) and _in_a_run(log, len(BELOW_BASE[0]))


@pytest.mark.parametrize("case", ["crc_mismatch", "negative_delta", "negative_count", "overflow"])
def test_verify_reports_and_repair_cuts_by_the_same_rule(tmp_path, case):
    # (an overflowed batch is the segment's last: with a batch after it, it is one whose offset jumped ahead)
    log, pos = _log(tmp_path, CASES[case](), last=case != "overflow")
    (v,) = _rule_verdict(log, pos, SEG_BASE + 2)[:1]
    found = [f for f in verify_selection(open_path(log.parent), stats=VerifyStats())
             if f.position == pos and f.kind == v.kind]
    assert [(f.severity, f.message) for f in found] == [(v.severity, v.message)]
    plan = plan_repair(open_path(log.parent))
    cuts = [c for a in plan.actions for c in (a.ranges or []) if c.start == pos]
    problems = [p for p in plan.problems if p.kind == v.kind]
    if v.rule.cuts:
        assert [(c.kind, c.reason) for c in cuts] == [(v.kind, v.message)] and not problems
    else:  # kept (the broker copes), reported with the same severity and message
        assert not cuts and [(p.severity, p.message) for p in problems] == [(v.severity, v.message)]


def test_a_control_marker_of_another_type_breaks_a_rule_and_commit_does_not():
    h = BatchHeader(0, 70, 2, 7, 7, 1, 0, True, 0x30, 0, 0, TS, TS, producer_id=3, is_transactional=True,
                    is_control=True)
    assert rules.control_violation(h, "COMMIT") is None and rules.control_violation(h, "ABORT") is None
    assert rules.control_violation(h, "LEADER_CHANGE").rule is rules.BAD_MARKER
    assert rules.control_violation(h, None, "short").rule is rules.UNREADABLE_MARKER
    h.producer_id = -1  # not transactional: the broker reads no marker from it
    assert rules.control_violation(h, "LEADER_CHANGE") is None


def test_the_overlap_rule_names_whose_offset_field_to_blame(tmp_path):
    # v2-compacted-0 with C's baseOffset 20 -> 28 (one bit): C 28..32 over D 30..37 at the end of the log
    src = Path(__file__).resolve().parent.parent / "fixtures" / "java-oracle" / "v2-compacted-0"
    data = bytearray((src / "00000000000000000000.log").read_bytes())
    data[154 + 7] ^= 8
    log = tmp_path / "00000000000000000000.log"
    log.write_bytes(bytes(data))
    _a, _b, c, d = [h for h in walk(log) if isinstance(h, BatchHeader)]

    def blame(**kw):
        args = {"index_offset": None, "seg_start": None, "next_base": None, **kw}
        return rules.overlap_blame(log, c, d, 15, 30, **args)

    assert blame() == rules.BLAME_EITHER  # 20 or 24 fits C, 62 (and more) fits D: as many records each
    assert blame(index_offset=24) == rules.BLAME_THIS  # its .index entry names another base offset for C
    assert blame(index_offset=32) == rules.BLAME_EITHER  # (the entry agrees with C's field)
    assert blame(next_base=40) == rules.BLAME_THIS  # no one-bit change fits D between C and the next segment
    assert blame(seg_start=20) == rules.BLAME_THIS  # C first in its segment: its change gives the segment's name
    assert rules.overlap_blame(log, c, d, 15, 20, index_offset=None, seg_start=None, next_base=None) == \
        rules.BLAME_THIS  # the gap 15..19 fits C's span exactly
    assert rules.overlap_blame(log, c, None, 15, 30, index_offset=None, seg_start=None, next_base=None) == \
        rules.BLAME_NEXT  # nothing CRC-valid to judge against: C kept
