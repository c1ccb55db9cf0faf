"""One segment: ``N.log`` with its ``.index``, ``.timeindex`` and ``.txnindex``. Read-only."""

from __future__ import annotations

import os
import struct
from pathlib import Path

from ..format import index as fidx
from ..format.batch import V2_OVERHEAD
from ..format.legacy import RECORD_OVERHEAD
from ..format.names import filename_prefix
from ..format.records import LOG_OVERHEAD, BatchHeader
from ..plain import FrozenPlain
from . import scan
from .fs import read_index_file, read_txn_index_file

_MIN_ENTRY = LOG_OVERHEAD + RECORD_OVERHEAD[0]  # the smallest log entry: a v0 message without key and value


_TIME = struct.Struct(">qi")
_ZERO_ENTRY = bytes(fidx.TIME_ENTRY)


class TimeIndexTail(FrozenPlain):
    """The end of a ``.timeindex``: ``raw`` is its last whole entry as the broker reads it (zero-filled
    tail included; None when the file is missing or empty), ``last`` the last real entry (zero tail
    dropped), ``untrimmed`` whether a zero-filled tail follows it. Entries are (timestamp, offset)."""

    __slots__ = _fields = ("raw", "last", "untrimmed")

    def __init__(self, raw: tuple[int, int] | None, last: tuple[int, int] | None, untrimmed: bool):
        self.raw = raw
        self.last = last
        self.untrimmed = untrimmed


