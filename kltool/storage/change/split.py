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
``--like-broker`` plans the split Kafka 4.4 does make: of a segment whose last batch lies more than Int.MAX past
its base (:func:`plan_overflow_splits`; the batches in file order, nothing dropped; the segment is left to the
batch walk when it is damaged or its offsets do not ascend). When the offsets that split covers hold another
segment's name, the broker splits anyway (that segment stays between the new ones, or is replaced by the new
one of its name), but an interrupted split's completion at the next start would delete it: ``--like-broker``
refuses the partition with a ``split_refused`` error instead (:func:`overflow_split_refusal`).

Before any split, a partition whose intact batches are out of order across its files (runs in the wrong order
inside a file, two segments' contents swapped) is reordered as a whole (:func:`plan_reorder`, the rule in
:mod:`kltool.storage.check.reorder`): each run becomes or joins the segment named for its first offset, the new
segments swapped in the same way, unless a batch there is one whose offset field its neighbours make out to be
damaged (then the split and the batch walk below decide, as before). Damage in a reordered segment is handled
as the split handles it (below): cut (it stays in the backup with the old file, named in the plan) or, for a
batch a magic or length fix mends, carried with the restored bytes. A file every batch of which another file
holds too, byte for byte (a copied segment file), does not keep the others from being reordered: it is moved
into the backup first (:func:`_reorder_without_copies`), only when the reordering keeps every one of its
batches' other copies.

