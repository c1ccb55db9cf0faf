"""Split a segment whose batches lie below its base offset, the broker's way (issue 23).

What Kafka does (``LogSegment.recover``, ``LogLoader.retryOnOffsetOverflow``, ``LocalLog.splitOverflowedSegment``
and ``LocalLog.replaceSegments``): recovery checks every batch's last offset against the segment's base
(``ensureOffsetInRange``: the offset relative to the base must lie in [0, Int.MAX]); a batch outside raises
``LogSegmentOffsetOverflowException``, and the loader splits the segment instead of cutting anything: it copies
the batches, in file order, into new segments, each named after the base offset of the first batch it holds
(a batch whose offsets do not fit the current new segment starts the next one), writes them as ``.cleaned``
files, renames them ``.swap`` in descending offset order, moves the old files out and renames the ``.swap``
files into place. A crash at any step is undone (a ``.cleaned`` file left: it and the ``.swap`` files at or
above it are deleted) or completed (only ``.swap`` files: the files they replace are deleted, the ``.swap``
files renamed) by ``LogLoader.removeTempFilesAndCollectSwapFiles`` at the next start-up; ``kltool verify
--repair`` does the same (:func:`kltool.storage.change.view.plan_stale`). Kafka 4.4 starts that split only when
``hasOverflow()``, which looks at the last batch alone: batches below the base with later batches above it (a
misnamed segment, runs in the wrong order) make the loader throw ``IllegalArgumentException`` and the broker
exit at start-up (tests/broker/test_broker_split.py pins it). kltool does the split the loader means to do.

kltool plans the same split for a segment none of whose batches is damaged and whose batches below its base
come in runs of at least two (a single batch below the base is a damaged offset field, which the batch walk
restores or cuts; a segment whose whole content fits between its neighbours is renamed instead,
:mod:`kltool.storage.check.segment_name`, where that rule lives). Batches whose offsets another segment (or an
earlier batch of the same file) holds too, as an exact copy (same offsets, size and CRC), are duplicates: the
other copy stays in the log (the one in a segment whose name agrees with its content, and the one a
follower or consumer reading on from the earlier segment gets), and this copy stays in the backup with the
old file, named in the plan. No
intact batch leaves the log otherwise. The new segments get their ``.index`` and ``.timeindex`` by the
broker's recovery rule; the old file and its indexes move into the backup (``restore`` puts them back
byte for byte and removes the new files).

What is left to the batch walk (the split is not planned): damage in the segment, offsets another batch holds
with other bytes (a damaged offset field, or two histories: not told apart here), a v0/v1 compressed wrapper
(its first offset is not in its header), transactional or control batches, batches that would land in a gap
between other segments rather than between the segment's neighbours, and pieces that would enclose another
segment's name (the broker's swap completion would delete that segment).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ...format import names as fn
from ...format.records import BatchHeader
from ..check import batch_rules as rules
from ..check.segment_name import any_below_base, split_by_runs
from ..index_builder import IndexBuilder
from ..scan import walk
from .apply import file_size as _size
from .plan import Action, Cut
from .view import INDEX_KINDS, Seg, View

__all__ = ["Split", "plan_splits"]

INT32_MAX = rules.INT32_MAX


@dataclass
class _Contents:
    """A segment's batches (CRC-valid, in file order) and whether the split may take it."""

    batches: list[BatchHeader]
    clean: bool  # no damage, no inexact first offset, no transactional or control batch

    @property
    def lo(self) -> int | None:
        return min((rules.first_offset(h) for h in self.batches), default=None)

    @property
    def hi(self) -> int | None:
        return max((h.last_offset for h in self.batches), default=None)


@dataclass
class Split:
    """One segment split into ``pieces`` (lists of batches, each a new segment named after its first batch),
    ``dups``: its batches whose offsets another copy holds (batch, where the other copy is)."""

    seg: Seg
    pieces: list[list[BatchHeader]]
    dups: list[tuple[BatchHeader, str]] = field(default_factory=list)

    @property
    def last(self) -> int | None:
        return max((h.last_offset for p in self.pieces for h in p), default=None)

    def advance(self, ctx) -> None:
        """What the batch walk would have carried on from the kept batches (offset order): the last offset kept
        and the leader epochs."""
        for h in sorted((h for p in self.pieces for h in p), key=rules.first_offset):
            if ctx.last is None or h.last_offset > ctx.last:
                ctx.last = h.last_offset
            if h.magic == 2:
                ple = h.partition_leader_epoch
                ctx.last_epoch = ple
                if ple >= 0 and (not ctx.epochs or ple > ctx.epochs[-1][0]):
                    ctx.epochs.append((ple, h.base_offset))


def _read(log: Path) -> _Contents:
    batches, clean = [], True
    for item in walk(log):
        if not isinstance(item, BatchHeader) or not item.crc_valid:
            clean = False
            continue
        if not item.base_offset_exact or item.is_control or item.is_transactional or \
                any(v.rule.cuts for v in rules.field_violations(item)):
            clean = False
        batches.append(item)
    return _Contents(batches, clean)


