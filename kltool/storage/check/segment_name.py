"""The one rule for a segment whose file name is what is wrong (verify reports it, repair renames the segment).

A segment's base offset lives only in its file name, which no CRC covers. When its first batch starts below
the name, either the name or that batch's offset field (not covered by the CRC either) is damaged. The field
is the one when the batch fits exactly at the name, up to the second batch (its CRC-covered lastOffsetDelta
fills the gap), and one flipped bit turns the name into its value: repair restores the field. Otherwise the name is taken as wrong, as Kafka's recovery takes it:
a batch below a segment's base makes ``ensureOffsetInRange`` raise ``LogSegmentOffsetOverflowException`` and
the loader splits the segment (``LocalLog.splitOverflowedSegment``), the new file named after its first
batch's offset; no data is dropped. kltool renames the segment when its whole content fits between the
neighbouring segments (the same files Kafka's split would leave); when it does not (the segment also holds
offsets another segment holds, or runs of batches in the wrong order), repair splits it the broker's way
(:mod:`kltool.storage.change.split`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import CorruptDataError
from ...format import decode_records
from ...format.records import BatchHeader
from ..scan import Damage, open_segment_file, walk
from . import batch_rules as rules
from . import mend
from .batch_rules import first_offset

__all__ = ["first_batches", "last_offset_of", "misnamed_base", "below_base", "any_below_base", "runs_below_base",
           "split_by_runs", "last_out_of_line", "last_overflows", "SplitRule", "SplitPlan", "Mends", "describe_split", "describe_dups"]


def first_batches(path, n: int = 2, end: int | None = None) -> list[BatchHeader]:
    """The first ``n`` CRC-valid batches of a ``.log`` (up to byte ``end``)."""
    out = []
    for item in walk(path, end=end):
        if isinstance(item, BatchHeader) and item.crc_valid:
            out.append(item)
            if len(out) == n:
                break
    return out


def last_offset_of(path) -> int | None:
    """The highest last offset of a ``.log``'s CRC-valid batches (None: none)."""
    last = None
    for item in walk(path):
        if isinstance(item, BatchHeader) and item.crc_valid:
            last = item.last_offset if last is None else max(last, item.last_offset)
    return last


def _first_offset(h: BatchHeader) -> int | None:
    if h.magic == 2 or h.base_offset_exact:
        return h.base_offset
    return None  # a compressed v0/v1 wrapper: its first inner offset is not in its header


def misnamed_base(firsts: list[BatchHeader], name_base: int, prev_last: int | None, next_base: int | None,
                  last_of: Callable[[], int | None]) -> int | None:
    """The base offset a segment named ``name_base`` should have (its first batch's offset) when its name is
    what is wrong, else None. ``firsts``: its first two CRC-valid batches; ``prev_last``: the previous
    segment's last offset; ``next_base``: the next segment's name; ``last_of``: the segment's last offset
    (read only when needed)."""
    if not firsts:
        return None
    first = firsts[0]
    lo = _first_offset(first)
    if lo is None or not 0 <= lo < name_base or (prev_last is not None and lo <= prev_last):
        return None
    delta = first.last_offset - lo
    if len(firsts) > 1:
        nlo = _first_offset(firsts[1])
        if nlo is None or nlo <= first.last_offset:
            return None
        # the first batch fits exactly between the name and the second batch, and a flipped bit of its own
        # offset field explains it: that field is the damaged one (repair restores it), unless the previous
        # segment's end witnesses the batch's own offset (the content goes on right after it)
        if name_base + delta + 1 == nlo and (lo ^ name_base).bit_count() == 1 and \
                not (prev_last is not None and prev_last + 1 == lo):
            return None
    if next_base is not None:
        last = last_of()
        if last is None or last >= next_base:
            return None
    return lo


def below_base(h: BatchHeader, base: int) -> bool:
    """Does the batch lie below a segment base ``base`` (the order rule's test: a v0/v1 message by its own
    offset, a v2 batch by its base offset)?"""
    return h.last_offset < base or (h.magic == 2 and h.base_offset < base)


def any_below_base(path, base: int) -> bool:
    """Does a CRC-valid batch of the ``.log`` lie below ``base``? (The C walker's runs hold none: only the
    batches outside them are looked at.)"""
    for item in walk(path, runs=True, base_offset=base):
        if isinstance(item, BatchHeader) and item.crc_valid and below_base(item, base):
            return True
    return False


