"""The one read API: offset-, time- and key-bounded reads over a partition, seeking through the
indexes like the broker (``UnifiedLog.read`` / ``fetchOffsetByTimestamp``, ``LogSegment.read`` /
``translateOffset``): segments by base offset (binary search) or by largest timestamp, then the
``.timeindex``, then the ``.index``, then a short scan.

- :func:`read_partition` yields the batches (and damage) that may hold matching records;
- :class:`RecordFilter` is the exact rule for records (dump, the Spark data source and :func:`records`
  all filter with it; ``_speedups.format_v2`` applies the same rule in C);
- :func:`records` yields the matching records themselves, for scripts."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from ..errors import CorruptDataError
from ..format.records import BatchHeader, RecordColumns
from .partition import Partition
from .scan import HOLD, Damage, records_of
from .segment import Segment


def segments_for_time(p: Partition, timestamp: int) -> list[Segment]:
    """Segments from the first whose largest timestamp is >= ``timestamp`` (the broker's
    ``fetchOffsetByTimestamp`` skips earlier ones)."""
    segs = p.segments
    for i, s in enumerate(segs):
        if s.max_timestamp_so_far >= timestamp:
            return segs[i:]
    return []


def read_partition(p: Partition, *, from_offset: int | None = None, to_offset: int | None = None,
                   from_time: int | None = None, with_data: bool = True
                   ) -> Iterator[tuple[Segment, BatchHeader | Damage]]:
    """Batches (and damage) that may hold offsets in [from_offset, to_offset] and timestamps
    >= from_time, in offset order. Callers filter records exactly. A batch larger than
    :data:`~kltool.storage.scan.HOLD` is not held (``data`` None): read its records with
    :func:`~kltool.storage.scan.records_of`."""
    segs = p.segments_from(from_offset)
    if from_time is not None:
        by_time = segments_for_time(p, from_time)
        if len(by_time) < len(segs):
            segs = by_time
    first = True
    for seg in segs:
        start = 0
        if first:
            if from_time is not None:
                start = seg.position_for_time(from_time, from_offset)
            elif from_offset is not None:
                start = seg.position_for_offset(from_offset)
        first = False
        for item in seg.walk(start=start, with_data=with_data, hold_limit=HOLD):
            if isinstance(item, Damage):
                yield seg, item
                continue
            if from_offset is not None and item.last_offset < from_offset:
                continue
            if from_time is not None and item.max_timestamp < from_time and item.magic > 0:
                continue
            yield seg, item
            if to_offset is not None and item.last_offset >= to_offset:
                return


@dataclass
class RecordFilter:
    """Exact record bounds: offsets in [from_offset, to_offset] and timestamps in [from_time, to_time]
    (all inclusive, None = unbounded), and ``key`` equal to the record's key when given."""

    from_offset: int | None = None
    to_offset: int | None = None
    from_time: int | None = None
    to_time: int | None = None
    key: bytes | None = None

    def batch_may_match(self, h: BatchHeader) -> bool:
        """False when no record of the batch can match (from its header alone)."""
        if self.from_offset is not None and h.last_offset < self.from_offset:
            return False
        if self.to_offset is not None and h.base_offset_exact and h.base_offset > self.to_offset:
            return False
        if self.from_time is not None and h.magic > 0 and h.max_timestamp < self.from_time:
            return False
        return True

    def record_matches(self, offset: int, ts: int, key: bytes | None) -> bool:
        if self.from_offset is not None and offset < self.from_offset:
            return False
        if self.to_offset is not None and offset > self.to_offset:
            return False
        if self.from_time is not None and ts < self.from_time:
            return False
        if self.to_time is not None and ts > self.to_time:
            return False
        if self.key is not None and key != self.key:
            return False
        return True

    def past_end(self, offset: int, ts: int, magic: int) -> bool:
        """The read stops here: a record at or after ``from_offset`` stamped after ``to_time`` (like
        kcat's end timestamp; v0 messages carry no timestamp and never end a read)."""
        return (self.to_time is not None and magic > 0 and ts > self.to_time
                and (self.from_offset is None or offset >= self.from_offset))

    def indices(self, cols: RecordColumns) -> list[int] | range:
        """The positions of the matching records of a decoded batch (``range(len(cols))`` when all do)."""
        n = len(cols)
        offs, tss = cols.offsets, cols.timestamps
        if self.key is None and self.from_time is None and self.to_time is None:
            lo, hi = self.from_offset, self.to_offset
            if (lo is None or not n or offs[0] >= lo) and (hi is None or not n or offs[-1] <= hi):
                return range(n)
            return [i for i in range(n) if (lo is None or offs[i] >= lo) and (hi is None or offs[i] <= hi)]
        return [i for i in range(n) if self.record_matches(offs[i], tss[i], cols.key(i))]


@dataclass(slots=True)
class LogRecord:
    """A record as :func:`records` yields it, with where it lives."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: str  # create | log_append | none
    key: bytes | None
    value: bytes | None
    headers: list[tuple[bytes, bytes | None]]
    sequence: int
    size: int
    control: dict | None  # COMMIT/ABORT/... for control records, else None
    batch: BatchHeader = field(repr=False)
    segment: Segment = field(repr=False)


def records(p: Partition, *, from_offset: int | None = None, to_offset: int | None = None,
            from_time: int | None = None, to_time: int | None = None, key: bytes | None = None,
            include_control: bool = False, errors: list | None = None) -> Iterator[LogRecord]:
    """The records of partition ``p`` in offset order that pass the :class:`RecordFilter` built from
    the arguments; the read stops at the first record stamped after ``to_time``. Control records
    (transaction markers) only with ``include_control``, as a consumer never sees them. Damaged
    regions, batches with a bad CRC and batches that cannot be decoded are skipped; with ``errors`` a
    list, each is appended to it (a :class:`~kltool.storage.scan.Damage`, a BatchHeader or a
    :class:`~kltool.errors.CorruptDataError`). A batch is read a bounded group of records at a time, so
    one whose records together exceed --max-record-bytes is read all the same; a record larger than it is an error
    (:class:`~kltool.format.compression.TooLarge`) after the records before it."""
    flt = RecordFilter(from_offset, to_offset, from_time, to_time, key)
    for seg, item in read_partition(p, from_offset=from_offset, to_offset=to_offset, from_time=from_time):
        if isinstance(item, Damage) or not item.crc_valid:
            if errors is not None:
                errors.append(item)
            continue
        h = item
        if not flt.batch_may_match(h) or (h.is_control and not include_control):
            continue
        try:
            for cols in records_of(h, seg.log_path):  # bounded groups: any batch, however large
                offs, tss = cols.offsets, cols.timestamps
                for i in flt.indices(cols) if flt.to_time is None else range(len(cols)):
                    if flt.past_end(offs[i], tss[i], h.magic):
                        return
                    if flt.to_time is not None and not flt.record_matches(offs[i], tss[i], cols.key(i)):
                        continue
                    r = cols.record(i)
                    yield LogRecord(p.topic, p.partition, r.offset, r.timestamp, h.timestamp_type, r.key, r.value,
                                    r.headers, r.sequence, r.size, r.control, h, seg)
        except CorruptDataError as e:
            if errors is not None:
                errors.append(e.at(path=seg.log_path))
