"""The one read API: offset-, time- and key-bounded reads over a partition, seeking through the
indexes like the broker (``UnifiedLog.read`` / ``fetchOffsetByTimestamp``, ``LogSegment.read`` /
``translateOffset``): segments by base offset (binary search) or by largest timestamp, then the
``.timeindex``, then the ``.index``, then a short scan.

- :func:`read_partition` yields the batches (and damage) that may hold matching records;
- :class:`RecordFilter` is the exact rule for records (dump, the Spark data source and :func:`records`
  all filter with it; ``_speedups.format_v2`` applies the same rule in C);
- :func:`records` yields the matching records themselves, for scripts;
- :class:`Isolation` is what a consumer at an isolation level sees (``read_uncommitted``: no control
  batches; ``read_committed``: no aborted transactional batches either, and nothing from the last stable
  offset on); without one, the forensic view: every batch."""

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


ISOLATION_LEVELS = ("read_uncommitted", "read_committed")


class Isolation:
    """What a consumer at ``level`` sees of a partition, batch by batch, as the broker serves a fetch:
    control batches are hidden at both levels; at ``read_committed`` the batches of aborted transactions
    are hidden too (the aborted ranges: a producer's transactional batches from its first one after its last
    marker up to an ABORT marker, the ranges the broker keeps in ``.txnindex``), and the read ends at the last
    stable offset (the first offset of the earliest transaction with no marker yet). Built from one pass over
    the partition's batch headers (the markers' records are read to tell COMMIT from ABORT)."""

    def __init__(self, p: Partition, level: str):
        if level not in ISOLATION_LEVELS:
            raise ValueError(f"isolation level must be one of {ISOLATION_LEVELS}, not {level!r}")
        self.level = level
        self.aborted: dict[int, list[tuple[int, int]]] = {}  # producer id -> [(first offset, marker offset)]
        self.last_stable_offset: int | None = None
        if level == "read_committed":
            self._scan(p)

    def _scan(self, p: Partition) -> None:
        open_txn: dict[int, int] = {}  # producer id -> first offset of its open transaction
        for seg in p.segments:
            for h in seg.walk(with_data=False, hold_limit=HOLD):
                if isinstance(h, Damage) or not h.crc_valid or not h.is_transactional:
                    continue
                if not h.is_control:
                    open_txn.setdefault(h.producer_id, h.base_offset)
                    continue
                first = open_txn.pop(h.producer_id, None)
                if self._marker(h, seg) == "ABORT":
                    self.aborted.setdefault(h.producer_id, []).append(
                        (h.base_offset if first is None else first, h.base_offset))
        if open_txn:
            self.last_stable_offset = min(open_txn.values())

    @staticmethod
    def _marker(h: BatchHeader, seg: Segment) -> str | None:
        try:
            for cols in records_of(h, seg.log_path):
                if len(cols):
                    c = cols.record(0).control
                    return c["type"] if c else None
        except CorruptDataError:
            return None
        return None

    def ends_at(self, h: BatchHeader) -> bool:
        """The read stops before this batch (it starts at or after the last stable offset)."""
        return self.last_stable_offset is not None and h.base_offset >= self.last_stable_offset

    def hides(self, h: BatchHeader) -> bool:
        """The consumer never sees this batch's records."""
        if h.is_control:
            return True
        if self.level != "read_committed" or not h.is_transactional:
            return False
        return any(first <= h.base_offset <= last for first, last in self.aborted.get(h.producer_id, ()))


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
            include_control: bool = False, errors: list | None = None,
            isolation_level: str | None = None) -> Iterator[LogRecord]:
    """The records of partition ``p`` in offset order that pass the :class:`RecordFilter` built from
    the arguments; the read stops at the first record stamped after ``to_time``. Control records
    (transaction markers) only with ``include_control``, as a consumer never sees them. Damaged
    regions, batches with a bad CRC and batches that cannot be decoded are skipped; with ``errors`` a
    list, each is appended to it (a :class:`~kltool.storage.scan.Damage`, a BatchHeader or a
    :class:`~kltool.errors.CorruptDataError`). A batch is read a bounded group of records at a time, so
    one whose records together exceed --max-record-bytes is read all the same; a record larger than it is an error
    (:class:`~kltool.format.compression.TooLarge`) after the records before it. ``isolation_level``
    (``read_uncommitted`` or ``read_committed``, see :class:`Isolation`): what a consumer at that level reads
    (no control records, whatever ``include_control`` says); None: every record, aborted ones included."""
    flt = RecordFilter(from_offset, to_offset, from_time, to_time, key)
    iso = Isolation(p, isolation_level) if isolation_level is not None else None
    for seg, item in read_partition(p, from_offset=from_offset, to_offset=to_offset, from_time=from_time):
        if isinstance(item, Damage) or not item.crc_valid:
            if errors is not None:
                errors.append(item)
            continue
        h = item
        if iso is not None:
            if iso.ends_at(h):
                return
            if iso.hides(h):
                continue
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