def runs_below_base(batches: list[BatchHeader], base: int) -> list[list[BatchHeader]]:
    """The batches below ``base``, in file order, in runs of ascending offsets."""
    runs: list[list[BatchHeader]] = []
    prev = None
    for h in batches:
        if not below_base(h, base):
            prev = None
            continue
        if prev is not None and first_offset(h) > prev.last_offset:
            runs[-1].append(h)
        else:
            runs.append([h])
        prev = h
    return runs


def split_by_runs(batches: list[BatchHeader], base: int, next_base: int | None = None) -> bool:
    """Is a segment (its CRC-valid batches, in file order) one to split as the broker splits an overflowed
    segment? Batches lie below its base, in runs of at least two batches or in runs the batches around them
    do not explain: one batch alone below the base between neighbours that read in order without it (the
    batch before it and the one after it; for the file's first batch, the name and the one after it) is a
    damaged offset field (the batch walk restores or cuts it), not content that belongs elsewhere. One at the
    end of the file, after a batch above it (batches written in reverse order), or followed by a batch lower
    still, is content: the split keeps it; but not at the end of a segment that is not the last (``next_base``,
    the next segment's name, where the broker rolled the log on), when it fits between the batch before it and
    that name (:func:`last_out_of_line`: Kafka never serves it where its field puts it)."""
    runs = runs_below_base(batches, base)
    return bool(runs) and all(len(r) >= 2 or not _lone_field(batches, r[0], base, next_base) for r in runs)


def last_out_of_line(prev_last: int, h: BatchHeader, first: int, next_base: int | None) -> bool:
    """Is ``h`` (first offset ``first``), the last batch of a segment after a batch ending at ``prev_last``,
    a damaged offset field: the segment is not the last (``next_base``: the next one's name), ``h`` lies below
    the batch before it, or at or past ``next_base`` while that batch lies below it, and its offsets fit between
    the two (where the field would have moved it from)? Kafka does not serve such a batch at its field's
    offsets: below the base, ``LogSegment.recover`` throws and the split the loader tries is refused (only a last
    batch past Int.MAX is split), so the broker does not start; at or past the next segment's name, every fetch
    of those offsets reads the next segment."""
    if next_base is None:
        return False
    out = first <= prev_last or (h.last_offset >= next_base and prev_last < next_base)
    return out and next_base - prev_last - 1 >= h.last_offset - first + 1


def _lone_field(batches: list[BatchHeader], h: BatchHeader, base: int, next_base: int | None = None) -> bool:
    """Is ``h``, alone below ``base``, a damaged offset field: do its neighbours in the file read in order
    without it? (None after it, the last batch: nothing says the log went on past the one before it, unless
    the next segment's name does, :func:`last_out_of_line`.)"""
    k = next(k for k, x in enumerate(batches) if x is h)
    if k + 1 == len(batches):  # a segment of one batch: the file name is what is wrong (misnamed_base), or its field
        return k == 0 or last_out_of_line(batches[k - 1].last_offset, h, first_offset(h), next_base)
    after = first_offset(batches[k + 1])
    return after > (batches[k - 1].last_offset if k else base - 1)


# -- the split: which segments, which pieces (verify reports it, repair applies it: change/split.py) -----------

INT32_MAX = rules.INT32_MAX


