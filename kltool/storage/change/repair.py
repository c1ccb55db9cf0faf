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
  damage and quarantine every later segment.
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
import struct
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import CorruptDataError, KltoolError, UsageError
from ...format import decode_records, parse_header
from ...format import index as fidx
from ...format import names as fn
from ...format.batch import V2_OVERHEAD
from ...format.legacy import RECORD_OVERHEAD
from ...format.records import HEADER_SIZE_UP_TO_MAGIC, LOG_OVERHEAD, MIN_BATCH_SIZE_FIELD, BatchHeader
from ..check.index_check import IndexChecker
from ..confine import outside_findings
from ..epochs import checkpoint_epochs, epoch_out_of_line
from ..findings import Finding
from ..fs import TMP_SUFFIX
from ..index_builder import DEFAULT_INDEX_INTERVAL_BYTES, IndexBuilder, TxnIndexBuilder
from ..logdir import LogDir, Selection
from ..partition import Partition
from ..scan import Damage, walk
from .apply import (
    BACKUP_SUFFIX,
    MANIFEST_NAME,
    LogDirLocks,
    apply_changes,
    check_backup_root,
    default_backup_root,
)
from .apply import file_size as _size
from .apply import read_file as _read
from .plan import Action, ChangeSet, Cut
from .restore import restore

__all__ = [
    "Action", "Cut", "Problem", "Group", "Plan", "plan_repair", "apply_plan", "repair", "restore",
    "RepairResult", "MANIFEST_NAME", "BACKUP_SUFFIX", "default_backup_root",
]

INT32_MAX = 2**31 - 1
_MAGIC = HEADER_SIZE_UP_TO_MAGIC - 1  # the magic byte's position in a batch
_MAX_FIX_BATCH = 64 << 20  # a magic fix is tried for batches up to this size (bigger ones are not plausible)
_CHUNK = 4 << 20
_INDEX_KINDS = ("index", "timeindex", "txnindex")

# Something the repair found and does not fix: a finding like verify's.
Problem = Finding


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
    problems: list[Problem] = field(default_factory=list)
    log_end_offsets: dict[str, int] = field(default_factory=dict)


@dataclass
class Plan:
    groups: list[Group]
    mode: str  # salvage | like-broker | rebuild-index

    @property
    def actions(self) -> list[Action]:
        return [a for g in self.groups for a in g.actions]

    @property
    def problems(self) -> list[Problem]:
        return [p for g in self.groups for p in g.problems]


# ------------------------------------------------------------------------------------ the partition view


@dataclass
class _Seg:
    base: int
    log: Path  # where the .log is now
    final: Path  # its name after the plan's renames
    index: Path | None = None  # current paths of the index files (None: missing)
    timeindex: Path | None = None
    txnindex: Path | None = None

    def final_of(self, kind: str) -> Path:
        return self.final.with_name(fn.segment_file(self.base, kind))


class _View:
    """A partition directory's segment files as they will be after the stale-file actions:
    final name → current path."""

    def __init__(self, d: Path):
        self.dir = d
        self.entries: list[tuple[int, str, str | None, Path]] = []
        self.temps: list[Path] = []
        for e in sorted(d.iterdir(), key=lambda p: p.name):
            if e.is_dir():
                continue
            m = fn.SEGMENT_FILE.match(e.name)
            if m:
                self.entries.append((int(m.group(1)), m.group(2), m.group(3), e))
            elif e.name.endswith(TMP_SUFFIX):
                self.temps.append(e)
        self.current: dict[str, Path] = {e.name: e for _o, _k, t, e in self.entries if t is None}

    def files(self, kind: str | None = None) -> list[tuple[int, str, str, Path]]:
        """(offset, kind, final name, current path) of the files that will exist."""
        out = []
        for name, path in sorted(self.current.items()):
            m = fn.SEGMENT_FILE.match(name)
            if m and (kind is None or m.group(2) == kind):
                out.append((int(m.group(1)), m.group(2), name, path))
        return out

    def segments(self) -> list[_Seg]:
        segs = []
        for off, _k, _name, path in self.files("log"):
            prefix = fn.filename_prefix(off)
            segs.append(_Seg(off, path, self.dir / f"{prefix}.log",
                             self.current.get(f"{prefix}.index"), self.current.get(f"{prefix}.timeindex"),
                             self.current.get(f"{prefix}.txnindex")))
        return segs


def _next_offset_of(path: Path, base: int) -> int:
    """``readNextOffset`` of a segment file: last batch's last offset + 1, or the base offset when empty."""
    last = None
    for item in walk(path):
        if isinstance(item, BatchHeader) and item.crc_valid:
            last = item.last_offset if last is None else max(last, item.last_offset)
    return base if last is None else last + 1