def _same(h: BatchHeader, twin: BatchHeader | None) -> bool:
    """Is ``twin`` a copy of ``h`` (the same offsets, size and CRC)?"""
    return twin is not None and (rules.first_offset(twin), twin.last_offset, twin.size, twin.crc) == \
        (rules.first_offset(h), h.last_offset, h.size, h.crc)


def _pieces(kept: list[BatchHeader]) -> list[list[BatchHeader]]:
    """``splitOverflowedSegment``: the batches in file order, a new segment whenever a batch does not fit the
    current one (below its base, past Int.MAX of it, or not above its last offset)."""
    pieces: list[list[BatchHeader]] = []
    for h in kept:
        if pieces:
            cur = pieces[-1]
            base = rules.first_offset(cur[0])
            if rules.first_offset(h) > cur[-1].last_offset and 0 <= h.last_offset - base <= INT32_MAX:
                cur.append(h)
                continue
        pieces.append([h])
    return sorted(pieces, key=lambda p: rules.first_offset(p[0]))


class _Planner:
    def __init__(self, view: View, segs: list[Seg], interval: int):
        self.view = view
        self.segs = segs
        self.interval = interval
        self._contents: dict[int, _Contents] = {}

    def contents(self, s: Seg) -> _Contents:
        c = self._contents.get(id(s))
        if c is None:
            c = self._contents[id(s)] = _read(s.log)
        return c

    def span(self, s: Seg) -> tuple[int, int]:
        """The offsets a segment claims: from its name (or its first batch, if lower) to its last batch."""
        c = self.contents(s)
        lo, hi = c.lo, c.hi
        return (s.base if lo is None else min(s.base, lo)), (s.base if hi is None else max(s.base, hi))

    def plan(self, i: int) -> Split | None:
        s = self.segs[i]
        if s.log != s.final or not any_below_base(s.log, s.base):
            return None
        c = self.contents(s)
        if not c.clean:
            return None
        if not split_by_runs(c.batches, s.base):
            return None
        others = [(o, *self.span(o)) for o in self.segs if o is not s]
        placed = self._place(s, c, others)
        if placed is None:
            return None
        kept, dups = placed
        order = {id(h): k for k, h in enumerate(c.batches)}
        pieces = _pieces(sorted(kept, key=lambda h: order[id(h)]))
        if pieces and not self._safe(s, pieces, others):
            return None
        return Split(s, pieces, dups)

    def _place(self, s: Seg, c: _Contents, others) -> tuple[list, list] | None:
        """(the batches kept, the duplicates with where the other copy is), in offset order; None when a batch
        belongs to no place the split can put it: in a gap between other segments, or over offsets another
        batch holds without being its copy (different bytes: a damaged offset field, not a second copy)."""
        floor = max((hi for o, _lo, hi in others if o.base < s.base), default=None)
        ceil = min((lo for o, lo, _hi in others if o.base > s.base), default=None)
        kept, dups = [], []
        for h in sorted(c.batches, key=lambda h: (rules.first_offset(h), h.position)):
            lo, hi = rules.first_offset(h), h.last_offset
            other = next((o for o, olo, ohi in others if lo <= ohi and olo <= hi and self.contents(o).batches), None)
            if other is not None or (kept and lo <= kept[-1].last_offset):
                twin = self._copy_of(h, other) if other is not None else kept[-1]
                if not _same(h, twin):
                    return None
                dups.append((h, other.log.name if other is not None else f"{s.log.name} at byte {twin.position}"))
            elif (floor is not None and lo <= floor) or (ceil is not None and hi >= ceil):
                return None  # in a gap between other segments: not where the split puts it
            else:
                kept.append(h)
        return kept, dups

    def _copy_of(self, h: BatchHeader, o: Seg) -> BatchHeader | None:
        """The batch of segment ``o`` that starts at ``h``'s first offset."""
        lo = rules.first_offset(h)
        return next((x for x in self.contents(o).batches if rules.first_offset(x) == lo), None)

    @staticmethod
    def _safe(s: Seg, pieces, others) -> bool:
        """The broker completes an interrupted swap by deleting every other file named in [the lowest new
        base, the highest next offset): that range must hold no other segment's name (the old segment's is
        moved into it first when it lies outside), and the pieces must not interleave."""
        lo = rules.first_offset(pieces[0][0])
        hi = max(h.last_offset for p in pieces for h in p) + 1
        if any(lo <= o.base < hi for o, _a, _b in others):
            return False
        return all(p[-1].last_offset < rules.first_offset(q[0]) for p, q in zip(pieces, pieces[1:], strict=False))


def _describe_dups(dups: list[tuple[BatchHeader, str]]) -> str:
    parts = [f"{rules.first_offset(h)}..{h.last_offset} (also in {where})" for h, where in dups[:5]]
    more = f" and {len(dups) - 5} more" if len(dups) > 5 else ""
    return ", ".join(parts) + more


