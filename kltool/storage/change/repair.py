"""Repair: plan → apply, with a backup of every byte that leaves a file and a manifest to undo it.

:func:`plan_repair` reads a selection (under the broker's ``.lock``) and returns a :class:`Plan`: a list of
:class:`~kltool.storage.change.plan.Action` objects per log dir (:class:`Group`), in the order they must be
applied. :func:`apply_plan` hands them to the apply engine (:mod:`kltool.storage.change.apply`), which copies
everything an action removes into a backup run directory, writes the manifest *before* changing anything,
then applies the actions one by one; :func:`kltool.storage.change.restore.restore` undoes a run from its manifest.
:func:`repair` does the locking, the planning and the applying.

What the planner does (the broker's ``LogLoader.load`` and ``LogSegment.recover``, offline):

* Stale files by the broker's own rules (``LogLoader.removeTempFilesAndCollectSwapFiles``): ``.deleted`` and ``.cleaned`` files and ``.swap``
  files of an incomplete split are quarantined (moved into the backup); the files a complete ``.swap`` set
  replaces are quarantined and the ``.swap`` files renamed into place. Orphan index files are quarantined;
  kltool's own temporary files (``*.kltool-tmp``) from an interrupted run are deleted.
* Every segment is walked with :func:`kltool.storage.scan.walk` (which resynchronises after damage by a byte
  scan for a whole, CRC-valid batch). A damaged range — torn tail, zero run, impossible length, bad magic,
  garbage, a batch with a CRC mismatch, offsets that do not increase, an unparsable transaction marker — is
  cut. By default only the damaged bytes are cut (``truncate`` at the tail, ``excise`` in the middle) and
  every valid batch after them is kept: the lost offsets become a gap, as compaction leaves.
  ``like_broker=True`` cuts like ``LogSegment.recover`` + ``LogLoader.recoverLog``: truncate at the first
  damage and quarantine every later segment; a segment whose last offset is more than 2^31-1 past its base is
  split as ``LocalLog.splitOverflowedSegment`` splits it (:func:`kltool.storage.change.split.plan_overflow_splits`);
  when only an earlier batch overflows, the broker does not start and ``--like-broker`` changes nothing.
* A batch whose only fault is its magic byte (the v2 CRC does not cover the magic; the v0/v1 CRC does, and
  is tried for 0 and 1) gets its magic byte restored (``fix_magic``, a one-byte in-place write) instead of
  being cut: the CRC proves the rest of the batch intact.
* Indexes of a changed segment, and missing, corrupt, untrimmed or inconsistent ``.index``/``.timeindex``
  files, are rebuilt with :class:`~kltool.storage.index_builder.IndexBuilder` (the broker's recovery rule);
  ``.txnindex`` entries whose marker was cut are dropped, a corrupt ``.txnindex`` is rebuilt with
  :class:`~kltool.storage.index_builder.TxnIndexBuilder`. Index files are written *before* their log is cut,
  so a run killed in between converges on the next run.
* With the new log end offset (LEO): producer snapshots beyond it (and corrupt ones) are quarantined,
  ``leader-epoch-checkpoint`` entries starting after it are dropped (a corrupt one is rebuilt from the
  batches), and the log dir's recovery-point, replication-offset and log-start-offset checkpoints are lowered
  to it (a cleaner-offset entry past it is removed, which is what the cleaner does anyway).

Every file replacement is atomic (temp file, fsync, rename, fsync of the directory); a truncation is one
``ftruncate`` + fsync, a magic fix one ``pwrite`` of a byte + fsync. Each run plans afresh from what is on
disk, so a run killed at any point and run again converges to the same result; the new run's manifest lists
the interrupted ones (``follows``) and :func:`restore` undoes the whole chain.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import CorruptDataError, UsageError
from ...format import index as fidx
from ...format import names as fn
from ...format.records import BatchHeader
from ..check.segment_name import first_batches, last_overflows, misnamed_base
from ..epochs import checkpoint_epochs
from ..findings import Finding
from ..fs import TMP_SUFFIX, read_small_file, read_txn_index_file
from ..index_builder import DEFAULT_INDEX_INTERVAL_BYTES
from ..logdir import LogDir, Selection, check_file
from ..partition import Partition
from ..scan import walk
from .apply import (
    BACKUP_SUFFIX,
    MANIFEST_NAME,
    LogDirLocks,
    apply_changes,
    check_backup_root,
    check_changes,
    default_backup_root,
)
from .apply import file_size as _size
from .plan import Action, ChangeSet, Cut, left_alone
from .restore import restore
from .segscan import Ctx, SegScan
from .split import overflow_split_refusal, plan_overflow_splits, plan_splits
from .view import INDEX_KINDS, Seg, View, next_offset_of, plan_stale, snapshot_open_txns

__all__ = [
    "Action", "Cut", "Group", "Plan", "plan_repair", "apply_plan", "repair", "restore",
    "RepairResult", "MANIFEST_NAME", "BACKUP_SUFFIX", "default_backup_root",
]


@dataclass
class Group:
    """The actions for one log dir (or the directory that holds the selected partitions): one lock, one
    backup run directory, one manifest."""

    root: Path
    logdir: LogDir | None = None
    partitions: list[Partition] = field(default_factory=list)
    files: list[tuple[Path, int]] = field(default_factory=list)  # (partition dir, base offset) of single files
    whole_logdir: bool = False
    actions: list[Action] = field(default_factory=list)
    problems: list[Finding] = field(default_factory=list)
    log_end_offsets: dict[str, int] = field(default_factory=dict)


@dataclass
class Plan:
    groups: list[Group]
    mode: str  # salvage | like-broker | rebuild-index

    @property
    def actions(self) -> list[Action]:
        return [a for g in self.groups for a in g.actions]

    @property
    def problems(self) -> list[Finding]:
        return [p for g in self.groups for p in g.problems]



# ------------------------------------------------------------------------------------ partition planning


def _plan_segment_names(view: View, segs: list[Seg], acts: list[Action]) -> None:
    """A segment whose file name (its base offset, which no CRC covers) is above its first batch's offset
    would lose every batch as 'below the segment's base offset'. When the content fits between the
    neighbouring segments, the name is what is wrong: rename the segment to its first batch's offset (its
    index files, relative to the old name, are set aside and rebuilt)."""
    prev_last = None
    spans = [(first_batches(s.log), s) for s in segs]
    lasts = {id(s): next_offset_of(s.log, s.base) - 1 if firsts else None for firsts, s in spans}
    moved = False
    for i, (firsts, s) in enumerate(spans):
        first = firsts[0] if firsts else None
        last = lasts[id(s)]
        new_base = misnamed_base(firsts, s.base, prev_last, segs[i + 1].base if i + 1 < len(segs) else None,
                                 lambda last=last: last)
        if new_base is None and first is not None and prev_last is not None and first.base_offset <= prev_last:
            new_base = _moved_base(firsts, s, segs, lasts)  # its content belongs before earlier segments
            moved = moved or new_base is not None
        if new_base is not None:
            target = s.final.with_name(fn.segment_file(new_base, "log"))
            if target.name not in view.current:
                acts.append(Action("rename", s.log, f"the file name says base offset {s.base} but its batches start "
                                   f"at {new_base} and fit between the neighbouring segments: the name (not "
                                   f"covered by any CRC) is wrong", target=target))
                for kind in INDEX_KINDS:
                    cur = getattr(s, kind)
                    if cur is not None:
                        acts.append(Action("quarantine", cur, f"relative to the wrong base offset {s.base}; rebuilt "
                                           f"for {new_base}", old_size=_size(cur)))
                        setattr(s, kind, None)
                s.base, s.final = new_base, target  # s.log stays where the file is until the rename
        if last is not None:
            prev_last = max(prev_last, last) if prev_last is not None else last
    if moved:
        segs.sort(key=lambda s: s.base)


def _moved_base(firsts, s: Seg, segs: list[Seg], lasts: dict[int, int | None]) -> int | None:
    """The name of a segment whose batches lie below earlier segments (a name far too high): its first batch's
    offset when the whole content fits between the segments around that offset (where Kafka's overflow split
    would put it), else None."""
    lo = firsts[0].base_offset
    others = [o for o in segs if o is not s]
    before = [o for o in others if o.base <= lo]
    after = [o for o in others if o.base > lo]
    prev_last = None
    for o in before:
        la = lasts[id(o)]
        if la is not None:
            prev_last = la if prev_last is None else max(prev_last, la)
    if before and prev_last is None:
        prev_last = before[-1].base - 1
    if before and before[-1].base == lo:
        return None
    return misnamed_base(firsts, s.base, prev_last, after[0].base if after else None, lambda: lasts[id(s)])


def _index_actions(sc: SegScan, *, force: bool, indexes_only: bool, acts: list[Action],
                   probs: list[Finding]) -> None:
    seg, ex = sc.seg, sc.existing
    modified = bool(sc.cuts)  # a magic fix moves nothing: the indexes stay valid
    if sc.overflow is not None:
        v = sc.overflow
        probs.append(Finding(v.severity, v.kind, str(seg.log), v.message, offset=v.offset))
    if sc.builder is None:
        if modified or force or ex.index_problems or ex.time_problems or (ex.index_missing and sc.size):
            probs.append(Finding("error", "index_not_rebuilt", str(seg.log),
                                 f"indexes not rebuilt: {sc.builder_error}"))
        return
    _offset_time_actions(sc, modified, force, acts)
    _txn_actions(sc, modified, force, indexes_only, acts, probs)


def _rebuild_reasons(sc: SegScan, modified: bool, force: bool, n_ti: int) -> tuple[str | None, str | None]:
    """Why the .index and the .timeindex are rebuilt (None: they are not)."""
    ex = sc.existing
    rule = f"the broker's recovery rule, index.interval.bytes {sc.builder.index_interval_bytes}"
    if modified:
        return (f"the segment's log changes: rebuilt by {rule}",) * 2
    if force:
        return (f"rebuilt by {rule}",) * 2
    why_i = why_t = None
    if ex.index_missing:
        if sc.new_size > 0:
            why_i = f"missing (the broker would recover the segment at startup): rebuilt by {rule}"
    elif ex.index_problems:
        why_i = f"{ex.index_problems[0]}: rebuilt by {rule}"
    if ex.time_missing:
        if n_ti and sc.new_size > 0:
            why_t = f"missing (retention would see no timestamps): rebuilt by {rule}"
    elif ex.time_problems:
        why_t = f"{ex.time_problems[0]}: rebuilt by {rule}"
    return why_i, why_t


def _offset_time_actions(sc: SegScan, modified: bool, force: bool, acts: list[Action]) -> None:
    seg, ex, b = sc.seg, sc.existing, sc.builder
    b.finish()
    new_oi, new_ti = b.offset_index_bytes(), b.time_index_bytes()
    why_i, why_t = _rebuild_reasons(sc, modified, force, len(b.time_entries))
    if why_i is not None and new_oi != ex.index_bytes:
        acts.append(Action("rebuild_index", seg.final_of("index"), why_i, data=new_oi, entries=len(b.offset_entries),
                           source=seg.index, old_size=None if ex.index_bytes is None else len(ex.index_bytes)))
    if why_t is not None and new_ti != ex.time_bytes:
        acts.append(Action("rebuild_index", seg.final_of("timeindex"), why_t, data=new_ti, entries=len(b.time_entries),
                           source=seg.timeindex, old_size=None if ex.time_bytes is None else len(ex.time_bytes)))


def _txn_problems(seg: Seg, data: bytes | None) -> list[str]:
    if data is None:
        return []
    problems = fidx.check_txn_index(data, seg.base, path=str(seg.txnindex))
    rest = fidx.trailing_bytes(data, fidx.TXN_ENTRY)
    if rest:
        problems.append(f"{rest} trailing bytes (a partial entry)")
    return problems


def _txn_actions(sc: SegScan, modified: bool, force: bool, indexes_only: bool, acts: list[Action],
                 probs: list[Finding]) -> None:
    seg = sc.seg
    data = _read(seg.txnindex, read_txn_index_file)  # a trailing run of zero entries read as one
    problems = _txn_problems(seg, data)
    rebuilt = fidx.encode_txn_index(sc.txn_entries) if sc.txn_ok else None
    new = why = None
    if data is not None and not problems and modified:
        kept = [t for t in fidx.iter_txn_index(data) if t.last_offset in sc.kept_markers]
        new, why = fidx.encode_txn_index(kept), "the segment's log changes: entries whose marker was cut are dropped"
    elif problems and rebuilt is not None:
        new, why = rebuilt, f"{problems[0]}: rebuilt from the transaction markers"
    elif problems:
        good = [t for t in fidx.iter_txn_index(data)  # (its whole entries, a chunk at a time)
                if t.version <= fidx.TXN_INDEX_VERSION and t.last_offset >= seg.base]
        new, why = fidx.encode_txn_index(good), f"{problems[0]}: the bad entries are dropped"
    elif rebuilt is not None and (force or modified or (sc.existing.index_missing and not indexes_only)) and \
            (data is not None or rebuilt):
        new, why = rebuilt, "rebuilt from the transaction markers"
    if new is not None and new != data:
        acts.append(Action("rebuild_index", seg.final_of("txnindex"), why, data=new,
                           entries=len(new) // fidx.TXN_ENTRY, source=seg.txnindex,
                           old_size=None if data is None else len(data)))
    elif force and not sc.txn_ok and data is not None:
        probs.append(Finding("warning", "index_not_rebuilt", str(seg.txnindex),
                             f"transaction index kept: {sc.ctx.txn_error}"))


def _cut_action(sc: SegScan) -> Action | None:
    if not sc.cuts:
        return None
    cuts = sc.cuts
    tail = len(cuts) == 1 and cuts[0].end == sc.size
    op = "truncate" if tail else "excise"
    known = [c.records for c in cuts if c.records is not None]
    firsts = [c.first_offset for c in cuts if c.first_offset is not None]
    lasts = [c.last_offset for c in cuts if c.last_offset is not None]
    kinds = []
    for c in cuts:
        if c.kind not in kinds:
            kinds.append(c.kind)
    if sc.like_broker:
        reason = f"{cuts[0].kind}: {cuts[0].reason}; truncated there as the broker's recovery does"
    elif tail:
        reason = f"{cuts[0].kind}: {cuts[0].reason}"
    else:
        reason = f"{', '.join(kinds)}: {len(cuts)} damaged range(s) cut, the valid batches around them kept"
    return Action(op, sc.seg.final, reason, start=cuts[0].start, end=cuts[-1].end, old_size=sc.size,
                  new_size=sc.new_size, first_offset=min(firsts) if firsts else None,
                  last_offset=max(lasts) if lasts else None, records_lost=sum(known) if known else None,
                  ranges=list(cuts), source=sc.seg.log, fixes=list(sc.fixes))


def _segment_records(log: Path) -> tuple[int | None, int | None, int | None]:
    """(first offset, last offset, records) of the valid batches of a whole segment the plan removes; records
    is None when a legacy compressed wrapper's inner count is unknown without decompressing."""
    first = last = None
    records: int | None = 0
    for item in walk(log):
        if not isinstance(item, BatchHeader) or not item.crc_valid:
            continue
        first = item.base_offset if first is None else first
        last = item.last_offset
        if records is not None:
            records = records + item.count if isinstance(item.count, int) and item.base_offset_exact else None
    return first, last, records