class Segment:
    """One segment, like Kafka's ``LogSegment``. Read-only; what it reads from its files (indexes, the
    time index's tail, its largest timestamp) is read once per object, as the broker keeps it in memory
    after loading a log (``Partition.refresh()`` makes new objects).

    ``active`` says whether this is its partition's last (active) segment, whose final time-index entry
    is only written on roll or close; a segment opened on its own counts as active, the safe choice."""

    def __init__(self, directory: Path, base_offset: int, log_path: Path | None = None, *, active: bool = True):
        self.directory = Path(directory)
        self.base_offset = base_offset
        self.log_path = log_path if log_path is not None else self.directory / f"{filename_prefix(base_offset)}.log"
        self._offset_index = None
        self._time_index = None
        self._time_index_tail: TimeIndexTail | None = None
        self._max_ts: tuple[int, str] | None = None
        self._checked_max: int | None = None
        self._active = active

    @property
    def active(self) -> bool:
        return self._active

    @active.setter
    def active(self, value: bool) -> None:
        if value != self._active:
            self._active = value
            self._max_ts = self._checked_max = None

    def __repr__(self) -> str:
        return f"Segment({self.log_path})"

    # Index paths are made on demand: opening a partition of thousands of segments stays cheap.
    @property
    def _index_stem(self) -> str:
        """What the names of its index files start with (a tiered copy's differs)."""
        return filename_prefix(self.base_offset)

    @property
    def index_path(self) -> Path:
        return self.directory / f"{self._index_stem}.index"

    @property
    def timeindex_path(self) -> Path:
        return self.directory / f"{self._index_stem}.timeindex"

    @property
    def txnindex_path(self) -> Path:
        return self.directory / f"{self._index_stem}.txnindex"

    @property
    def name(self) -> str:
        return self.log_path.name

    @property
    def size(self) -> int:
        return self.log_path.stat().st_size

    # -- batches -------------------------------------------------------------------------------
    def walk(self, **kw):
        """Batches and damage of the ``.log`` (see :func:`kltool.storage.scan.walk`)."""
        return scan.walk(self.log_path, **kw)

    def batches(self, **kw):
        return scan.batches(self.log_path, **kw)

    # -- indexes -------------------------------------------------------------------------------
    @staticmethod
    def _read(path: Path, read=read_index_file):
        """The file's content (a zero-filled tail not held: see :func:`~kltool.storage.fs.read_index_file`),
        None when it is missing. A regular file only: a FIFO named like an index never blocks."""
        try:
            return read(path)
        except FileNotFoundError:
            return None

    def offset_index(self) -> list[tuple[int, int]]:
        """(offset, position) entries, zero-filled preallocated tail dropped; [] when missing."""
        if self._offset_index is None:
            data = self._read(self.index_path)
            self._offset_index = [] if data is None else fidx.offset_index_entries(data, self.base_offset)
        return self._offset_index

    def time_index(self) -> list[tuple[int, int]]:
        """(timestamp, offset) entries, zero-filled tail dropped; [] when missing."""
        if self._time_index is None:
            data = self._read(self.timeindex_path)
            self._time_index = [] if data is None else fidx.time_index_entries(data, self.base_offset)
        return self._time_index

    def txn_index(self) -> list:
        data = self._read(self.txnindex_path, read_txn_index_file)
        return [] if data is None else fidx.parse_txn_index(data)

    # -- lookups (LogSegment.translateOffset / findOffsetByTimestamp) ------------------------
    def position_for_offset(self, offset: int) -> int:
        """Where to start scanning for ``offset``: the offset index's largest entry <= offset,
        if that entry points at a plausible batch; else 0."""
        entries = self.offset_index()
        if not entries or offset < self.base_offset:
            return 0
        o, pos = fidx.lookup_offset(entries, offset, self.base_offset)
        if pos == 0:
            return 0
        try:
            if pos + _MIN_ENTRY > self.size:
                return 0
            with os.fdopen(scan.open_segment_file(self.log_path), "rb") as f:
                head = os.pread(f.fileno(), V2_OVERHEAD, pos)
        except OSError:
            return 0
        return pos if fidx.entry_points_at_batch(head, o, self.base_offset) else 0

    def position_for_time(self, timestamp: int, starting_offset: int | None = None) -> int:
        """LogSegment.findOffsetByTimestamp's seek: time index, then offset index. An entry that fails
        :meth:`time_entry_ok` (a damaged ``.timeindex``) is not used: the seek starts at the segment's
        start (or ``starting_offset``), so a damaged index costs a scan, never records."""
        entries = self.time_index()
        if not entries:
            return self.position_for_offset(starting_offset or self.base_offset)
        ts, off = fidx.lookup_time(entries, timestamp, self.base_offset)
        if ts != fidx.NO_TIMESTAMP and not self.time_entry_ok(ts, off):
            off = self.base_offset
        if starting_offset is not None:
            off = max(off, starting_offset)
        return self.position_for_offset(off)

    def time_entry_ok(self, timestamp: int, offset: int) -> bool:
        """Can a time-index entry be used for a lookup: an entry is (the largest timestamp so far, the
        offset of the record holding it), so the batch holding ``offset`` must have ``timestamp`` as its
        largest, and the entries must be in order. Checked before use, as offset-index entries are."""
        if not self._time_index_ordered() or offset < self.base_offset:
            return False
        for h in self.batches(start=self._position_near(offset), chunk_size=64 << 10):
            if h.last_offset >= offset:
                return h.crc_valid and h.max_timestamp == timestamp
        return False

    def _position_near(self, offset: int) -> int:
        """:meth:`position_for_offset`, reading only the offset index's last entry when that one is at
        or below ``offset`` (a time index's last entry names a batch near the segment's end), so checking
        the tails of many segments reads a few bytes of each index, not the whole of each."""
        if self._offset_index is None:
            try:
                with os.fdopen(scan.open_segment_file(self.index_path), "rb") as f:
                    n = os.fstat(f.fileno()).st_size // fidx.OFFSET_ENTRY
                    raw = os.pread(f.fileno(), fidx.OFFSET_ENTRY, (n - 1) * fidx.OFFSET_ENTRY) if n else b""
                    rel, pos = struct.unpack(">ii", raw) if len(raw) == fidx.OFFSET_ENTRY else (-1, 0)
                if pos > 0 and self.base_offset + rel <= offset and pos + _MIN_ENTRY <= self.size:
                    with os.fdopen(scan.open_segment_file(self.log_path), "rb") as f:
                        head = os.pread(f.fileno(), V2_OVERHEAD, pos)
                    if fidx.entry_points_at_batch(head, self.base_offset + rel, self.base_offset):
                        return pos
            except OSError:
                return 0
        return self.position_for_offset(offset)

    def _time_index_ordered(self) -> bool:
        e = self.time_index()
        return all(a[0] <= b[0] and a[1] <= b[1] for a, b in zip(e, e[1:], strict=False))

    @property
    def checked_max_timestamp(self) -> int:
        """:attr:`max_timestamp_so_far` when its time-index entry passes :meth:`time_entry_ok` (or it
        does not come from the index alone), else the largest timestamp of the batches (a scan): what a
        lookup by time may skip a segment on."""
        if self._checked_max is None:
            ts, source = self._max_timestamp()
            if source.startswith("timeindex") and not self.time_entry_ok(*self.time_index_tail().last):
                ts = max((h.max_timestamp for h in self.batches() if h.crc_valid), default=-1)
            self._checked_max = ts
        return self._checked_max

    # -- timestamps (LogSegment.maxTimestampSoFar / largestTimestamp) ---------------------------
    def time_index_tail(self) -> TimeIndexTail:
        """The last entry of the ``.timeindex`` (12 bytes read; the whole file only when it ends in zeros)."""
        if self._time_index_tail is None:
            self._time_index_tail = self._read_time_index_tail()
        return self._time_index_tail

    def _read_time_index_tail(self) -> TimeIndexTail:
        try:
            fd = scan.open_segment_file(self.timeindex_path)
        except FileNotFoundError:
            return TimeIndexTail(None, None, False)
        try:
            n = os.fstat(fd).st_size // fidx.TIME_ENTRY
            if n == 0:
                return TimeIndexTail(None, None, False)
            tail = os.pread(fd, fidx.TIME_ENTRY, (n - 1) * fidx.TIME_ENTRY)
        finally:
            os.close(fd)
        ts, rel = _TIME.unpack(tail)
        raw = (ts, self.base_offset + rel)
        if tail != _ZERO_ENTRY or n == 1:
            return TimeIndexTail(raw, raw, False)
        entries = self.time_index()  # the whole file, zero tail dropped
        last = entries[-1] if entries else None
        if last == (0, self.base_offset) and len(entries) == 1:
            last = None  # nothing but zeros: never written
        return TimeIndexTail(raw, last, True)

    @property
    def max_timestamp_so_far(self) -> int:
        """The largest record timestamp (Kafka's ``LogSegment.maxTimestampSoFar``); -1 when no record
        has one. Read once (see :attr:`max_timestamp_source`)."""
        return self._max_timestamp()[0]

    @property
    def max_timestamp_source(self) -> str:
        """Where :attr:`max_timestamp_so_far` came from: ``timeindex`` (a closed segment's trimmed time
        index ends with the segment's maximum, written on roll, trusted when above 0), ``timeindex+batches``
        (the active segment, whose index may lack the final entry: the batches after its last entry are
        scanned too), ``batches`` (an untrimmed, empty or missing index says nothing: all are scanned) or
        ``none``."""
        return self._max_timestamp()[1]

    @property
    def largest_timestamp(self) -> int:
        """Kafka's ``LogSegment.largestTimestamp``: :attr:`max_timestamp_so_far`, else the ``.log``
        file's mtime (what time retention goes by)."""
        ts = self.max_timestamp_so_far
        return ts if ts >= 0 else int(os.stat(self.log_path).st_mtime * 1000)

    def _max_timestamp(self) -> tuple[int, str]:
        if self._max_ts is None:
            self._max_ts = self._read_max_timestamp()
        return self._max_ts

    def _read_max_timestamp(self) -> tuple[int, str]:
        tail = self.time_index_tail()
        indexed = tail.last is not None and tail.last[0] > 0
        if indexed and not tail.untrimmed and not self.active:
            return tail.last[0], "timeindex"
        if self.size == 0:
            return -1, "none"
        if indexed:  # the index up to its last entry, the batches after the position it names
            best, off = tail.last
            for h in self.batches(start=self.position_for_offset(off)):
                if h.max_timestamp > best:
                    best = h.max_timestamp
            return best, "timeindex+batches"
        ts = max((h.max_timestamp for h in self.batches() if h.crc_valid), default=-1)
        return (ts, "batches") if ts >= 0 else (-1, "none")

    def last_batch(self) -> BatchHeader | None:
        """The last readable batch, scanning from the last offset-index entry."""
        start = 0
        entries = self.offset_index()
        if entries:
            start = self.position_for_offset(entries[-1][0])
        last = None
        for h in self.batches(start=start):
            last = h
        if last is None and start:
            for h in self.batches():
                last = h
        return last

    def next_offset(self) -> int:
        """Offset after the last batch (the base offset for an empty segment)."""
        last = self.last_batch()
        return self.base_offset if last is None else last.last_offset + 1




def first_batch(seg: Segment) -> BatchHeader | None:
    for h in seg.batches(chunk_size=64 << 10):
        return h
    return None