def _ranges(piece: list[BatchHeader]) -> list[Cut]:
    """The byte ranges of the old file a new segment is made of (adjacent batches merged)."""
    out: list[Cut] = []
    for h in piece:
        if out and out[-1].end == h.position:
            out[-1].end = h.end
            out[-1].last_offset = h.last_offset
        else:
            out.append(Cut(h.position, h.end, "copy", "copied into the new segment", rules.first_offset(h),
                           h.last_offset))
    return out


def _indexes(piece: list[BatchHeader], base: int, interval: int) -> tuple[bytes, bytes]:
    b = IndexBuilder(base, interval)
    pos = 0
    for h in piece:
        b.on_batch(pos, h.size, h.last_offset, h.max_timestamp)
        pos += h.size
    b.finish()
    return b.offset_index_bytes(), b.time_index_bytes()


def _split_actions(sp: Split, interval: int) -> list[Action]:
    """``replaceSegments`` as plan steps: the new segments written as ``.cleaned`` files, renamed ``.swap`` in
    descending offset order, the old segment's files moved into the backup, the ``.swap`` files renamed into
    place."""
    s, d = sp.seg, sp.seg.log.parent
    names = [fn.segment_file(rules.first_offset(p[0]), "log") for p in sp.pieces]
    why = (f"its batches lie below its base offset {s.base}: split as the broker's recovery splits a segment with "
           f"an offset overflow (LocalLog.splitOverflowedSegment), each new segment named after its first batch")
    acts: list[Action] = []
    log, indexes = s.log, [getattr(s, k) for k in INDEX_KINDS]
    if sp.pieces:
        lo = rules.first_offset(sp.pieces[0][0])
        if not lo <= s.base <= sp.last:
            # the broker completes an interrupted swap by deleting the files named in [lo, last + 1): the old
            # segment takes the first new name first (its indexes, relative to the old name, go now)
            for cur in indexes:
                if cur is not None:
                    acts.append(Action("quarantine", cur, f"index of the split segment {s.base}", old_size=_size(cur)))
            indexes = []
            log = d / fn.segment_file(lo, "log")
            acts.append(Action("rename", s.log, f"moved to the first new segment's name, so that an interrupted "
                               f"split is completed or undone over the offsets it covers: {why}", target=log))
    kinds = ("log", "index", "timeindex")
    for p in sp.pieces:
        base = rules.first_offset(p[0])
        size = sum(h.size for h in p)
        acts.append(Action("create", d / fn.segment_file(base, "log", "cleaned"), f"new segment {base}..{p[-1].last_offset} "
                           f"({len(p)} batches) from {s.log.name}: {why}", new_size=size, source=log,
                           ranges=_ranges(p), first_offset=base, last_offset=p[-1].last_offset))
        oi, ti = _indexes(p, base, interval)
        for kind, data in (("index", oi), ("timeindex", ti)):
            acts.append(Action("create", d / fn.segment_file(base, kind, "cleaned"), f"the index of the new segment "
                               f"{base} (the broker's recovery rule)", data=data, new_size=len(data)))
    for p in reversed(sp.pieces):
        base = rules.first_offset(p[0])
        for kind in kinds:
            acts.append(Action("rename", d / fn.segment_file(base, kind, "cleaned"), "new segment complete: "
                               ".cleaned -> .swap (descending offsets, as the broker renames)",
                               target=d / fn.segment_file(base, kind, "swap")))
    reason = f"replaced by {', '.join(names)}" if names else "every batch in it is held by another segment too"
    if sp.dups:
        reason += (f"; {len(sp.dups)} batch(es) whose offsets are held twice stay only in the backup with this file, "
                   f"the other copy stays in the log: {_describe_dups(sp.dups)}")
    acts.append(Action("quarantine", log, reason, old_size=_size(s.log)))
    for cur in indexes:
        if cur is not None:
            acts.append(Action("quarantine", cur, f"index of the split segment {s.base}", old_size=_size(cur)))
    for p in sp.pieces:
        base = rules.first_offset(p[0])
        for kind in kinds:
            acts.append(Action("rename", d / fn.segment_file(base, kind, "swap"), "swap the new segment in",
                               target=d / fn.segment_file(base, kind)))
    return acts


def plan_splits(view: View, segs: list[Seg], acts: list[Action], *,
                interval: int) -> dict[int, Split]:
    """Plan the split of every segment that needs one (appending to ``acts``); returns {id(seg): Split} of
    the segments split (the batch walk skips them; :meth:`Split.advance` carries its state on)."""
    planner = _Planner(view, segs, interval)
    out: dict[int, Split] = {}
    for i, s in enumerate(segs):
        sp = planner.plan(i)
        if sp is None:
            continue
        out[id(s)] = sp
        acts.extend(_split_actions(sp, interval))
    return out

