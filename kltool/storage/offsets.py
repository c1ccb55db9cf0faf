"""Offsets of a partition without a broker: by timestamp, earliest, latest, max timestamp, true counts.

The lookups follow the broker's own path (``UnifiedLog.fetchOffsetByTimestamp``,
``LogSegment.findOffsetByTimestamp``, ``FileRecords.searchForTimestamp``):

1. segments oldest first, skipping each whose **largest timestamp** is below the target;
2. in the first candidate, the ``.timeindex`` (largest entry <= target), then the ``.index`` (largest
   entry <= that offset), then a short scan of batches from that position;
3. in the first batch whose max timestamp is >= target, the first record with timestamp >= target and
   offset >= the log start offset.

A segment's largest timestamp is :attr:`Segment.max_timestamp_so_far` (read from the last 12 bytes of
its ``.timeindex``, topped up with a scan for the active segment; see there). Like the broker, which
holds these in memory after loading a log, each :class:`Segment` object reads it once: the first lookup
on a partition reads a 12-byte tail per segment up to the target, later ones only a few KiB of the
target segment's ``.timeindex``, ``.index`` and ``.log`` (``Partition.refresh()`` forgets them).

Where the broker answers nothing although a later segment holds a match (a candidate segment chosen by
a largest timestamp that no record at or above the log start offset reaches), kltool goes on to the
next candidate: the answer is always the first such record in offset order, as a scan of every record
would find.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..errors import CorruptDataError
from ..format.records import BatchHeader
from .scan import Damage, records_of
from .segment import Segment

if TYPE_CHECKING:
    from .partition import Partition

__all__ = [
    "TimestampOffset", "RecordCount", "log_end_offset", "earliest", "latest", "offset_for_time", "max_timestamp", "SegmentStats", "segment_stats",
    "count_records",
]

_SCAN_CHUNK = 64 << 10  # a lookup's scan starts at most index.interval.bytes before its target


@dataclass(frozen=True, slots=True)
class TimestampOffset:
    """An answer: ``offset`` of the record found, its ``timestamp`` (-1 when not a time lookup) and the
    leader epoch of its batch (None when unknown), as ``ListOffsets`` returns them."""

    offset: int
    timestamp: int = -1
    leader_epoch: int | None = None


def log_end_offset(p: Partition) -> int:
    """The broker's log end offset: the next offset of the **last** segment (``readNextOffset``), which
    is its base offset when it is empty."""
    return p.log_end_offset()


def earliest(p: Partition) -> TimestampOffset:
    """ListOffsets EARLIEST: the log start offset."""
    return TimestampOffset(p.log_start_offset())


def latest(p: Partition) -> TimestampOffset:
    """ListOffsets LATEST here means the log end offset (the offset the next record gets)."""
    return TimestampOffset(log_end_offset(p))


def _epoch(h: BatchHeader) -> int | None:
    return h.partition_leader_epoch if h.magic >= 2 and h.partition_leader_epoch >= 0 else None


def _scan_records(seg: Segment, h: BatchHeader, warnings: list[str], start_offset: int, match=None):
    """One pass over the batch's records, a bounded group at a time (records_of: any batch size):
    (how many are at or above ``start_offset``, the first of them, (offset, timestamp) of the first of
    them whose timestamp passes ``match``); None, with a warning, when the batch cannot be decoded."""
    n = 0
    first = found = None
    try:
        for cols in records_of(h, seg.log_path):
            offs = cols.offsets
            if offs and offs[0] < start_offset:
                offs = [o for o in offs if o >= start_offset]
            n += len(offs)
            if first is None and offs:
                first = offs[0]
            if match is not None and found is None:
                for off, ts in zip(cols.offsets, cols.timestamps, strict=True):
                    if off >= start_offset and match(ts):
                        found = (off, ts)
                        break
    except CorruptDataError as e:
        if getattr(e, "partial", None) is None:  # (else a v0/v1 wrapper's whole inner messages before a
            warnings.append(f"{seg.log_path}: batch {h.base_offset}..{h.last_offset} at byte {h.position} "
                            f"cannot be decoded ({e.message}); skipped")  # partial one: Kafka's records)
            return None
    return n, first, found


@dataclass
class _Lookup:
    """Per-call state: the log start offset and records that could not be decoded."""

    p: Partition
    start_offset: int
    warnings: list[str] = field(default_factory=list)

    def candidates(self):
        """Segments that hold offsets >= the log start offset."""
        segs = self.p.segments
        n = len(segs)
        for i, seg in enumerate(segs):
            if i + 1 < n and segs[i + 1].base_offset <= self.start_offset:
                continue
            yield seg

    def search(self, seg: Segment, start: int, match) -> TimestampOffset | None:
        """Batches from ``start`` whose max timestamp passes ``match``, then their first record that does."""
        for item in seg.walk(start=start, chunk_size=_SCAN_CHUNK):
            if isinstance(item, Damage) or not item.crc_valid:
                continue
            h = item
            if h.last_offset < self.start_offset or not match(h.max_timestamp):
                continue
            got = _scan_records(seg, h, self.warnings, self.start_offset, match)
            if got is not None and got[2] is not None:
                return TimestampOffset(got[2][0], got[2][1], _epoch(h))
        return None


def offset_for_time(p: Partition, timestamp: int, *, start_offset: int | None = None,
                    warnings: list[str] | None = None) -> TimestampOffset | None:
    """The first record (in offset order, at or above the log start offset) whose timestamp is >=
    ``timestamp``, found the broker's way (module docstring); None when there is none."""
    lk = _Lookup(p, p.log_start_offset() if start_offset is None else start_offset)
    try:
        return _first_match(lk, lk.candidates(), timestamp, lambda largest: largest >= timestamp,
                            lambda ts: ts >= timestamp)
    finally:
        if warnings is not None:
            warnings.extend(lk.warnings)