def _quarantine_segment(seg: Seg, reason: str, acts: list[Action]) -> None:
    """Move a whole segment out (``--like-broker``'s deletion of the segments after a truncation); its .log
    action carries the offsets and records it removes, so the plan counts them."""
    for p in (seg.txnindex, seg.timeindex, seg.index, seg.log):
        if p is not None:
            a = Action("quarantine", p, reason, old_size=_size(p))
            if p is seg.log:
                a.first_offset, a.last_offset, a.records_lost = _segment_records(p)
            acts.append(a)


def _salvage_overflow_splits(view, segs, p, overflowed, splits, acts, probs, n_probs, *, interval, only_bases):
    """Salvage: batches past what their segment can index that no neighbour puts back (a burst of offset fields
    that jumped together) are kept where the broker's recovery keeps them, in a segment of their own (the
    broker's overflow split), rather than leaving the segment's indexes unrebuilt, when the segment changes or
    its indexes are wrong (what verify reports as errors; else the broker's own split at load is left to it). (splits, scans, later, ctx) of
    the partition scanned again with the splits, or None when no split is planned (one that would cover another
    segment's name is not)."""
    at = {id(s): i for i, s in enumerate(segs)}
    idx = [at[id(s)] for s in overflowed if id(s) not in splits]
    if not idx or overflow_split_refusal(segs, idx) is not None:
        return None
    n_acts = len(acts)
    more = plan_overflow_splits(segs, idx, acts, interval=interval)
    if not more:
        del acts[n_acts:]
        return None
    del probs[n_probs:]
    splits = {**splits, **more}
    ctx = _new_ctx(view, segs, p)
    scans, later = _scan_segments(segs, ctx, probs, like_broker=False, interval=interval, only_bases=only_bases,
                                  progress=None, splits=splits)
    return splits, scans, later, ctx


