"""Verification: every batch's framing and CRC, offsets, indexes against their log by Kafka's
rules (``OffsetIndex``, ``TimeIndex``, ``TransactionIndex`` and their ``sanityCheck``), stale and orphan files, checkpoints, snapshots. Read-only.

:func:`verify_selection` yields :class:`Finding` objects; :class:`VerifyStats` counts what was read.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
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
from ..logdir import LogDir, Selection
from ..partition import Partition
from ..scan import HOLD, BatchRun, Damage, FileSpan, records_of, walk
from ..segment import Segment
from .index_check import IndexChecker

INT32_MAX = 2**31 - 1


class VerifyStats(Plain):
    """Counts of a verify run. ``uncounted_wrappers``: compressed v0/v1 messages whose records a shallow
    verify did not count; ``segment_ends``: partition path -> the log end offset seen; ``last_batches``
    (bookkeeping, not compared or shown): .log -> its last batch (_odd_one_out)."""

    _fields = ("partitions", "segments", "files", "batches", "records", "bytes", "errors", "warnings", "lost_bytes",
               "uncounted_wrappers", "segment_ends")

    def __init__(self, partitions: int = 0, segments: int = 0, files: int = 0, batches: int = 0, records: int = 0,
                 bytes: int = 0, errors: int = 0, warnings: int = 0, lost_bytes: int = 0,  # noqa: A002
                 uncounted_wrappers: int = 0, segment_ends: dict | None = None, last_batches: dict | None = None):
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
        self.last_batches = {} if last_batches is None else last_batches


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
        data = seg.txnindex_path.read_bytes()
    except FileNotFoundError:
        return out
    for msg in fidx.check_txn_index(data, seg.base_offset, path=str(seg.txnindex_path)):
        out.append(_err("index_corrupt", seg.txnindex_path, msg))
    rest = fidx.trailing_bytes(data, fidx.TXN_ENTRY)
    if rest:
        out.append(_warn("index_corrupt", seg.txnindex_path, f"{rest} trailing bytes (a partial entry, ignored "
                         f"by Kafka)", position=len(data) - rest))
    return out


def verify_log_file(path: Path, *, base_offset: int | None, deep: bool, stats: VerifyStats,  # noqa: C901
                    progress: Callable[[int], None] | None = None, prev_last: int | None = None,
                    index_check: IndexChecker | None = None, live_tail: bool = False,
                    epochs: EpochWatch | None = None) -> Iterator[Finding]:
    """Findings for one ``.log`` file. Returns (via ``stats.segment_ends``) nothing; yields findings.
    ``epochs`` follows the partition's leader epochs across its segments (a file alone: its own)."""
    if epochs is None:
        epochs = EpochWatch()
    last = prev_last
    first_problem = None
    prev = None  # the previous valid batch: (position, base offset, last offset, the last offset before it), or a run
    for item in walk(path, with_data=deep, progress=progress, runs=True, prev_last=prev_last, base_offset=base_offset,
                     deep=deep, want_cols=index_check is not None and index_check.pending, hold_limit=HOLD):
        if type(item) is BatchRun:  # batches the C walker checked: nothing to report, only to count
            stats.batches += item.batches
            stats.bytes += item.size
            stats.records += item.records
            if index_check is not None:
                index_check.run(item)
            base, first_last, epoch = item.first()
            odd_epoch = epochs.batches(epoch, item.batches, path, item.position, base, first_last)
            if odd_epoch is not None:
                yield odd_epoch
            prev = (item, last)
            last = item.last_offset
            continue
        if isinstance(item, Damage):  # (no gap for the epochs: a repair cuts it, its neighbours meet)
            where = "" if item.resumed_at is None else f"; valid batches resume at byte {item.resumed_at}"
            if live_tail and item.resumed_at is None:
                # The active segment of a running broker: a write in progress, or preallocated space.
                yield _warn(item.kind, path, f"{item.message} (a broker or another kltool holds this log dir: probably a "
                            f"write in progress or preallocated space)", position=item.position, length=item.length)
                continue
            stats.lost_bytes += item.length
            yield _err(item.kind, path, f"{item.message}{where}", position=item.position, length=item.length)
            if first_problem is None:
                first_problem = item.position
            continue
        h = item
        stats.batches += 1
        stats.bytes += h.size
        if h.count is not None:
            stats.records += h.count
        elif h.compression == 0:
            stats.records += 1  # an uncompressed v0/v1 message is one record
        elif not deep:
            stats.uncounted_wrappers += 1
        if h.crc_valid and h.magic == 2:
            odd_epoch = epochs.batches(h.partition_leader_epoch, 1, path, h.position, h.base_offset, h.last_offset)
            if odd_epoch is not None:
                yield odd_epoch
        elif h.crc_valid:
            epochs.gap()  # a v0/v1 message
        if not h.crc_valid:
            computed = _computed_crc(path, h)
            yield _err("crc_mismatch", path, f"Record is corrupt (stored crc = {h.crc}, computed crc = {computed}) "
                       f"in batch {h.base_offset}..{h.last_offset}", position=h.position, offset=h.base_offset,
                       length=h.size)
            if first_problem is None:
                first_problem = h.position
            continue
        lo = h.base_offset if h.magic == 2 else h.last_offset
        odd = _odd_one_out(prev, lo, last, path)
        if odd is not None:
            # the previous batch, not this one, is out of line: its offset field (not covered by the CRC)
            yield _odd_field_finding(path, odd, lo)
            last = odd[3]
        elif last is not None and lo <= last:
            yield _err("offset_order", path, f"batch offsets {h.base_offset}..{h.last_offset} do not follow the "
                       f"previous batch's last offset {last} (the offset field is not covered by the CRC: when the "
                       f"batches after it follow on, only this field is damaged)", position=h.position,
                       offset=h.base_offset)
        elif base_offset is not None:
            if h.last_offset < base_offset or (h.magic == 2 and h.base_offset < base_offset):
                yield _err("offset_order", path, f"batch offset {h.base_offset} is below the segment's base offset "
                           f"{base_offset}", position=h.position, offset=h.base_offset)
            elif h.last_offset - base_offset > INT32_MAX:
                yield _warn("offset_overflow", path, f"offset {h.last_offset} is more than 2^31-1 past the segment's "
                            f"base offset {base_offset}: the broker will split this segment",
                            position=h.position, offset=h.last_offset)
        if h.magic == 2 and h.last_offset < h.base_offset:
            yield _err("invalid_batch", path, f"negative last offset delta ({h.last_offset - h.base_offset})",
                       position=h.position, offset=h.base_offset)
        if h.magic == 2 and h.count is not None and h.count < 0:
            yield _err("invalid_batch", path, f"Found invalid record count {h.count}", position=h.position,
                       offset=h.base_offset)
        if deep or (h.is_control and h.producer_id >= 0):
            yield from _check_records(path, h, deep, stats)
        if index_check is not None:
            index_check.batch(h)
        if h.crc_valid:
            prev = (h.position, lo, h.last_offset, last)
        if last is None or h.last_offset > last:
            last = h.last_offset
    stats.segment_ends[str(path)] = last
    stats.last_batches[str(path)] = prev