def _plan_stale(view: _View, acts: list[Action]) -> None:
    """LogLoader.removeTempFilesAndCollectSwapFiles + the swap completion (``LogLoader.load``)."""
    d = view.dir
    deleted = [(o, k, e) for o, k, t, e in view.entries if t == "deleted"]
    cleaned = [(o, k, e) for o, k, t, e in view.entries if t == "cleaned"]
    swaps = [(o, k, e) for o, k, t, e in view.entries if t == "swap"]
    for _o, _k, e in deleted:
        acts.append(Action("quarantine", e, "scheduled for deletion (.deleted): the broker deletes it at startup",
                           old_size=_size(e)))
    min_cleaned = min((o for o, _k, _e in cleaned), default=None)
    valid_swaps = []
    for o, k, e in swaps:
        if min_cleaned is not None and o >= min_cleaned:
            acts.append(Action("quarantine", e, f"swap file of an incomplete split (at or above the smallest "
                               f".cleaned offset {min_cleaned}): the broker deletes it", old_size=_size(e)))
        else:
            valid_swaps.append((o, k, e))
    for _o, _k, e in cleaned:
        acts.append(Action("quarantine", e, "leftover .cleaned file of an interrupted clean or split: the broker "
                           "deletes it", old_size=_size(e)))
    log_swaps = [(o, e) for o, k, e in valid_swaps if k == "log"]
    if log_swaps:
        lo = min(o for o, _e in log_swaps)
        hi = max(_next_offset_of(e, o) for o, e in log_swaps)
        for name, path in list(view.current.items()):
            m = fn.SEGMENT_FILE.match(name)
            off = int(m.group(1))
            if lo <= off < hi:
                acts.append(Action("quarantine", path, f"replaced by the .swap files covering offsets [{lo}, {hi}) "
                                   f"(an interrupted compaction or split; the broker finishes it)",
                                   old_size=_size(path)))
                del view.current[name]
    # Rename .log.swap before the index swaps of the same base (a run killed in between converges).
    order = {"log": 0, "index": 1, "timeindex": 2, "txnindex": 3, "snapshot": 4}
    for _o, _k, e in sorted(valid_swaps, key=lambda t: (t[0], order[t[1]])):
        final_name = e.name[: -len(".swap")]
        if final_name in view.current:
            old = view.current.pop(final_name)
            acts.append(Action("quarantine", old, f"replaced by {e.name}", old_size=_size(old)))
        acts.append(Action("rename", e, "complete the interrupted swap (the broker renames .swap files into place)",
                           target=d / final_name))
        view.current[final_name] = e


# ------------------------------------------------------------------------------------------ segment scan


class _Ctx:
    """State carried across the segments of a partition, in offset order."""

    def __init__(self, open_txns: dict[int, int] | None = None):
        self.last: int | None = None  # last offset kept so far
        self.pending: list[Cut] = []  # damage cuts waiting for the next kept batch to bound their offsets
        self.epochs: list[tuple[int, int]] = []  # leader epochs of the kept batches (epoch, start offset)
        self.last_epoch: int | None = None  # the partitionLeaderEpoch of the last kept v2 batch
        self.known_epochs: set[int] = set()  # the epochs leader-epoch-checkpoint names
        self.txn = TxnIndexBuilder(open_txns)
        self.txn_ok = True
        self.txn_error = ""



class _Peek:
    """The walk's items, with a look further ahead: the first CRC-valid batch after damage that the plan
    cuts (the leader-epoch witness, epochs.epoch_out_of_line)."""

    __slots__ = ("it", "ahead")
    LIMIT = 256  # items looked at, at most

    def __init__(self, it):
        self.it = it
        self.ahead: deque = deque()

    def __iter__(self):
        return self

    def __next__(self):
        return self.ahead.popleft() if self.ahead else next(self.it)

    def next_valid(self) -> BatchHeader | None:
        """The first CRC-valid batch among the items still to come (they stay to come), None when damage
        goes on to the end or for more than LIMIT items."""
        for i in range(self.LIMIT):
            if i == len(self.ahead):
                x = next(self.it, None)
                if x is None:
                    return None
                self.ahead.append(x)
            x = self.ahead[i]
            if isinstance(x, BatchHeader) and x.crc_valid:
                return x
        return None