def _plan_partition(g: Group, p: Partition, *, like_broker: bool, interval: int, only_bases: set[int] | None,
                    force_index: bool, indexes_only: bool, progress=None) -> None:
    acts, probs = g.actions, g.problems
    n_acts = len(acts)
    if p.kind == "delete":
        probs.append(Finding("warning", "skipped", str(p.path), "partition marked for deletion: not repaired"))
        return
    full = only_bases is None
    view = View(p.path)
    if full and not indexes_only:
        _plan_leftovers(view, acts)
        probs.extend(_unrepairable_files(p))
        probs.extend(_directories(p))
    elif indexes_only and any(t for _o, _k, t, _e in view.entries):
        probs.append(Finding("warning", "stale_file", str(p.path), "leftover .swap/.cleaned/.deleted files are "
                             "not handled by rebuild-index (use verify --repair)"))
    segs = view.segments()
    splits = {}
    if full and not indexes_only and not like_broker:
        _plan_segment_names(view, segs, acts)
        splits = plan_splits(view, segs, acts, interval=interval)  # below their base, not renamed: split.py
    n_probs = len(probs)
    ctx = _new_ctx(view, segs, p)
    scans, later = _scan_segments(segs, ctx, probs, like_broker=like_broker and not indexes_only, interval=interval,
                                  only_bases=only_bases, progress=progress, splits=splits)
    refusal = next((r for r in map(_broker_will_not_start, scans) if r is not None), None)
    if refusal is not None:  # the broker changes nothing here: neither does --like-broker
        del acts[n_acts:]
        probs.append(refusal)
        return
    overflowed = [sc.seg for sc in scans if sc.overflow is not None]
    if like_broker and full and not indexes_only and overflowed:
        at = {id(s): i for i, s in enumerate(segs)}
        refusal = overflow_split_refusal(segs, [at[id(s)] for s in overflowed])
        if refusal is not None:  # the broker's split would cover another segment's name: not done here
            del acts[n_acts:], probs[n_probs:]
            probs.append(refusal)
            return
        splits = plan_overflow_splits(segs, [at[id(s)] for s in overflowed], acts, interval=interval)
        if splits:  # scanned again without them: the split carries the state on (split.py)
            del probs[n_probs:]
            ctx = _new_ctx(view, segs, p)
            scans, later = _scan_segments(segs, ctx, probs, like_broker=True, interval=interval, only_bases=None,
                                          progress=None, splits=splits)
    elif full and not indexes_only and (overflowed := [sc.seg for sc in scans if sc.overflow is not None and (
            sc.cuts or sc.existing.index_problems or sc.existing.time_problems)]):
        splits, scans, later, ctx = _salvage_overflow_splits(view, segs, p, overflowed, splits, acts, probs,
                                                             n_probs, interval=interval, only_bases=only_bases) or (
            splits, scans, later, ctx)
    for s in reversed(later):
        _quarantine_segment(s, f"after the truncation in {scans[-1].seg.final.name}: the broker's recovery deletes "
                               f"every later segment", acts)
    for sc in scans:
        if indexes_only and sc.modified:
            probs.append(Finding("error", "damaged", str(sc.seg.log), "the log is damaged: indexes not rebuilt "
                                 "(run kltool verify --repair)"))
            continue
        _segment_actions(sc, force_index, indexes_only, acts, probs)
    if not full or indexes_only:
        return
    # The log end offset after the plan.
    final = [s for s in segs if s not in later]
    last_scan = next((sc for sc in scans if sc.seg is final[-1]), None) if final else None
    if last_scan is None and final and id(final[-1]) in splits:  # the last segment is split (split.py)
        leo = ctx.last + 1 if ctx.last is not None else final[-1].base
    elif last_scan is None:
        return
    else:
        leo = last_scan.kept_last + 1 if last_scan.kept_last is not None else final[-1].base
    g.log_end_offsets[str(p.path)] = leo
    _plan_partition_files(view, p, leo, ctx, acts)