@dataclass
class Mends:
    """What repair's batch walk would do with a segment's damage, done the split's way: the damaged ranges cut
    (``cuts``: start, end, kind, message; they stay in the backup with the old file) and the byte fixes of the
    batches a magic or length fix mends (``fixes``: position, old, new; ``whys``: why, by position), which
    the split's copies carry (the old file is not changed; :mod:`kltool.storage.check.mend`, the one home of
    those fixes)."""

    cuts: list[tuple[int, int, str, str]] = field(default_factory=list)
    fixes: list[tuple[int, int, int]] = field(default_factory=list)
    whys: dict[int, str] = field(default_factory=dict)

    def add(self, probe) -> BatchHeader:
        h, fixes, why = probe
        self.fixes.extend(fixes)
        for at, _old, new in fixes:
            self.whys[at] = why if why is not None else mend.magic_why(h.position, new)
        return h

    def describe(self) -> str:
        """What verify and the plan say of them (empty: none)."""
        out = []
        if self.cuts:
            rng = ", ".join(f"bytes [{a}, {b}) {kind}" for a, b, kind, _m in self.cuts[:5])
            more = f" and {len(self.cuts) - 5} more" if len(self.cuts) > 5 else ""
            out.append(f"{len(self.cuts)} damaged range(s) cut, as the batch walk cuts them ({rng}{more}; they stay "
                       f"in the backup with the old file)")
        if self.fixes:
            batches = len({self.whys[p] for p, _o, _n in self.fixes})  # (each why names its batch's position)
            out.append(f"{batches} batch(es) mended (a magic byte or length field the CRC does not cover, "
                       f"{len(self.fixes)} byte(s) restored in the copy, the old file left as it is) and carried")
        return "; ".join(out)


@dataclass
class _Contents:
    """A segment's batches (CRC-valid, in file order), whether the split may take it, and the marker type
    (COMMIT/ABORT) of each transaction control batch, by position."""

    batches: list[BatchHeader]
    clean: bool  # no negative or unreadable first offset, no unreadable marker
    markers: dict[int, str] = field(default_factory=dict)
    firsts: dict[int, int] = field(default_factory=dict)  # a compressed v0/v1 wrapper's first inner offset
    mends: Mends = field(default_factory=lambda: Mends())

    @property
    def damaged(self) -> bool:
        return bool(self.mends.cuts or self.mends.fixes)

    def first(self, h: BatchHeader) -> int:
        return self.firsts.get(h.position, first_offset(h))

    @property
    def lo(self) -> int | None:
        return min((self.first(h) for h in self.batches), default=None)

    @property
    def hi(self) -> int | None:
        return max((h.last_offset for h in self.batches), default=None)


@dataclass
class SplitPlan:
    """One segment split into ``pieces`` (lists of batches, each a new segment named after its first batch),
    ``dups``: its batches whose offsets another copy holds (batch, where the other copy is); ``markers``: the
    marker type of each transaction control batch (by position)."""

    pieces: list[list[BatchHeader]]
    dups: list[tuple[BatchHeader, str]] = field(default_factory=list)
    markers: dict[int, str] = field(default_factory=dict)
    firsts: dict[int, int] = field(default_factory=dict)
    overflow: bool = False  # split because its last batch is more than Int.MAX past its base (plan_overflow)
    mends: Mends = field(default_factory=lambda: Mends())  # the damage cut and the batches mended on the way

    def first(self, h: BatchHeader) -> int:
        """A batch's first offset (a compressed v0/v1 wrapper's: its first inner message's, the broker's
        ``baseOffset()`` of a legacy batch)."""
        return self.firsts.get(h.position, first_offset(h))

    @property
    def bases(self) -> list[int]:
        return [self.first(p[0]) for p in self.pieces]

    @property
    def last(self) -> int | None:
        return max((h.last_offset for p in self.pieces for h in p), default=None)


def _marker(log: Path, h: BatchHeader) -> tuple[str | None, str | None]:
    """(the marker type of a transaction control batch, the error reading it)."""
    with open(log, "rb") as f:
        data = os.pread(f.fileno(), h.size, h.position)
    try:
        cols = decode_records(h, data)
    except CorruptDataError as e:
        return None, e.message
    return ((cols.controls[0] or {}).get("type") if len(cols) and cols.controls else None), None


def _inner_first(log: Path, h: BatchHeader) -> int | None:
    """The first inner offset of a compressed v0/v1 wrapper (its header holds only the last), or None when
    its messages do not read."""
    from ..scan import records_of

    try:
        for cols in records_of(h, log):
            if len(cols):
                return cols.offsets[0]
    except CorruptDataError:
        return None
    return None