def _check_records(path: Path, h: BatchHeader, deep: bool, stats: VerifyStats) -> Iterator[Finding]:
    """Findings for the records of batch ``h``, read a bounded group at a time (records_of): a record over
    --max-record-bytes is record_too_large, anything Kafka's reader rejects record_corrupt."""
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
        else:
            yield _err("record_corrupt", path, f"batch {h.base_offset}..{h.last_offset}: {e.message}",
                       position=e.position if e.position is not None else h.position, offset=h.base_offset)
        return
    if h.is_control and h.producer_id >= 0 and control is not None and control not in ("COMMIT", "ABORT"):
        yield _err("invalid_control", path, f"transactional control batch {h.base_offset} holds a "
                   f"{control} record, not COMMIT/ABORT: the broker's log load fails on it",
                   position=h.position, offset=h.base_offset)
    if h.magic < 2 and h.compression != 0:
        stats.records += n


def _odd_field_finding(path, odd, lo: int) -> Finding:
    pos, base, _plast, before = odd
    return _err("offset_field", path, f"batch at byte {pos} has offset field {base} (not covered by the CRC) that its "
                f"neighbours contradict (after {before}, before {lo}): kltool verify --repair restores it when they "
                f"fix its value, else cuts only that batch", position=pos, offset=base)


