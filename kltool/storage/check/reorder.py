"""The one rule for a partition whose intact batches are out of order across its files: runs of batches in the
wrong order inside a file, or the contents of two segment files swapped (repair reorders them:
:func:`kltool.storage.change.split.plan_reorder`).

A partition's intact batches (CRC-valid, or mended by a magic or length fix: :mod:`kltool.storage.check.mend`)
are read in file order, segment after segment by name; a batch whose first offset does not lie above the one
before it starts a new *run*. When the batches, sorted by offset, overlap nowhere (an exact copy, the same
offsets, size and CRC, counts once), the order of the log is known and no intact batch has to go: each run
becomes or joins the segment named for its first offset (a new segment starts at each run's first batch, and
where the file the batches come from changes), every segment named after its first batch's base offset, the
offsets strictly increasing across segments. The segments whose content does not change keep their files.

The offset field (v2 ``baseOffset``, a v0/v1 message's offset) is not covered by the CRC, so a batch out of
order may be one whose field is damaged, and no reordering may serve its records at the offsets the damaged
field says. Kafka itself never serves such a batch where its field puts it (``LogSegment.recover`` meets a
batch below the segment's base: ``LogSegmentOffsetOverflowException``, and the split that follows is refused
unless the *last* batch overflows, so the broker does not start; a batch at or past the next segment's base
offset is shadowed by that segment for every fetch). So the rule takes a batch at its field's offsets only
where nothing says the field is damaged; these are *suspects* (:func:`suspects`), and a partition holding one
is not reordered (the batch walk and the split judge it as before: restored where its neighbours fix its
offsets, else cut into the backup):

* the last batch of a segment that is not the last, out of line with its neighbours (the batch before it in
  the file and the next segment's name, where the broker rolled the log on): below the batch before it, or at
  or past the next segment's base offset while the batch before it lies below that offset, when its offsets
  fit between that batch and the next segment's name (where a damaged field would have moved it from);
* batches above their neighbours (the batch before them, or the segment's name, and the batch after them read
  in order without them, the batch after that in order too) whose offsets fit between those: fields that
  jumped ahead (one, or a burst over two neighbouring batches);
* the first batch of a segment below its name, alone there (the batch after it lies above the name), when it
  fits between the name and that batch (the name is the witness, as :func:`~kltool.storage.check.
  segment_name.misnamed_base` and the split's rule take it).

A batch alone below its neighbours elsewhere (inside a segment, or at the end of the last one) is content in
the wrong place, kept at its field's offsets when they fit the order of the whole partition.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ...format.records import BatchHeader
from ..scan import BatchRun, walk
from .batch_rules import first_offset
from .segment_name import (
    INT32_MAX,
    SplitRule,
    _Contents,
    any_below_base,
    below_base,
    describe_dups,
    last_out_of_line,
)

__all__ = ["Placed", "Layout", "runs_of", "suspects", "out_of_order", "plan_layout", "describe_reorder", "CopiesAside",
           "layout_without_copies", "describe_copy"]


@dataclass
class Placed:
    """A batch of the partition: the segment file it is in (index in the segments), the batch, its first
    offset (a compressed v0/v1 wrapper's first inner offset)."""

    seg: int
    h: BatchHeader
    first: int
    run_start: bool = False

    @property
    def last(self) -> int:
        return self.h.last_offset

    def key(self) -> tuple[int, int, int, int]:
        return self.first, self.h.last_offset, self.h.size, self.h.crc


@dataclass
class Layout:
    """The reordered partition: ``pieces`` (the new segments of the segments ``region`` (indexes, contiguous by
    name), each a list of batches, named after its first), ``dups`` (exact copies left out: the batch, the
    other copy); ``names``: the name of each piece (its first batch's offset, or the file's name for a segment
    that stays as it is)."""

    region: list[int]
    pieces: list[list[Placed]]
    dups: list[tuple[Placed, Placed]] = field(default_factory=list)
    names: list[int] = field(default_factory=list)
    damage: str = ""  # what is done with the damage in the region's files (cut, or mended in the copies)


def runs_of(batches: list[BatchHeader], first) -> list[bool]:
    """For each batch of a file (in file order): does it start a run (the first batch, or one whose first
    offset does not lie above the last offset of the batch before it)?"""
    out = []
    prev = None
    for h in batches:
        out.append(prev is None or first(h) <= prev.last_offset)
        prev = h
    return out


def _room(lo_excl: int, hi_excl: int, hs: list[BatchHeader], first) -> bool:
    """Do the offsets of ``hs`` fit strictly between ``lo_excl`` and ``hi_excl`` (room for their offset counts)?"""
    return hi_excl - lo_excl - 1 >= sum(h.last_offset - first(h) + 1 for h in hs)


def suspects(names: list[int], contents: list[_Contents]) -> list[tuple[int, BatchHeader, str]]:
    """The batches whose offset field the neighbours make out to be damaged (see the module): (segment index,
    batch, why). Not one whose true place would be taken: when another batch of the partition holds the offsets
    right after the batch before it (where the damaged field would have moved it from), its field is not what
    is wrong."""
    spans = sorted((c.first(h), h.last_offset, id(h)) for c in contents for h in c.batches)

    def free(after: int, hs: list[BatchHeader], first) -> bool:
        lo, hi = after + 1, after + sum(h.last_offset - first(h) + 1 for h in hs)
        mine = {id(h) for h in hs}
        return not any(a <= hi and lo <= b for a, b, k in spans if k not in mine)

    out = []
    for i, c in enumerate(contents):
        bs, first = c.batches, c.first
        nxt = names[i + 1] if i + 1 < len(names) else None
        if len(bs) > 1 and nxt is not None and last_out_of_line(bs[-2].last_offset, bs[-1], first(bs[-1]), nxt) \
                and free(bs[-2].last_offset, bs[-1:], first):
            out.append((i, bs[-1], f"the last batch of a segment before {nxt}, out of line with the batch before "
                                   f"it (last offset {bs[-2].last_offset}) and the next segment's name"))
        if len(bs) > 1 and first(bs[0]) < names[i] <= first(bs[1]) and \
                _room(names[i] - 1, first(bs[1]), bs[:1], first) and free(names[i] - 1, bs[:1], first):
            out.append((i, bs[0], f"the first batch, below the segment's name {names[i]} and alone there"))
        for b, start in enumerate(runs_of(bs, first)):
            if not start or not b:
                continue
            after = first(bs[b])
            j = b
            while j and bs[j - 1].last_offset >= after:
                j -= 1
            prev_last = bs[j - 1].last_offset if j else names[i] - 1
            steady = b + 1 == len(bs) or first(bs[b + 1]) > bs[b].last_offset  # the batch after them goes on
            if prev_last < after and j < b and steady and _room(prev_last, after, bs[j:b], first) and \
                    free(prev_last, bs[j:b], first):
                out.extend((i, h, f"above its neighbours (last offset {prev_last}, next {after}), where its "
                                  f"offsets would fit") for h in bs[j:b])
    return out


def _disordered(names: list[int], contents: list[_Contents]) -> bool:
    """Are the batches out of order (in segment and file order), copies held twice aside (the batch walk and
    the split leave one of them in place)?"""
    seen: dict[tuple, int] = {}
    for c in contents:
        for h in c.batches:
            k = (c.first(h), h.last_offset, h.size, h.crc)
            seen[k] = seen.get(k, 0) + 1
    prev = None
    for name, c in zip(names, contents, strict=True):
        for h in c.batches:
            lo = c.first(h)
            if seen[(lo, h.last_offset, h.size, h.crc)] > 1:
                continue
            if below_base(h, name) or (prev is not None and lo <= prev):
                return True
            prev = h.last_offset
    return False


def out_of_order(segs: list[tuple[int, Path]]) -> bool:
    """Does a CRC-valid batch of the partition (its segments as (base offset, ``.log``), by name) lie below its
    segment's base offset, or not above the batches before it? One walk over the files, the C walker's runs
    (batches it checked to be in order and within their segment) taken as they are: nothing else is read for a
    partition in order (the split and the reorder look only at one that is not)."""
    prev = None
    for base, log in segs:
        for item in walk(log, runs=True, base_offset=base, prev_last=prev):
            if isinstance(item, BatchRun):
                prev = item.last_offset if prev is None else max(prev, item.last_offset)
                continue
            if not isinstance(item, BatchHeader) or not item.crc_valid:
                continue
            if below_base(item, base) or (prev is not None and first_offset(item) <= prev):
                return True
            prev = item.last_offset if prev is None else max(prev, item.last_offset)
    return False


def _sorted_unique(placed: list[Placed]) -> tuple[list[Placed], list[tuple[Placed, Placed]]] | None:
    """The batches in offset order, exact copies left out (the first one in segment and file order stays);
    None when two different batches overlap."""
    kept: list[Placed] = []
    dups: list[tuple[Placed, Placed]] = []
    for p in sorted(placed, key=lambda p: (p.first, p.last, p.seg, p.h.position)):
        if kept and p.first <= kept[-1].last:
            if p.key() != kept[-1].key():
                return None
            dups.append((p, kept[-1]))
            continue
        kept.append(p)
    return kept, dups


def _pieces(kept: list[Placed]) -> list[list[Placed]]:
    """A new segment at each run's first batch, where the file changes, and where a batch would lie more than
    Int.MAX past the segment's first offset."""
    pieces: list[list[Placed]] = []
    for p in kept:
        if pieces and not p.run_start and pieces[-1][-1].seg == p.seg and p.last - pieces[-1][0].first <= INT32_MAX:
            pieces[-1].append(p)
        else:
            pieces.append([p])
    return pieces


def plan_layout(rule: SplitRule) -> Layout | None:
    """The reordering of the partition (``rule.segs``, by name), or None: nothing out of order, a segment the
    split may not take (an unreadable first offset or marker; damage is cut, or mended in the copies, as the
    split does it), a suspect (:func:`suspects`), two
    different batches over the same offsets, or a layout whose files cannot be swapped in safely."""
    segs = rule.segs
    if len(segs) == 0:
        return None
    names = [b for b, _g in segs]
    contents = [rule.contents(g) for _b, g in segs]
    if not _disordered(names, contents):
        return None
    if suspects(names, contents):
        return None
    placed: list[Placed] = []
    for i, c in enumerate(contents):
        for h, start in zip(c.batches, runs_of(c.batches, c.first), strict=True):
            placed.append(Placed(i, h, c.first(h), start))
    got = _sorted_unique(placed)
    if got is None:
        return None
    kept, dups = got
    pieces = _pieces(kept)
    # the segments that stay as they are: one piece, the whole file, named as the file
    same = set()
    for j, p in enumerate(pieces):
        i = p[0].seg
        below = pieces[j - 1][-1].last if j else -1
        if below < names[i] and not below_base(p[0].h, names[i]) and [x.h for x in p] == contents[i].batches:
            same.add(i)
    changed = [i for i in range(len(segs)) if i not in same]
    if not changed:
        return None
    region = list(range(min(changed), max(changed) + 1))
    if any(not contents[i].clean for i in region):
        return None  # (damage cut is left out of the new segments: it stays in the backup with the old file; the
        # batches a magic or length fix mends are carried, the copies holding the restored bytes, as a split's)
    inside = [p for p in pieces if p[0].seg in region or any(x.seg in region for x in p)]
    if any(x.seg not in region for p in inside for x in p):
        return None
    lo, hi = inside[0][0].first, max(x.last for p in inside for x in p) + 1
    if any(lo <= names[i] < hi for i in range(len(segs)) if i not in region):
        return None  # the broker's completion of an interrupted swap would delete that segment
    if any(not lo <= names[i] < hi for i in region):
        return None  # an old file the completion would not delete: left to the split and the walk
    if any(d.seg not in region for d, _o in dups):
        return None
    # every segment named above the last offset of the one before it (a fetch finds the segment by its name)
    layout = sorted([(names[i], contents[i].hi) for i in range(len(segs)) if i not in region] +
                    [(p[0].first, p[-1].last) for p in inside])
    if any(b <= a_hi for (_a, a_hi), (b, _h) in zip(layout, layout[1:], strict=False) if a_hi is not None):
        return None
    damage = "; ".join(d for i in region if (d := contents[i].mends.describe()))
    return Layout(region, inside, dups, [p[0].first for p in inside], damage)


def describe_reorder(lay: Layout, name_of) -> str:
    """What ``verify`` says of a segment of the region repair reorders (the same new segments the plan writes)."""
    runs = ", ".join(f"{p[0].first}..{p[-1].last} ({len(p)} batches) -> {name_of(b)}"
                     for p, b in zip(lay.pieces, lay.names, strict=True))
    msg = (f"the partition's intact batches are out of order across its files (runs of batches in the wrong order, "
           f"or segment contents swapped): kltool verify --repair reorders whole runs, every intact batch kept: "
           f"{runs}")
    if lay.dups:
        msg += f"; {len(lay.dups)} batch(es) whose offsets are held twice stay only in the backup"
    markers = sum(1 for p in lay.pieces for x in p if x.h.magic == 2 and x.h.is_control and x.h.producer_id >= 0)
    if markers:
        msg += f"; {markers} transaction marker(s) carried, the .txnindex rebuilt for each new segment"
    if lay.damage:
        msg += f"; {lay.damage}"
    return msg


@dataclass
class CopiesAside:
    """A partition reordered without its copied segment files (:func:`layout_without_copies`): ``aside`` and
    ``rest`` index ``rule.segs`` of the whole partition; ``layout`` indexes ``rest`` (``sub``, its rule)."""

    aside: list[int]
    rest: list[int]
    sub: SplitRule
    layout: Layout


def _copy_key(c: _Contents, h: BatchHeader) -> tuple[int, int, int, int]:
    return c.first(h), h.last_offset, h.size, h.crc


def layout_without_copies(rule: SplitRule, eligible=lambda i: True) -> CopiesAside | None:
    """The one rule for a copied segment file (a ``.log`` copied under another segment's name): a file with
    batches below its base every batch of which another file of the partition holds too (the same offsets,
    size and CRC) keeps :func:`plan_layout` from reordering the partition; it is set aside (repair moves it
    into the backup) and the other files are laid out without it, only when that layout keeps every batch of
    every copy in a new segment. None otherwise (the split and the batch walk decide, as before). ``eligible``:
    which of ``rule.segs`` may be set aside. verify and repair both ask this."""
    segs = rule.segs
    aside: list[int] = []
    for i, (base, log) in enumerate(segs):
        if not eligible(i) or not any_below_base(log, base):
            continue
        c = rule.contents(log)
        if not c.batches:
            continue
        held = {_copy_key(rule.contents(o), h) for k, (_b, o) in enumerate(segs) if k != i and k not in aside
                for h in rule.contents(o).batches}
        if all(_copy_key(c, h) in held for h in c.batches):
            aside.append(i)
    if not aside:
        return None
    rest = [k for k in range(len(segs)) if k not in aside]
    sub = SplitRule([segs[k] for k in rest])
    sub._contents = rule._contents  # (each file read once)
    lay = plan_layout(sub)
    if lay is None:
        return None
    kept = {(x.first, x.h.last_offset, x.h.size, x.h.crc) for p in lay.pieces for x in p}
    if any(_copy_key(rule.contents(segs[i][1]), h) not in kept for i in aside
           for h in rule.contents(segs[i][1]).batches):
        return None
    return CopiesAside(aside, rest, sub, lay)


def describe_copy(c: _Contents) -> str:
    """Why a copied segment file goes into the backup (repair's reason, verify's finding)."""
    msg = (f"a copy: every batch in it is held by another file of the partition too (the same offsets, size and "
           f"CRC), and each of those copies is kept by the reordering of the other files; {len(c.batches)} "
           f"batch(es) stay only in the backup with this file: "
           f"{describe_dups([(h, 'a new segment') for h in c.batches], c.first)}")
    if c.mends.cuts:
        msg += f"; {c.mends.describe()}"
    return msg
