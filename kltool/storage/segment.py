"""One segment: ``N.log`` with its ``.index``, ``.timeindex`` and ``.txnindex``. Read-only."""

from __future__ import annotations

import os
from pathlib import Path

from ..format import index as fidx
from ..format.records import BatchHeader
from . import scan

SEGMENT_SUFFIXES = ("log", "index", "timeindex", "txnindex")


def filename_prefix(offset: int) -> str:
    """Kafka's 20-digit zero-padded file-name prefix."""
    return f"{offset:020d}"


class Segment:
    def __init__(self, directory: Path, base_offset: int, log_path: Path | None = None):
        self.directory = Path(directory)
        self.base_offset = base_offset
        self.log_path = log_path if log_path is not None else self.directory / f"{filename_prefix(base_offset)}.log"
        self._offset_index = None
        self._time_index = None

    def __repr__(self) -> str:
        return f"Segment({self.log_path})"

    # Index paths are made on demand: opening a partition of thousands of segments stays cheap.
    @property
    def index_path(self) -> Path:
        return self.directory / f"{filename_prefix(self.base_offset)}.index"

    @property
    def timeindex_path(self) -> Path:
        return self.directory / f"{filename_prefix(self.base_offset)}.timeindex"

    @property
    def txnindex_path(self) -> Path:
        return self.directory / f"{filename_prefix(self.base_offset)}.txnindex"

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
    def _read(path: Path) -> bytes | None:
        try:
            with open(path, "rb") as f:
                return f.read()
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
        data = self._read(self.txnindex_path)
        return [] if data is None else fidx.parse_txn_index(data)

    # -- lookups (the broker's, reference §5.6) ----------------------------------------------
    def _header_at(self, position: int) -> BatchHeader | None:
        """The header of a batch at ``position`` if it looks sane (used to trust index entries)."""
        try:
            size = self.size
            if position < 0 or position + 61 > size and position + 26 > size:
                return None
            with open(self.log_path, "rb") as f:
                f.seek(position)
                head = f.read(61)
            from ..format import parse_header

            if len(head) < 26 or head[16] > 2:
                return None
            return parse_header(head + bytes(61 - len(head)), 0, check_crc=False)
        except (OSError, ValueError):
            return None

    def position_for_offset(self, offset: int) -> int:
        """Where to start scanning for ``offset``: the offset index's largest entry <= offset,
        if that entry points at a plausible batch; else 0."""
        entries = self.offset_index()
        if not entries or offset < self.base_offset:
            return 0
        o, pos = fidx.lookup_offset(entries, offset, self.base_offset)
        if pos == 0:
            return 0
        h = self._header_at(pos)
        if h is None or h.last_offset > o or h.last_offset < self.base_offset:
            return 0
        return pos

    def position_for_time(self, timestamp: int, starting_offset: int | None = None) -> int:
        """LogSegment.findOffsetByTimestamp's seek: time index, then offset index."""
        entries = self.time_index()
        if not entries:
            return self.position_for_offset(starting_offset or self.base_offset)
        _ts, off = fidx.lookup_time(entries, timestamp, self.base_offset)
        if starting_offset is not None:
            off = max(off, starting_offset)
        return self.position_for_offset(off)

    def largest_timestamp(self) -> tuple[int, str]:
        """(largest timestamp, source): the time index's last entry, else a scan of the batches,
        else the file's mtime (Kafka's last resort)."""
        entries = self.time_index()
        if entries:
            return entries[-1][0], "timeindex"
        best = -1
        for h in self.batches():
            if h.max_timestamp > best:
                best = h.max_timestamp
        if best >= 0:
            return best, "batches"
        return int(os.stat(self.log_path).st_mtime * 1000), "mtime"

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


def fast_max_timestamp(seg: Segment) -> int:
    """Largest batch timestamp: the time index's last entry combined with a scan of the batches
    after the position it names (those can be newer); a full scan when there is no time index."""
    entries = seg.time_index()
    best = -1
    start = 0
    if entries:
        best, off = entries[-1]
        start = seg.position_for_offset(off)
    for h in seg.batches(start=start):
        if h.max_timestamp > best:
            best = h.max_timestamp
    return best