def _mended_items(log: Path, mends: Mends) -> Iterator[BatchHeader]:
    """The batches of a ``.log`` as repair's batch walk keeps them, in file order (``SegScan.run``'s damage
    handling, without its offset judgements: a split takes the offsets as they are): CRC-valid batches, and
    damaged ones a magic or length fix mends (the fixes and the damage cut recorded in ``mends``)."""
    fd = open_segment_file(log)
    try:
        size = os.fstat(fd).st_size
        start = 0
        while start is not None:
            items, start = walk(log, start=start), None
            for item in items:
                if isinstance(item, BatchHeader) and item.crc_valid:
                    yield item
                    continue
                pos = item.position
                if isinstance(item, Damage):
                    probe = mend.size_probe(fd, log, size, pos)
                    if probe is not None and probe[0].end <= size:
                        yield mends.add(probe)
                        start = probe[0].end
                        break
                    probe = mend.magic_probe(fd, pos, item.end)
                    if probe is not None:
                        h = mends.add(probe)
                        yield h
                        if h.end < item.end:
                            mends.cuts.append((h.end, item.end, "garbage", "unreadable bytes after a batch whose "
                                               "magic byte was repaired"))
                        continue
                    mends.cuts.append((pos, item.end, item.kind, item.message))
                    continue
                probe = mend.magic_probe(fd, pos, item.end)
                if probe is not None:
                    yield mends.add(probe)
                    continue
                v = rules.crc_violation(item, rules.computed_crc(log, item))
                probe = mend.size_probe(fd, log, size, pos)
                if probe is not None:
                    yield mends.add(probe)
                    start = probe[0].end
                    break
                inner = mend.valid_within(log, item)
                if inner is not None:  # its length (not covered by the CRC) swallows a valid batch: keep that
                    mends.cuts.append((pos, inner, v.kind, v.message))
                    start = inner
                    break
                mends.cuts.append((pos, item.end, v.kind, v.message))
    finally:
        os.close(fd)


def _read(log: Path) -> _Contents:
    batches, clean, markers, firsts, mends = [], True, {}, {}, Mends()
    for item in _mended_items(log, mends):
        if not item.base_offset_exact and item.magic < 2:
            lo = _inner_first(log, item)
            if lo is None or not 0 <= lo <= item.last_offset:
                clean = False
            else:
                firsts[item.position] = lo
        elif not item.base_offset_exact:
            clean = False
        if first_offset(item) < 0 or any(v.rule.cuts for v in rules.field_violations(item)):
            clean = False  # (a negative offset is a damaged field: no segment is named below 0)
        if item.magic == 2 and item.is_control and item.producer_id >= 0:
            ctype, error = _marker(log, item)
            if rules.control_violation(item, ctype, error) is not None or ctype is None:
                clean = False
            else:
                markers[item.position] = ctype
        batches.append(item)
    return _Contents(batches, clean, markers, firsts, mends)


def _same(h: BatchHeader, twin: BatchHeader | None) -> bool:
    """Is ``twin`` a copy of ``h`` (the same offsets, size and CRC)?"""
    return twin is not None and (first_offset(twin), twin.last_offset, twin.size, twin.crc) == \
        (first_offset(h), h.last_offset, h.size, h.crc)  # (the CRC covers a wrapper's inner offsets)


def _pieces(kept: list[BatchHeader], first: Callable[[BatchHeader], int]) -> list[list[BatchHeader]]:
    """``splitOverflowedSegment``: the batches in file order, a new segment whenever a batch does not fit the
    current one (below its base, past Int.MAX of it, or not above its last offset)."""
    pieces: list[list[BatchHeader]] = []
    for h in kept:
        if pieces:
            cur = pieces[-1]
            base = first(cur[0])
            if first(h) > cur[-1].last_offset and 0 <= h.last_offset - base <= INT32_MAX:
                cur.append(h)
                continue
        pieces.append([h])
    return sorted(pieces, key=lambda p: first(p[0]))


def last_overflows(last: int | None, base: int) -> bool:
    """Kafka's ``LogSegment.hasOverflow()``: is the segment's last offset (its last batch's) more than Int.MAX
    past its base? Only then does ``LocalLog.splitOverflowedSegment`` split it; otherwise the loader's split
    fails (``IllegalArgumentException``) and the broker does not start."""
    return last is not None and last - base > INT32_MAX