class _SegScan:
    """Walk one segment: decide what to cut and what to fix, and build its new indexes on the way."""

    def __init__(self, seg: _Seg, ctx: _Ctx, *, like_broker: bool, interval: int, is_active: bool,
                 progress=None, next_base: int | None = None):
        self.seg = seg
        self.next_base = next_base  # the next segment's base offset (its file name): bounds this one's last batch
        self.field_fixes: dict[int, str] = {}  # position of a restored uncovered byte -> why
        self.ctx = ctx
        self.like_broker = like_broker
        self.size = seg.log.stat().st_size
        self.cuts: list[Cut] = []
        self.fixes: list[tuple[int, int, int]] = []
        self.shift = 0
        self.builder: IndexBuilder | None = IndexBuilder(seg.base, interval)
        self.builder_error = ""
        self.existing = IndexChecker(seg.base, seg.index, seg.timeindex, log_size=self.size, is_active=is_active)
        self.kept = 0
        self.kept_last: int | None = None
        self.kept_markers: set[int] = set()
        self.stopped = False  # like-broker: truncated here
        self.overflow: str | None = None
        self.txn_entries: list = []
        self.progress = progress
        self.fd = -1

    # -- the walk --------------------------------------------------------------------------------------
    def run(self) -> None:
        self.fd = os.open(self.seg.log, os.O_RDONLY)
        try:
            items = self.items = _Peek(walk(self.seg.log, progress=self.progress))
            nxt = next(items, None)
            while nxt is not None:
                item, nxt = nxt, next(items, None)
                self.lookahead = nxt
                if self.stopped:
                    self._count_tail(item)
                    continue
                if isinstance(item, Damage):
                    pos, end = item.position, item.end
                    fixed = None if self.like_broker else self._try_fix_size(pos)
                    if fixed is not None and fixed.end <= self.size:
                        self._batch(fixed)
                        items = self.items = _Peek(walk(self.seg.log, start=fixed.end, progress=None))
                        nxt = next(items, None)
                        continue
                    h = self._try_fix_magic(pos, end)
                    if h is not None:
                        self._batch(h)
                        pos = h.end
                        if pos >= end or self.stopped:
                            continue
                        self._cut(pos, end, "garbage", "unreadable bytes after a batch whose magic byte was repaired")
                        continue
                    first, last, records = self._hint(item)
                    self._cut(pos, end, item.kind, item.message, first, last, records, damage=True)
                    continue
                h = item
                if not h.crc_valid:
                    fixed = self._try_fix_magic(h.position, h.end)
                    if fixed is not None:
                        self._batch(fixed)
                        continue
                    fixed = None if self.like_broker else self._try_fix_size(h.position)
                    if fixed is not None:  # the walk trusted a damaged length: go on from the batch's true end
                        self._batch(fixed)
                        items = self.items = _Peek(walk(self.seg.log, start=fixed.end, progress=None))
                        nxt = next(items, None)
                        continue
                    self._cut(h.position, h.end, "crc_mismatch", f"Record is corrupt (stored crc = {h.crc})",
                              h.base_offset, h.last_offset, h.count)
                    continue
                self._batch(h)
        finally:
            os.close(self.fd)
        self.existing.finish()
        self.txn_entries = self.ctx.txn.take() if self.ctx.txn_ok else []
        self.txn_ok = self.ctx.txn_ok

    def _count_tail(self, item) -> None:
        c = self.cuts[-1]
        if isinstance(item, BatchHeader) and item.crc_valid:
            if item.count is not None and item.count > 0:
                c.records = (c.records or 0) + item.count
            if c.last_offset is None or item.last_offset > c.last_offset:
                c.last_offset = item.last_offset

    def _hint(self, d: Damage) -> tuple[int | None, int | None, int | None]:
        """Offsets a damaged region probably held: from a readable header at its start (a torn batch), else
        from the neighbours (the next kept batch bounds it later)."""
        first = self.ctx.last + 1 if self.ctx.last is not None else self.seg.base
        if d.kind == "torn_tail" and d.length >= V2_OVERHEAD:
            head = os.pread(self.fd, V2_OVERHEAD, d.position)
            if len(head) == V2_OVERHEAD and head[_MAGIC] == 2:
                try:
                    h = parse_header(head, 0, check_crc=False)
                except (CorruptDataError, ValueError, struct.error):
                    h = None
                if h is not None and h.base_offset >= first and h.last_offset >= h.base_offset \
                        and h.count is not None and 0 <= h.count <= h.last_offset - h.base_offset + 1:
                    return first, h.last_offset, h.count
        return first, None, None

    def _try_fix_magic(self, pos: int, limit: int) -> BatchHeader | None:
        """A batch at ``pos`` that is valid once its magic byte is 2 (or 1, 0): the CRC proves it."""
        head = os.pread(self.fd, HEADER_SIZE_UP_TO_MAGIC, pos)
        if len(head) < HEADER_SIZE_UP_TO_MAGIC:
            return None
        size_field = int.from_bytes(head[8:12], "big", signed=True)
        total = size_field + LOG_OVERHEAD
        if size_field < MIN_BATCH_SIZE_FIELD or pos + total > limit or total > _MAX_FIX_BATCH:
            return None
        cur = head[_MAGIC]
        data = bytearray(os.pread(self.fd, total, pos))
        if len(data) != total:
            return None
        for m in (2, 1, 0):
            if m == cur or (m == 2 and total < V2_OVERHEAD) or (m < 2 and size_field < RECORD_OVERHEAD[m]):
                continue
            data[_MAGIC] = m
            try:
                h = parse_header(data, 0)
            except (CorruptDataError, ValueError, struct.error):
                continue
            if h.crc_valid and h.size == total:
                h.position = pos
                self.fixes.append((pos + _MAGIC, cur, m))  # the magic byte's position
                return h
        return None

    def _try_fix_size(self, pos: int) -> BatchHeader | None:
        """A batch at ``pos`` whose length field (not covered by the CRC) is damaged: the next whole, CRC-valid
        batch after ``pos`` (or the end of the file) marks where it really ends, and its CRC over exactly that
        span proves the rest of it intact. Restores the length field in place; returns the batch, or None."""
        head = os.pread(self.fd, HEADER_SIZE_UP_TO_MAGIC, pos)
        if len(head) < HEADER_SIZE_UP_TO_MAGIC or head[_MAGIC] > 2:
            return None
        ends = []
        for item in walk(self.seg.log, start=pos + 1):
            if isinstance(item, BatchHeader) and item.crc_valid:
                ends.append(item.position)
                break
        ends.append(self.size)
        for end in ends:
            total = end - pos
            if total > _MAX_FIX_BATCH or total < LOG_OVERHEAD + RECORD_OVERHEAD[0]:
                continue
            data = bytearray(os.pread(self.fd, total, pos))
            old = bytes(data[8:12])
            data[8:12] = (total - LOG_OVERHEAD).to_bytes(4, "big", signed=True)
            if bytes(data[8:12]) == old:
                continue
            try:
                h = parse_header(data, 0)
            except (CorruptDataError, ValueError, struct.error):
                continue
            if not h.crc_valid or h.size != total:
                continue
            h.position = pos
            for i in range(4):
                if old[i] != data[8 + i]:
                    self.fixes.append((pos + 8 + i, old[i], data[8 + i]))
                    self.field_fixes[pos + 8 + i] = (
                        f"the batch at byte {pos} is valid (its CRC checks over {total} bytes, up to the next whole "
                        f"batch) but its length field (not covered by the CRC) says "
                        f"{int.from_bytes(old, 'big', signed=True)}: restored to {total - LOG_OVERHEAD}")
            return h
        return None

    def _uncovered_epoch(self, h: BatchHeader) -> None:
        """A v2 batch whose partitionLeaderEpoch (not covered by the CRC) differs from the same epoch both its
        neighbours carry, and that leader-epoch-checkpoint does not name: leader epochs never go down in a
        log, so the field is damaged; restore the neighbours' epoch in place (the broker would otherwise add
        the bogus epoch to its leader epoch cache at recovery)."""
        prev, nxt = self.ctx.last_epoch, self.lookahead
        if isinstance(nxt, Damage) or (isinstance(nxt, BatchHeader) and not nxt.crc_valid):
            nxt = self.items.next_valid()  # what is cut between makes the next valid batch its neighbour
        if h.magic != 2 or prev is None or not isinstance(nxt, BatchHeader) or not nxt.crc_valid or nxt.magic != 2:
            return
        ple = h.partition_leader_epoch
        if not epoch_out_of_line(prev, ple, nxt.partition_leader_epoch, self.ctx.known_epochs,
                                 nxt.base_offset > h.last_offset):
            return
        old = os.pread(self.fd, 4, h.position + 12)
        new = prev.to_bytes(4, "big", signed=True)
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            if a != b:
                self.fixes.append((h.position + 12 + i, a, b))
                self.field_fixes[h.position + 12 + i] = (
                    f"the batch at byte {h.position} is valid (its CRC checks) but its partitionLeaderEpoch field "
                    f"(not covered by the CRC) says {ple} between batches of epoch {prev}, and "
                    f"leader-epoch-checkpoint does not name {ple}: restored to {prev}")
        h.partition_leader_epoch = prev

    def _index_offset_at(self, position: int) -> int | None:
        """The offset the existing .index gives for the batch at ``position`` (its last offset), if any."""
        if not hasattr(self, "_index_by_pos"):
            self._index_by_pos = {pos: off for off, pos in self.existing.oi}
        return self._index_by_pos.get(position)

    def _rather_this_one(self, h: BatchHeader, nxt: BatchHeader, low: int, nlo: int, delta: int | None) -> bool:
        """Overlapping neighbours with nothing to fix either's value (a compacted log has gaps): blame this
        batch only when a one-bit change of its offset fits it between its neighbours while no one-bit change
        of the next batch's fits that one after it (a flipped bit is the common damage); else keep it."""
        if delta is None or nxt.magic != 2:
            return False
        after = next((i for i in walk(self.seg.log, start=nxt.end) if isinstance(i, BatchHeader)), None)
        if after is None:
            n2lo = self.next_base
        elif after.crc_valid and after.magic == 2:
            n2lo = after.base_offset
        else:
            n2lo = None

        def fits(value: int, lo_bound: int, hi: int | None, d: int) -> list[int]:
            return [x for k in range(63) if lo_bound <= (x := value ^ (1 << k)) and (hi is None or x + d < hi)]

        mine = fits(h.base_offset, low, nlo, delta)
        theirs = fits(nxt.base_offset, h.last_offset + 1, n2lo, nxt.last_offset - nxt.base_offset)
        if mine and not theirs:
            return True
        # both could be: a segment's first batch starts at the segment's base offset (its file name) as a rule
        return bool(mine and self.ctx.last is None and self.seg.base in mine)

    def _uncovered_offset(self, h: BatchHeader) -> BatchHeader | None:
        """A CRC-valid batch whose offset field (not covered by the CRC: v2 baseOffset, v0/v1 offset) its
        neighbours contradict: restore the field in place when the neighbours (previous last offset, next
        base offset or the next segment's base, the .index entry at its position, its own CRC-covered
        lastOffsetDelta) fix the only possible value; otherwise excise this one batch. Returns the batch to
        go on with (corrected), or None when it was cut."""
        prev = self.ctx.last
        low = prev + 1 if prev is not None else self.seg.base
        lo = h.base_offset if h.magic == 2 else h.last_offset
        nxt = self.lookahead
        if isinstance(nxt, BatchHeader) and nxt.crc_valid and (nxt.magic == 2 or nxt.compression == 0):
            nlo = nxt.base_offset
        elif nxt is None:
            nlo = self.next_base
        else:
            nlo = None  # damage or a compressed v0/v1 wrapper next: no upper bound from it
        below = lo < low
        past = nlo is not None and nlo >= low and h.last_offset >= nlo
        if not (below or past) or (below and (nlo is None or nlo < low)):
            # in order; or going back with nothing after it to say the log goes on (a duplicate, say), or the
            # whole rest out of order (not one batch's field): _reject decides as before
            return h
        delta = h.last_offset - h.base_offset if h.magic == 2 else (0 if h.compression == 0 else None)
        idx = self._index_offset_at(h.position)
        if past and not below and lo <= nlo:
            # the next batch starts inside this one: either may be the damaged one. This one is, only when
            # the gap to the next fits it exactly at another offset (or its .index entry says so); else keep
            # it, and the next batch is judged in its turn.
            exact = delta is not None and nlo - low == delta + 1 and low != lo
            by_index = idx is not None and delta is not None and idx - delta != h.base_offset
            if not (exact or by_index) and not self._rather_this_one(h, nxt, low, nlo, delta):
                return h
        cands = set()
        if idx is not None and delta is not None:
            cands.add(idx - delta)
        if delta is not None and nlo is not None and nlo - low == delta + 1:
            cands.add(low)
        fits = [c for c in cands if c >= low and (nlo is None or c + delta < nlo)]
        field = "baseOffset" if h.magic == 2 else "offset"
        if len(cands) == 1 and len(fits) == 1:
            new = fits[0]
            old_bytes = os.pread(self.fd, 8, h.position)
            new_bytes = new.to_bytes(8, "big", signed=True) if h.magic == 2 else \
                (new + delta).to_bytes(8, "big", signed=True)
            for i, (a, b) in enumerate(zip(old_bytes, new_bytes, strict=True)):
                if a != b:
                    self.fixes.append((h.position + i, a, b))
                    self.field_fixes[h.position + i] = (
                        f"the batch at byte {h.position} is valid (its CRC checks) but its {field} field (not "
                        f"covered by the CRC) says {h.base_offset if h.magic == 2 else h.last_offset}; its "
                        f"neighbours fix it at {new if h.magic == 2 else new + delta}: restored")
            h.base_offset, h.last_offset = (new, new + delta) if h.magic == 2 else (new, new)
            return h
        why = (f"the batch at byte {h.position} is valid (its CRC checks) but its {field} field (not covered by "
               f"the CRC) says {lo}, which its neighbours contradict (after {prev}, before {nlo}); its true "
               f"offsets cannot be told, so only this batch is cut")
        self._cut(h.position, h.end, "offset_field", why, None, None, h.count)
        return None

    def _reject(self, h: BatchHeader) -> tuple[tuple[str, str] | None, str | None]:
        """(why the batch cannot stay, or None; the marker type of a transaction control batch)."""
        base = self.seg.base
        last = self.ctx.last
        lo = h.base_offset if h.magic == 2 else h.last_offset
        if h.magic == 2 and h.last_offset < h.base_offset:
            return ("invalid_batch", f"negative last offset delta ({h.last_offset - h.base_offset})"), None
        if h.magic == 2 and h.count is not None and h.count < 0:
            return ("invalid_batch", f"Found invalid record count {h.count}"), None
        if h.last_offset < base or (h.magic == 2 and h.base_offset < base):
            return ("offset_order", f"batch offset {h.base_offset} is below the segment's base offset {base}"), None
        if last is not None and lo <= last:
            return ("offset_order", f"batch offsets {h.base_offset}..{h.last_offset} do not follow the previous "
                                    f"batch's last offset {last}"), None
        if h.magic == 2 and h.is_control and h.producer_id >= 0:
            data = os.pread(self.fd, h.size, h.position)
            try:
                cols = decode_records(h, data)
            except CorruptDataError as e:
                return ("invalid_control", f"unreadable transaction marker: {e.message}"), None
            ctype = None
            if len(cols) and cols.controls:
                ctype = (cols.controls[0] or {}).get("type")
                if ctype not in ("ABORT", "COMMIT"):
                    return ("invalid_control", f"control batch of producer {h.producer_id} holds a {ctype} "
                                               f"record (the broker fails to load it)"), None
            return None, ctype
        return None, None

    def _batch(self, h: BatchHeader) -> None:
        if not self.like_broker:
            h = self._uncovered_offset(h)
            if h is None:
                return
            self._uncovered_epoch(h)
        why, ctype = self._reject(h)
        if why is not None:
            if self.fixes and self.fixes[-1][0] == h.position + 16:
                self.fixes.pop()  # the batch goes anyway
            self._cut(h.position, h.end, why[0], why[1], h.base_offset, h.last_offset, h.count)
            return
        self._keep(h, ctype)

    def _keep(self, h: BatchHeader, ctype: str | None) -> None:
        ctx = self.ctx
        last = h.last_offset
        if last - self.seg.base > INT32_MAX and self.overflow is None:
            self.overflow = (f"offset {last} is more than 2^31-1 past the segment's base offset "
                             f"{self.seg.base}: the broker splits such a segment; kltool does not")
        if self.builder is not None:
            try:
                self.builder.on_batch(h.position - self.shift, h.size, last, h.max_timestamp)
            except KltoolError as e:
                self.builder = None
                self.builder_error = e.message
        self.existing.batch(h)
        if h.magic == 2:
            ple = h.partition_leader_epoch
            ctx.last_epoch = ple
            if ple >= 0 and (not ctx.epochs or ple > ctx.epochs[-1][0]):
                ctx.epochs.append((ple, h.base_offset))
            if h.producer_id >= 0:
                if ctx.txn_ok:
                    try:
                        ctx.txn.on_batch(h, ctype if h.is_control else None)
                    except KltoolError as e:
                        ctx.txn_ok = False
                        ctx.txn_error = e.message
                if h.is_control:
                    self.kept_markers.add(h.base_offset)
        if ctx.pending:
            for c in ctx.pending:
                if h.magic == 2 and c.first_offset is not None and h.base_offset - 1 < c.first_offset:
                    c.first_offset = None
                    c.records = 0  # no offset is missing: the region held no batch the log needed
                elif h.magic == 2:
                    c.last_offset = h.base_offset - 1
            ctx.pending.clear()
        self.kept += 1
        if ctx.last is None or last > ctx.last:
            ctx.last = last
        if self.kept_last is None or last > self.kept_last:
            self.kept_last = last

    def _cut(self, start: int, end: int, kind: str, reason: str, first=None, last=None, records=None,
             damage: bool = False) -> None:
        if self.like_broker:
            end = self.size
            c = Cut(start, end, kind, reason, first, last, records if records is not None and records >= 0 else None)
            self.cuts.append(c)
            self.stopped = True
            return
        c = Cut(start, end, kind, reason, first, last, records if records is not None and records >= 0 else None)
        self.cuts.append(c)
        self.shift += end - start
        if damage and last is None:
            self.ctx.pending.append(c)

    @property
    def modified(self) -> bool:
        return bool(self.cuts or self.fixes)

    @property
    def new_size(self) -> int:
        return self.size - sum(c.length for c in self.cuts)