_NOT_REBUILT = {fn.PARTITION_METADATA: "the topic id it holds is known only to the cluster's metadata: copy the file "
                                       "from another replica of the partition (a broker takes the log dir offline "
                                       "over a corrupt one, and in KRaft mode treats a log without it as stray)",
                fn.QUORUM_STATE: "the KRaft quorum state is not rebuilt offline"}


def _unrepairable_files(p: Partition) -> list[Finding]:
    """Errors for a partition's damaged metadata files that repair cannot rebuild (verify reports them the same
    way): without them a repair would say "nothing to do" and exit 0 over a file the broker fails on."""
    out = []
    for name, kind in ((fn.PARTITION_METADATA, "partition_metadata"), (fn.QUORUM_STATE, "json")):
        f = check_file(p.path / name, kind)
        if f is not None and f.severity == "error":
            out.append(Finding("error", f.kind, f.file, f"{f.message}: not repaired ({_NOT_REBUILT[name]})",
                               position=f.position))
    return out


def _directories(p: Partition) -> list[Finding]:
    """Errors for directories named as a segment's files (``N.timeindex`` ...): the broker's loader lists only
    files, then opens the segment's files by name and fails on a directory (an IOException: the log dir goes
    offline). Repair writes, moves and deletes regular files only: without these a repair that had nothing else
    to change would exit 0 over them (verify reports them unreadable)."""
    out = []
    for e in sorted(p.path.iterdir()):
        if e.is_dir() and not e.is_symlink() and fn.SEGMENT_FILE.match(e.name):
            out.append(Finding("error", "unreadable", str(e), "a directory where the broker expects a segment "
                               "file (it cannot open it: the log dir goes offline): not repaired (move it out of "
                               "the partition directory)"))
    return out