def _odd_one_out(prev, lo: int, last: int | None, path: Path):
    """When the batch at ``lo`` breaks the offset order only because the batch before it jumped ahead (that
    one's offset field, which the CRC does not cover, is wrong: it is above this batch while this one still
    follows the batch before it), the previous batch as (position, offset, last offset, the last offset
    before it); else None."""
    if prev is None or last is None or lo > last:
        return None
    if isinstance(prev[0], BatchRun):
        run, before_run = prev
        # the run's last two batches, read again from the file (only on this rare path)
        hs = [h for h in walk(path, start=run.position, end=run.end) if isinstance(h, BatchHeader)][-2:]
        if not hs or hs[-1].last_offset != run.last_offset:
            return None
        before = hs[0].last_offset if len(hs) == 2 else before_run
        prev = (hs[-1].position, hs[-1].base_offset, hs[-1].last_offset, before)
    _pos, _base, plast, before = prev
    if plast != last or (before is not None and lo <= before):
        return None
    return prev


def _computed_crc(path: Path, h: BatchHeader) -> int:
    """The CRC the batch's bytes give (read in steps when the walker did not hold them)."""
    import zlib

    from ...format.speedups import crc32c

    func, skip = (crc32c, 21) if h.magic >= 2 else (zlib.crc32, 16)
    if h.data is not None:
        return func(memoryview(h.data)[skip:h.size])
    value = 0
    with open(path, "rb") as f:
        span = FileSpan(f.fileno(), h.position + skip, h.position + h.size)
        while True:
            data = span.read(4 << 20)
            if not data:
                return value
            value = func(data, value)


