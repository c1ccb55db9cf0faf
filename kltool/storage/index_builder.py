"""The broker's rules for writing ``.index``, ``.timeindex`` and ``.txnindex`` (``LogSegment.append``
and ``LogSegment.recover`` with ``OffsetIndex``, ``TimeIndex`` and ``TransactionIndex``).

One :class:`IndexBuilder` serves both writers of index entries:

* the **append path** (``LogSegment.append``, one call per producer request on a leader, or per fetched
  chunk on a follower): :meth:`IndexBuilder.on_append`;
* the **recovery path** (``LogSegment.recover``, what Kafka does when it rebuilds a segment's indexes):
  :meth:`IndexBuilder.on_batch`, and :meth:`IndexBuilder.rebuild` over a whole segment.

Both rules are "add an entry when the current position is more than ``index.interval.bytes`` past the
anchor", checked *before* the bytes of the append/batch are counted:

=================  =================================================  ========================================
                   append path                                        recovery path
=================  =================================================  ========================================
granularity        one append call (may hold several batches)         one batch
counter            ``bytesSinceLastIndexEntry`` (not persisted)       ``validBytes - lastIndexEntry``
offset entry       (last offset of the *whole append*, its start)     (``batch.lastOffset``, batch start)
anchor reset       at each entry, **and to the current size on every  at each entry only (starts at 0)
                   broker restart or truncation** (counter = 0)
=================  =================================================  ========================================

Without restarts and with one batch per append (a leader's usual case) both give the same entries.
A broker restart re-anchors the append path at the log end, so a broker-written index of a segment that
lived through restarts differs from a rebuilt one (:meth:`IndexBuilder.restart` models this). Either way
the entries satisfy :func:`check_offset_index_invariant`.

The time index records the running maximum timestamp ``(maxTimestampSoFar, offsetOfMaxTimestampSoFar)``
whenever an offset entry is added, and once more when the segment is rolled, closed or recovered
(:meth:`IndexBuilder.finish`); ``TimeIndex.maybeAppend`` writes only timestamps greater than the last
entry's (initially -1), so segments of v0 data (timestamp -1) get an empty time index.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..errors import CorruptDataError, UnsafeOperation
from ..format.index import (
    OFFSET_ENTRY,
    TIME_ENTRY,
    encode_offset_entry,
    encode_time_entry,
)
from .producer_state import ProducerStateManager

__all__ = [
    "DEFAULT_INDEX_INTERVAL_BYTES", "DEFAULT_MAX_INDEX_BYTES", "NO_TIMESTAMP",
    "IndexBuilder", "TxnIndexBuilder", "rebuild_indexes", "check_offset_index_invariant",
]

DEFAULT_INDEX_INTERVAL_BYTES = 4096  # index.interval.bytes
DEFAULT_MAX_INDEX_BYTES = 10485760  # segment.index.bytes
NO_TIMESTAMP = -1
_INT32_MAX = 2**31 - 1


class IndexBuilder:
    """Offset and time index entries of one segment with base offset ``base_offset``, built by Kafka's
    rules. Offsets handed in and out are absolute. Entries are kept as lists of
    ``(offset, position)`` and ``(timestamp, offset)``.

    Errors mirror the broker's: a relative offset outside [0, Int.MAX] raises UnsafeOperation
    (``LogSegmentOffsetOverflowException``: the caller must roll or split), a full index raises
    UnsafeOperation (the caller must roll first), and an offset that does not increase raises
    CorruptDataError (``InvalidOffsetException``; during recovery Kafka then drops the whole segment).
    """

    def __init__(self, base_offset: int, index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
                 max_index_bytes: int = DEFAULT_MAX_INDEX_BYTES):
        if index_interval_bytes < 0:
            raise ValueError("index.interval.bytes must be >= 0")
        if max_index_bytes < 4:
            raise ValueError("segment.index.bytes must be >= 4")
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.max_index_bytes = max_index_bytes
        # AbstractIndex: file length roundDown(maxIndexSize, entrySize) → maxEntries.
        self.max_offset_entries = max_index_bytes // OFFSET_ENTRY
        self.max_time_entries = max_index_bytes // TIME_ENTRY
        self.offset_entries: list[tuple[int, int]] = []
        self.time_entries: list[tuple[int, int]] = []
        # An empty TimeIndex's lastEntry is (NO_TIMESTAMP, baseOffset); LogSegment starts from it.
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = base_offset
        self.size = 0  # bytes of the .log seen so far (= FileRecords.sizeInBytes / validBytes)
        self.anchor = 0  # size - bytesSinceLastIndexEntry (append path) / lastIndexEntry (recovery)

    # ------------------------------------------------------------------------------------ construction

    @classmethod
    def resume(cls, base_offset: int, offset_entries: Iterable[tuple[int, int]],
               time_entries: Iterable[tuple[int, int]], log_size: int, **kw) -> IndexBuilder:
        """Continue an existing (active) segment the way a restarted broker does: entries as loaded,
        max timestamp = last time-index entry (``readMaxTimestampAndOffsetSoFar``), and
        ``bytesSinceLastIndexEntry`` = 0 at the current log size."""
        b = cls(base_offset, **kw)
        b.offset_entries = list(offset_entries)
        b.time_entries = list(time_entries)
        if b.time_entries:
            b.max_timestamp, b.offset_of_max_timestamp = b.time_entries[-1]
        b.size = b.anchor = log_size
        return b

    def restart(self) -> None:
        """A broker restart (or ``truncateTo``): ``bytesSinceLastIndexEntry`` is back to 0 at the current
        size. Call :meth:`finish` first to model the close entry of a clean shutdown."""
        self.anchor = self.size

    # ---------------------------------------------------------------------------------------- the rules

    def _check_offset(self, offset: int, position: int | None = None) -> None:
        rel = offset - self.base_offset
        if not 0 <= rel <= _INT32_MAX:  # LogSegment.ensureOffsetInRange
            raise UnsafeOperation(f"Detected offset overflow at offset {offset} in segment with base offset "
                                  f"{self.base_offset}", position=position)

    def _offset_append(self, offset: int, position: int) -> None:
        """``OffsetIndex.append``."""
        n = len(self.offset_entries)
        if n >= self.max_offset_entries:
            raise UnsafeOperation(f"Attempt to append to a full index (size = {n}).", position=position)
        if n and offset <= self.offset_entries[-1][0]:
            raise CorruptDataError(f"Attempt to append an offset {offset} to position {n} no larger than the "
                                   f"last offset appended ({self.offset_entries[-1][0]}) to the offset index",
                                   position=position)
        self.offset_entries.append((offset, position))

    def _time_maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> bool:
        """``TimeIndex.maybeAppend``; True when an entry was written."""
        n = len(self.time_entries)
        if not skip_full_check and n >= self.max_time_entries - 1:
            raise UnsafeOperation(f"Attempt to append to a full time index (size = {n}).")
        last_ts, last_off = self.time_entries[-1] if n else (NO_TIMESTAMP, self.base_offset)
        if n and offset < last_off:
            raise CorruptDataError(f"Attempt to append an offset ({offset}) to slot {n} no larger than the last "
                                   f"offset appended ({last_off}) to the time index")
        if n and timestamp < last_ts:
            raise CorruptDataError(f"Attempt to append a timestamp ({timestamp}) to slot {n} no larger than the "
                                   f"last timestamp appended ({last_ts}) to the time index")
        if timestamp > last_ts:
            self.time_entries.append((timestamp, offset))
            return True
        return False

    def on_append(self, position: int, size: int, last_offset: int, max_timestamp: int,
                  offset_of_max_timestamp: int) -> tuple[int, int] | None:
        """``LogSegment.append`` for one append call of ``size`` bytes written at ``position`` (= the
        current log size) whose records end at ``last_offset`` and whose largest timestamp
        ``max_timestamp`` sits in the batch ending at ``offset_of_max_timestamp`` (shallow offset).

        If ``bytesSinceLastIndexEntry > index.interval.bytes`` (before counting this append) an offset
        entry ``(last_offset, position)`` is added, and the time index gets the running maximum.
        Returns the offset entry added, or None.
        """
        if size <= 0:
            return None
        if position != self.size:
            raise ValueError(f"append at position {position}, but the segment is {self.size} bytes long")
        self._check_offset(last_offset, position)
        if max_timestamp > self.max_timestamp:
            self.max_timestamp, self.offset_of_max_timestamp = max_timestamp, offset_of_max_timestamp
        return self._index_and_advance(position, size, last_offset)

    def on_batch(self, position: int, size: int, last_offset: int, max_timestamp: int) -> tuple[int, int] | None:
        """``LogSegment.recover`` for one valid batch at ``position`` (= ``validBytes``).

        If ``validBytes - lastIndexEntry > index.interval.bytes`` an offset entry
        ``(batch.lastOffset, validBytes)`` is added and the time index gets the running maximum
        (whose offset is the last offset of the batch holding it). Returns the offset entry, or None.
        """
        if position != self.size:
            raise ValueError(f"batch at position {position}, but {self.size} valid bytes precede it")
        self._check_offset(last_offset, position)
        if max_timestamp > self.max_timestamp:
            self.max_timestamp, self.offset_of_max_timestamp = max_timestamp, last_offset
        return self._index_and_advance(position, size, last_offset)

    def _index_and_advance(self, position: int, size: int, last_offset: int) -> tuple[int, int] | None:
        """The rule both paths share: an entry when more than ``index.interval.bytes`` lie between the
        last entry and ``position``; then the segment grows by ``size``."""
        entry = None
        if position - self.anchor > self.index_interval_bytes:
            self._offset_append(last_offset, position)
            self._time_maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self.anchor = position
            entry = (last_offset, position)
        self.size = position + size
        return entry

    def on_header(self, header) -> tuple[int, int] | None:
        """:meth:`on_batch` for a :class:`~kltool.format.records.BatchHeader`."""
        return self.on_batch(header.position, header.size, header.last_offset, header.max_timestamp)

    def finish(self) -> tuple[int, int] | None:
        """The final time-index entry written on roll, close and at the end of recovery:
        ``maybeAppend(maxTimestampSoFar, offsetOfMaxTimestampSoFar, skipFullCheck=true)``.
        Idempotent. Returns the entry if one was added."""
        if self._time_maybe_append(self.max_timestamp, self.offset_of_max_timestamp, skip_full_check=True):
            return self.time_entries[-1]
        return None

    # ------------------------------------------------------------------------------------------ results

    def is_full(self) -> bool:
        """Either index is full (forces a roll): offset entries >= maxEntries, time entries >=
        maxEntries - 1 (the last slot is kept for :meth:`finish`)."""
        return (len(self.offset_entries) >= self.max_offset_entries
                or len(self.time_entries) >= self.max_time_entries - 1)

    def can_append_offset(self, offset: int) -> bool:
        """``OffsetIndex.canAppendOffset``: ``offset`` fits as a relative offset (else roll)."""
        return 0 <= offset - self.base_offset <= _INT32_MAX

    def offset_index_bytes(self) -> bytes:
        """The trimmed ``.index`` (entries × 8 bytes)."""
        b = self.base_offset
        return b"".join(encode_offset_entry(off - b, pos) for off, pos in self.offset_entries)

    def time_index_bytes(self) -> bytes:
        """The trimmed ``.timeindex`` (entries × 12 bytes). Call :meth:`finish` first for a closed segment."""
        b = self.base_offset
        return b"".join(encode_time_entry(ts, off - b) for ts, off in self.time_entries)

    # ------------------------------------------------------------------------------------------ rebuild

    def rebuild(self, batches: Iterable) -> tuple[bytes, bytes]:
        """Kafka's rebuild (``LogSegment.recover``): feed every batch header of the segment (valid ones,
        in file order) through :meth:`on_batch`, add the final time entry, and return the trimmed
        ``(offset_index_bytes, time_index_bytes)``. Use a fresh builder."""
        for h in batches:
            self.on_header(h)
        self.finish()
        return self.offset_index_bytes(), self.time_index_bytes()


def rebuild_indexes(base_offset: int, batches: Iterable, *,
                    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
                    max_index_bytes: int = DEFAULT_MAX_INDEX_BYTES) -> tuple[bytes, bytes]:
    """``IndexBuilder(base_offset, ...).rebuild(batches)``."""
    return IndexBuilder(base_offset, index_interval_bytes, max_index_bytes).rebuild(batches)


def check_offset_index_invariant(entries: list[tuple[int, int]], batches: list) -> list[str]:
    """The invariant of every offset index Kafka writes, by the append and the recovery path alike.

    ``entries`` are absolute ``(offset, position)``; ``batches`` the segment's headers in file order.
    Each entry's position is the start of a batch; offsets and positions strictly increase; every batch
    before the position has lastOffset < entry offset and the batch at it has lastOffset <= entry offset.
    Returns problem descriptions (empty when the index is consistent).
    """
    problems = []
    starts = {h.position: i for i, h in enumerate(batches)}
    # prefix maximum of last offsets: the largest lastOffset among batches[0..i)
    prefix_max = []
    m = None
    for h in batches:
        prefix_max.append(m)
        m = h.last_offset if m is None else max(m, h.last_offset)
    prev = None
    for k, (off, pos) in enumerate(entries):
        if prev is not None and (off <= prev[0] or pos <= prev[1]):
            problems.append(f"entry {k} ({off}, {pos}) does not increase after ({prev[0]}, {prev[1]})")
        prev = (off, pos)
        i = starts.get(pos)
        if i is None:
            problems.append(f"entry {k} ({off}, {pos}): position {pos} is not the start of a batch")
            continue
        if batches[i].last_offset > off:
            problems.append(f"entry {k} ({off}, {pos}): the batch there ends at offset {batches[i].last_offset}")
        if prefix_max[i] is not None and prefix_max[i] >= off:
            problems.append(f"entry {k} ({off}, {pos}): an earlier batch reaches offset {prefix_max[i]}")
    return problems


# ---------------------------------------------------------------------------------------- txn index


class TxnIndexBuilder(ProducerStateManager):
    """The aborted transactions of a segment (its ``.txnindex``), from the one producer state: a
    :class:`~kltool.storage.producer_state.ProducerStateManager` started from the transactions open
    before the first batch fed ({producer id: first offset}, e.g. a snapshot's
    ``currentTxnFirstOffset``), as ``LogSegment.recover`` collects them."""

    def __init__(self, open_txns: dict[int, int] | None = None):
        super().__init__(open_txns=open_txns)