def _new_ctx(view: View, segs: list[Seg], p: Partition) -> Ctx:
    ctx = Ctx(snapshot_open_txns(view, segs[0].base if segs else None))
    ctx.known_epochs = checkpoint_epochs(p.path)
    return ctx


def _broker_will_not_start(sc: SegScan) -> Finding | None:
    """``--like-broker``: the broker's recovery meets an offset more than 2^31-1 past the segment's base
    (``LogSegmentOffsetOverflowException``, before any truncation) and goes to split the segment, but
    ``LocalLog.splitOverflowedSegment`` requires ``hasOverflow()``, which looks only at the segment's last batch:
    when that one is in range, the split fails (``IllegalArgumentException``) and the broker does not start
    (seen on Kafka 4.4: tests/test_like_broker_offset_field.py)."""
    v = sc.overflow
    if not sc.like_broker or v is None:
        return None
    last = None
    for item in walk(sc.seg.log, resync=False):  # (the batches the broker's reader frames, CRC or not)
        if isinstance(item, BatchHeader):
            last = item.last_offset
    if last_overflows(last, sc.seg.base):
        return None  # the last batch overflows: the broker splits the segment (plan_overflow_splits)
    return Finding("error", "broker_will_not_start", str(sc.seg.log),
                   f"the broker will not start on this segment: its recovery stops at offset {v.offset}, more than "
                   f"2^31-1 past the base offset {sc.seg.base} (LogSegmentOffsetOverflowException), to split the "
                   f"segment, but the segment's last offset {last} does not overflow (\"Split operation is only "
                   f"permitted for segments with overflow\", a fatal error at start-up); --like-broker changes "
                   f"nothing: repair it with kltool verify --repair (the default salvage mode)", offset=v.offset)


def _plan_leftovers(view: View, acts: list[Action]) -> None:
    """Stale files (:func:`plan_stale`), orphan index files and kltool's own temporary files."""
    plan_stale(view, acts)
    for off, kind, name, path in view.files():
        if kind in INDEX_KINDS and fn.segment_file(off, "log") not in view.current:
            acts.append(Action("quarantine", path, "orphan index file without a .log (the broker deletes it)",
                               old_size=_size(path)))
            del view.current[name]
    for t in view.temps:
        acts.append(Action("delete", t, "leftover temporary file of an interrupted kltool run (a partial copy)",
                           old_size=_size(t)))


def _names_after(segs: list[Seg], splits) -> list[int]:
    """The segment names the log has once the splits are done: a segment split (or reordered) away bounds no
    other segment (its batches all held elsewhere, it leaves no name at all); the new segments its split makes
    do. The batch walk bounds a segment's last batch by the next of these, never by a file the plan removes."""
    out: set[int] = set()
    for s in segs:
        sp = splits.get(id(s)) if splits else None
        if sp is None:
            out.add(s.base)
        else:
            out.update(sp.names)
    return sorted(out)


def _scan_segments(segs: list[Seg], ctx: Ctx, probs: list[Finding], *, like_broker: bool, interval: int,
                   only_bases: set[int] | None, progress, splits=None) -> tuple[list[SegScan], list[Seg]]:
    """Scan the segments in offset order: (the scans, the segments after a like-broker truncation). A segment
    in ``splits`` (planned by split.py) is not scanned: its split carries the state on."""
    scans: list[SegScan] = []
    later: list[Seg] = []
    names = _names_after(segs, splits)
    for s in segs:
        if scans and scans[-1].stopped:
            later.append(s)
            continue
        if splits and id(s) in splits:
            splits[id(s)].advance(ctx)
            continue
        if only_bases is not None and s.base not in only_bases:
            if ctx.epoch_suspect is not None:  # a segment not repaired: its first batch witnesses the epoch before
                ctx.settle_epoch(next(iter(first_batches(s.log, 1)), None))
            continue
        if ctx.last is not None and s.base <= ctx.last:
            probs.append(Finding("error", "offset_order", str(s.log), f"segment base offset {s.base} is not above "
                                 f"the previous segment's last offset {ctx.last}"))
        next_base = min((b for b in names if b > s.base), default=None)
        sc = SegScan(s, ctx, like_broker=like_broker, interval=interval, is_active=next_base is None,
                     progress=progress, next_base=next_base)
        sc.run()
        scans.append(sc)
    return scans, later