def verify_partition(p: Partition, *, deep: bool = False, stats: VerifyStats,
                     progress: Callable[[int], None] | None = None) -> Iterator[Finding]:
    stats.partitions += 1
    segs = p.segments
    last = None
    epochs = EpochWatch(checkpoint_epochs(p.path))
    for i, seg in enumerate(segs):
        stats.segments += 1
        size = seg.size
        is_active = i == len(segs) - 1
        odd = None
        if i and last is not None and seg.base_offset <= last:
            prev_log = segs[i - 1].log_path
            odd = _odd_one_out(stats.last_batches.get(str(prev_log)), seg.base_offset, last, prev_log)
        if odd is not None:  # the previous segment's last batch jumped past this segment's base offset
            yield _odd_field_finding(segs[i - 1].log_path, odd, seg.base_offset)
            last = odd[3]
        elif last is not None and seg.base_offset <= last:
            yield _err("offset_order", seg.log_path, f"segment base offset {seg.base_offset} is not above the "
                       f"previous segment's last offset {last}", offset=seg.base_offset)
        content_base = seg.base_offset
        firsts = [h for h in walk(seg.log_path, end=min(size, 1 << 20)) if isinstance(h, BatchHeader)
                  and h.crc_valid][:2] if size else []
        first = firsts[0] if firsts else None
        agree = len(firsts) == 1 or (len(firsts) == 2 and first.last_offset < firsts[1].base_offset < seg.base_offset)
        if first is not None and first.magic == 2 and 0 <= first.base_offset < seg.base_offset and agree and \
                (last is None or first.base_offset > last) and \
                (i + 1 == len(segs) or first.last_offset < segs[i + 1].base_offset):
            # one finding for a wrong file name, not one per batch "below the segment's base offset"
            content_base = first.base_offset
            yield _err("segment_base_offset", seg.log_path, f"the file name says base offset {seg.base_offset} but "
                       f"its batches start at {first.base_offset} (the name is covered by no CRC): kltool verify "
                       f"--repair renames the segment and rebuilds its indexes", offset=first.base_offset)
        ic = _index_checker(seg, is_active, size)
        early = len(ic.findings)
        yield from ic.findings
        yield from _check_txn_index(seg)
        yield from verify_log_file(seg.log_path, base_offset=content_base, deep=deep, stats=stats,
                                   live_tail=is_active and _broker_running(p),
                                   progress=progress, prev_last=last, index_check=ic, epochs=epochs)
        yield from ic.finish()[early:]
        seg_last = stats.segment_ends.get(str(seg.log_path))
        if seg_last is not None:
            last = seg_last
    leo = (last + 1) if last is not None else (segs[-1].base_offset if segs else 0)
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
    from ...format.checkpoints import parse_leader_epoch_checkpoint, parse_partition_metadata
    from ...format.snapshot import parse_snapshot

    for off, path in p.snapshots:
        try:
            snap = parse_snapshot(path.read_bytes())
        except CorruptDataError as e:
            yield _err("snapshot_corrupt", path, e.message, position=e.position)
            continue
        if not snap.crc_valid:
            yield _err("snapshot_corrupt", path, f"Snapshot is corrupt (CRC is no longer valid). Stored crc: "
                       f"{snap.crc}. Computed crc: {snap.computed_crc}", position=2)
        if off > leo:
            yield _warn("snapshot_beyond_end", path, f"producer snapshot at offset {off} is beyond the log end "
                        f"offset {leo} (the broker deletes it)", offset=off)
    lec = p.path / fn.LEADER_EPOCH_CHECKPOINT
    if lec.exists():
        try:
            entries = parse_leader_epoch_checkpoint(lec.read_text(encoding="utf-8"))
        except (CorruptDataError, UnicodeDecodeError) as e:
            yield _err("checkpoint_corrupt", lec, getattr(e, "message", str(e)))
        else:
            prev = None
            for epoch, start in entries:
                if prev is not None and (epoch <= prev[0] or start < prev[1]):
                    yield _err("checkpoint_corrupt", lec, f"leader epochs out of order: ({prev[0]}, {prev[1]}) then "
                               f"({epoch}, {start})")
                if start > leo:
                    yield _warn("checkpoint_beyond_end", lec, f"leader epoch {epoch} starts at {start}, beyond the log "
                                f"end offset {leo}", offset=start)
                prev = (epoch, start)
    pm = p.path / fn.PARTITION_METADATA
    if pm.exists():
        try:
            parse_partition_metadata(pm.read_text(encoding="utf-8"))
        except (CorruptDataError, UnicodeDecodeError) as e:
            yield _err("checkpoint_corrupt", pm, getattr(e, "message", str(e)))


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
    for name in fn.ROOT_OFFSET_CHECKPOINTS:
        try:
            cp = ld.checkpoint(name)
        except CorruptDataError as e:
            yield _err("checkpoint_corrupt", ld.path / name, e.message)
            continue
        for p in ld.partitions:
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
        yield from count(verify_partition(p, deep=deep, stats=stats, progress=progress))
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
        from ...format.snapshot import parse_snapshot

        try:
            snap = parse_snapshot(path.read_bytes())
        except CorruptDataError as e:
            yield _err("snapshot_corrupt", path, e.message, position=e.position)
        else:
            if not snap.crc_valid:
                yield _err("snapshot_corrupt", path, f"Snapshot is corrupt (CRC is no longer valid). Stored crc: "
                           f"{snap.crc}. Computed crc: {snap.computed_crc}", position=2)
    elif kind == "kraft_snapshot":
        yield from verify_log_file(path, base_offset=None, deep=deep, stats=stats, progress=progress)
    elif kind in ("offset_checkpoint", "leader_epoch_checkpoint", "partition_metadata", "meta_properties"):
        from ..fs import read_text_file

        try:
            read_text_file(path, kind)
        except CorruptDataError as e:
            yield _err("checkpoint_corrupt", path, e.message, position=e.position)
    else:
        yield _warn("unknown_file", path, "not a file kltool knows how to check")