def _first_match(lk, cands, seek_ts: int, seg_ok, rec_ok) -> TimestampOffset | None:
    """The broker's path through candidate segments: skip those whose largest timestamp fails
    ``seg_ok``, seek through the time index to ``seek_ts``, then scan for a record passing ``rec_ok``."""
    for seg in cands:
        if not seg_ok(seg.checked_max_timestamp):  # a damaged .timeindex: the batches' own
            continue
        pos = seg.position_for_time(seek_ts, max(lk.start_offset, seg.base_offset))
        found = lk.search(seg, pos, rec_ok)
        if found is not None:
            return found
    return None


def max_timestamp(p: Partition, *, start_offset: int | None = None,
                  warnings: list[str] | None = None) -> TimestampOffset | None:
    """ListOffsets MAX_TIMESTAMP: the largest record timestamp and the first record holding it (the
    first segment with the largest maximum, its first batch with that max timestamp, that batch's first
    record with it). None when no record has a timestamp."""
    lk = _Lookup(p, p.log_start_offset() if start_offset is None else start_offset)
    try:
        cands = list(lk.candidates())
        best = -1
        for seg in cands:
            best = max(best, seg.max_timestamp_so_far)
        if best < 0:
            return None
        # Entries are running maxima: the batch where ``best`` first appears is at or after the
        # position of the largest entry <= best.
        return _first_match(lk, cands, best, lambda largest: largest == best, lambda ts: ts == best)
    finally:
        if warnings is not None:
            warnings.extend(lk.warnings)


@dataclass
class SegmentStats:
    """What a walk of one segment's batches found, at or above ``start_offset``."""

    batches: int = 0
    records: int = 0  # data records (control records excluded)
    control_records: int = 0
    first_offset: int | None = None
    last_offset: int | None = None
    first_timestamp: int = -1  # of the first batch
    max_timestamp: int = -1
    damaged_bytes: int = 0
    invalid_batches: int = 0

    def add(self, other: SegmentStats) -> None:
        for name in ("batches", "records", "control_records", "damaged_bytes", "invalid_batches"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        if self.first_offset is None:
            self.first_offset, self.first_timestamp = other.first_offset, other.first_timestamp
        if other.last_offset is not None:
            self.last_offset = other.last_offset
        self.max_timestamp = max(self.max_timestamp, other.max_timestamp)


def segment_stats(seg: Segment, start_offset: int = 0, *, warnings: list[str] | None = None,
                  progress=None) -> SegmentStats:
    """Walk the batch headers of ``seg`` (from the index position of ``start_offset``). Records are
    decoded only for a batch that straddles ``start_offset`` and for a legacy compressed wrapper, whose
    header holds no count. Damaged regions and batches with a bad CRC are counted apart."""
    st = SegmentStats()
    warnings = [] if warnings is None else warnings
    start = seg.position_for_offset(start_offset) if seg.base_offset < start_offset else 0
    for item in seg.walk(start=start, progress=progress):
        if isinstance(item, Damage):
            st.damaged_bytes += item.length
            continue
        h = item
        if not h.crc_valid:
            st.invalid_batches += 1
            continue
        if h.last_offset < start_offset:
            continue
        if h.count is not None and h.base_offset >= start_offset:
            n, first = h.count, h.base_offset
        elif h.magic < 2 and h.compression == 0:
            n, first = 1, h.last_offset
        else:
            got = _scan_records(seg, h, warnings, start_offset)
            if got is None:
                continue
            n, first = got[0], (h.last_offset if got[1] is None else got[1])
        st.batches += 1
        if h.is_control:
            st.control_records += n
        else:
            st.records += n
        if st.first_offset is None:
            st.first_offset = first
            st.first_timestamp = h.first_timestamp if h.magic == 2 else h.max_timestamp
        st.last_offset = h.last_offset
        st.max_timestamp = max(st.max_timestamp, h.max_timestamp)
    return st


@dataclass
class RecordCount:
    """True counts at or above the log start offset (``records`` excludes control records)."""

    log_start_offset: int
    log_end_offset: int
    stats: SegmentStats = field(default_factory=SegmentStats)
    warnings: list[str] = field(default_factory=list)

    @property
    def records(self) -> int:
        return self.stats.records

    @property
    def offset_span(self) -> int:
        """log end − log start: what tools without a reader report as the count."""
        return max(0, self.log_end_offset - self.log_start_offset)


def count_records(p: Partition, progress=None) -> RecordCount:
    """The true number of records at or above the log start offset: every batch header is read."""
    lso = p.log_start_offset()
    rc = RecordCount(lso, log_end_offset(p))
    segs = p.segments
    for i, seg in enumerate(segs):
        if i + 1 < len(segs) and segs[i + 1].base_offset <= lso:
            continue
        rc.stats.add(segment_stats(seg, lso, warnings=rc.warnings, progress=progress))
    if rc.stats.damaged_bytes or rc.stats.invalid_batches:
        rc.warnings.append(f"{p.path}: {rc.stats.damaged_bytes} damaged bytes and {rc.stats.invalid_batches} "
                           f"batches with a bad CRC were not counted (kltool verify shows where)")
    return rc