def _segment_actions(sc: SegScan, force_index: bool, indexes_only: bool, acts: list[Action],
                     probs: list[Finding]) -> None:
    """The actions of one scanned segment: in-place fixes, index rebuilds, the cut, in a safe order."""
    for pos, old, new in sc.fixes:
        if pos in sc.field_fixes:
            acts.append(Action("fix_field", sc.seg.final, sc.field_fixes[pos], position=pos, old_byte=old,
                               new_byte=new, source=sc.seg.log))
            continue
        acts.append(Action("fix_magic", sc.seg.final, f"the batch at byte {pos - 16} is valid (its CRC checks) "
                           f"with magic {new}: only its magic byte was damaged", position=pos, old_byte=old,
                           new_byte=new, source=sc.seg.log))
    idx: list[Action] = []
    _index_actions(sc, force=force_index, indexes_only=indexes_only, acts=idx, probs=probs)
    cut = _cut_action(sc)
    if cut is None:
        acts.extend(idx)
        return
    # A log about to change: first the time and txn indexes, then the old offset index moves aside (a
    # broker started before the run ends finds no .index and recovers the segment, so it never trusts
    # stale positions), then the cut, and the new offset index last. A run killed anywhere converges.
    new_index = [a for a in idx if a.file.suffix == ".index"]
    acts.extend(a for a in idx if a.file.suffix != ".index")
    if new_index and sc.seg.index is not None:
        # (by the name it has when this step runs: a .swap file the plan renamed into place is there by then)
        acts.append(Action("quarantine", sc.seg.final_of("index"), "moved aside while the log changes (a broker "
                           "started meanwhile rebuilds a missing .index); rewritten after the cut",
                           old_size=_size(sc.seg.index)))
        for a in new_index:
            a.source = None
    acts.append(cut)
    acts.extend(new_index)


def _plan_partition_files(view: View, p: Partition, leo: int, ctx: Ctx, acts: list[Action]) -> None:
    from ...format.checkpoints import encode_leader_epoch_checkpoint, parse_leader_epoch_checkpoint
    from ..fs import read_snapshot

    quarantined, kept = 0, 0
    for off, _k, _name, path in view.files("snapshot"):
        if off > leo:
            acts.append(Action("quarantine", path, f"producer snapshot at offset {off} is beyond the log end offset "
                               f"{leo} (the broker deletes it)", old_size=_size(path)))
            quarantined += _has_producers(path, read_snapshot)
            continue
        try:
            snap = read_snapshot(path, entries=False)
            bad = None if snap.crc_valid else (f"Snapshot is corrupt (CRC is no longer valid). Stored crc: "
                                               f"{snap.crc}. Computed crc: {snap.computed_crc}")
        except CorruptDataError as e:
            bad = e.message
        if bad is not None:
            acts.append(Action("quarantine", path, f"{bad} (the broker deletes a corrupt snapshot)",
                               old_size=_size(path)))
            quarantined += 1
        else:
            kept += 1
    if quarantined and not kept:
        _plan_empty_snapshot(p, leo, acts)
    lec = p.path / fn.LEADER_EPOCH_CHECKPOINT
    try:
        raw = read_small_file(lec)
    except FileNotFoundError:
        raw = None
    if raw is not None:
        why = None
        try:
            entries = parse_leader_epoch_checkpoint(raw.decode("utf-8"))
            prev = None
            for epoch, start in entries:
                if prev is not None and (epoch <= prev[0] or start < prev[1]):
                    raise CorruptDataError(f"leader epochs out of order: ({prev[0]}, {prev[1]}) then "
                                           f"({epoch}, {start})")
                prev = (epoch, start)
        except (CorruptDataError, UnicodeDecodeError) as e:
            entries = list(ctx.epochs)
            why = f"{getattr(e, 'message', str(e))}: rebuilt from the batches' leader epochs"
        # An entry starting exactly at the LEO is what a new leader with no data yet writes (the broker trims
        # it at load itself): only entries beyond the LEO go.
        kept = [(e, s) for e, s in entries if s <= leo]
        if kept != entries and why is None:
            why = f"entries starting after the log end offset {leo} are dropped"
        new = encode_leader_epoch_checkpoint(kept).encode()
        if why is not None and new != raw:
            acts.append(Action("write_checkpoint", lec, why, data=new, entries=len(kept), old_size=len(raw)))


def _has_producers(path: Path, read_snapshot) -> bool:
    try:
        return bool(read_snapshot(path).entries)
    except (CorruptDataError, OSError):
        return True  # unreadable: it may have had some