# ------------------------------------------------------------------------------------ partition planning


def _first_batches(log: Path, n: int = 2) -> list[BatchHeader]:
    out = []
    for item in walk(log):
        if isinstance(item, BatchHeader) and item.crc_valid:
            out.append(item)
            if len(out) == n:
                break
    return out


def _plan_segment_names(view: _View, segs: list[_Seg], acts: list[Action]) -> None:
    """A segment whose file name (its base offset, which no CRC covers) is above its first batch's offset
    would lose every batch as 'below the segment's base offset'. When the content fits between the
    neighbouring segments, the name is what is wrong: rename the segment to its first batch's offset (its
    index files, relative to the old name, are set aside and rebuilt)."""
    prev_last = None
    for i, s in enumerate(segs):
        firsts = _first_batches(s.log)
        first = firsts[0] if firsts else None
        last = _next_offset_of(s.log, s.base) - 1 if first is not None else None
        # the name is wrong only when the content agrees with itself: its first two batches both lie below
        # the name, in order (one damaged batch's offset field is the other case, handled batch by batch)
        agree = len(firsts) == 1 or (len(firsts) == 2 and firsts[1].magic == 2
                                    and first.last_offset < firsts[1].base_offset < s.base)
        if first is not None and first.magic == 2 and 0 <= first.base_offset < s.base and agree \
                and (prev_last is None or first.base_offset > prev_last) \
                and (i + 1 == len(segs) or (last is not None and last < segs[i + 1].base)):
            new_base = first.base_offset
            target = s.final.with_name(fn.segment_file(new_base, "log"))
            if target.name not in view.current:
                acts.append(Action("rename", s.log, f"the file name says base offset {s.base} but its batches start "
                                   f"at {new_base} and fit between the neighbouring segments: the name (not "
                                   f"covered by any CRC) is wrong", target=target))
                for kind in _INDEX_KINDS:
                    cur = getattr(s, kind)
                    if cur is not None:
                        acts.append(Action("quarantine", cur, f"relative to the wrong base offset {s.base}; rebuilt "
                                           f"for {new_base}", old_size=_size(cur)))
                        setattr(s, kind, None)
                s.base, s.final = new_base, target  # s.log stays where the file is until the rename
        if last is not None:
            prev_last = max(prev_last, last) if prev_last is not None else last