class SplitRule:
    """The one rule for "split this segment as the broker splits an overflowed one" (:mod:`kltool.storage.
    change.split` has the whole story). ``segs``: the partition's segments as (base offset, ``.log`` path),
    the bases as the plan has them (after renames); each segment's batches are read at most once."""

    def __init__(self, segs: list[tuple[int, Path]]):
        self.segs = segs
        self._contents: dict[Path, _Contents] = {}
        self.refusals: dict[int, str] = {}  # why plan(i) did not split segment i, when verify should say so
        self._by_first: dict[Path, dict[int, BatchHeader]] = {}  # (_copy_of)

    def contents(self, log: Path) -> _Contents:
        c = self._contents.get(log)
        if c is None:
            c = self._contents[log] = _read(log)
        return c

    def span(self, base: int, log: Path) -> tuple[int, int]:
        """The offsets a segment claims: from its name (or its first batch, if lower) to its last batch."""
        c = self.contents(log)
        lo, hi = c.lo, c.hi
        return (base if lo is None else min(base, lo)), (base if hi is None else max(base, hi))

    def plan(self, i: int) -> SplitPlan | None:
        """The split of segment ``i``, or None (not one to split, or one the split may not take)."""
        base, log = self.segs[i]
        if not any_below_base(log, base):
            return None
        c = self.contents(log)
        if not c.clean or not split_by_runs(c.batches, base, self.segs[i + 1][0] if i + 1 < len(self.segs) else None):
            return None
        others = [(b, lg, *self.span(b, lg)) for k, (b, lg) in enumerate(self.segs) if k != i]
        placed = self._place(base, log, c, others)
        if isinstance(placed, str):
            self.refusals[i] = placed
            return None
        if placed is None:
            return None
        kept, dups = placed
        order = {id(h): k for k, h in enumerate(c.batches)}
        pieces = _pieces(sorted(kept, key=lambda h: order[id(h)]), c.first)
        if pieces and not self._safe(pieces, others, c.first):
            return None
        return SplitPlan(pieces, dups, {h.position: c.markers[h.position] for p in pieces for h in p
                                        if h.position in c.markers}, c.firsts, mends=c.mends)

    def plan_overflow(self, i: int) -> SplitPlan | None:
        """The split Kafka's loader makes of segment ``i`` when its recovery meets an offset more than Int.MAX
        past the base (``LogSegmentOffsetOverflowException``) and its last batch overflows (:func:`last_overflows`):
        the batches in file order, a new segment named after the first batch that does not fit the current one,
        nothing dropped. None when the segment is not one, or one the split may not take here: damage (the
        broker's split copies damaged bytes too), offsets not ascending in file order, or a piece over another
        segment's name (the swap completion after a crash would delete that segment)."""
        c = self.contents(self.segs[i][1])
        pieces = self._overflow_pieces(i)
        if pieces is None:
            return None
        others = [(b, lg, b, b) for k, (b, lg) in enumerate(self.segs) if k != i]  # (_safe looks at names only)
        if not self._safe(pieces, others, c.first):
            return None
        return SplitPlan(pieces, [], dict(c.markers), c.firsts, overflow=True)

    def _overflow_pieces(self, i: int) -> list[list[BatchHeader]] | None:
        base, log = self.segs[i]
        c = self.contents(log)
        if not c.clean or c.damaged or not c.batches or not last_overflows(c.batches[-1].last_offset, base):
            return None
        if any(c.first(h) <= prev.last_offset for prev, h in zip(c.batches, c.batches[1:], strict=False)):
            return None
        return _pieces(c.batches, c.first)  # (ascending: the same pieces as the broker's, in file order)

    def overflow_enclosed(self, i: int) -> tuple[list[int], list[int], int] | None:
        """Why :meth:`plan_overflow` does not take segment ``i`` when other segments are named inside the offsets
        its split covers: (the new segments' names, those other names, the split's next offset); None otherwise.
        The broker splits it anyway (``LocalLog.replaceSegments``): a segment named like a new one is replaced
        by it (its files renamed over), the others stay between the new segments; but a split interrupted after
        its ``.swap`` renames is completed at the next start by deleting every segment named inside the
        ``.swap`` files' offsets (``LogLoader``), those others too."""
        pieces = self._overflow_pieces(i)
        if pieces is None:
            return None
        c = self.contents(self.segs[i][1])
        lo, hi = c.first(pieces[0][0]), max(h.last_offset for p in pieces for h in p) + 1
        inside = sorted(b for k, (b, _g) in enumerate(self.segs) if k != i and lo <= b < hi)
        return ([c.first(p[0]) for p in pieces], inside, hi) if inside else None

    def _place(self, base: int, log: Path, c: _Contents, others) -> tuple[list, list] | str | None:
        """(the batches kept, the duplicates with where the other copy is), in offset order; None when a batch
        belongs to no place the split can put it: in a gap between other segments; or why not (what verify
        says) when a batch lies over offsets another batch holds without being its copy (different bytes: a
        damaged offset field or two histories, not told apart here)."""
        floor = max((hi for b, _g, _lo, hi in others if b < base), default=None)
        ceil = min((lo for b, _g, lo, _hi in others if b > base), default=None)
        kept, dups = [], []
        for h in sorted(c.batches, key=lambda h: (c.first(h), h.position)):
            lo, hi = c.first(h), h.last_offset
            other = next((g for _b, g, olo, ohi in others if lo <= ohi and olo <= hi and self.contents(g).batches),
                         None)
            if other is not None or (kept and lo <= kept[-1].last_offset):
                twin = self._copy_of(h, other) if other is not None else kept[-1]
                if not _same(h, twin):
                    where = other.name if other is not None else f"{log.name} at byte {twin.position}"
                    return (f"not split as the broker splits an overflowed segment: the offsets {lo}..{hi} of the "
                            f"batch at byte {h.position} are held with other bytes by {where} (a damaged offset "
                            f"field or two histories, not told apart), so the batch walk judges its batches, "
                            f"cutting those out of place")
                dups.append((h, other.name if other is not None else f"{log.name} at byte {twin.position}"))
            elif (floor is not None and lo <= floor) or (ceil is not None and hi >= ceil):
                return None  # in a gap between other segments: not where the split puts it
            else:
                kept.append(h)
        return kept, dups

    def _copy_of(self, h: BatchHeader, log: Path) -> BatchHeader | None:
        """The batch of segment ``log`` that starts at ``h``'s first offset (by the offset order rule's first)."""
        by_first = self._by_first.get(log)
        if by_first is None:  # (one dict per file: a copied segment of many batches is not a quadratic walk)
            by_first = self._by_first[log] = {}
            for x in self.contents(log).batches:
                by_first.setdefault(first_offset(x), x)
        return by_first.get(first_offset(h))

    @staticmethod
    def _safe(pieces, others, first: Callable[[BatchHeader], int]) -> bool:
        """The broker completes an interrupted swap by deleting every other file named in [the lowest new
        base, the highest next offset): that range must hold no other segment's name (the old segment's is
        moved into it first when it lies outside), and the pieces must not interleave."""
        lo = first(pieces[0][0])
        hi = max(h.last_offset for p in pieces for h in p) + 1
        if any(lo <= b < hi for b, _g, _a, _c in others):
            return False
        return all(p[-1].last_offset < first(q[0]) for p, q in zip(pieces, pieces[1:], strict=False))