A batch held twice goes into the backup only when its other copy stays in the log: the batch walk bounds a
segment by the names the log has after the splits (``repair._names_after``), never by the name of a file the
split removes (a copy named inside the original's offsets used to make the original's last batch look like one
running past the next segment, cut, while the copy's batch went into the backup as "held twice").

kltool plans the same split for a segment whose batches below its base come in runs of at least two, or alone
where the batches around it do not read in order without it (at the end of the file after a higher batch, or
before a lower one: batches written in reverse order), but not at the end of a segment that is not the last
(:func:`~kltool.storage.check.segment_name.last_out_of_line`: the next segment's name says where it belongs); a single batch below the base between neighbours in
order is a damaged offset field, which the batch walk restores or cuts (:func:`~kltool.storage.check.
segment_name.split_by_runs`); a segment whose whole content fits between its neighbours is renamed instead
(:mod:`kltool.storage.check.segment_name`, where that rule lives). Batches whose offsets another segment (or an
earlier batch of the same file) holds too, as an exact copy (same offsets, size and CRC), are duplicates: the
other copy stays in the log (the one in a segment whose name agrees with its content, and the one a
follower or consumer reading on from the earlier segment gets), and this copy stays in the backup with the
old file, named in the plan. No
intact batch leaves the log otherwise. The new segments get their ``.index`` and ``.timeindex`` by the
broker's recovery rule; the old file and its indexes move into the backup (``restore`` puts them back
byte for byte and removes the new files).

Transactional and control batches are carried like any other; each new segment holding an ABORT marker gets
the ``.txnindex`` of its aborted transactions from the one producer state (:meth:`Split.advance`, fed in
offset order as the batch walk feeds it), as the broker's recovery of the new segments rebuilds it; producer
snapshots are not touched (the offsets do not change). ``verify`` reports each segment to split once
(``segment_split``), by the same rule (:class:`kltool.storage.check.segment_name.SplitRule`).

Damage in the segment is handled as the batch walk handles it (:class:`~kltool.storage.check.segment_name.Mends`):
a batch whose magic byte or length field alone is hit (no CRC covers it) is mended and carried, the new
segment's copy holding the restored bytes (the old file is not changed: it goes into the backup as it is);
any other damaged range is cut (it stays in the backup with the old file, named in the plan and by verify).

What is left to the batch walk (the split is not planned): offsets another batch holds
with other bytes (a damaged offset field, or two histories: not told apart here), a negative offset (a damaged
field: no segment is named below 0), a v0/v1 compressed wrapper whose inner messages do not read (its
first offset, which names a new segment as the broker's ``baseOffset()`` of a legacy batch does, is the first
inner message's, not in its header), an unreadable transaction marker, batches that would land in a gap between other segments rather than between
the segment's neighbours, and pieces that would enclose another segment's name (the broker's swap completion
would delete that segment).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...errors import KltoolError
from ...format import names as fn
from ...format.index import encode_aborted_txn
from ...format.records import BatchHeader
from ..check.reorder import Layout, describe_copy, layout_without_copies, out_of_order, plan_layout
from ..check.segment_name import SplitPlan, SplitRule, describe_dups
from ..findings import Finding
from ..index_builder import IndexBuilder
from .apply import file_size as _size
from .plan import Action, Cut
from .view import INDEX_KINDS, Seg, View

__all__ = ["Split", "plan_splits", "plan_overflow_splits", "overflow_split_refusal"]


@dataclass
class Split:
    """One segment split by ``plan`` (:class:`~kltool.storage.check.segment_name.SplitPlan`: its pieces, the
    duplicates, the transaction markers); ``txn``: the ``.txnindex`` create action of each piece (filled by
    :meth:`advance`, when the producer state before the segment is known)."""

    seg: Seg
    plan: SplitPlan
    txn: dict[int, Action] = field(default_factory=dict)

    @property
    def pieces(self) -> list[list[BatchHeader]]:
        return self.plan.pieces

    @property
    def dups(self) -> list[tuple[BatchHeader, str]]:
        return self.plan.dups

    @property
    def last(self) -> int | None:
        return self.plan.last

    @property
    def names(self) -> list[int]:
        """The names of the segments the split leaves in the log (none when every batch is held elsewhere)."""
        return self.plan.bases

    def advance(self, ctx) -> None:
        """What the batch walk would have carried on from the kept batches (offset order): the last offset kept,
        the leader epochs and the producer state (the transactions each new segment's ``.txnindex`` lists)."""
        _advance(ctx, self.pieces, self.plan.first, lambda h: self.plan.markers.get(h.position), self.txn)


def _advance(ctx, pieces: list[list[BatchHeader]], first, marker, txn: dict[int, Action]) -> None:
    """:meth:`Split.advance` over ``pieces`` (offset order); ``marker(h)``: a control batch's marker type;
    ``txn``: the ``.txnindex`` create action of each piece, by its first offset."""
    for p in pieces:
        for h in p:
            ctx.close_pending(h, first(h))  # the first batch kept bounds a damage cut before it
            if ctx.last is None or h.last_offset > ctx.last:
                ctx.last = h.last_offset
            if h.magic != 2:
                continue
            ple = h.partition_leader_epoch
            ctx.last_epoch = ple
            if ple >= 0 and (not ctx.epochs or ple > ctx.epochs[-1][0]):
                ctx.epochs.append((ple, h.base_offset))
            if h.producer_id >= 0 and ctx.txn_ok:
                try:
                    ctx.txn.on_batch(h, marker(h) if h.is_control else None)
                except KltoolError as e:
                    ctx.txn_ok = False
                    ctx.txn_error = e.message
        entries = ctx.txn.take() if ctx.txn_ok else []
        a = txn.get(first(p[0]))
        if a is not None:
            a.data = b"".join(encode_aborted_txn(t.producer_id, t.first_offset, t.last_offset,
                                                 t.last_stable_offset) for t in entries)
            a.new_size = len(a.data)
            a.entries = len(entries)


def _ranges(piece: list[BatchHeader], first) -> list[Cut]:
    """The byte ranges of the old file a new segment is made of (adjacent batches merged)."""
    out: list[Cut] = []
    for h in piece:
        if out and out[-1].end == h.position:
            out[-1].end = h.end
            out[-1].last_offset = h.last_offset
        else:
            out.append(Cut(h.position, h.end, "copy", "copied into the new segment", first(h),
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


def _kinds(piece: list[BatchHeader], markers: dict[int, str]) -> tuple[str, ...]:
    """The files of a new segment: a ``.txnindex`` too when it holds an ABORT marker."""
    if any(markers.get(h.position) == "ABORT" for h in piece):
        return ("log", "index", "timeindex", "txnindex")
    return ("log", "index", "timeindex")


def _mended(fixes: list[tuple[int, int, int]], mends) -> str:
    """What the plan says of the bytes a new segment's copy restores (the old file stays as it is, in the
    backup): the walk's magic and length fixes of the batches it holds."""
    if not fixes:
        return ""
    whys = list(dict.fromkeys(mends.whys[pos] for pos, _o, _n in fixes))
    return (f"; {len(fixes)} byte(s) restored in the copy: " + "; ".join(
        ", ".join(f"byte {pos}: {old} -> {new}" for pos, old, new in fixes if mends.whys[pos] == w) + f" ({w})"
        for w in whys))


def _split_actions(sp: Split, interval: int) -> list[Action]:
    """``replaceSegments`` as plan steps: the new segments written as ``.cleaned`` files, renamed ``.swap`` in
    descending offset order, the old segment's files moved into the backup, the ``.swap`` files renamed into
    place."""
    s, d = sp.seg, sp.seg.log.parent
    names = [fn.segment_file(sp.plan.first(p[0]), "log") for p in sp.pieces]
    what = (f"its last offset is more than 2^31-1 past its base offset {s.base}" if sp.plan.overflow else
            f"its batches lie below its base offset {s.base}")
    why = (f"{what}: split as the broker's recovery splits a segment with an offset overflow "
           f"(LocalLog.splitOverflowedSegment), each new segment named after its first batch")
    mends = sp.plan.mends
    acts: list[Action] = []
    log, indexes = s.log, [getattr(s, k) for k in INDEX_KINDS]
    if sp.pieces:
        lo = sp.plan.first(sp.pieces[0][0])
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
    kinds = {sp.plan.first(p[0]): _kinds(p, sp.plan.markers) for p in sp.pieces}
    for p in sp.pieces:
        base = sp.plan.first(p[0])
        size = sum(h.size for h in p)
        ranges = _ranges(p, sp.plan.first)
        fixes = [f for f in mends.fixes if any(c.start <= f[0] < c.end for c in ranges)]
        acts.append(Action("create", d / fn.segment_file(base, "log", "cleaned"), f"new segment {base}..{p[-1].last_offset} "
                           f"({len(p)} batches) from {s.log.name}: {why}{_mended(fixes, mends)}", new_size=size,
                           source=log, ranges=ranges, first_offset=base, last_offset=p[-1].last_offset, fixes=fixes))
        oi, ti = _indexes(p, base, interval)
        for kind, data in (("index", oi), ("timeindex", ti)):
            acts.append(Action("create", d / fn.segment_file(base, kind, "cleaned"), f"the index of the new segment "
                               f"{base} (the broker's recovery rule)", data=data, new_size=len(data)))
        if "txnindex" in kinds[base]:  # its aborted transactions, from the producer state (Split.advance)
            sp.txn[base] = Action("create", d / fn.segment_file(base, "txnindex", "cleaned"), f"the transaction "
                                  f"index of the new segment {base} (its aborted transactions, rebuilt as the "
                                  f"broker's recovery rebuilds it)", data=b"", new_size=0)
            acts.append(sp.txn[base])
    for p in reversed(sp.pieces):
        base = sp.plan.first(p[0])
        for kind in kinds[base]:
            acts.append(Action("rename", d / fn.segment_file(base, kind, "cleaned"), "new segment complete: "
                               ".cleaned -> .swap (descending offsets, as the broker renames)",
                               target=d / fn.segment_file(base, kind, "swap")))
    reason = f"replaced by {', '.join(names)}" if names else "every batch in it is held by another segment too"
    if sp.dups:
        reason += (f"; {len(sp.dups)} batch(es) whose offsets are held twice stay only in the backup with this file, "
                   f"the other copy stays in the log: {describe_dups(sp.dups, sp.plan.first)}")
    if mends.cuts:
        reason += f"; {mends.describe()}"
    acts.append(Action("quarantine", log, reason, old_size=_size(s.log)))
    for cur in indexes:
        if cur is not None:
            acts.append(Action("quarantine", cur, f"index of the split segment {s.base}", old_size=_size(cur)))
    for p in sp.pieces:
        base = sp.plan.first(p[0])
        for kind in kinds[base]:
            acts.append(Action("rename", d / fn.segment_file(base, kind, "swap"), "swap the new segment in",
                               target=d / fn.segment_file(base, kind)))
    return acts


class Reorder:
    """A partition's segments ``region`` rewritten in offset order (:func:`~kltool.storage.check.reorder.
    plan_layout`): :meth:`advance` of the first carries the state on over every new segment, the others' do
    nothing (the batch walk skips them all)."""

    def __init__(self, layout: Layout, segs: list[Seg], markers: dict[int, str]):
        self.layout = layout
        self.segs = segs
        self.markers = markers  # id(batch) -> marker type of a transaction control batch
        self.txn: dict[int, Action] = {}
        self.done = False
        self.damage: dict[int, str] = {}  # what the plan says of the damage cut from segment i (stays in the backup)
        self.mends: dict = {}  # segment i's Mends: the byte fixes its copies carry

    @property
    def pieces(self) -> list[list[BatchHeader]]:
        return [[x.h for x in p] for p in self.layout.pieces]

    @property
    def names(self) -> list[int]:
        return self.layout.names

    def first(self, h: BatchHeader) -> int:
        return self._firsts[id(h)]

    def advance(self, ctx) -> None:
        if self.done:
            return
        self.done = True
        self._firsts = {id(x.h): x.first for p in self.layout.pieces for x in p}
        _advance(ctx, self.pieces, self.first, lambda h: self.markers.get(id(h)), self.txn)


def _reorder_actions(ro: Reorder, interval: int) -> list[Action]:
    """The new segments of a reordered region, swapped in as :func:`_split_actions` swaps a split's."""
    lay, segs = ro.layout, ro.segs
    d = segs[lay.region[0]].log.parent
    bases = lay.names
    why = ("the partition's intact batches are out of order across its files (runs of batches in the wrong "
           "order, or segment contents swapped): each run becomes or joins the segment named for its first "
           "offset, no intact batch left out")
    acts: list[Action] = []
    kinds: dict[int, tuple[str, ...]] = {}
    firsts = {id(x.h): x.first for p in lay.pieces for x in p}
    for p, base in zip(lay.pieces, bases, strict=True):
        hs = [x.h for x in p]
        src = segs[p[0].seg].log
        kinds[base] = ("log", "index", "timeindex", "txnindex") if any(
            ro.markers.get(id(h)) == "ABORT" for h in hs) else ("log", "index", "timeindex")
        ranges = _ranges(hs, lambda h: firsts[id(h)])
        mends = ro.mends.get(p[0].seg)
        fixes = [f for f in mends.fixes if any(c.start <= f[0] < c.end for c in ranges)] if mends else []
        acts.append(Action("create", d / fn.segment_file(base, "log", "cleaned"), f"new segment {base}.."
                           f"{hs[-1].last_offset} ({len(hs)} batches) from {src.name}: {why}"
                           f"{_mended(fixes, mends) if fixes else ''}", new_size=sum(h.size for h in hs), source=src,
                           ranges=ranges, first_offset=base, last_offset=hs[-1].last_offset, fixes=fixes))
        oi, ti = _indexes(hs, base, interval)
        for kind, data in (("index", oi), ("timeindex", ti)):
            acts.append(Action("create", d / fn.segment_file(base, kind, "cleaned"), f"the index of the new segment "
                               f"{base} (the broker's recovery rule)", data=data, new_size=len(data)))
        if "txnindex" in kinds[base]:
            ro.txn[base] = Action("create", d / fn.segment_file(base, "txnindex", "cleaned"), f"the transaction "
                                  f"index of the new segment {base} (its aborted transactions, rebuilt as the "
                                  f"broker's recovery rebuilds it)", data=b"", new_size=0)
            acts.append(ro.txn[base])
    for base in reversed(bases):
        for kind in kinds[base]:
            acts.append(Action("rename", d / fn.segment_file(base, kind, "cleaned"), "new segment complete: "
                               ".cleaned -> .swap (descending offsets, as the broker renames)",
                               target=d / fn.segment_file(base, kind, "swap")))
    names = ", ".join(fn.segment_file(b, "log") for b in bases)
    for i in lay.region:
        s = segs[i]
        reason = f"replaced by {names}: {why}"
        dups = [(x.h, segs[o.seg].log.name if o.seg != i else f"{s.log.name} at byte {o.h.position}")
                for x, o in lay.dups if x.seg == i]
        if dups:
            reason += (f"; {len(dups)} batch(es) whose offsets are held twice stay only in the backup with this "
                       f"file, the other copy stays in the log: {describe_dups(dups, lambda h: firsts.get(id(h), h.base_offset))}")
        if ro.damage.get(i):
            reason += f"; {ro.damage[i]}"
        acts.append(Action("quarantine", s.log, reason, old_size=_size(s.log)))
        for k in INDEX_KINDS:
            cur = getattr(s, k)
            if cur is not None:
                acts.append(Action("quarantine", cur, f"index of the reordered segment {s.base}", old_size=_size(cur)))
    for base in bases:
        for kind in kinds[base]:
            acts.append(Action("rename", d / fn.segment_file(base, kind, "swap"), "swap the new segment in",
                               target=d / fn.segment_file(base, kind)))
    return acts


def plan_reorder(segs: list[Seg], acts: list[Action], rule: SplitRule, *, interval: int,
                 layout: Layout | None = None) -> dict[int, Reorder]:
    """Plan the reordering of a partition whose intact batches are out of order across its files (appending to
    ``acts``); returns {id(seg): Reorder} of the segments rewritten (the batch walk skips them), or {}.
    ``layout``: the rule's layout when already made."""
    lay = plan_layout(rule) if layout is None else layout
    if lay is None or any(segs[i].log != segs[i].final for i in lay.region):
        return {}
    markers = {}
    for i in lay.region:
        c = rule.contents(segs[i].log)
        markers.update({id(h): c.markers[h.position] for h in c.batches if h.position in c.markers})
    ro = Reorder(lay, segs, markers)
    ro.damage = {i: rule.contents(segs[i].log).mends.describe() for i in lay.region}
    ro.mends = {i: rule.contents(segs[i].log).mends for i in lay.region}
    acts.extend(_reorder_actions(ro, interval))
    return {id(segs[i]): ro for i in lay.region}


class SetAside:
    """A segment file every batch of which another file of the partition holds too, byte for byte (a copied
    segment file), moved into the backup whole before the rest is reordered (:func:`_reorder_without_copies`):
    it carries no state on and leaves no name in the log."""

    pieces: list = []
    names: list[int] = []

    def advance(self, ctx) -> None:
        return None


def _reorder_without_copies(segs: list[Seg], acts: list[Action], rule: SplitRule, *,
                            interval: int) -> dict[int, Reorder | SetAside]:
    """The reordering of a partition one of whose files is a copy of others
    (:func:`~kltool.storage.check.reorder.layout_without_copies`, the rule verify asks too): the copy moved
    into the backup first, the other files reordered without it; else {}."""
    ca = layout_without_copies(rule, lambda i: segs[i].log == segs[i].final)
    if ca is None:
        return {}
    mine: list[Action] = []
    ro = plan_reorder([segs[k] for k in ca.rest], mine, ca.sub, interval=interval, layout=ca.layout)
    if not ro:
        return {}
    out: dict[int, Reorder | SetAside] = dict(ro)
    for i in ca.aside:
        s = segs[i]
        acts.append(Action("quarantine", s.log, describe_copy(rule.contents(s.log)), old_size=_size(s.log)))
        for k in INDEX_KINDS:
            cur = getattr(s, k)
            if cur is not None:
                acts.append(Action("quarantine", cur, f"index of the copied segment {s.base}", old_size=_size(cur)))
        out[id(s)] = SetAside()
    acts.extend(mine)
    return out


def plan_splits(view: View, segs: list[Seg], acts: list[Action], *,
                interval: int) -> dict[int, Split | Reorder | SetAside]:
    """Plan the split of every segment that needs one (appending to ``acts``), or the reordering of the
    partition's runs of batches (:func:`plan_reorder`) when its batches are out of order across files; returns
    {id(seg): Split or Reorder} of the segments split (the batch walk skips them; ``advance`` carries its state
    on)."""
    rule = SplitRule([(s.base, s.log) for s in segs])
    out: dict[int, Split] = {}
    if not out_of_order(rule.segs):  # (no batch below its base either: nothing to split)
        return out
    reordered = plan_reorder(segs, acts, rule, interval=interval) or _reorder_without_copies(segs, acts, rule,
                                                                                          interval=interval)
    if reordered:
        return reordered
    for i, s in enumerate(segs):
        if s.log != s.final:  # renamed (segment_name.misnamed_base)
            continue
        plan = rule.plan(i)
        if plan is None:
            continue
        sp = out[id(s)] = Split(s, plan)
        acts.extend(_split_actions(sp, interval))
    return out



def overflow_split_refusal(segs: list[Seg], overflowed: list[int]) -> Finding | None:
    """``--like-broker``: the finding that refuses the partition when the broker's split of an overflowed
    segment ``segs[i]`` (``i`` in ``overflowed``) covers offsets another segment is named in
    (:meth:`~kltool.storage.check.segment_name.SplitRule.overflow_enclosed`), else None."""
    rule = SplitRule([(s.base, s.log) for s in segs])
    for i in overflowed:
        got = rule.overflow_enclosed(i)
        if got is None:
            continue
        bases, inside, hi = got
        s = segs[i]
        named = ", ".join(fn.segment_file(b, "log") for b in inside)
        replaced = [b for b in inside if b in bases]
        fate = (f"{', '.join(fn.segment_file(b, 'log') for b in replaced)} is replaced by the new segment of the "
                f"same name (its files renamed over: its records lost)" if replaced else
                f"{'it stays' if len(inside) == 1 else 'they stay'} between the new segments")
        return Finding("error", "split_refused", str(s.log),
                       f"the broker's recovery splits this segment (its last offset is more than 2^31-1 past its "
                       f"base offset {s.base}: LocalLog.splitOverflowedSegment) into "
                       f"{', '.join(fn.segment_file(b, 'log') for b in bases)}, over offsets "
                       f"[{bases[0]}, {hi}) where {named} is named too: {fate}; a split interrupted after its .swap "
                       f"renames is completed at the next start by deleting every segment named inside those "
                       f"offsets (LogLoader), so --like-broker does not split it and changes nothing in this "
                       f"partition: repair it with kltool verify --repair (the default salvage mode)",
                       offset=s.base)
    return None


def plan_overflow_splits(segs: list[Seg], overflowed: list[int], acts: list[Action], *,
                         interval: int) -> dict[int, Split]:
    """``--like-broker``: plan the broker's split of each segment ``segs[i]`` (``i`` in ``overflowed``) whose
    recovery meets an offset more than Int.MAX past its base and whose last batch overflows
    (:meth:`~kltool.storage.check.segment_name.SplitRule.plan_overflow`), appending to ``acts``; returns
    {id(seg): Split} as :func:`plan_splits` does."""
    rule = SplitRule([(s.base, s.log) for s in segs])
    out: dict[int, Split] = {}
    for i in overflowed:
        plan = rule.plan_overflow(i)
        if plan is not None:
            sp = out[id(segs[i])] = Split(segs[i], plan)
            acts.extend(_split_actions(sp, interval))
    return out