def _plan_empty_snapshot(p: Partition, leo: int, acts: list[Action]) -> None:
    """The last producer snapshots go, and producers with them: leave an empty one at the log start offset. With none, a broker
    started with the clean-shutdown marker assumes no producers at all (UnifiedLog.rebuildProducerState's
    upgrade shortcut: empty snapshots, no replay), so it loses the open transactions and producer
    sequences that kltool (and the broker's own recovery) rebuild from the log; with an empty snapshot at
    the log start it replays the log from there, as recovery does."""
    from ..producer_state import ProducerStateManager

    start = min(p.log_start_offset(), leo)
    path = p.path / fn.segment_file(start, "snapshot")
    create = Action("create", path, "no producer snapshot is left: an empty one at the log start offset makes a "
                    "broker started with the clean-shutdown marker rebuild the producers from the log",
                    data=ProducerStateManager().snapshot_bytes())
    if any(a.file == path for a in acts):  # a corrupt one there is quarantined first
        acts.append(create)
        return
    # first of the partition's steps: a run killed after it plans no second one (the snapshot is there), and
    # a run killed before it plans it again
    acts.insert(next((i for i, a in enumerate(acts) if Path(a.file).parent == p.path), len(acts)), create)


_ROOT_CHECKPOINTS = (fn.RECOVERY_POINT_CHECKPOINT, fn.REPLICATION_OFFSET_CHECKPOINT, fn.LOG_START_OFFSET_CHECKPOINT,
                     fn.CLEANER_OFFSET_CHECKPOINT)  # the order the plan lists them in


def _read(p: Path | None, read=read_small_file) -> bytes | None:
    """The bytes of ``p`` (a regular file only: storage.fs.read_small_file), or None when it does not exist."""
    if p is None:
        return None
    try:
        return read(p)
    except FileNotFoundError:
        return None


def _plan_root(g: Group) -> None:
    from ...format.checkpoints import encode_offset_checkpoint, parse_offset_checkpoint

    ld = g.logdir
    if ld is None:
        return
    if g.whole_logdir:
        for e in sorted(ld.path.iterdir()):
            if e.is_file() and e.name.endswith(TMP_SUFFIX):
                g.actions.append(Action("delete", e, "leftover temporary file of an interrupted kltool run",
                                        old_size=_size(e)))
    for name in _ROOT_CHECKPOINTS:
        path = ld.path / name
        try:
            raw = read_small_file(path)
        except FileNotFoundError:
            continue
        try:
            cp = parse_offset_checkpoint(raw.decode("utf-8"))
        except (CorruptDataError, UnicodeDecodeError) as e:
            g.problems.append(Finding("error", "checkpoint_corrupt", str(path), getattr(e, "message", str(e))))
            continue
        new = dict(cp)
        notes = []
        for p in g.partitions:
            leo = g.log_end_offsets.get(str(p.path))
            key = (p.topic, p.partition)
            v = cp.get(key)
            if leo is None or v is None or p.kind != "normal" or v <= leo:
                continue
            # a log start past the end is dropped, never clamped: the broker would load logStartOffset = LEO and
            # serve none of the kept records; without an entry the log starts at its first segment (Kafka writes
            # an entry only when the log start is above the first segment's base)
            if name in (fn.CLEANER_OFFSET_CHECKPOINT, fn.LOG_START_OFFSET_CHECKPOINT):
                del new[key]
                notes.append(f"{p.name} {v} removed")
            else:
                new[key] = leo
                notes.append(f"{p.name} {v} -> {leo}")
        if new != cp:
            g.actions.append(Action("write_checkpoint", path, f"beyond the log end offset: {'; '.join(notes)}",
                                    data=encode_offset_checkpoint(new).encode(), entries=len(new),
                                    old_size=len(raw)))


def _in_backup(path: Path, cache: dict[Path, bool]) -> bool:
    """Is ``path`` inside a kltool backup run directory (one holding a manifest)? Never repair those."""
    p = Path(os.path.abspath(path))
    seen = []
    for anc in [p, *p.parents]:
        if anc in cache:
            hit = cache[anc]
            break
        seen.append(anc)
        if (anc / MANIFEST_NAME).is_file() or anc.name.endswith(BACKUP_SUFFIX):
            hit = True
            break
    else:
        hit = False
    for a in seen:
        cache[a] = hit
    return hit


def _groups(sel: Selection) -> list[Group]:
    """The selection in groups, one per log dir (or the directory that holds the selected partitions); what
    lies inside a kltool backup directory is skipped (a warning)."""
    gr = _Grouper()
    for ld in sel.logdirs:
        if gr.skip(ld.path, ld.path):
            gr.skipped_set.add(ld.path)
            continue
        gr.group(ld.path, ld).whole_logdir = True
    for p in sel.partitions:
        if gr.skip(p.path, None if p.logdir is not None and p.logdir.path in gr.skipped_set else p.path):
            continue
        g = gr.group(p.logdir.path if p.logdir is not None else p.path.parent, p.logdir)
        outside = left_alone(p)  # a symlink out of the log dir: never written through (storage/confine.py)
        if outside:
            g.problems.extend(outside)
            continue
        if gr.first(g, p.path):
            g.partitions.append(p)
    selected_dirs = {Path(os.path.abspath(p.path)) for p in sel.partitions}
    for f in sel.files:
        if not gr.skip(f.parent, f):
            gr.file(f, selected_dirs)
    gr.report_skipped()
    return list(gr.groups.values())