def describe_dups(dups: list[tuple[BatchHeader, str]], first: Callable[[BatchHeader], int] = first_offset) -> str:
    parts = [f"{first(h)}..{h.last_offset} (also in {where})" for h, where in dups[:5]]
    more = f" and {len(dups) - 5} more" if len(dups) > 5 else ""
    return ", ".join(parts) + more


def describe_split(sp: SplitPlan, base: int, name_of: Callable[[int], str]) -> str:
    """What ``verify`` says of a segment repair splits (the same pieces the plan writes)."""
    runs = ", ".join(f"{sp.first(p[0])}..{p[-1].last_offset} ({len(p)} batches) -> {name_of(sp.first(p[0]))}"
                     for p in sp.pieces)
    msg = (f"batches lie below the segment's base offset {base} (the file name, covered by no CRC): kltool verify "
           f"--repair splits it as the broker splits a segment with an offset overflow, every intact batch kept: "
           f"{runs or 'no new segment'}")
    if sp.dups:
        msg += (f"; {len(sp.dups)} batch(es) whose offsets are held twice stay only in the backup: "
                f"{describe_dups(sp.dups, sp.first)}")
    if sp.markers:
        msg += f"; {len(sp.markers)} transaction marker(s) carried, the .txnindex rebuilt for each new segment"
    damage = sp.mends.describe()
    if damage:
        msg += f"; {damage}"
    return msg