def _snapshot_open_txns(view: _View, first_base: int | None) -> dict[int, int]:
    """Transactions open at the first segment, from the producer snapshot named after it."""
    from ...format.snapshot import parse_snapshot

    if first_base is None:
        return {}
    p = view.current.get(fn.segment_file(first_base, "snapshot"))
    if p is None:
        return {}
    try:
        snap = parse_snapshot(p.read_bytes())
    except (CorruptDataError, OSError):
        return {}
    if not snap.crc_valid:
        return {}
    return {e.producer_id: e.current_txn_first_offset for e in snap.entries if e.current_txn_first_offset >= 0}


def _index_actions(sc: _SegScan, *, force: bool, indexes_only: bool, acts: list[Action],  # noqa: C901
                   probs: list[Problem]) -> None:
    seg, ex = sc.seg, sc.existing
    modified = bool(sc.cuts)  # a magic fix moves nothing: the indexes stay valid
    if sc.overflow is not None:
        probs.append(Problem("error", "offset_overflow", str(seg.log), sc.overflow))
    if sc.builder is None:
        if modified or force or ex.index_problems or ex.time_problems or (ex.index_missing and sc.size):
            probs.append(Problem("error", "index_not_rebuilt", str(seg.log),
                                 f"indexes not rebuilt: {sc.builder_error}"))
        return
    b = sc.builder
    b.finish()
    new_oi, new_ti = b.offset_index_bytes(), b.time_index_bytes()
    n_oi, n_ti = len(b.offset_entries), len(b.time_entries)
    rule = f"the broker's recovery rule, index.interval.bytes {b.index_interval_bytes}"
    why_i = why_t = None
    if modified:
        why_i = why_t = f"the segment's log changes: rebuilt by {rule}"
    elif force:
        why_i = why_t = f"rebuilt by {rule}"
    else:
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
    if why_i is not None and new_oi != ex.index_bytes:
        acts.append(Action("rebuild_index", seg.final_of("index"), why_i, data=new_oi, entries=n_oi,
                           source=seg.index, old_size=None if ex.index_bytes is None else len(ex.index_bytes)))
    if why_t is not None and new_ti != ex.time_bytes:
        acts.append(Action("rebuild_index", seg.final_of("timeindex"), why_t, data=new_ti, entries=n_ti,
                           source=seg.timeindex, old_size=None if ex.time_bytes is None else len(ex.time_bytes)))
    # .txnindex
    data = _read(seg.txnindex)
    sane = True
    problems: list[str] = []
    if data is not None:
        problems = fidx.check_txn_index(data, seg.base, path=str(seg.txnindex))
        rest = fidx.trailing_bytes(data, fidx.TXN_ENTRY)
        if rest:
            problems.append(f"{rest} trailing bytes (a partial entry)")
        sane = not problems
    rebuilt = fidx.encode_txn_index(sc.txn_entries) if sc.txn_ok else None
    new = None
    why = None
    if data is not None and sane and modified:
        kept = [t for t in fidx.parse_txn_index(data) if t.last_offset in sc.kept_markers]
        new = fidx.encode_txn_index(kept)
        why = "the segment's log changes: entries whose marker was cut are dropped"
    elif data is not None and not sane:
        if rebuilt is not None:
            new, why = rebuilt, f"{problems[0]}: rebuilt from the transaction markers"
        else:
            good = [t for t in fidx.parse_txn_index(data[: len(data) - len(data) % fidx.TXN_ENTRY])
                    if t.version <= fidx.TXN_INDEX_VERSION and t.last_offset >= seg.base]
            new, why = fidx.encode_txn_index(good), f"{problems[0]}: the bad entries are dropped"
    elif rebuilt is not None and (force or modified or (ex.index_missing and not indexes_only)) and \
            (data is not None or rebuilt):
        new, why = rebuilt, "rebuilt from the transaction markers"
    if new is not None and new != data:
        acts.append(Action("rebuild_index", seg.final_of("txnindex"), why, data=new,
                           entries=len(new) // fidx.TXN_ENTRY, source=seg.txnindex,
                           old_size=None if data is None else len(data)))
    elif force and not sc.txn_ok and data is not None:
        probs.append(Problem("warning", "index_not_rebuilt", str(seg.txnindex),
                             f"transaction index kept: {sc.ctx.txn_error}"))


