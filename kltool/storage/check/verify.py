"""Verification: every batch's framing and CRC, offsets, indexes against their log by Kafka's
rules (``OffsetIndex``, ``TimeIndex``, ``TransactionIndex`` and their ``sanityCheck``), stale and orphan files, checkpoints, snapshots. Read-only.

:func:`verify_selection` yields :class:`Finding` objects; :class:`VerifyStats` counts what was read.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

from ...errors import CorruptDataError
from ...format import index as fidx
from ...format import names as fn
from ...format.compression import TooLarge
from ...format.records import BatchHeader
from ...plain import Plain
from ..confine import logdir_outside_findings, outside_findings
from ..epochs import EpochWatch, checkpoint_epochs
from ..findings import Finding
from ..fs import read_small_file, read_txn_index_file
from ..logdir import LogDir, Selection, check_file, partition_file_findings, unreadable
from ..partition import Partition
from ..scan import HOLD, BatchRun, Damage, records_of, walk
from ..segment import Segment
from . import batch_rules as rules
from .index_check import IndexChecker
from .reorder import Layout, describe_copy, describe_reorder, layout_without_copies, plan_layout
from .segment_name import (
    SplitRule,
    describe_split,
    first_batches,
    last_offset_of,
    last_out_of_line,
    misnamed_base,
)


class VerifyStats(Plain):
    """Counts of a verify run. ``uncounted_wrappers``: compressed v0/v1 messages whose records a shallow
    verify did not count; ``segment_ends``: partition path -> the log end offset seen."""

    _fields = ("partitions", "segments", "files", "batches", "records", "bytes", "errors", "warnings", "lost_bytes",
               "uncounted_wrappers", "segment_ends")

    def __init__(self, partitions: int = 0, segments: int = 0, files: int = 0, batches: int = 0, records: int = 0,
                 bytes: int = 0, errors: int = 0, warnings: int = 0, lost_bytes: int = 0,  # noqa: A002
                 uncounted_wrappers: int = 0, segment_ends: dict | None = None):
        self.partitions = partitions
        self.segments = segments
        self.files = files
        self.batches = batches
        self.records = records
        self.bytes = bytes
        self.errors = errors
        self.warnings = warnings
        self.lost_bytes = lost_bytes
        self.uncounted_wrappers = uncounted_wrappers
        self.segment_ends = {} if segment_ends is None else segment_ends


def _err(kind, file, msg, position=None, offset=None, length=None):
    return Finding("error", kind, str(file), msg, position, offset, length)


def _warn(kind, file, msg, position=None, offset=None, length=None):
    return Finding("warning", kind, str(file), msg, position, offset, length)


def _index_checker(seg: Segment, is_active: bool, log_size: int | None) -> IndexChecker:
    """The one index judge (:class:`~kltool.storage.check.index_check.IndexChecker`) for ``seg``."""
    return IndexChecker(seg.base_offset, seg.index_path, seg.timeindex_path, log_size=log_size, is_active=is_active)


def _check_txn_index(seg: Segment) -> list[Finding]:
    out: list[Finding] = []
    try:
        data = read_txn_index_file(seg.txnindex_path)  # a trailing run of zero entries read as one
        size = seg.txnindex_path.stat().st_size
    except FileNotFoundError:
        return out
    problems, unchecked = fidx.txn_index_check(data, seg.base_offset, path=str(seg.txnindex_path))
    for msg in problems:
        out.append(_err("index_corrupt", seg.txnindex_path, msg))
    if unchecked is not None:  # garbage: the rest is not checked (a bounded time and output)
        out.append(Finding("info", "index_unchecked", str(seg.txnindex_path),
                           fidx.unchecked_note(len(problems), *unchecked, what="are corrupt")))
    rest = fidx.trailing_bytes(data, fidx.TXN_ENTRY)
    if rest:
        out.append(_warn("index_corrupt", seg.txnindex_path, f"{rest} trailing bytes (a partial entry, ignored "
                         f"by Kafka)", position=size - rest))
    return out


class LogEnd(Plain):
    """What the check of one ``.log`` hands on to the next segment's: ``last``, the highest last offset of its
    valid batches (or what came before it, None: no batch yet), and ``batch``, its last valid batch as
    (position, first offset, last offset, the last offset before it), the one an odd-one-out test blames."""

    __slots__ = _fields = ("last", "batch")

    def __init__(self, last: int | None, batch: tuple | None):
        self.last = last
        self.batch = batch


def verify_log_file(path: Path, *, base_offset: int | None, deep: bool, stats: VerifyStats,
                    progress: Callable[[int], None] | None = None, prev_last: int | None = None,
                    index_check: IndexChecker | None = None, live_tail: bool = False,
                    epochs: EpochWatch | None = None, next_base: int | None = None) -> Generator[Finding, None, LogEnd]:
    """Findings for one ``.log`` file, by the batch rules (:mod:`kltool.storage.check.batch_rules`); returns
    (the generator's value, ``end = yield from verify_log_file(...)``) a :class:`LogEnd`. ``prev_last`` is
    the last offset before the file; ``epochs`` follows the partition's leader epochs across its segments
    (a file alone: its own); ``next_base`` is the next segment's base offset (None: none)."""
    check = _LogCheck(path, base_offset, deep, stats, index_check, live_tail,
                      epochs if epochs is not None else EpochWatch(), prev_last, next_base)
    for item in walk(path, with_data=deep, progress=progress, runs=True, prev_last=prev_last, base_offset=base_offset,
                     deep=deep, want_cols=index_check is not None and index_check.pending, hold_limit=HOLD):
        if type(item) is BatchRun:  # batches the C walker checked: nothing to report, only to count
            f = check.run(item)
            if f is not None:
                yield f
        elif isinstance(item, Damage):
            yield check.damage(item)
        else:
            yield from check.batch(item)
    return LogEnd(check.last, check.prev)


class _LogCheck:
    """The state of one file's check, in file order: the last offset so far and the previous valid batch
    (position, first offset, last offset, the last offset before it)."""

    __slots__ = ("path", "base_offset", "deep", "stats", "index_check", "live_tail", "epochs", "last", "prev",
                 "next_base", "gap")

    def __init__(self, path, base_offset, deep, stats, index_check, live_tail, epochs, last, next_base=None):
        self.next_base = next_base
        self.path = path
        self.base_offset = base_offset
        self.deep = deep
        self.stats = stats
        self.index_check = index_check
        self.live_tail = live_tail
        self.epochs = epochs
        self.last = last
        self.prev = None
        self.gap = False  # damage since the previous valid batch (then it is no witness against the next one)

    def run(self, item: BatchRun) -> Finding | None:
        stats = self.stats
        stats.batches += item.batches
        stats.bytes += item.size
        stats.records += item.records
        if self.index_check is not None:
            self.index_check.run(item)
        base, first_last, epoch = item.first()
        found = self.epochs.batches(epoch, item.batches, self.path, item.position, base, first_last)
        pos, tail_base, before = item.tail
        self.prev = (pos, tail_base, item.last_offset, self.last if item.batches == 1 else before)
        self.last = item.last_offset
        self.gap = False
        return found

    def damage(self, item: Damage) -> Finding:
        # (no gap for the epochs: a repair cuts it, its neighbours meet)
        self.gap = True
        if self.live_tail and item.resumed_at is None:
            # The active segment of a running broker: a write in progress, or preallocated space.
            return _warn(item.kind, self.path, f"{item.message} (a broker or another kltool holds this log dir: "
                         f"probably a write in progress or preallocated space)", position=item.position,
                         length=item.length)
        where = "" if item.resumed_at is None else f"; valid batches resume at byte {item.resumed_at}"
        self.stats.lost_bytes += item.length
        return Finding(rules.damage_rule(item.kind), item.kind, str(self.path), f"{item.message}{where}",
                       item.position, None, item.length)

    def _count(self, h: BatchHeader) -> None:
        stats = self.stats
        stats.batches += 1
        stats.bytes += h.size
        if h.count is not None:
            stats.records += h.count
        elif h.compression == 0:
            stats.records += 1  # an uncompressed v0/v1 message is one record
        elif not self.deep:
            stats.uncounted_wrappers += 1

    def batch(self, h: BatchHeader) -> Iterator[Finding]:
        self._count(h)
        path = self.path
        if not h.crc_valid:
            self.gap = True
            yield _finding(path, rules.crc_violation(h, rules.computed_crc(path, h)), h.position, length=h.size)
            return
        if h.magic == 2:
            odd_epoch = self.epochs.batches(h.partition_leader_epoch, 1, path, h.position, h.base_offset,
                                            h.last_offset)
            if odd_epoch is not None:
                yield odd_epoch
        else:
            self.epochs.gap()  # a v0/v1 message
        lo = rules.first_offset(h)
        odd = _odd_one_out(self.prev, lo, self.last)
        blamed = None
        if odd is not None:
            # the previous batch, not this one, is out of line: its offset field (not covered by the CRC), or
            # its lastOffsetDelta when its records end before this batch; unless the overlap rule keeps it
            # (rules.overlap_blame, the rule repair cuts by): then this batch is
            blamed = _odd_finding(path, odd, lo, self.base_offset, h, self.next_base,
                                  None if self.gap else self._overlap)
            if isinstance(blamed, Finding):
                yield blamed
                self.last = odd[3]
                blamed = None
        violations = rules.header_violations(h, self.last, self.base_offset)
        if blamed is not None:
            yield from blamed.findings(h, violations)
        else:
            for v in violations:
                yield _finding(path, v, h.position)
        if self.deep or (h.is_control and h.producer_id >= 0):
            yield from _check_records(path, h, self.deep, self.stats)
        if self.index_check is not None:
            self.index_check.batch(h)
        self.prev = (h.position, lo, h.last_offset, self.last)
        self.gap = False
        if self.last is None or h.last_offset > self.last:
            self.last = h.last_offset

    def _overlap(self, c: BatchHeader, d: BatchHeader, low: int, before: int | None) -> _NextBlamed | None:
        """Batch ``c`` starts in order (at or after ``low``) and ``d``, the valid batch right after it, starts inside
        it: when the overlap rule (rules.overlap_blame) keeps ``c`` and ``d`` is the witness repair trusts after
        it (its own successor does not contradict it), what ``d`` is blamed with; else None (``c`` is)."""
        lo, nlo = rules.first_offset(c), rules.first_offset(d)
        if not low <= lo <= nlo or (d.magic != 2 and d.compression != 0):
            return None
        seg_base = self.base_offset
        if d.magic == 2 and seg_base is not None and d.last_offset - seg_base > rules.INT32_MAX:
            return None  # (no witness: past what a v2 segment holds)
        ahead = list(islice(walk(self.path, start=d.end), _AHEAD))
        after = next((x for x in ahead if isinstance(x, BatchHeader) and x.crc_valid), None)
        if after is None:
            if not ahead and last_out_of_line(c.last_offset, d, nlo, self.next_base):
                return None  # (the file's last batch, out of line with the next segment's name: no witness)
            after_first = self.next_base if not ahead else None
        elif d.last_offset >= rules.first_offset(after):
            return None  # its successor contradicts it: repair trusts the one after, and blames ``c``
        else:
            after_first = rules.first_offset(after)
        idx = self.index_check.index_offset_at(c.position) if self.index_check is not None else None
        blame = rules.overlap_blame(self.path, c, d, low, nlo, index_offset=idx,
                                    seg_start=seg_base if before is None else None, next_base=self.next_base)
        if blame == rules.BLAME_THIS:
            return None
        note = rules.either_note(c.position, c.base_offset, c.last_offset) if blame == rules.BLAME_EITHER else ""
        return _NextBlamed(self.path, c.last_offset, after_first, note)


_AHEAD = 256  # items looked at past a batch for the next valid one (as repair's look-ahead, segscan.Peek.LIMIT)


class _NextBlamed:
    """The findings of a batch that the overlap rule blames instead of the one before it, which it overlaps
    (kept, ending at ``kept_last``): as ``verify --repair`` judges it in its turn, its offset field when the valid
    batch after it (at ``after_first``) follows the kept one, else the order rule; ``note`` is
    rules.either_note when either could be the damaged one."""

    __slots__ = ("path", "kept_last", "after_first", "note")

    def __init__(self, path, kept_last: int, after_first: int | None, note: str):
        self.path, self.kept_last, self.after_first, self.note = path, kept_last, after_first, note

    def findings(self, h: BatchHeader, violations: list[rules.Violation]) -> Iterator[Finding]:
        for v in violations:
            if v.rule is not rules.NOT_FOLLOWING:
                yield _finding(self.path, v, h.position)
            elif self.after_first is not None and self.after_first > self.kept_last:
                yield _odd_field_finding(self.path, (h.position, rules.first_offset(h), h.last_offset,
                                                     self.kept_last), self.after_first)
            else:
                yield Finding(v.severity, v.kind, str(self.path), v.message + self.note, h.position, v.offset, None)


def _finding(path, v: rules.Violation, position: int, length: int | None = None) -> Finding:
    return Finding(v.severity, v.kind, str(path), v.message, position, v.offset, length)


# What repair does with a CRC-valid batch whose records Kafka's reader rejects (its records count lying low or
# high, a record's length, a codec frame), and why: the one line verify --deep says of it (kltool-verify(1)).
def kept_note(after: int) -> str:
    return (f"its CRC checks, so Kafka's recovery keeps it (it parses no records) and `kltool verify --repair` keeps "
            f"it too (report only: nothing in it is cut or rewritten); consumers fail at this batch; `kltool "
            f"retention --before-offset {after}` moves the log start offset past it (consumers then skip it, and "
            f"the broker deletes it with its segment)")


def _check_records(path: Path, h: BatchHeader, deep: bool, stats: VerifyStats) -> Iterator[Finding]:
    """Findings for the records of batch ``h``, read a bounded group at a time (records_of): a record over
    --max-record-bytes is record_too_large, anything Kafka's reader rejects record_corrupt (an unreadable
    transaction marker: invalid_control, the batch rule)."""
    n = 0
    prev = None
    control = None
    try:
        for cols in records_of(h, path):
            n += len(cols)
            if control is None and cols.controls:
                control = cols.controls[0]["type"]
            offs = cols.offsets
            if not deep or not offs:
                continue
            in_range = offs[0] >= h.base_offset and offs[-1] <= h.last_offset and (prev is None or offs[0] > prev)
            if not (in_range and cols.ordered):
                for o in offs:
                    if o < h.base_offset or o > h.last_offset or (prev is not None and o <= prev):
                        yield _err("offset_order", path, f"record offset {o} outside or out of order in "
                                   f"batch {h.base_offset}..{h.last_offset}", position=h.position, offset=o)
                        deep = False  # one finding per batch
                        break
                    prev = o
            prev = offs[-1]
    except CorruptDataError as e:
        if isinstance(e, TooLarge):
            msg = e.message if e.message.startswith("batch ") else f"batch {h.base_offset}..{h.last_offset}: {e.message}"
            yield _err("record_too_large", path, msg, position=h.position,
                       offset=e.offset if e.offset is not None else h.base_offset)
        elif (v := rules.control_violation(h, None, e.message)) is not None:
            yield _finding(path, v, e.position if e.position is not None else h.position)
        else:
            yield _err("record_corrupt", path, f"batch {h.base_offset}..{h.last_offset}: {e.message}; "
                       f"{kept_note(h.last_offset + 1)}", position=e.position if e.position is not None else h.position,
                       offset=h.base_offset)
        return
    v = rules.control_violation(h, control)
    if v is not None:
        yield _finding(path, v, h.position)
    if h.magic < 2 and h.compression != 0:
        stats.records += n


def _odd_finding(path, odd, lo: int, seg_base: int | None, nb: BatchHeader | None = None,
                 next_base: int | None = None, overlap=None) -> Finding | _NextBlamed:
    """The finding for the batch ``odd`` (position, first offset, last offset, the last offset before it) that the
    batch ``nb`` (None: the next segment) starting at ``lo`` contradicts: a lastOffsetDelta that runs past its own
    records (rules.range_violation, the rule repair cuts by), else its offset field; unless ``overlap`` (the odd
    batch, ``nb``, the first offset the log may go on at, the last offset before it) says ``nb`` is the one to
    blame (rules.overlap_blame): then how (:class:`_NextBlamed`)."""
    pos, _base, _plast, before = odd
    h = next((x for x in walk(path, start=pos) if isinstance(x, BatchHeader)), None)
    if h is not None and h.position == pos:
        low = before + 1 if before is not None else (seg_base if seg_base is not None else h.base_offset)
        moved = None if nb is None else \
            (lambda: rules.fits_between(nb, h.last_offset, rules.first_after(path, nb.end, next_base)))
        v = rules.range_violation(h, low, lo, lambda: rules.records_end(path, h), moved)
        if v is not None:
            return _finding(path, v, pos, length=h.size)
        blamed = None if overlap is None or nb is None else overlap(h, nb, low, before)
        if blamed is not None:
            return blamed
    return _odd_field_finding(path, odd, lo)


def _odd_field_finding(path, odd, lo: int) -> Finding:
    pos, base, _plast, before = odd
    return _err("offset_field", path, f"batch at byte {pos} has offset field {base} (not covered by the CRC) that its "
                f"neighbours contradict (after {before}, before {lo}): kltool verify --repair restores it when they "
                f"fix its value, else cuts only that batch", position=pos, offset=base)


def _odd_one_out(prev, lo: int, last: int | None):
    """When the batch at ``lo`` breaks the offset order only because the batch before it (``prev``: position,
    first offset, last offset, the last offset before it) jumped ahead (that one's offset field, which the CRC
    does not cover, is wrong: it is above this batch while this one still follows the batch before it),
    ``prev``; else None."""
    if prev is None or last is None or lo > last:
        return None
    _pos, _base, plast, before = prev
    if plast != last or (before is not None and lo <= before):
        return None
    return prev


def verify_partition(p: Partition, *, deep: bool = False, stats: VerifyStats,
                     progress: Callable[[int], None] | None = None) -> Iterator[Finding]:
    stats.partitions += 1
    segs = p.segments
    end = LogEnd(None, None)  # what the segments so far hand on
    epochs = EpochWatch(checkpoint_epochs(p.path))
    splits = _Splits(segs)
    for i, seg in enumerate(segs):
        stats.segments += 1
        size = seg.size
        is_active = i == len(segs) - 1
        last = end.last
        odd = _odd_one_out(end.batch, seg.base_offset, last) if i else None
        if odd is not None:  # the previous segment's last batch jumped past this segment's base offset
            yield _odd_finding(segs[i - 1].log_path, odd, seg.base_offset, segs[i - 1].base_offset)
            last = odd[3]
        elif last is not None and seg.base_offset <= last:
            yield _err("offset_order", seg.log_path, f"segment base offset {seg.base_offset} is not above the "
                       f"previous segment's last offset {last}", offset=seg.base_offset)
        content_base = seg.base_offset
        named = _misnamed(seg, size, last, segs[i + 1].base_offset if i + 1 < len(segs) else None)
        if named is not None:
            # one finding for a wrong file name, not one per batch "below the segment's base offset"
            content_base = named
            yield _err("segment_base_offset", seg.log_path, f"the file name says base offset {seg.base_offset} but "
                       f"its batches start at {named} (the name is covered by no CRC): kltool verify "
                       f"--repair renames the segment and rebuilds its indexes", offset=named)
        ic = _index_checker(seg, is_active, size)
        early = len(ic.findings)
        yield from ic.findings
        yield from _check_txn_index(seg)
        walked = verify_log_file(seg.log_path, base_offset=content_base, deep=deep, stats=stats,
                                 live_tail=is_active and _broker_running(p), progress=progress,
                                 prev_last=last, index_check=ic, epochs=epochs,
                                 next_base=segs[i + 1].base_offset if i + 1 < len(segs) else None)
        split = splits.of(i) if named is None else None
        seg_end = yield from _unless_split(walked, split)
        if not split:  # (a split segment's indexes are rebuilt for its new segments)
            yield from ic.finish()[early:]
        end = LogEnd(seg_end.last if seg_end.last is not None else last, seg_end.batch)
    leo = (end.last + 1) if end.last is not None else (segs[-1].base_offset if segs else 0)
    stats.segment_ends[str(p.path)] = leo
    for f in p.stale_files:
        yield _warn("stale_file", f, f"leftover {f.suffix} file from an interrupted broker operation "
                    f"(the broker finishes or deletes it at startup)")
    for f in p.orphan_indexes:
        yield _warn("orphan_index", f, "index file without a .log file (the broker deletes it at startup)")
    for f in p.temp_files:
        yield _warn("stale_file", f, "leftover temporary file")
    for f in p.other_files:
        yield _warn("unknown_file", f, "not a file Kafka writes in a partition directory")
    yield from _check_partition_files(p, leo)
    for snap in p.kraft_snapshots:
        yield from verify_log_file(snap, base_offset=None, deep=deep, stats=stats, progress=progress)


_OFFSET_KINDS = ("offset_order", "offset_field", "offset_overflow")


class _Splits:
    """Which segments ``verify --repair`` splits (:class:`~kltool.storage.check.segment_name.SplitRule`, the
    rule repair plans by), asked only of a segment whose walk finds an offset out of place."""

    def __init__(self, segs: list[Segment]):
        self.segs = segs
        self.rule: SplitRule | None = None

    def of(self, i: int) -> _SegSplit:
        return _SegSplit(self, i)

    def plan(self, i: int):
        if self.rule is None:
            self.rule = SplitRule([(s.base_offset, s.log_path) for s in self.segs])
            self.layout = plan_layout(self.rule)  # (runs out of order across files: reordered, check/reorder.py)
            # (else, a copied segment file set aside and the rest reordered: the rule repair plans by)
            self.copies = layout_without_copies(self.rule) if self.layout is None else None
        if self.layout is not None and i in self.layout.region:
            return self.layout
        ca = self.copies
        if ca is not None:
            if i in ca.aside:
                return _Copy(self.rule.contents(self.segs[i].log_path))
            if i in ca.rest and ca.rest.index(i) in ca.layout.region:
                return ca.layout
        return self.rule.plan(i)

    def refusal(self, i: int) -> str | None:
        """Why segment ``i`` is not split, when its batches overlap another segment's different data."""
        return self.rule.refusals.get(i) if self.rule is not None else None


@dataclass
class _Copy:
    """A copied segment file repair sets aside (:func:`~kltool.storage.check.reorder.layout_without_copies`)."""

    contents: object


class _SegSplit:
    """One segment's split, decided at its first offset finding (None until then, or when there is none)."""

    def __init__(self, splits: _Splits, i: int):
        self.splits, self.i = splits, i
        self.asked = False
        self.plan = None

    def __bool__(self) -> bool:
        return self.plan is not None

    def ask(self) -> Finding | None:
        """The one finding for a segment repair splits (None: not one)."""
        if self.asked:
            return None
        self.asked = True
        self.plan = self.splits.plan(self.i)
        if self.plan is None:
            return None
        seg = self.splits.segs[self.i]
        name_of = lambda b: fn.segment_file(b, "log")  # noqa: E731
        if isinstance(self.plan, Layout):
            msg = describe_reorder(self.plan, name_of)
        elif isinstance(self.plan, _Copy):
            msg = f"{describe_copy(self.plan.contents)}: kltool verify --repair moves it into the backup"
        else:
            msg = describe_split(self.plan, seg.base_offset, name_of)
        return _err("segment_split", seg.log_path, msg, offset=seg.base_offset)


def _unless_split(walked: Generator[Finding, None, LogEnd], split: _SegSplit | None) -> Generator[Finding, None, LogEnd]:
    """The findings of a segment's walk, except that a segment repair splits (asked at its first offset
    finding) is one ``segment_split`` finding instead of one per batch out of place."""
    while True:
        try:
            f = next(walked)
        except StopIteration as stop:
            return stop.value
        if split is not None and f.kind in _OFFSET_KINDS:
            asked = split.asked
            first = split.ask()
            if first is not None:
                yield first
            if split:
                continue
            why = None if asked else split.splits.refusal(split.i)
            if why is not None:  # (said once, at the segment's first offset finding)
                f = Finding(f.severity, f.kind, f.file, f"{f.message}; {why}", f.position, f.offset, f.length)
        yield f


def _misnamed(seg: Segment, size: int, last: int | None, next_base: int | None) -> int | None:
    """The offset a segment's content starts at when its file name (which no CRC covers) is what is wrong
    (:func:`~kltool.storage.check.segment_name.misnamed_base`, the rule repair renames by)."""
    if not size:
        return None
    firsts = first_batches(seg.log_path, 2, end=min(size, 1 << 20))
    return misnamed_base(firsts, seg.base_offset, last, next_base, lambda: last_offset_of(seg.log_path))


def _broker_running(p: Partition) -> bool:
    """Does a broker (or another kltool) hold the partition's log dir (its .lock)? Cached per log dir."""
    ld = p.logdir
    if ld is None:
        return False
    cached = getattr(ld, "_broker_running", None)
    if cached is None:
        from ..fs import lock_holder_present

        try:
            cached = ld.lock_path.exists() and lock_holder_present(ld.path)
        except OSError:
            cached = False
        ld._broker_running = cached
    return cached


def _check_partition_files(p: Partition, leo: int) -> Iterator[Finding]:
    from ...format.checkpoints import parse_leader_epoch_checkpoint
    from ..fs import read_snapshot

    for off, path in p.snapshots:
        try:
            snap = read_snapshot(path, entries=False)
        except CorruptDataError as e:
            yield _err("snapshot_corrupt", path, e.message, position=e.position)
            continue
        except OSError as e:
            yield unreadable(path, e)
            continue
        if not snap.crc_valid:
            yield _err("snapshot_corrupt", path, f"Snapshot is corrupt (CRC is no longer valid). Stored crc: "
                       f"{snap.crc}. Computed crc: {snap.computed_crc}", position=2)
        if off > leo:
            yield _warn("snapshot_beyond_end", path, f"producer snapshot at offset {off} is beyond the log end "
                        f"offset {leo} (the broker deletes it)", offset=off)
    lec = p.path / fn.LEADER_EPOCH_CHECKPOINT
    bad = check_file(lec, "leader_epoch_checkpoint")
    if bad is not None:
        yield bad
    elif lec.exists():
        prev = None
        for epoch, start in parse_leader_epoch_checkpoint(read_small_file(lec)):
            if prev is not None and (epoch <= prev[0] or start < prev[1]):
                yield _err("checkpoint_corrupt", lec, f"leader epochs out of order: ({prev[0]}, {prev[1]}) then "
                           f"({epoch}, {start})")
            if start > leo:
                yield _warn("checkpoint_beyond_end", lec, f"leader epoch {epoch} starts at {start}, beyond the log "
                            f"end offset {leo}", offset=start)
            prev = (epoch, start)
    for f in (check_file(p.path / fn.PARTITION_METADATA, "partition_metadata"), *partition_file_findings(p)):
        if f is not None:
            yield f


def _check_logdir(ld: LogDir, stats: VerifyStats) -> Iterator[Finding]:
    from ..fs import lock_holder_present

    try:
        if ld.lock_path.exists() and lock_holder_present(ld.path):
            yield _warn("broker_lock_held", ld.lock_path, "a broker or another kltool holds this log dir (reading only)")
    except OSError:
        pass
    for d in ld.unknown_dirs:
        yield _err("unknown_dir", d, "not a topic-partition directory: a broker refuses to start with it in its "
                   "log dir (move it out)")
    yield from ld.file_findings()  # meta.properties, .kafka_cleanshutdown, kltool-topics.json; unreadable ones
    yield from _check_root_checkpoints(ld, ld.partitions, stats)


def _check_root_checkpoints(ld: LogDir, partitions, stats: VerifyStats) -> Iterator[Finding]:
    """The entries of ``partitions`` in the log dir's offset checkpoints (all of its partitions for a log dir,
    the selected ones when partition dirs are given)."""
    for name in fn.ROOT_OFFSET_CHECKPOINTS:
        try:
            cp = ld.checkpoint(name)
        except CorruptDataError as e:
            yield _err("unknown_version" if getattr(e, "unknown_version", False) else "checkpoint_corrupt",
                       ld.path / name, e.message, position=e.position)
            continue
        except OSError:
            continue  # (an unreadable finding from file_findings)
        for p in partitions:
            v = cp.get((p.topic, p.partition))
            leo = stats.segment_ends.get(str(p.path))
            if v is None or leo is None or p.kind != "normal":
                continue
            if v > leo:
                sev = _err if name == fn.LOG_START_OFFSET_CHECKPOINT else _warn
                hint = {
                    fn.LOG_START_OFFSET_CHECKPOINT: "the broker will delete every segment of this partition",
                    fn.RECOVERY_POINT_CHECKPOINT: "the recovery point is past the log end",
                    fn.REPLICATION_OFFSET_CHECKPOINT: "the high watermark is past the log end",
                    fn.CLEANER_OFFSET_CHECKPOINT: "the cleaner resets it",
                }[name]
                yield sev("checkpoint_beyond_end", ld.path / name, f"{p.name}: {v} is beyond the log end offset "
                          f"{leo}: {hint}", offset=v)


def verify_selection(sel: Selection, *, deep: bool = False, stats: VerifyStats | None = None,
                     progress: Callable[[int], None] | None = None) -> Iterator[Finding]:
    """All findings for a selection (log dirs, partitions, single files)."""
    stats = stats if stats is not None else VerifyStats()

    def count(fs):
        for f in fs:
            if f.severity == "error":
                stats.errors += 1
            elif f.severity == "warning":  # info is a note, not a problem
                stats.warnings += 1
            yield f

    for p in sel.partitions:
        yield from count(outside_findings(p))  # a symlink out of the log dir (storage/confine.py)
        try:
            yield from count(verify_partition(p, deep=deep, stats=stats, progress=progress))
        except BrokenPipeError:
            raise
        except OSError as e:  # a file or directory it may not read: reported, and the run goes on
            yield from count([unreadable(e.filename or p.path, e, f"the rest of partition {p.name} was not checked")])
    whole = {os.path.abspath(ld.path) for ld in sel.logdirs}
    parents: dict[str, tuple[LogDir, list[Partition]]] = {}
    for p in sel.partitions:  # partition dirs given alone: their own entries in the parent log dir's checkpoints
        if p.logdir is not None and os.path.abspath(p.logdir.path) not in whole and not outside_findings(p):
            parents.setdefault(os.path.abspath(p.logdir.path), (p.logdir, []))[1].append(p)
    for ld, ps in parents.values():
        yield from count(_check_root_checkpoints(ld, ps, stats))
    for ld in sel.logdirs:
        yield from count(logdir_outside_findings(ld.path))
        yield from count(_check_logdir(ld, stats))
    for f in sel.files:
        stats.files += 1
        yield from count(verify_file(f, deep=deep, stats=stats, progress=progress))


def verify_file(path: Path, *, deep: bool, stats: VerifyStats,
                progress: Callable[[int], None] | None = None) -> Iterator[Finding]:
    """A single file named on the command line, checked by its type."""
    from ...format.names import classify

    kind, base = classify(path)
    if kind == "log":
        seg = Segment(path.parent, base, path) if base is not None else None
        ic = None
        if seg is not None:  # a single .log is checked against its indexes, their file checks aside
            ic = _index_checker(seg, False, os.path.getsize(path))
            early = len(ic.findings)
        yield from verify_log_file(path, base_offset=base, deep=deep, stats=stats, progress=progress,
                                   index_check=ic)
        if ic is not None:
            yield from ic.finish()[early:]
    elif kind in ("index", "timeindex", "txnindex"):
        seg = Segment(path.parent, base)
        has_log = seg.log_path.exists()
        ic = _index_checker(seg, False, seg.size if has_log else None)
        early = len(ic.findings)
        yield from ic.findings
        yield from _check_txn_index(seg)
        if has_log:
            for h in seg.batches():
                if h.crc_valid:
                    ic.batch(h)
            yield from ic.finish()[early:]
    elif kind == "snapshot":
        from ..fs import read_snapshot

        try:
            snap = read_snapshot(path, entries=False)
        except CorruptDataError as e:
            yield _err("snapshot_corrupt", path, e.message, position=e.position)
        except OSError as e:
            yield unreadable(path, e)
        else:
            if not snap.crc_valid:
                yield _err("snapshot_corrupt", path, f"Snapshot is corrupt (CRC is no longer valid). Stored crc: "
                           f"{snap.crc}. Computed crc: {snap.computed_crc}", position=2)
    elif kind == "kraft_snapshot":
        yield from verify_log_file(path, base_offset=None, deep=deep, stats=stats, progress=progress)
    elif kind in ("offset_checkpoint", "leader_epoch_checkpoint", "partition_metadata", "meta_properties", "json"):
        bad = check_file(path, kind)
        if bad is not None:
            yield bad
    else:
        yield _warn("unknown_file", path, "not a file kltool knows how to check")