class _Grouper:
    def __init__(self):
        self.groups: dict[Path, Group] = {}
        self.cache: dict[Path, bool] = {}
        self.skipped: list[Path] = []
        self.skipped_set: set[Path] = set()
        self.members: set[tuple[Path, object]] = set()  # (group root, partition dir or (dir, base)): no list scan

    def group(self, root: Path, logdir: LogDir | None) -> Group:
        key = Path(os.path.abspath(root))
        g = self.groups.get(key)
        if g is None:
            g = self.groups[key] = Group(key, logdir)
        if g.logdir is None and logdir is not None:
            g.logdir = logdir
        return g

    def skip(self, path: Path, report: Path | None) -> bool:
        """Is ``path`` inside a backup directory? (``report``: what to name as skipped, None: nothing.)"""
        if not _in_backup(path, self.cache):
            return False
        if report is not None:
            self.skipped.append(report)
        return True

    def first(self, g: Group, member) -> bool:
        if (g.root, member) in self.members:
            return False
        self.members.add((g.root, member))
        return True

    def file(self, f: Path, selected_dirs: set[Path]) -> None:
        from ...format.names import classify

        kind, base = classify(f)
        pdir = Path(os.path.abspath(f.parent))
        if kind in ("log", *INDEX_KINDS) and base is not None and not f.name.count(".") > 1:
            if pdir in selected_dirs:
                return
            g = self.group(pdir.parent, None)
            if self.first(g, (pdir, base)):
                g.files.append((pdir, base))
        else:
            self.group(pdir, None).problems.append(Finding(
                "warning", "skipped", str(f), "repair works on segments (.log and its index files), partition "
                "directories and log dirs; this file is not repaired"))

    def report_skipped(self) -> None:
        if not self.skipped:
            return
        g = next(iter(self.groups.values()), None)
        if g is None:
            raise UsageError(f"{self.skipped[0]} is inside a kltool backup directory: never repaired (restore it "
                             f"with kltool restore MANIFEST)")
        for path in self.skipped:
            g.problems.append(Finding("warning", "skipped", str(path), "inside a kltool backup directory: not "
                                      "repaired"))


def plan_repair(sel: Selection, *, like_broker: bool = False, interval: int = DEFAULT_INDEX_INTERVAL_BYTES,
                indexes_only: bool = False, force_index: bool = False, progress=None) -> Plan:
    """The plan for a selection. Take the locks first (:func:`repair` does) so that nothing changes between
    planning and applying. ``indexes_only`` + ``force_index`` is ``rebuild-index``."""
    groups = _groups(sel)
    for g in groups:
        _plan_group(g, like_broker=like_broker, interval=interval, indexes_only=indexes_only,
                    force_index=force_index, progress=progress)
    mode = "rebuild-index" if indexes_only else ("like-broker" if like_broker else "salvage")
    return Plan(groups, mode)


def _plan_group(g: Group, *, like_broker, interval, indexes_only, force_index, progress) -> None:
    for p in g.partitions:
        _plan_partition(g, p, like_broker=like_broker, interval=interval, only_bases=None,
                        force_index=force_index, indexes_only=indexes_only, progress=progress)
    by_dir: dict[Path, set[int]] = {}
    for pdir, base in g.files:
        by_dir.setdefault(pdir, set()).add(base)
    for pdir, bases in by_dir.items():
        _plan_partition(g, Partition(pdir, topic="", partition=0, kind="normal"), like_broker=like_broker,
                        interval=interval, only_bases=bases, force_index=force_index, indexes_only=indexes_only,
                        progress=progress)
    if not indexes_only:
        _plan_root(g)
    if g.logdir is not None and g.whole_logdir and not indexes_only:
        for d in g.logdir.unknown_dirs:
            g.problems.append(Finding("error", "unknown_dir", str(d), "not a topic-partition directory: a broker "
                                      "refuses to start with it in its log dir (move it out; not done by repair)"))


# --------------------------------------------------------------------------------------------- applying


def _change_sets(groups) -> list[ChangeSet]:
    return [ChangeSet(g.root, g.actions, [p.path for p in g.partitions]) for g in groups]


def apply_plan(plan: Plan, backup_dir=None, *, on_action: Callable[[Action], None] | None = None) -> list[Path]:
    """Apply ``plan`` (its locks must be held) through the backup engine. Returns the manifests written."""
    return apply_changes(_change_sets(plan.groups), plan.mode, backup_dir, on_action=on_action)


@dataclass
class RepairResult:
    plan: Plan
    manifests: list[Path]
    dry_run: bool


def repair(sel: Selection, *, dry_run: bool = False, backup_dir=None, like_broker: bool = False,
           interval: int = DEFAULT_INDEX_INTERVAL_BYTES, indexes_only: bool = False, force_index: bool = False,
           progress=None, on_action: Callable[[Action], None] | None = None) -> RepairResult:
    """Lock, plan and (unless ``dry_run``) apply. Raises BrokerLockHeld (exit 3) when a broker holds a lock."""
    roots = [g.root for g in _groups(sel)]
    if backup_dir is not None:
        check_backup_root(Path(backup_dir), _change_sets(_groups(sel)))
    with LogDirLocks(roots, dry_run):
        plan = plan_repair(sel, like_broker=like_broker, interval=interval, indexes_only=indexes_only,
                           force_index=force_index, progress=progress)
        if dry_run:  # refuses what the real run would, with the same line (apply.check_changes)
            check_changes(_change_sets(plan.groups), backup_dir)
        manifests = [] if dry_run else apply_plan(plan, backup_dir, on_action=on_action)
    return RepairResult(plan, manifests, dry_run)