def _cut_action(sc: _SegScan) -> Action | None:
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


def _quarantine_segment(seg: _Seg, reason: str, acts: list[Action]) -> None:
    """Move a whole segment out (``--like-broker``'s deletion of the segments after a truncation); its .log
    action carries the offsets and records it removes, so the plan counts them."""
    for p in (seg.txnindex, seg.timeindex, seg.index, seg.log):
        if p is not None:
            a = Action("quarantine", p, reason, old_size=_size(p))
            if p is seg.log:
                a.first_offset, a.last_offset, a.records_lost = _segment_records(p)
            acts.append(a)


def _plan_partition(g: Group, p: Partition, *, like_broker: bool, interval: int, only_bases: set[int] | None,  # noqa: C901
                    force_index: bool, indexes_only: bool, progress=None) -> None:
    acts, probs = g.actions, g.problems
    if p.kind == "delete":
        probs.append(Problem("warning", "skipped", str(p.path), "partition marked for deletion: not repaired"))
        return
    full = only_bases is None
    view = _View(p.path)
    if full and not indexes_only:
        _plan_stale(view, acts)
        for off, kind, name, path in view.files():
            if kind in _INDEX_KINDS and fn.segment_file(off, "log") not in view.current:
                acts.append(Action("quarantine", path, "orphan index file without a .log (the broker deletes it)",
                                   old_size=_size(path)))
                del view.current[name]
        for t in view.temps:
            acts.append(Action("delete", t, "leftover temporary file of an interrupted kltool run (a partial copy)",
                               old_size=_size(t)))
    elif indexes_only and any(t for _o, _k, t, _e in view.entries):
        probs.append(Problem("warning", "stale_file", str(p.path), "leftover .swap/.cleaned/.deleted files are "
                             "not handled by rebuild-index (use verify --repair)"))
    segs = view.segments()
    if full and not indexes_only and not like_broker:
        _plan_segment_names(view, segs, acts)
    ctx = _Ctx(_snapshot_open_txns(view, segs[0].base if segs else None))
    ctx.known_epochs = checkpoint_epochs(p.path)
    scans: list[_SegScan] = []
    later: list[_Seg] = []
    for i, s in enumerate(segs):
        if scans and scans[-1].stopped:
            later.append(s)
            continue
        if only_bases is not None and s.base not in only_bases:
            continue
        if ctx.last is not None and s.base <= ctx.last:
            probs.append(Problem("error", "offset_order", str(s.log), f"segment base offset {s.base} is not above "
                                 f"the previous segment's last offset {ctx.last}"))
        sc = _SegScan(s, ctx, like_broker=like_broker and not indexes_only, interval=interval,
                      is_active=(i == len(segs) - 1), progress=progress,
                      next_base=segs[i + 1].base if i + 1 < len(segs) else None)
        sc.run()
        scans.append(sc)
    for s in reversed(later):
        _quarantine_segment(s, f"after the truncation in {scans[-1].seg.final.name}: the broker's recovery deletes "
                               f"every later segment", acts)
    for sc in scans:
        if indexes_only and sc.modified:
            probs.append(Problem("error", "damaged", str(sc.seg.log), "the log is damaged: indexes not rebuilt "
                                 "(run kltool verify --repair)"))
            continue
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
            continue
        # A log about to change: first the time and txn indexes, then the old offset index moves aside (a
        # broker started before the run ends finds no .index and recovers the segment, so it never trusts
        # stale positions), then the cut, and the new offset index last. A run killed anywhere converges.
        new_index = [a for a in idx if a.file.suffix == ".index"]
        acts.extend(a for a in idx if a.file.suffix != ".index")
        if new_index and sc.seg.index is not None:
            acts.append(Action("quarantine", sc.seg.index, "moved aside while the log changes (a broker started "
                               "meanwhile rebuilds a missing .index); rewritten after the cut",
                               old_size=_size(sc.seg.index)))
            for a in new_index:
                a.source = None
        acts.append(cut)
        acts.extend(new_index)
    if not full or indexes_only:
        return
    # The log end offset after the plan.
    final = [s for s in segs if s not in later]
    if not final:
        return
    last_scan = next((sc for sc in scans if sc.seg is final[-1]), None)
    if last_scan is None:
        return
    leo = last_scan.kept_last + 1 if last_scan.kept_last is not None else final[-1].base
    g.log_end_offsets[str(p.path)] = leo
    _plan_partition_files(view, p, leo, ctx, acts)


def _plan_partition_files(view: _View, p: Partition, leo: int, ctx: _Ctx, acts: list[Action]) -> None:
    from ...format.checkpoints import encode_leader_epoch_checkpoint, parse_leader_epoch_checkpoint
    from ...format.snapshot import parse_snapshot

    for off, _k, _name, path in view.files("snapshot"):
        if off > leo:
            acts.append(Action("quarantine", path, f"producer snapshot at offset {off} is beyond the log end offset "
                               f"{leo} (the broker deletes it)", old_size=_size(path)))
            continue
        try:
            snap = parse_snapshot(path.read_bytes())
            bad = None if snap.crc_valid else (f"Snapshot is corrupt (CRC is no longer valid). Stored crc: "
                                               f"{snap.crc}. Computed crc: {snap.computed_crc}")
        except CorruptDataError as e:
            bad = e.message
        if bad is not None:
            acts.append(Action("quarantine", path, f"{bad} (the broker deletes a corrupt snapshot)",
                               old_size=_size(path)))
    lec = p.path / fn.LEADER_EPOCH_CHECKPOINT
    try:
        raw = lec.read_bytes()
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


_ROOT_CHECKPOINTS = (fn.RECOVERY_POINT_CHECKPOINT, fn.REPLICATION_OFFSET_CHECKPOINT, fn.LOG_START_OFFSET_CHECKPOINT,
                     fn.CLEANER_OFFSET_CHECKPOINT)  # the order the plan lists them in


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
            raw = path.read_bytes()
        except FileNotFoundError:
            continue
        try:
            cp = parse_offset_checkpoint(raw.decode("utf-8"))
        except (CorruptDataError, UnicodeDecodeError) as e:
            g.problems.append(Problem("error", "checkpoint_corrupt", str(path), getattr(e, "message", str(e))))
            continue
        new = dict(cp)
        notes = []
        for p in g.partitions:
            leo = g.log_end_offsets.get(str(p.path))
            key = (p.topic, p.partition)
            v = cp.get(key)
            if leo is None or v is None or p.kind != "normal" or v <= leo:
                continue
            if name == fn.CLEANER_OFFSET_CHECKPOINT:
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


def _groups(sel: Selection) -> list[Group]:  # noqa: C901
    from ...format.names import classify

    groups: dict[Path, Group] = {}
    cache: dict[Path, bool] = {}
    skipped: list[Path] = []
    skipped_set: set[Path] = set()
    members: set[tuple[Path, object]] = set()  # (group root, partition dir or (dir, base)): linear, not a list scan

    def group(root: Path, logdir: LogDir | None) -> Group:
        key = Path(os.path.abspath(root))
        g = groups.get(key)
        if g is None:
            g = groups[key] = Group(key, logdir)
        if g.logdir is None and logdir is not None:
            g.logdir = logdir
        return g

    for ld in sel.logdirs:
        if _in_backup(ld.path, cache):
            skipped.append(ld.path)
            skipped_set.add(ld.path)
            continue
        group(ld.path, ld).whole_logdir = True
    for p in sel.partitions:
        if _in_backup(p.path, cache):
            if p.logdir is None or p.logdir.path not in skipped_set:
                skipped.append(p.path)
            continue
        g = group(p.logdir.path if p.logdir is not None else p.path.parent, p.logdir)
        outside = outside_findings(p)  # a symlink out of the log dir: never written through (storage/confine.py)
        if outside:
            g.problems.extend(outside)
            continue
        if (g.root, p.path) not in members:
            members.add((g.root, p.path))
            g.partitions.append(p)
    selected_dirs = {Path(os.path.abspath(p.path)) for p in sel.partitions}
    for f in sel.files:
        if _in_backup(f.parent, cache):
            skipped.append(f)
            continue
        kind, base = classify(f)
        pdir = Path(os.path.abspath(f.parent))
        if kind in ("log", *_INDEX_KINDS) and base is not None and not f.name.count(".") > 1:
            if pdir in selected_dirs:
                continue
            g = group(pdir.parent, None)
            if (g.root, (pdir, base)) not in members:
                members.add((g.root, (pdir, base)))
                g.files.append((pdir, base))
        else:
            g = group(pdir, None)
            g.problems.append(Problem("warning", "skipped", str(f), "repair works on segments (.log and its "
                                      "index files), partition directories and log dirs; this file is not repaired"))
    if skipped:
        g = next(iter(groups.values()), None)
        if g is None:
            raise UsageError(f"{skipped[0]} is inside a kltool backup directory: never repaired (restore it with "
                             f"kltool restore MANIFEST)")
        for path in skipped:
            g.problems.append(Problem("warning", "skipped", str(path), "inside a kltool backup directory: not "
                                      "repaired"))
    return list(groups.values())


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
            g.problems.append(Problem("error", "unknown_dir", str(d), "not a topic-partition directory: a broker "
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
        manifests = [] if dry_run else apply_plan(plan, backup_dir, on_action=on_action)
    return RepairResult(plan, manifests, dry_run)
